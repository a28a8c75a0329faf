"""``fsdp_shard="whole"``: the fsdp/hsdp presets place each parameter whole on one dp rank,
``RS(0, [0, .., n, .., 0])``, balanced by bytes within each block; wrong uses are refused."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spmdc.dialects.shard import RaggedShard, Replicate
from spmdc.sharding.mesh import Mesh
from spmdc.sharding.plan import Plan, PlanError, preset, whole_owners

PARAMS = {"wte.weight": (128, 32), "h.0.attn.w": (96, 32), "h.0.attn.b": (96,), "h.0.mlp.fc": (128, 32),
          "h.0.mlp.proj": (32, 128), "h.0.ln.w": (32,), "h.1.attn.w": (96, 32), "h.1.mlp.fc": (128, 32),
          "h.1.mlp.proj": (32, 128), "ln_f.weight": (32,)}


def test_owners_balance_each_block():
    owners = whole_owners(PARAMS, 4)
    for block in ("h.0", "h.1"):
        members = [f for f in PARAMS if f.startswith(block + ".")]
        # the three biggest of the block land on three different ranks
        big = sorted(members, key=lambda f: -len(str(PARAMS[f])))[:3]
        assert len({owners[f] for f in big}) == 3
    assert whole_owners(PARAMS, 4) == owners   # deterministic: every rank computes the same


def test_preset_layouts():
    plan = preset("fsdp", Mesh({"dp": 4}), PARAMS, [2], [3], fsdp_shard="whole")
    owners = whole_owners(PARAMS, 4)
    for fqn, shape in PARAMS.items():
        spec = plan.params[fqn.replace("[", "[[]")]
        (st,) = spec.storage.values()
        assert st == RaggedShard(0, tuple(shape[0] if r == owners[fqn] else 0 for r in range(4)))
        assert spec.compute == {"dp": Replicate()}
    hsdp = preset("hsdp", Mesh({"rep": 2, "dp": 2}), PARAMS, [2], [3], fsdp_shard="whole")
    assert isinstance(hsdp.params["h.0.mlp.fc"].storage["dp"], RaggedShard)
    assert "rep" not in hsdp.params["h.0.mlp.fc"].storage


@pytest.mark.parametrize("make,message", [
    (lambda: preset("megatron", Mesh({"tp": 2}), PARAMS, fsdp_shard="whole"), "'fsdp' or 'hsdp' preset"),
    (lambda: Plan.from_dict({"preset": "fsdp", "fsdp_shard": "wholes"}), "did you mean 'whole'"),
    (lambda: Plan.from_dict({"params": {"*": "R"}, "fsdp_shard": "whole"}), "a plan without a preset"),
])
def test_wrong_uses_are_refused(make, message):
    with pytest.raises(PlanError, match=message):
        make()


def test_cli_refuses_whole_with_a_tensor_parallel_plan():
    p = subprocess.run([sys.executable, "-m", "spmdc.tools.cli", "run", "mlp", "--mesh", "tp=2", "--plan", "megatron",
                        "--fsdp-shard", "whole"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--fsdp-shard whole" in lines[0] and "'fsdp' or 'hsdp'" in lines[0], p.stderr
