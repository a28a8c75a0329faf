// RUN: %spmdc-opt %s -p schedule-collectives | FileCheck %s
// RUN: %spmdc-opt %s -p bucket-collectives,schedule-collectives | FileCheck %s --check-prefix=INDUCTOR
// RUN: %spmdc-opt %s -p 'schedule-collectives{memory-cap=1}' | FileCheck %s --check-prefix=CAP
// RUN: %spmdc-opt %s -p 'schedule-collectives{keep-peak=true}' | FileCheck %s --check-prefix=KEEP

shard.mesh @mesh = <["dp" = 2]>

// FSDP forward of two blocks: the gather of block 1 is issued right after block 0's gather
// is waited, so it runs while block 0 computes; each wait sits just before its first use.
// CHECK-LABEL: func.func @prefetch
// CHECK:      %[[H0:.*]] = comm.all_gather_start %w0 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> !comm.handle<tensor<8x8xf32>>
// CHECK-NEXT: %[[A:.*]] = comm.wait %[[H0]] : (!comm.handle<tensor<8x8xf32>>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[H1:.*]] = comm.all_gather_start %w1
// CHECK-NEXT: %[[Y:.*]] = tensor.matmul %x, %[[A]]
// CHECK-NEXT: %[[B:.*]] = comm.wait %[[H1]]
// CHECK-NEXT: tensor.matmul %[[Y]], %[[B]]
// Prefetching that does not raise the peak is free: it happens under any cap.
// CAP-LABEL: func.func @prefetch
// CAP:      comm.wait
// CAP-NEXT: comm.all_gather_start %w1
func.func @prefetch(%w0: tensor<4x8xf32> {spmdc.param = "h.0.w"}, %w1: tensor<4x8xf32> {spmdc.param = "h.1.w"},
                    %x: tensor<8x8xf32>) -> tensor<8x8xf32> attributes {spmdc.rank = 0} {
  %a = comm.all_gather %w0 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %y = tensor.matmul %x, %a : tensor<8x8xf32> loc("h.0.fc/aten.mm")
  %b = comm.all_gather %w1 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %z = tensor.matmul %y, %b : tensor<8x8xf32> loc("h.1.fc/aten.mm")
  func.return %z : tensor<8x8xf32>
}

// Block 0 computes a 16 KiB temporary: prefetching block 1's gather during it raises the
// peak by the 256 bytes in flight. Without a cap it is prefetched; under a cap it waits.
// CHECK-LABEL: func.func @capped
// CHECK:      comm.wait
// CHECK-NEXT: comm.all_gather_start %w1
// CHECK-NEXT: tensor.matmul %x
// CHECK-NEXT: tensor.exp
// CAP-LABEL: func.func @capped
// CAP:      tensor.sum
// CAP-NEXT: comm.all_gather_start %w1
// CAP-NEXT: comm.wait
func.func @capped(%w0: tensor<4x8xf32> {spmdc.param = "h.0.w"}, %w1: tensor<4x8xf32> {spmdc.param = "h.1.w"},
                  %x: tensor<8x8xf32>, %xx: tensor<64x64xf32>) -> (tensor<8x8xf32>, tensor<f32>) attributes {spmdc.rank = 0} {
  %a = comm.all_gather %w0 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %y = tensor.matmul %x, %a : tensor<8x8xf32> loc("h.0.fc/aten.mm")
  %big = tensor.exp %xx : tensor<64x64xf32> loc("h.0.act/aten.exp")
  %s = tensor.sum %big {dims = [0, 1], keepdim = false} : (tensor<64x64xf32>) -> tensor<f32> loc("h.0.act/aten.sum")
  %b = comm.all_gather %w1 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %z = tensor.matmul %y, %b : tensor<8x8xf32> loc("h.1.fc/aten.mm")
  func.return %z, %s : tensor<8x8xf32>, tensor<f32>
}

