func.func @invalid(%x: tensor<4xf32>) -> tensor<8xf32> {
  func.return %x : tensor<4xf32>
}
