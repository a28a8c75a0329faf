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
    %lin = tensor.linear %x, %w, %s : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
    %sum = tensor.sum %lin {dims = [1], keepdim = false} : (tensor<8x32xf32>) -> tensor<8xf32>
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
    %ko = comm.keep_at_origin %ar {axes = ["tp"], mesh = @mesh} : tensor<32x8xf32>
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
    %gl = tensor.gelu %x {approximate = "tanh"} : tensor<2x8xf32>
    %0 = tensor.gelu_backward %gl, %x {approximate = "tanh"} : tensor<2x8xf32>
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
  // Core ATen ops (from tests/lit/dialects/tensor/ops_*_core.mlir)
  func.func @core_elementwise_float_math(%x: tensor<3x4xf32>, %h: tensor<4xbf16>) -> (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4xbf16>) {
    %0 = tensor.tan %x : tensor<3x4xf32>
    %1 = tensor.sinh %x : tensor<3x4xf32>
    %2 = tensor.cosh %x : tensor<3x4xf32>
    %3 = tensor.asin %x : tensor<3x4xf32>
    %4 = tensor.acos %x : tensor<3x4xf32>
    %5 = tensor.atan %x : tensor<3x4xf32>
    %6 = tensor.asinh %x : tensor<3x4xf32>
    %7 = tensor.acosh %x : tensor<3x4xf32>
    %8 = tensor.atanh %x : tensor<3x4xf32>
    %9 = tensor.expm1 %x : tensor<3x4xf32>
    %10 = tensor.log2 %x : tensor<3x4xf32>
    %11 = tensor.log10 %x : tensor<3x4xf32>
    %12 = tensor.asinh %h : tensor<4xbf16>
    func.return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12 : tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4xbf16>
  }
  func.func @core_elementwise_atan2_and_roundings(%y: tensor<3x4xf32>, %x: tensor<4xf32>, %h: tensor<4xbf16>) -> (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4xbf16>) {
    %0 = tensor.atan2 %y, %x : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
    %1 = tensor.ceil %0 : tensor<3x4xf32>
    %2 = tensor.floor %y : tensor<3x4xf32>
    %3 = tensor.trunc %y : tensor<3x4xf32>
    %4 = tensor.round %y : tensor<3x4xf32>
    %5 = tensor.round %h : tensor<4xbf16>
    func.return %1, %2, %3, %4, %5 : tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4xbf16>
  }
  func.func @core_elementwise_remainders_and_rounded_quotients(%a: tensor<3x4xf32>, %b: tensor<4xf32>, %i: tensor<3x4xi64>, %j: tensor<4xi64>) -> (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xi64>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xi64>) {
    %0 = tensor.fmod %a, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
    %1 = tensor.remainder %a, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
    %one = tensor.constant {value = dense<1> : tensor<i64>} : tensor<i64>
    %d = tensor.add %j, %one : (tensor<4xi64>, tensor<i64>) -> tensor<4xi64>
    %2 = tensor.fmod %i, %d : (tensor<3x4xi64>, tensor<4xi64>) -> tensor<3x4xi64>
    %3 = tensor.remainder %2, %d : (tensor<3x4xi64>, tensor<4xi64>) -> tensor<3x4xi64>
    %4 = tensor.div %a, %b {rounding_mode = "trunc"} : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
    %5 = tensor.div %a, %b {rounding_mode = "floor"} : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
    %6 = tensor.div %i, %d {rounding_mode = "floor"} : (tensor<3x4xi64>, tensor<4xi64>) -> tensor<3x4xi64>
    func.return %0, %1, %3, %4, %5, %6 : tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xi64>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xi64>
  }
  func.func @core_elementwise_float_tests(%x: tensor<4xf32>, %h: tensor<2x3xbf16>) -> (tensor<4xi1>, tensor<4xi1>, tensor<2x3xi1>) {
    %0 = tensor.div %x, %x : tensor<4xf32>
    %1 = tensor.isinf %x : (tensor<4xf32>) -> tensor<4xi1>
    %2 = tensor.isnan %0 : (tensor<4xf32>) -> tensor<4xi1>
    %3 = tensor.isnan %h : (tensor<2x3xbf16>) -> tensor<2x3xi1>
    func.return %1, %2, %3 : tensor<4xi1>, tensor<4xi1>, tensor<2x3xi1>
  }
  func.func @core_elementwise_elu_and_leaky_relu(%x: tensor<3x4xf32>, %h: tensor<4xbf16>) -> (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4xbf16>) {
    %0 = tensor.elu %x : tensor<3x4xf32>
    %1 = tensor.elu %x {alpha = 1.5, input_scale = 0.5, scale = 2.0} : tensor<3x4xf32>
    %2 = tensor.leaky_relu %x {negative_slope = 0.2} : tensor<3x4xf32>
    %3 = tensor.leaky_relu %h : tensor<4xbf16>
    func.return %0, %1, %2, %3 : tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4xbf16>
  }
  func.func @core_nn_avg_pools(%x: tensor<2x3x6x6xf32>, %dy: tensor<2x3x4x4xf32>, %v: tensor<2x3x4x6x6xf32>) -> (tensor<2x3x4x4xf32>, tensor<2x3x6x6xf32>, tensor<2x3x2x3x3xf32>) {
    %0 = tensor.avg_pool %x {ceil_mode = true, count_include_pad = false, kernel = [3, 3], padding = [1, 1], stride = [2, 2]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x4x4xf32>
    %1 = tensor.avg_pool_grad %dy {ceil_mode = true, count_include_pad = false, kernel = [3, 3], padding = [1, 1], stride = [2, 2]} : (tensor<2x3x4x4xf32>) -> tensor<2x3x6x6xf32>
    %2 = tensor.avg_pool %v {divisor_override = 3, kernel = [2, 2, 2], padding = [0, 0, 0], stride = [2, 2, 2]} : (tensor<2x3x4x6x6xf32>) -> tensor<2x3x2x3x3xf32>
    func.return %0, %1, %2 : tensor<2x3x4x4xf32>, tensor<2x3x6x6xf32>, tensor<2x3x2x3x3xf32>
  }
  func.func @core_nn_max_pools(%x: tensor<2x3x6x6xf32>, %u: tensor<3x4x6x6xf32>) -> (tensor<2x3x3x3xf32>, tensor<2x3x3x3xi64>, tensor<3x5x4x4xf32>) {
    %v:2 = tensor.max_pool %x {dilation = [1, 1], kernel = [2, 2], padding = [0, 0], stride = [2, 2]} : (tensor<2x3x6x6xf32>) -> (tensor<2x3x3x3xf32>, tensor<2x3x3x3xi64>)
    %w:2 = tensor.max_pool %u {ceil_mode = true, dilation = [1, 1, 1], kernel = [2, 2, 2], padding = [1, 1, 1], stride = [1, 2, 2]} : (tensor<3x4x6x6xf32>) -> (tensor<3x5x4x4xf32>, tensor<3x5x4x4xi64>)
    func.return %v#0, %v#1, %w#0 : tensor<2x3x3x3xf32>, tensor<2x3x3x3xi64>, tensor<3x5x4x4xf32>
  }
  func.func @core_nn_adaptive_pools(%x: tensor<2x3x6x6xf32>, %dy: tensor<2x3x4x5xf32>, %r: tensor<2x3x6xf32>) -> (tensor<2x3x4x5xf32>, tensor<2x3x6x6xf32>, tensor<2x3x4xf32>) {
    %0 = tensor.adaptive_avg_pool %x {output_size = [4, 5]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x4x5xf32>
    %1 = tensor.adaptive_avg_pool_grad %dy {spatial_dims = 2} : (tensor<2x3x4x5xf32>) -> tensor<2x3x6x6xf32>
    %2 = tensor.adaptive_avg_pool %r {output_size = [4]} : (tensor<2x3x6xf32>) -> tensor<2x3x4xf32>
    func.return %0, %1, %2 : tensor<2x3x4x5xf32>, tensor<2x3x6x6xf32>, tensor<2x3x4xf32>
  }
  func.func @core_nn_upsample_nearest(%x: tensor<2x3x6x6xf32>) -> (tensor<2x3x9x4xf32>, tensor<2x3x9x4xf32>) {
    %0 = tensor.upsample_nearest %x {output_size = [9, 4]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x9x4xf32>
    %1 = tensor.upsample_nearest %x {output_size = [9, 4], scales = [1.5, 0.7]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x9x4xf32>
    func.return %0, %1 : tensor<2x3x9x4xf32>, tensor<2x3x9x4xf32>
  }
  func.func @core_nn_grid_sample(%x: tensor<2x3x6x6xf32>, %g: tensor<2x4x5x2xf32>, %dy: tensor<2x3x4x5xf32>) -> (tensor<2x3x4x5xf32>, tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>) {
    %0 = tensor.grid_sample %x, %g {align_corners = false, interpolation_mode = 0, padding_mode = 0} : (tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>) -> tensor<2x3x4x5xf32>
    %dx:2 = tensor.grid_sample_grad %dy, %x, %g {align_corners = true, interpolation_mode = 1, padding_mode = 1} : (tensor<2x3x4x5xf32>, tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>) -> (tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>)
    func.return %0, %dx#0, %dx#1 : tensor<2x3x4x5xf32>, tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>
  }
  func.func @core_nn_cdist(%a: tensor<2x5x6xf32>, %b: tensor<2x4x6xf32>, %g: tensor<2x5x4xf32>) -> (tensor<2x5x6xf32>, tensor<2x5x4xf32>) {
    %d = tensor.cdist %a, %b {p = inf} : (tensor<2x5x6xf32>, tensor<2x4x6xf32>) -> tensor<2x5x4xf32>
    %da = tensor.cdist_grad %g, %a, %b, %d {p = inf} : (tensor<2x5x4xf32>, tensor<2x5x6xf32>, tensor<2x4x6xf32>, tensor<2x5x4xf32>) -> tensor<2x5x6xf32>
    %e = tensor.cdist %a, %b {mm = true, p = 2.0} : (tensor<2x5x6xf32>, tensor<2x4x6xf32>) -> tensor<2x5x4xf32>
    func.return %da, %e : tensor<2x5x6xf32>, tensor<2x5x4xf32>
  }
  func.func @core_nn_pdist(%x: tensor<5x6xf32>, %g: tensor<10xf32>) -> (tensor<10xf32>, tensor<5x6xf32>) {
    %q = tensor.pdist %x {p = 1.5} : (tensor<5x6xf32>) -> tensor<10xf32>
    %dx = tensor.pdist_grad %g, %x, %q {p = 1.5} : (tensor<10xf32>, tensor<5x6xf32>, tensor<10xf32>) -> tensor<5x6xf32>
    func.return %q, %dx : tensor<10xf32>, tensor<5x6xf32>
  }
  func.func @core_nn_embedding_bag_max(%w: tensor<10x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xi64>) {
    %ids = tensor.constant {value = dense<[1, 4, 4, 0, 7, 2, 9, 3]> : tensor<8xi64>} : tensor<8xi64>
    %off = tensor.constant {value = dense<[0, 3, 3, 5]> : tensor<4xi64>} : tensor<4xi64>
    %o:2 = tensor.embedding_bag_max %w, %ids, %off {include_last_offset = false, padding_idx = 4} : (tensor<10x6xf32>, tensor<8xi64>, tensor<4xi64>) -> (tensor<4x6xf32>, tensor<4x6xi64>)
    func.return %o#0, %o#1 : tensor<4x6xf32>, tensor<4x6xi64>
  }
  func.func @core_reduction_extremes_and_products(%x: tensor<4x6xf32>, %n: tensor<4x6xi64>) -> (tensor<4xf32>, tensor<4x1xf32>, tensor<i64>, tensor<4xi64>, tensor<1x6xi64>, tensor<i64>) {
    %0 = tensor.min %x {dims = [1], keepdim = false} : (tensor<4x6xf32>) -> tensor<4xf32>
    %1 = tensor.prod %x {dims = [1], keepdim = true} : (tensor<4x6xf32>) -> tensor<4x1xf32>
    %2 = tensor.prod %n {dims = [0, 1], keepdim = false} : (tensor<4x6xi64>) -> tensor<i64>
    %3 = tensor.argmax %x {dim = 1, keepdim = false} : (tensor<4x6xf32>) -> tensor<4xi64>
    %4 = tensor.argmin %x {dim = 0, keepdim = true} : (tensor<4x6xf32>) -> tensor<1x6xi64>
    %5 = tensor.argmax %n {keepdim = false} : (tensor<4x6xi64>) -> tensor<i64>
    func.return %0, %1, %2, %3, %4, %5 : tensor<4xf32>, tensor<4x1xf32>, tensor<i64>, tensor<4xi64>, tensor<1x6xi64>, tensor<i64>
  }
  func.func @core_reduction_ordering(%x: tensor<4x6xf32>, %n: tensor<4x6xi64>) -> (tensor<4x2xf32>, tensor<4x2xi64>, tensor<4x6xf32>, tensor<4x6xi64>, tensor<4x6xi64>, tensor<4x6xf32>) {
    %v:2 = tensor.topk %x {dim = 1, k = 2, largest = true, sorted = true} : (tensor<4x6xf32>) -> (tensor<4x2xf32>, tensor<4x2xi64>)
    %s:2 = tensor.sort %x {descending = true, dim = 0, stable = true} : (tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xi64>)
    %ns:2 = tensor.sort %n {dim = 1} : tensor<4x6xi64>
    %c = tensor.cumprod %x {dim = 1} : tensor<4x6xf32>
    func.return %v#0, %v#1, %s#0, %ns#1, %ns#0, %c : tensor<4x2xf32>, tensor<4x2xi64>, tensor<4x6xf32>, tensor<4x6xi64>, tensor<4x6xi64>, tensor<4x6xf32>
  }
  func.func @core_reduction_index_select_scatter_reduce_histc(%x: tensor<4x6xf32>, %rows: tensor<8xi64>, %idx: tensor<4x2xi64>, %src: tensor<4x2xf32>) -> (tensor<8x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4xf32>) {
    %0 = tensor.index_select %x, %rows {dim = 0} : (tensor<4x6xf32>, tensor<8xi64>) -> tensor<8x6xf32>
    %1 = tensor.scatter_reduce %x, %idx, %src {dim = 1, include_self = true, reduce = "amax"} : (tensor<4x6xf32>, tensor<4x2xi64>, tensor<4x2xf32>) -> tensor<4x6xf32>
    %2 = tensor.scatter_reduce %x, %idx, %src {dim = 1, include_self = false, reduce = "mean"} : (tensor<4x6xf32>, tensor<4x2xi64>, tensor<4x2xf32>) -> tensor<4x6xf32>
    %3 = tensor.histc %x {bins = 4, max = 1.0, min = -1.0} : (tensor<4x6xf32>) -> tensor<4xf32>
    func.return %0, %1, %2, %3 : tensor<8x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4xf32>
  }
  func.func @core_reduction_permutation() -> tensor<6xi64> {
    %0 = tensor.randperm : tensor<6xi64>
    func.return %0 : tensor<6xi64>
  }
  func.func @shape_iota() -> (tensor<5xi64>, tensor<3xi32>) {
    %0 = tensor.iota {start = 0, step = 1} : tensor<5xi64>
    %1 = tensor.iota {start = 7, step = -3} : tensor<3xi32>
    func.return %0, %1 : tensor<5xi64>, tensor<3xi32>
  }
  func.func @core_shape_diagonal_and_scatter(%x: tensor<3x2x4xf32>, %m: tensor<4x3xf32>) -> (tensor<3x2x4xf32>, tensor<3xf32>) {
    %d = tensor.diagonal %x {dim1 = 0, dim2 = 2, offset = 1} : (tensor<3x2x4xf32>) -> tensor<2x3xf32>
    %e = tensor.diagonal %m {dim1 = 0, dim2 = 1, offset = -1} : (tensor<4x3xf32>) -> tensor<3xf32>
    %z = tensor.constant {value = dense<0.0> : tensor<3x2x4xf32>} : tensor<3x2x4xf32>
    %s = tensor.diagonal_scatter %z, %d {dim1 = 0, dim2 = 2, offset = 1} : (tensor<3x2x4xf32>, tensor<2x3xf32>) -> tensor<3x2x4xf32>
    func.return %s, %e : tensor<3x2x4xf32>, tensor<3xf32>
  }
  func.func @core_shape_grouped_matmul(%x: tensor<10x8xf32>, %w: tensor<4x8x6xf32>) -> (tensor<10x6xf32>, tensor<10x8xf32>, tensor<4x8x6xf32>) {
    %offs = tensor.constant {value = dense<[3, 3, 8, 8]> : tensor<4xi32>} : tensor<4xi32>
    %y = tensor.grouped_matmul %x, %w, %offs : (tensor<10x8xf32>, tensor<4x8x6xf32>, tensor<4xi32>) -> tensor<10x6xf32>
    %dx = tensor.grouped_matmul %y, %w, %offs {transpose_w = true} : (tensor<10x6xf32>, tensor<4x8x6xf32>, tensor<4xi32>) -> tensor<10x8xf32>
    %dw = tensor.grouped_matmul_wgrad %x, %y, %offs : (tensor<10x8xf32>, tensor<10x6xf32>, tensor<4xi32>) -> tensor<4x8x6xf32>
    func.return %y, %dx, %dw : tensor<10x6xf32>, tensor<10x8xf32>, tensor<4x8x6xf32>
  }
  func.func @expert_dispatch(%x: tensor<8x4xf32>, %w: tensor<4x4x6xf32>) -> (tensor<16x6xf32>, tensor<8x6xf32>, tensor<4x4x6xf32>) {
    %ids = tensor.constant {value = dense<[0, 2, 1, 2, 3, 0, 2, 1, 1, 1, 0, 3, 2, 0, 3, 3]> : tensor<16xi64>} : tensor<16xi64>
    %c = tensor.expert_counts %ids {experts = 4, sources = 2} : (tensor<16xi64>) -> tensor<2x4xi64>
    %d:3 = tensor.expert_route %ids, %c {per_source = 8, slot_rows = 16, slots = 2} : (tensor<16xi64>, tensor<2x4xi64>) -> (tensor<16xi64>, tensor<4xi32>, tensor<4xi32>)
    %rows = tensor.expert_dispatch %x, %d#0, %c {per_source = 8, slot_rows = 16, top_k = 2} : (tensor<8x4xf32>, tensor<16xi64>, tensor<2x4xi64>) -> tensor<32x4xf32>
    %y = tensor.grouped_matmul %rows, %w, %d#1, %d#2 {slot_rows = 16} : (tensor<32x4xf32>, tensor<4x4x6xf32>, tensor<4xi32>, tensor<4xi32>) -> tensor<32x6xf32>
    %dw = tensor.grouped_matmul_wgrad %rows, %y, %d#1, %d#2 {slot_rows = 16} : (tensor<32x4xf32>, tensor<32x6xf32>, tensor<4xi32>, tensor<4xi32>) -> tensor<4x4x6xf32>
    %back = tensor.expert_combine %y, %d#0, %c {per_source = 8, top_k = 1} : (tensor<32x6xf32>, tensor<16xi64>, tensor<2x4xi64>) -> tensor<16x6xf32>
    %tok = tensor.expert_combine %y, %d#0, %c {per_source = 8, top_k = 2} : (tensor<32x6xf32>, tensor<16xi64>, tensor<2x4xi64>) -> tensor<8x6xf32>
    func.return %back, %tok, %dw : tensor<16x6xf32>, tensor<8x6xf32>, tensor<4x4x6xf32>
  }
  func.func @expert_all_to_all(%x: tensor<2x4xf32>, %p: tensor<4xf32>) -> (tensor<16x4xf32>, tensor<2x4xf32>) {
    %dest = tensor.constant {value = dense<[3, 19, 35, 51]> : tensor<4xi64>} : tensor<4xi64>
    %c = tensor.constant {value = dense<1> : tensor<4x4xi64>} : tensor<4x4xi64>
    %rows:2 = comm.expert_dispatch %x, %p, %dest, %c {axis = "tp", mesh = @mesh, slot_rows = 16, top_k = [2, 1]} : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xi64>, tensor<4x4xi64>) -> (tensor<16x4xf32>, tensor<16xf32>)
    %y = comm.expert_combine %rows#0, %dest, %c {axis = "tp", mesh = @mesh, top_k = [2]} : (tensor<16x4xf32>, tensor<4xi64>, tensor<4x4xi64>) -> tensor<2x4xf32>
    func.return %rows#0, %y : tensor<16x4xf32>, tensor<2x4xf32>
  }
}