// keep-peak (the compiler's default without a cap): the same decision with no cap given, from
// the program's own peak; ranks of different local shapes (spmdc.uneven) could decide
// differently, so there the start rises as far as it can.
// KEEP-LABEL: func.func @capped(
// KEEP:      tensor.sum
// KEEP-NEXT: comm.all_gather_start %w1
// KEEP-NEXT: comm.wait
// KEEP-LABEL: func.func @capped_uneven
// KEEP:      comm.wait
// KEEP-NEXT: comm.all_gather_start %w1
// KEEP-NEXT: tensor.matmul %x
func.func @capped_uneven(%w0: tensor<4x8xf32> {spmdc.param = "h.0.w"}, %w1: tensor<4x8xf32> {spmdc.param = "h.1.w"},
                  %x: tensor<8x8xf32>, %xx: tensor<64x64xf32>) -> (tensor<8x8xf32>, tensor<f32>) attributes {spmdc.rank = 0, spmdc.uneven} {
  %a = comm.all_gather %w0 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %y = tensor.matmul %x, %a : tensor<8x8xf32> loc("h.0.fc/aten.mm")
  %big = tensor.exp %xx : tensor<64x64xf32> loc("h.0.act/aten.exp")
  %s = tensor.sum %big {dims = [0, 1], keepdim = false} : (tensor<64x64xf32>) -> tensor<f32> loc("h.0.act/aten.sum")
  %b = comm.all_gather %w1 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %z = tensor.matmul %y, %b : tensor<8x8xf32> loc("h.1.fc/aten.mm")
  func.return %z, %s : tensor<8x8xf32>, tensor<f32>
}

