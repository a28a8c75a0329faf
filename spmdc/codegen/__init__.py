"""Code generation (Python modules, Triton kernels)."""
