"""``rank_module(step, r, parsed=...)`` (the dry run's path: one parse, a clone per rank role) builds
exactly the program a rank builds from the global program's text, and leaves the parsed copy as it was."""

from __future__ import annotations

from spmdc.compiler.driver import compile_global, rank_module
from spmdc.frontend.workloads import load_workload
from spmdc.ir.parser import parse_module
from spmdc.ir.printer import print_module
from spmdc.sharding.mesh import Mesh


def test_rank_programs_from_a_parsed_copy_equal_those_from_text():
    w = load_workload("mlp")
    step = compile_global(w.model, w.inputs, mesh=Mesh({"dp": 2, "tp": 2}), plan="fsdp+tp", train=True,
                          loss_fn=w.loss_fn, loss_inputs=w.loss_inputs)
    parsed = parse_module(step.global_ir, "<global>")
    before = print_module(parsed)
    for rank in range(4):
        assert print_module(rank_module(step, rank, parsed=parsed)) == print_module(rank_module(step, rank))
    assert print_module(parsed) == before
