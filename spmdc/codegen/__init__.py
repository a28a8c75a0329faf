"""Code generation: partitioned IR → Python modules (Triton kernels for fused regions later).

    from spmdc.codegen import emit_python, load_program, dump_codegen
"""

from spmdc.codegen.cache import dump_codegen, load_program
from spmdc.codegen.python_emitter import emit_python

__all__ = ["dump_codegen", "emit_python", "load_program"]
