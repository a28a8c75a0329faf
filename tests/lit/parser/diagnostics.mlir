// RUN: %spmdc-opt %s --split-input-file --verify-diagnostics

// Parse errors checked with expected-error comments; the comment may sit on the
// line itself, above it (@+N, @below) or below it (@-N, @above).

func.func @element_type_typo(%x: tensor<8x16xf3>) { // expected-error {{unknown element type 'f3' in 'tensor<8x16xf3>'}}
  func.return
}

// -----

func.func @undefined_value() -> tensor<4xf32> {
  // expected-error@below {{use of undeclared SSA value '%v'}}
  func.return %v : tensor<4xf32>
}

// -----

func.func @unknown_op(%x: tensor<4xf32>) {
  %0 = tensor.frobnicate %x : tensor<4xf32>
  // expected-error@-1 {{unregistered operation 'tensor.frobnicate'}}
  func.return
}

// -----

func.func @unterminated_string() {
  "func.return"() {note = "abc} : () -> ()
  // expected-error@above {{unterminated string}}
}

// -----

func.func @missing_arrow_type(%x: tensor<4xf32>) {
  // expected-error@+2 {{unexpected}}
  %0 = "tensor.neg"(%x)
      : (tensor<4xf32>) tensor<4xf32>
  func.return
}

// -----

shard.mesh @mesh = <["tp" = 2]>
func.func @bad_placement(%x: tensor<4xf32>) {
  // expected-error@+1 {{unexpected}}
  %0 = shard.annotate %x {sharding = #shard<@mesh, [Q(0)]>} : tensor<4xf32>
  func.return
}

// -----

func.func @not_rectangular() {
  // expected-error@+1 {{dense literal is not rectangular}}
  %0 = tensor.constant {value = dense<[[1, 2], [3]]> : tensor<2x2xi32>} : tensor<2x2xi32>
  func.return
}

// -----

// A chunk without errors and without expectations is fine.
func.func @valid(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
