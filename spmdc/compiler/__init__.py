"""The compiler driver: the one pass pipeline (:mod:`.pass_pipeline`), the compiler as one function of
named stages (:func:`.driver.compile_program`; its halves: the global program, one rank's program),
and dump hooks (:mod:`.dump`).

    from spmdc.compiler import Dump, compile_global, compile_rank
    step = compile_global(model, (x,), mesh=Mesh({"tp": 4}), plan="megatron")
    prog = compile_rank(step, rank=0, target="torch", dump=Dump(ir_dir="ir", code_dir="gen"))

Layering: it uses the frontend, passes and codegen; the runtime uses it and only executes.
"""

from spmdc.compiler.driver import (
    Compilation,
    compile_global,
    compile_program,
    compile_rank,
    default_target,
    plan_for,
    rank_module,
    split_example_inputs,
)
from spmdc.compiler.dump import Dump
from spmdc.compiler.pass_pipeline import PipelineOptions, Stage, named_pipelines, stages
from spmdc.compiler.program import CompiledStep, RankProgram

compile_step = compile_global   # the name the Python API has used

__all__ = ["Compilation", "CompiledStep", "Dump", "PipelineOptions", "RankProgram", "Stage", "compile_global",
           "compile_program", "compile_rank", "compile_step", "default_target", "named_pipelines", "plan_for",
           "rank_module", "split_example_inputs", "stages"]
