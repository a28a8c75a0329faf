"""``spmdc.eager``: the sharded global program dispatched op by op at run time.

One 4-rank gloo launch: gpt2-tiny and llama-tiny under fsdp+tp (2×2) and gpt2-tiny under
megatron (tp=4), 2 SGD steps each (dropout on, one seed). The eager run issues the compiled
program's collectives in the same order and its losses and parameters are bitwise those of the
compiled program without per-rank collective rewrites (bucket=False, overlap=False,
fuse_collectives=False); against the default compiled program and one device they agree to
rtol 1e-5 / 1e-4 (reductions summed in another order). ``hints=False`` (DTensor's forward rule)
agrees with one device to rtol 1e-4.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import eager_workers as W  # noqa: E402
from rank_checks import train_one_device  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402

KEYS = [f"{name}/{plan}" for name, _, plan in W.CASES]


@pytest.fixture(scope="module")
def four():
    return launch(W.eager_four, 4, (), timeout_s=900)


def one_device(name: str, steps: int = 2):
    model, ((x,), (y,)), loss_fn = W.job(name)
    model = copy.deepcopy(model)
    losses = train_one_device(model, x, y, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1), steps, seed=1)
    return losses, {k: v.detach() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("key", KEYS)
def test_eager_is_bitwise_the_compiled_program(four, key):
    for r in four.values():
        e, c = r[key]["eager"], r[key]["plain"]
        assert e["order"] == c["order"] and len(e["order"]) > 0
        assert all(torch.equal(a, b) for a, b in zip(e["losses"], c["losses"]))
        assert all(torch.equal(e["state"][k], c["state"][k]) for k in c["state"])


@pytest.mark.parametrize("key", KEYS)
def test_eager_matches_the_default_program_and_one_device(four, key):
    losses, state = one_device(key.split("/")[0])
    for r in four.values():
        e, d = r[key]["eager"], r[key]["default"]
        torch.testing.assert_close(torch.stack(e["losses"]), torch.stack(d["losses"]), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(torch.stack(e["losses"]), torch.stack(losses), rtol=1e-4, atol=1e-5)
        for k in state:
            torch.testing.assert_close(e["state"][k], state[k], rtol=1e-4, atol=1e-5)


def test_dispatch_without_hints_matches_one_device(four):
    losses, state = one_device("gpt2_tiny")
    for r in four.values():
        got = r["gpt2_tiny/fsdp+tp"]["no_hints"]
        torch.testing.assert_close(torch.stack(got["losses"]), torch.stack(losses), rtol=1e-4, atol=1e-5)
        for k in state:
            torch.testing.assert_close(got["state"][k], state[k], rtol=1e-4, atol=1e-5)


def test_trace_has_a_line_per_op_with_its_collectives(four):
    r = four[0]["gpt2_tiny/megatron"]
    trace = r["trace"]
    assert len(trace) == r["ops"]
    issued = [ln for ln in trace if "issues " in ln]
    assert issued and all(" -> (" in ln for ln in trace)
    assert any("all_reduce" in ln and "P(sum)" in ln for ln in issued)   # megatron's row-parallel reductions
    assert trace[-1].startswith("func.return")


def test_compiled_only_options_are_refused(four):
    assert "'bucket' is an option of the compiled program" in four[0]["refused"]


@pytest.mark.parametrize("args,message", [
    (["--eager-trace", "t.txt"], "--eager-trace writes the op-by-op run of --eager"),
    (["--eager", "--target", "triton"], "drop --target triton"),
    (["--eager", "--eager-trace", "/no/such/dir/t.txt"], "no directory"),
])
def test_cli_mistakes(args, message):
    p = subprocess.run([sys.executable, "-m", "spmdc.tools.cli", "run", "mlp", *args], capture_output=True,
                       text=True, timeout=120)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode != 0 and len(lines) == 1 and message in lines[0], p.stderr
