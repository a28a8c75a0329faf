"""Every rank of a process group issues that group's collectives in one order.

A gloo or NCCL group matches collectives by their position in each rank's sequence, so the
bucketed and scheduled per-rank programs must agree group by group even when shards are
uneven (a rank's piece smaller or empty). Checked statically on every rank's program of
models with uneven shards (BERT's and OPT's vocabularies over 4 ranks), with and without a
memory cap (a rank-dependent decision).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "models"))
import hf_tiny  # noqa: E402

from spmdc.compiler import compile_step  # noqa: E402
from spmdc.dialects.comm import StartOp, collective_kind  # noqa: E402
from spmdc.sharding.mesh import Mesh  # noqa: E402


def group_sequences(step, mesh: Mesh) -> dict[tuple, dict[int, list[tuple[str, list[str]]]]]:
    """(axes, fixed coordinates of the other axes) → rank → its collectives on that group, in
    issue order: (kind, whole-tensor types as the group sees them)."""
    out: dict[tuple, dict[int, list]] = {}
    for r in range(mesh.size):
        coords, rest = {}, r
        for name, size in reversed(list(zip(mesh.axis_names, mesh.shape))):
            coords[name], rest = rest % size, rest // size
        for op in step.rank_module(r).walk():
            kind = collective_kind(op)
            if kind is None or kind == "comm.all_slice":
                continue
            sync = op.as_sync() if isinstance(op, StartOp) else op
            whole = sync.results if kind.startswith("comm.all_gather") else sync.operands
            group = (tuple(op.axes), tuple((a, coords[a]) for a in mesh.axis_names if a not in op.axes))
            out.setdefault(group, {}).setdefault(r, []).append((kind, [str(v.type) for v in whole]))
    return out


@pytest.mark.parametrize("name,plan,mesh,cap", [
    ("bert", "fsdp", Mesh({"dp": 4}), 0),
    ("opt", "fsdp", Mesh({"dp": 4}), 0),
    ("opt", "fsdp", Mesh({"dp": 4}), 1),
    ("opt", "fsdp+tp", Mesh({"dp": 2, "tp": 2}), 1),
])
def test_ranks_of_a_group_issue_its_collectives_in_one_order(name, plan, mesh, cap):
    model = hf_tiny.build(name)
    ids, labels = hf_tiny.batch()
    step = compile_step(model, (), mesh=mesh, plan=plan, train=True, memory_cap=cap,
                        kwargs={"input_ids": ids, "labels": labels})
    groups = group_sequences(step, mesh)
    assert groups
    for group, per_rank in groups.items():
        first = next(iter(per_rank.values()))
        for r, seq in per_rank.items():
            assert seq == first, f"group {group}: rank {r} issues {seq} but another rank {first}"
    # the point of the check: under fsdp on 4 ranks these models have uneven shards
    if plan != "fsdp":
        return
    sizes = {tuple(str(a.type) for a in step.rank_module(r).body.ops[-1].args) for r in range(mesh.size)}
    assert len(sizes) > 1
