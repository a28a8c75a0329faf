// Uses every op of every registered dialect (checked by test_printer_roundtrip.py).
module @all attributes {spmdc.version = 1} {
  shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
  shard.mesh @"odd mesh" = <["x" = 3]>
  shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
  shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
  func.func @helper(%a: tensor<4xf32>) -> tensor<4xf32> {
    func.return %a : tensor<4xf32>
  }
  func.func @paused(%a: tensor<4xf32>, %g: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
    %e = tensor.exp %a : tensor<4xf32>
    %g_1 = func.suspend %e {results = [0]} : tensor<4xf32>
    %m = tensor.mul %e, %g_1 : tensor<4xf32>
    func.return %e, %m : tensor<4xf32>, tensor<4xf32>
  }
  func.func @main(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>},
                  %w: tensor<16x32xf32> {spmdc.param = "fc.weight"},
                  %v: tensor<4xf32>, %i: tensor<4xi32>)
      -> (tensor<8x32xf32> {spmdc.loss}, tensor<4xf32>, tensor<f32> {spmdc.grad_of = "fc.weight"}) {
    %mm = tensor.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %c = tensor.constant {value = dense<[1.5, -2.0, 1e-05, 1e+20]> : tensor<4xf32>} : tensor<4xf32>
    %s = tensor.constant {value = dense<0.5> : tensor<32xf32>} : tensor<32xf32>
    %0 = tensor.add %v, %c : tensor<4xf32>
    %1 = tensor.sub %0, %v : tensor<4xf32>
    %2 = tensor.mul %1, %v : tensor<4xf32>
    %3 = tensor.div %2, %v : tensor<4xf32>
    %4 = tensor.maximum %3, %v : tensor<4xf32>
    %5 = tensor.minimum %4, %v : tensor<4xf32>
    %6 = tensor.neg %5 : tensor<4xf32>
    %7 = tensor.exp %6 : tensor<4xf32>
    %8 = tensor.log %7 : tensor<4xf32>
    %9 = tensor.sqrt %8 : tensor<4xf32>
    %10 = tensor.rsqrt %9 : tensor<4xf32>
    %11 = tensor.tanh %10 : tensor<4xf32>
    %12 = tensor.relu %11 : tensor<4xf32>
    %13 = tensor.cast %i : (tensor<4xi32>) -> tensor<4xf32>
    %b = tensor.add %mm, %s {shard.sharding = [#shard<@mesh, [S(0), R]>]} : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
    %sum = tensor.sum %b {dims = [1], keepdim = false} : (tensor<8x32xf32>) -> tensor<8xf32>
    %max = tensor.max %b {dims = [1], keepdim = true} : (tensor<8x32xf32>) -> tensor<8x1xf32>
    %mean = tensor.mean %b {dims = [0, 1]} : (tensor<8x32xf32>) -> tensor<f32>
    %p = tensor.permute %b {perm = [1, 0]} : (tensor<8x32xf32>) -> tensor<32x8xf32>
    %r = tensor.reshape %p : (tensor<32x8xf32>) -> tensor<4x8x8xf32>
    %bc = tensor.broadcast %sum : (tensor<8xf32>) -> tensor<4x8xf32>
    %an = shard.annotate %b {sharding = #shard<@mesh, [S(0), S(1)]>} : tensor<8x32xf32>
    %rd = shard.redistribute %an {from = #shard<@mesh, [S(0), S(1)]>, to = #shard<@mesh, [R, P(sum)]>} : tensor<8x32xf32>
    %ag = comm.all_gather %rd {axis = "tp", dim = 0, mesh = @mesh} : (tensor<8x32xf32>) -> tensor<32x32xf32>
    %sl = comm.all_slice %ag {axis = "tp", dim = 1, mesh = @mesh} : (tensor<32x32xf32>) -> tensor<32x8xf32>
    %ar = comm.all_reduce %sl {axes = ["dp", "tp"], mesh = @mesh, op = "avg"} : tensor<32x8xf32>
    %rs = comm.reduce_scatter %ar {axis = "tp", dim = 0, mesh = @mesh, op = "max"} : (tensor<32x8xf32>) -> tensor<8x8xf32>
    %a2a = comm.all_to_all %rs {axis = "tp", concat_dim = 0, mesh = @mesh, split_dim = 1} : (tensor<8x8xf32>) -> tensor<32x2xf32>
    %agb:2 = comm.all_gather_bucket %rs, %a2a {axis = "tp", dims = [0, 1], mesh = @mesh} : (tensor<8x8xf32>, tensor<32x2xf32>) -> (tensor<32x8xf32>, tensor<32x8xf32>)
    %rsb:2 = comm.reduce_scatter_bucket %agb#0, %agb#1 {axis = "tp", dims = [0, 1], mesh = @mesh, op = "sum"} : (tensor<32x8xf32>, tensor<32x8xf32>) -> (tensor<8x8xf32>, tensor<32x2xf32>)
    %arb:2 = comm.all_reduce_bucket %rsb#0, %rsb#1 {axes = ["tp"], mesh = @mesh, op = "sum"} : (tensor<8x8xf32>, tensor<32x2xf32>) -> (tensor<8x8xf32>, tensor<32x2xf32>)
    %bsr = comm.bsr %arb#0 {from = #shard.union<split(0, [4, 4]), [#shard<@g0, [R]>, #shard<@g1, [R]>]>, messages = [[0, 4], [4, 0]], seq = 1, shape = [8, 8], to = #shard.union<dup, [#shard<@g0, [R]>, #shard<@g1, [R]>]>} : tensor<8x8xf32>
    %sar:2 = comm.split_all_reduce %arb#0, %arb#1 {groups = [[0, 1, 2, 3, 4, 5], [0, 4]], op = "sum", seq = 0, shapes = [[8, 8], [32, 2]], unions = [#shard.union<partial(sum), [#shard<@g0, [R]>, #shard<@g1, [R]>]>, #shard.union<partial(sum), [#shard<@g0, [S(0)]>, #shard<@g1, [S(0)]>]>]} : (tensor<8x8xf32>, tensor<32x2xf32>) -> (tensor<8x8xf32>, tensor<32x2xf32>)
    %h1 = comm.all_gather_start %rd {axis = "tp", dim = 0, mesh = @mesh} : (tensor<8x32xf32>) -> !comm.handle<tensor<32x32xf32>>
    %w1 = comm.wait %h1 : (!comm.handle<tensor<32x32xf32>>) -> tensor<32x32xf32>
    %h2 = comm.reduce_scatter_start %ar {axis = "tp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<32x8xf32>) -> !comm.handle<tensor<8x8xf32>>
    %w2 = comm.wait %h2 : (!comm.handle<tensor<8x8xf32>>) -> tensor<8x8xf32>
    %h3 = comm.all_reduce_start %sl {axes = ["dp", "tp"], mesh = @mesh, op = "sum"} : (tensor<32x8xf32>) -> !comm.handle<tensor<32x8xf32>>
    %w3 = comm.wait %h3 : (!comm.handle<tensor<32x8xf32>>) -> tensor<32x8xf32>
    %h4 = comm.all_gather_bucket_start %rs, %a2a {axis = "tp", dims = [0, 1], mesh = @mesh} : (tensor<8x8xf32>, tensor<32x2xf32>) -> !comm.handle<tensor<32x8xf32>, tensor<32x8xf32>>
    %w4:2 = comm.wait %h4 : (!comm.handle<tensor<32x8xf32>, tensor<32x8xf32>>) -> (tensor<32x8xf32>, tensor<32x8xf32>)
    %h5 = comm.reduce_scatter_bucket_start %w4#0, %w4#1 {axis = "tp", dims = [0, 1], mesh = @mesh, op = "sum"} : (tensor<32x8xf32>, tensor<32x8xf32>) -> !comm.handle<tensor<8x8xf32>, tensor<32x2xf32>>
    %w5:2 = comm.wait %h5 : (!comm.handle<tensor<8x8xf32>, tensor<32x2xf32>>) -> (tensor<8x8xf32>, tensor<32x2xf32>)
    %h6 = comm.all_reduce_bucket_start %w5#0, %w5#1 {axes = ["tp"], mesh = @mesh, op = "sum"} : (tensor<8x8xf32>, tensor<32x2xf32>) -> !comm.handle<tensor<8x8xf32>, tensor<32x2xf32>>
    %w6:2 = comm.wait %h6 : (!comm.handle<tensor<8x8xf32>, tensor<32x2xf32>>) -> (tensor<8x8xf32>, tensor<32x2xf32>)
    %call = func.call %12 {callee = @helper} : tensor<4xf32>
    %f:2 = kernel.fused %b, %s {kind = "pointwise"} : (tensor<8x32xf32>, tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
    ^bb0(%fa: tensor<8x32xf32>, %fb: tensor<32xf32>):
      %t = tensor.add %fa, %fb : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
      %u = tensor.relu %t : tensor<8x32xf32>
      kernel.yield %t, %u : tensor<8x32xf32>, tensor<8x32xf32>
    }
    %out = tensor.add %f#0, %f#1 : tensor<8x32xf32>
    func.return %out, %call, %mean : tensor<8x32xf32>, tensor<4xf32>, tensor<f32>
  }
  func.func @tensor_ops(%x: tensor<2x8xf32>, %e: tensor<f32>, %i: tensor<8xi64>, %w: tensor<64x32xf32>,
                        %ids: tensor<2x8xi64>, %t: tensor<2x1xi64>) -> (tensor<2x8xf32>, tensor<64x32xf32>) {
    %0 = tensor.gelu %x {approximate = "tanh"} : tensor<2x8xf32>
    %1 = tensor.sigmoid %0 : tensor<2x8xf32>
    %2 = tensor.sin %1 : tensor<2x8xf32>
    %3 = tensor.cos %2 : tensor<2x8xf32>
    %4 = tensor.erf %3 : tensor<2x8xf32>
    %5 = tensor.silu %4 : tensor<2x8xf32>
    %6 = tensor.abs %5 : tensor<2x8xf32>
    %l1p = tensor.log1p %6 : tensor<2x8xf32>
    %7 = tensor.sign %l1p : tensor<2x8xf32>
    %8 = tensor.pow %7, %e : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
    %9 = tensor.clamp %8 {max = 6.0, min = 0.0} : tensor<2x8xf32>
    %10 = tensor.clamp %i {max = 63, min = 0} : tensor<8xi64>
    %m = tensor.compare %x, %e {predicate = "lt"} : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xi1>
    %n = tensor.not %m : tensor<2x8xi1>
    %and = tensor.and %m, %n : tensor<2x8xi1>
    %or = tensor.or %and, %m : tensor<2x8xi1>
    %xor = tensor.xor %or, %n : tensor<2x8xi1>
    %sel = tensor.select %xor, %9, %e : (tensor<2x8xi1>, tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
    %sm = tensor.softmax %sel {dim = 1} : tensor<2x8xf32>
    %lsm = tensor.log_softmax %sm {dim = 1} : tensor<2x8xf32>
    %rnd = tensor.random {distribution = "bernoulli", p = 0.9} : tensor<2x8xf32>
    %seed = tensor.rng_seed : tensor<i64>
    %rnd2 = tensor.random %seed {distribution = "normal", mean = 0.0, std = 1.0, stream = 0} : (tensor<i64>) -> tensor<2x8xf32>
    %img = tensor.reshape %lsm : (tensor<2x8xf32>) -> tensor<1x2x2x4xf32>
    %cw = tensor.constant {value = dense<0.5> : tensor<3x2x1x2xf32>} : tensor<3x2x1x2xf32>
    %cy = tensor.conv %img, %cw {dilation = [1, 1], groups = 1, padding = [0, 0], stride = [1, 1]} : (tensor<1x2x2x4xf32>, tensor<3x2x1x2xf32>) -> tensor<1x3x2x3xf32>
    %cdx = tensor.conv_input_grad %cy, %cw {dilation = [1, 1], groups = 1, padding = [0, 0], stride = [1, 1]} : (tensor<1x3x2x3xf32>, tensor<3x2x1x2xf32>) -> tensor<1x2x2x4xf32>
    %cdw = tensor.conv_weight_grad %img, %cy {dilation = [1, 1], groups = 1, padding = [0, 0], stride = [1, 1]} : (tensor<1x2x2x4xf32>, tensor<1x3x2x3xf32>) -> tensor<3x2x1x2xf32>
    %all = tensor.all %xor {dims = [1], keepdim = false} : (tensor<2x8xi1>) -> tensor<2xi1>
    %any = tensor.any %xor {dims = [0, 1], keepdim = true} : (tensor<2x8xi1>) -> tensor<1x1xi1>
    %q = tensor.reshape %lsm : (tensor<2x8xf32>) -> tensor<1x2x2x4xf32>
    %att = tensor.attention %q, %q, %q {is_causal = true, scale = 0.5} : tensor<1x2x2x4xf32>
    %attm = tensor.attention %q, %q, %q, %any {scale = 0.5} : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>, tensor<1x1xi1>) -> tensor<1x2x2x4xf32>
    %ag:3 = tensor.attention_grad %att, %q, %q, %q, %att {is_causal = true, scale = 0.5} : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>)
    %cs = tensor.cumsum %ids {dim = 1} : tensor<2x8xi64>
    %var = tensor.var %lsm {correction = 0, dims = [1], keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
    %sl = tensor.slice %lsm {dim = 1, end = 8, start = 4, step = 1} : (tensor<2x8xf32>) -> tensor<2x4xf32>
    %cat = tensor.concat %sl, %sl {dim = 1} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
    %rev = tensor.reverse %cat {dims = [1]} : tensor<2x8xf32>
    %ins = tensor.insert_slice %rev, %sl {dim = 1, end = 8, start = 0, step = 2} : (tensor<2x8xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
    %pad = tensor.pad %cs {high = [0, 1], low = [0, 0], value = -100} : (tensor<2x8xi64>) -> tensor<2x9xi64>
    %emb = tensor.embedding %w, %ids : (tensor<64x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>
    %g = tensor.gather %ins, %t {dim = 1} : (tensor<2x8xf32>, tensor<2x1xi64>) -> tensor<2x1xf32>
    %sc = tensor.scatter %ins, %t, %g {dim = 1, reduce = "add"} : (tensor<2x8xf32>, tensor<2x1xi64>, tensor<2x1xf32>) -> tensor<2x8xf32>
    %idx = tensor.index %w, %ids : (tensor<64x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>
    %ip = tensor.index_put %w, %ids, %idx {accumulate = true} : (tensor<64x32xf32>, tensor<2x8xi64>, tensor<2x8x32xf32>) -> tensor<64x32xf32>
    func.return %sc, %ip : tensor<2x8xf32>, tensor<64x32xf32>
  }
  pipe.boundary {from = #shard<@g0, [S(0)]>, grad_from = #shard<@g1, [R]>, grad_to = #shard<@g0, [S(0)]>, id = 0, shape = [8, 8], to = #shard<@g1, [R]>}
  func.func @rank0() attributes {spmdc.rank = 0, spmdc.schedule = "1f1b", spmdc.stage = 0} {
    pipe.forward {mb = 0, stage = 0}
    pipe.send {mb = 0, to = [4], value = 0}
    pipe.recv {from = [4], grad, mb = 0, value = 0}
    pipe.backward {mb = 0, stage = 0}
    pipe.step
    func.return
  }
  func.func @rank4() attributes {spmdc.rank = 4, spmdc.schedule = "1f1b", spmdc.stage = 1} {
    pipe.recv {from = [0, 1, 2, 3], mb = 0, value = 0}
    pipe.forward_backward {mb = 0, stage = 1}
    pipe.send {grad, mb = 0, to = [0], value = 0}
    pipe.step
    func.return
  }
}
