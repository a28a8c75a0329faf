// A two-layer MLP, Megatron tensor-parallel over 2 ranks (column- then row-parallel).
// @main is the global (single-device) program; @main_tp is the per-rank SPMD program
// it partitions into: each rank holds S(1) of w1 and S(0) of w2, and one all_reduce
// turns the partial result into the replicated output.
shard.mesh @mesh = <["tp" = 2]>

func.func @main(%x: tensor<8x16xf32>,
                %w1: tensor<16x32xf32> {spmdc.param = "fc1.weight"},
                %w2: tensor<32x16xf32> {spmdc.param = "fc2.weight"}) -> tensor<8x16xf32> {
  %h = tensor.matmul %x, %w1 : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %a = tensor.relu %h : tensor<8x32xf32>
  %y = tensor.matmul %a, %w2 : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  func.return %y : tensor<8x16xf32>
}

func.func @main_tp(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [R]>},
                   %w1: tensor<16x16xf32> {shard.sharding = #shard<@mesh, [S(1)]>, spmdc.param = "fc1.weight"},
                   %w2: tensor<16x16xf32> {shard.sharding = #shard<@mesh, [S(0)]>, spmdc.param = "fc2.weight"})
    -> (tensor<8x16xf32> {shard.sharding = #shard<@mesh, [R]>}) {
  %h = tensor.matmul %x, %w1 : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %a = tensor.relu %h : tensor<8x16xf32>
  %p = tensor.matmul %a, %w2 : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %y = comm.all_reduce %p {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x16xf32>
  func.return %y : tensor<8x16xf32>
}
