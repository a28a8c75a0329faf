shard.mesh @"m\"'); __import__('builtins').PWNED = 1 #" = <["tp\"'); __import__('builtins').PWNED = 1 #\n" = 2, "class" = 1]>
func.func @"__import__('builtins').PWNED = 1\n"(%class: tensor<4xf32>) -> tensor<4xf32> {
  func.return %class : tensor<4xf32>
}
func.func @main(%class: tensor<4xf32>, %__import__: tensor<4xf32>, %_REF: tensor<4xf32>, %torch: tensor<4xf32>, %args: tensor<4xf32>, %comm: tensor<4xf32>, %ENTRY: tensor<4xf32>, %a.b-c$d: tensor<4xf32>, %None: tensor<4xf32>, %print: tensor<4xf32>, %match: tensor<4xf32>, %ℌx: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %def = tensor.add %class, %__import__ : tensor<4xf32>
  %lambda = tensor.add %def, %_REF : tensor<4xf32>
  %__builtins__ = tensor.add %lambda, %torch : tensor<4xf32>
  %1 = tensor.add %__builtins__, %args : tensor<4xf32>
  %2 = tensor.add %1, %comm : tensor<4xf32>
  %3 = tensor.add %2, %ENTRY : tensor<4xf32>
  %4 = tensor.add %3, %a.b-c$d : tensor<4xf32>
  %5 = tensor.add %4, %None : tensor<4xf32>
  %6 = tensor.add %5, %print : tensor<4xf32>
  %7 = tensor.add %6, %match : tensor<4xf32>
  %8 = tensor.add %7, %ℌx : tensor<4xf32>
  %ar = comm.all_reduce %8 {axes = ["tp\"'); __import__('builtins').PWNED = 1 #\n"], mesh = @"m\"'); __import__('builtins').PWNED = 1 #", op = "sum"} : tensor<4xf32>
  %call = func.call %ar {callee = @"__import__('builtins').PWNED = 1\n"} : tensor<4xf32>
  %g = tensor.gelu %call {approximate = "tanh"} : tensor<4xf32>
  func.return %g, %class : tensor<4xf32>, tensor<4xf32>
}
