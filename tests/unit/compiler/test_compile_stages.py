"""The compiler is one function of named stages (``spmdc.compiler.driver.compile_program``), and
every stage's output lands in the dump directory, numbered in order, holding that stage's IR."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spmdc.compiler import Dump, compile_global, compile_rank
from spmdc.compiler.driver import Compilation, compile_program
from spmdc.compiler.dump import STAGES
from spmdc.sharding.mesh import Mesh

GLOBAL = [f"{i:02d}-{s}.mlir" for i, s in enumerate(STAGES[:6])]
RANK = [f"{i:02d}-{s}.mlir" for i, s in enumerate(STAGES) if 6 <= i < 9] + ["09-codegen.py"]


@pytest.fixture(scope="module")
def mlp():
    from spmdc.frontend.workloads import load_workload

    return load_workload("mlp", batch=4)


def _job(w):
    return dict(train=True, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs, kwargs=w.kwargs)


def _main_args(text: str) -> str:
    return re.search(r"func\.func @main\((.*?)\) ->", text, re.S).group(1)


@pytest.fixture(scope="module")
def dumped(mlp, tmp_path_factory):
    """fsdp on dp=2 with clipping, rank 1's program, compiled in one call of compile_program."""
    root = tmp_path_factory.mktemp("dump")
    c = Compilation.of_model(mlp.model, mlp.inputs, mesh=Mesh({"dp": 2}), plan="fsdp", rank=1, target="torch",
                             dump=Dump(str(root / "ir"), str(root / "gen")), clip_grad_norm=1.0, **_job(mlp))
    compile_program(c)
    return root, c


def test_every_stage_writes_its_file_in_order(dumped):
    root, c = dumped
    stages = root / "ir" / "train" / "stages"
    assert sorted(p.name for p in stages.iterdir() if p.is_file()) == GLOBAL
    assert sorted(p.name for p in (stages / "rank1").iterdir()) == RANK
    assert c.program is not None and c.program.rank == 1
    # the per-pass dumps are still written beside them
    assert (root / "ir" / "train" / "global" / "00-captured.mlir").exists()
    assert (root / "gen" / "train" / "rank1.py").read_text() == c.program.source


def test_each_file_holds_its_stages_ir(dumped):
    root, _ = dumped
    stages = root / "ir" / "train" / "stages"
    text = {name: (stages / name).read_text() for name in GLOBAL} | {
        name: (stages / "rank1" / name).read_text() for name in RANK}
    for name, t in text.items():
        assert t.startswith(f"// {name[:2]} {name[3:].rsplit('.', 1)[0]}") or t.startswith("# 09 codegen"), name
    cap = text["00-capture.mlir"]
    assert "spmdc.param" in cap and "spmdc.train_step" in cap
    assert "shard.sharding" not in cap and "comm." not in cap
    planned = text["02-plan.mlir"]
    assert "shard.sharding" in _main_args(planned) and "comm." not in planned
    assert "spmdc.grad_norm" not in planned
    assert "spmdc.grad_norm" in text["03-clipping.mlir"]           # the global norm, a new result
    glob = text["04-global.mlir"]
    assert "shard.redistribute" not in glob and "comm.all_gather" in glob and "comm.reduce_scatter" in glob
    assert "spmdc.rank" not in glob                                   # still the global program
    assert "not applied (one mesh" in text["05-cross-group.mlir"]
    part = text["06-partition.mlir"]
    assert "spmdc.rank = 1" in part
    assert "%fc1.weight: tensor<32x16xf32>" in _main_args(glob)       # fc1's weight, global
    assert "%fc1.weight: tensor<16x16xf32>" in _main_args(part)       # its S(0) half on dp=2, rank 1
    ranked = text["07-rank-passes.mlir"]                              # bucketing + overlap by default
    assert "comm.all_gather_bucket" not in part and "_start" in ranked and "comm.wait" in ranked
    assert "not applied to one program" in text["08-pipeline-schedule.mlir"]
    assert "def main(args, comm)" in text["09-codegen.py"]


def test_the_two_halves_write_the_same_stages(mlp, dumped, tmp_path):
    """compile_global + compile_rank (how a job runs: global once, per rank everywhere) are
    compile_program cut in two: the same files, the same rank program."""
    root, _ = dumped
    dump = Dump(str(tmp_path / "ir"))
    step = compile_global(mlp.model, mlp.inputs, mesh=Mesh({"dp": 2}), plan="fsdp", dump=dump, clip_grad_norm=1.0,
                          **_job(mlp))
    compile_rank(step, 1, "torch", dump)
    stages = tmp_path / "ir" / "train" / "stages"
    assert sorted(p.name for p in stages.iterdir() if p.is_file()) == GLOBAL
    assert sorted(p.name for p in (stages / "rank1").iterdir()) == RANK
    for name in ("06-partition.mlir", "07-rank-passes.mlir"):
        assert (stages / "rank1" / name).read_text() == (root / "ir" / "train" / "stages" / "rank1" / name).read_text()


def test_device_groups_dump_each_groups_stages_and_the_cross_group_moves(tmp_path):
    from spmdc.compiler.device_groups import compile_groups
    from spmdc.frontend.workloads import load_workload
    from spmdc.sharding.device_groups import HeteroPlan

    hp = HeteroPlan.from_dict({"groups": [{"ranks": [0, 1, 2, 3], "mesh": "tp=4", "plan": "megatron", "share": 2},
                                          {"ranks": [4, 5], "mesh": "tp=2", "plan": "megatron", "share": 1}]})
    w = load_workload("mlp", batch=6)
    steps = compile_groups(w.model, hp, inputs=w.inputs, dump=Dump(str(tmp_path)), **_job(w))
    assert len(steps) == 2
    for g in hp.groups:
        d = tmp_path / "train" / "stages" / g.name
        assert sorted(p.name for p in d.iterdir()) == GLOBAL
        assert "comm.split_all_reduce" not in (d / "04-global.mlir").read_text()
        assert "comm.split_all_reduce" in (d / "05-cross-group.mlir").read_text()
        # each group's passes in its own directory (no group overwrites another's)
        assert (tmp_path / "train" / f"global-{g.name}" / "00-captured.mlir").exists()


def test_a_pipeline_schedule_is_dumped_as_stage_08(tmp_path):
    from spmdc.compiler.driver import schedule_pipeline
    from spmdc.ir.parser import parse_module

    src = (Path(__file__).resolve().parents[2] / "lit" / "passes" / "pipeline-schedule.mlir").read_text()
    module = parse_module(src.split("// -----")[0], "<t>")
    schedule_pipeline(module, "1f1b", 2, Dump(str(tmp_path)))
    text = (tmp_path / "pipeline" / "stages" / "08-pipeline-schedule.mlir").read_text()
    assert text.startswith("// 08 pipeline-schedule: 1f1b, 2 micro-batches")
    assert "spmdc.rank = 0" in text and "spmdc.schedule" in text
