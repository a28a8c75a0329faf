"""Code generation: partitioned IR → Python modules; ``target="triton"`` turns fused regions
into Triton kernels (:mod:`spmdc.codegen.triton_emitter`).

    from spmdc.codegen import emit_python, load_program, dump_codegen
    fn, path = load_program(module, "main", target="triton")
"""

from spmdc.codegen.cache import dump_codegen, load_program
from spmdc.codegen.python_emitter import emit_python

__all__ = ["dump_codegen", "emit_python", "load_program"]