// Backward: the reduce-scatter of block 1's gradient runs while block 0's gradient is
// computed, and is waited just before the next reduce-scatter is issued.
// CHECK-LABEL: func.func @reduce_scatter_overlap
// CHECK:      %[[G1:.*]] = tensor.exp %x
// CHECK-NEXT: %[[R1:.*]] = comm.reduce_scatter_start %[[G1]]
// CHECK-NEXT: %[[G0:.*]] = tensor.neg %x
// CHECK-NEXT: comm.wait %[[R1]]
// CHECK-NEXT: %[[R0:.*]] = comm.reduce_scatter_start %[[G0]]
// CHECK-NEXT: comm.wait %[[R0]]
// CHECK-NEXT: func.return
func.func @reduce_scatter_overlap(%x: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) attributes {spmdc.rank = 0} {
  %g1 = tensor.exp %x : tensor<8x8xf32>
  %r1 = comm.reduce_scatter %g1 {axis = "dp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<8x8xf32>) -> tensor<4x8xf32>
  %g0 = tensor.neg %x : tensor<8x8xf32>
  %r0 = comm.reduce_scatter %g0 {axis = "dp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<8x8xf32>) -> tensor<4x8xf32>
  func.return %r1, %r0 : tensor<4x8xf32>, tensor<4x8xf32>
}

// A start never rises above the op that computes its operand.
// CHECK-LABEL: func.func @dependency
// CHECK:      %[[S:.*]] = tensor.exp %x
// CHECK-NEXT: %[[H:.*]] = comm.all_gather_start %[[S]]
func.func @dependency(%x: tensor<4x8xf32>, %y: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) attributes {spmdc.rank = 0} {
  %m = tensor.matmul %y, %y : tensor<8x8xf32>
  %s = tensor.exp %x : tensor<4x8xf32>
  %a = comm.all_gather %s {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  func.return %m, %a : tensor<8x8xf32>, tensor<8x8xf32>
}

// Inductor's shapes, with bucketing first. Four independent parameter gathers whose results
// are used only after two matmuls: one bucket.
// INDUCTOR-LABEL: func.func @four_independent
// INDUCTOR:     comm.all_gather_bucket_start %w0, %w1, %w2, %w3 {axis = "dp", dims = [0, 0, 0, 0], mesh = @mesh}
// INDUCTOR-NOT: comm.all_gather
// INDUCTOR:     tensor.matmul
// INDUCTOR:     tensor.matmul
// INDUCTOR:     comm.wait
func.func @four_independent(%w0: tensor<4x8xf32> {spmdc.param = "w0"}, %w1: tensor<4x8xf32> {spmdc.param = "w1"},
                            %w2: tensor<4x8xf32> {spmdc.param = "w2"}, %w3: tensor<4x8xf32> {spmdc.param = "w3"},
                            %x: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>)
    attributes {spmdc.rank = 0} {
  %a = comm.all_gather %w0 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %b = comm.all_gather %w1 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %c = comm.all_gather %w2 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %d = comm.all_gather %w3 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %m = tensor.matmul %x, %x : tensor<8x8xf32>
  %n = tensor.matmul %m, %x : tensor<8x8xf32>
  func.return %n, %a, %b, %c, %d : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}

// Two of them feed the first matmul, two the second: two buckets, AG mm AG mm (the second
// issued before the first matmul runs, waited just before the second).
// INDUCTOR-LABEL: func.func @two_feed_each_matmul
// INDUCTOR:      %[[H0:.*]] = comm.all_gather_bucket_start %w0, %w1
// INDUCTOR-NEXT: %[[A:.*]]:2 = comm.wait %[[H0]]
// INDUCTOR-NEXT: %[[H1:.*]] = comm.all_gather_bucket_start %w2, %w3
// INDUCTOR-NEXT: %[[M:.*]] = tensor.matmul %[[A]]#0, %[[A]]#1
// INDUCTOR-NEXT: %[[B:.*]]:2 = comm.wait %[[H1]]
// INDUCTOR-NEXT: tensor.matmul %[[B]]#0, %[[B]]#1
func.func @two_feed_each_matmul(%w0: tensor<4x8xf32> {spmdc.param = "w0"}, %w1: tensor<4x8xf32> {spmdc.param = "w1"},
                                %w2: tensor<4x8xf32> {spmdc.param = "w2"}, %w3: tensor<4x8xf32> {spmdc.param = "w3"})
    -> (tensor<8x8xf32>, tensor<8x8xf32>) attributes {spmdc.rank = 0} {
  %a = comm.all_gather %w0 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %b = comm.all_gather %w1 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %c = comm.all_gather %w2 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %d = comm.all_gather %w3 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %m = tensor.matmul %a, %b : tensor<8x8xf32>
  %n = tensor.matmul %c, %d : tensor<8x8xf32>
  func.return %m, %n : tensor<8x8xf32>, tensor<8x8xf32>
}

// Megatron backward: the input gradient's reshape was made after the weight gradient (where autograd
// needed it); it moves up to its matmul, and the all-reduce starts there, overlapping the weight
// gradient's matmul.
// CHECK-LABEL: func.func @view_rises
// CHECK:      %dx = tensor.matmul %dy, %w
// CHECK-NEXT: %dx3 = tensor.reshape %dx
// CHECK-NEXT: %[[H:.*]] = comm.all_reduce_start %dx3
// CHECK-NEXT: %dyt = tensor.permute %dy
// CHECK-NEXT: %dw = tensor.matmul %dyt, %x
// CHECK-NEXT: comm.wait %[[H]]
func.func @view_rises(%dy: tensor<8x4xf32>, %w: tensor<4x8xf32>, %x: tensor<8x8xf32>)
    -> (tensor<2x4x8xf32>, tensor<4x8xf32>) attributes {spmdc.rank = 0} {
  %dx = tensor.matmul %dy, %w : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %dyt = tensor.permute %dy {perm = [1, 0]} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %dw = tensor.matmul %dyt, %x : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %dx3 = tensor.reshape %dx : (tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %r = comm.all_reduce %dx3 {axes = ["dp"], mesh = @mesh, op = "sum"} : tensor<2x4x8xf32>
  func.return %r, %dw : tensor<2x4x8xf32>, tensor<4x8xf32>
}

// A reduce-scatter's wait sinks to its result's first use, holding its pack that long; under
// keep-peak not over the program's peak (%big): it is waited before it.
// CHECK-LABEL: func.func @pack_held
// CHECK:      %big = tensor.matmul
// CHECK:      %r = comm.wait
// CHECK-NEXT: %u = tensor.neg %r
// KEEP-LABEL: func.func @pack_held
// KEEP:      %r = comm.wait
// KEEP:      %big = tensor.matmul
func.func @pack_held(%x: tensor<64x64xf32>, %p: tensor<256x8xf32>, %q: tensor<8x256xf32>)
    -> (tensor<32x64xf32>, tensor<f32>) attributes {spmdc.rank = 0} {
  %g = tensor.exp %x : tensor<64x64xf32>
  %r = comm.reduce_scatter %g {axis = "dp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<64x64xf32>) -> tensor<32x64xf32>
  %big = tensor.matmul %p, %q : (tensor<256x8xf32>, tensor<8x256xf32>) -> tensor<256x256xf32>
  %s = tensor.sum %big {dims = [0, 1], keepdim = false} : (tensor<256x256xf32>) -> tensor<f32>
  %u = tensor.neg %r : tensor<32x64xf32>
  func.return %u, %s : tensor<32x64xf32>, tensor<f32>
}
