// RUN: not %spmdc-opt %s -p bucket-collectives --split-input-file 2>/dev/null | FileCheck %s
// RUN: not %spmdc-opt %s -p bucket-collectives --split-input-file 2>&1 >/dev/null | FileCheck %s --check-prefix=ERR

shard.mesh @mesh = <["dp" = 2]>

// fsdp_shard = whole: each parameter whole on one rank (RS(0, [n, 0]) / RS(0, [0, n])). The
// gathers of a block still make one bucket, every member with its per-rank sizes; a plain
// member in the same bucket lists torch.chunk's sizes. Rank 0 holds %w1 (8 rows), rank 1 holds
// %w2 (8 rows): each rank's run is 64 elements, so the gather pads nothing.
// CHECK-LABEL: func.func @whole_parameters
// CHECK:      comm.all_gather_bucket %h.0.w1, %h.0.w2, %h.0.b {axis = "dp", dims = [0, 0, 0], mesh = @mesh, sizes = {{\[}}[8, 0], [0, 8], [4, 4]]}
// CHECK-SAME: : (tensor<8x8xf32>, tensor<0x8xf32>, tensor<4xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8xf32>)
// CHECK:      comm.reduce_scatter_bucket %g1, %g2 {axis = "dp", dims = [0, 0], mesh = @mesh, op = "sum", sizes = {{\[}}[8, 0], [0, 8]]}
// CHECK-SAME: -> (tensor<8x8xf32>, tensor<0x8xf32>)
func.func @whole_parameters(%h.0.w1: tensor<8x8xf32> {spmdc.param = "h.0.w1"}, %h.0.w2: tensor<0x8xf32> {spmdc.param = "h.0.w2"},
                            %h.0.b: tensor<4xf32> {spmdc.param = "h.0.b"}, %x: tensor<8x8xf32>)
    -> (tensor<8x8xf32> {spmdc.grad_of = "h.0.w1"}, tensor<0x8xf32> {spmdc.grad_of = "h.0.w2"}) attributes {spmdc.rank = 0} {
  %a = comm.all_gather %h.0.w1 {axis = "dp", dim = 0, mesh = @mesh, sizes = [8, 0]} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %m = tensor.matmul %x, %a : tensor<8x8xf32> loc("h.0.fc/aten.mm")
  %b = comm.all_gather %h.0.w2 {axis = "dp", dim = 0, mesh = @mesh, sizes = [0, 8]} : (tensor<0x8xf32>) -> tensor<8x8xf32>
  %n = tensor.matmul %m, %b : tensor<8x8xf32> loc("h.0.fc2/aten.mm")
  %c = comm.all_gather %h.0.b {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4xf32>) -> tensor<8xf32>
  %o = tensor.add %n, %c : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32> loc("h.0.fc2/aten.add")
  %g1 = tensor.exp %o : tensor<8x8xf32>
  %g2 = tensor.neg %o : tensor<8x8xf32>
  %r1 = comm.reduce_scatter %g1 {axis = "dp", dim = 0, mesh = @mesh, op = "sum", sizes = [8, 0]} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %r2 = comm.reduce_scatter %g2 {axis = "dp", dim = 0, mesh = @mesh, op = "sum", sizes = [0, 8]} : (tensor<8x8xf32>) -> tensor<0x8xf32>
  func.return %r1, %r2 : tensor<8x8xf32>, tensor<0x8xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2]>

// A bucket's sizes must list one array per member, each covering its dim.
// ERR: bucket-ragged.mlir:[[# @LINE + 2]]:{{[0-9]+}}: error: 'comm.all_gather_bucket' op 'sizes' [3, 0] must give 2 sizes adding up to 8
func.func @bad_sizes(%w: tensor<8x8xf32>, %v: tensor<4xf32>) -> (tensor<8x8xf32>, tensor<8xf32>) attributes {spmdc.rank = 0} {
  %a, %b = comm.all_gather_bucket %w, %v {axis = "dp", dims = [0, 0], mesh = @mesh, sizes = [[3, 0], [4, 4]]} : (tensor<8x8xf32>, tensor<4xf32>) -> (tensor<8x8xf32>, tensor<8xf32>)
  func.return %a, %b : tensor<8x8xf32>, tensor<8xf32>
}
