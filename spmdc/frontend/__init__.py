"""Frontend: capture torch.nn.Modules (torch.export → torch-mlir → spmdc IR)."""
