"""``spmdc.compile`` on real gloo ranks matches eager PyTorch on one device.

One launch per mesh size runs every (workload, plan) case through the Python API: forward
(full tensors, DTensor in and out), 3 training steps with SGD (momentum 0.9), then the
parameters are reset from the initial state_dict and 3 steps run with AdamW. Every rank
returns what it saw; the test compares with single-device eager training (torch.optim):
forward rtol 1e-5 / atol 1e-6, losses and parameters rtol 1e-4 / atol 1e-5.
"""

from __future__ import annotations

import importlib
import time

import pytest
import torch

from spmdc.runtime.launcher import launch

SGD = ("sgd", {"lr": 0.1, "momentum": 0.9})
# Adam divides by sqrt(v) + eps, so a gradient element near eps in size turns the rounding noise of
# the gradient (~1e-9 here, set by the size of the summed terms, whatever the reduction order) into
# an update error of about lr / eps times that: attention key biases even have gradients that are
# zero up to rounding (softmax ignores a per-row shift). lr / eps = 1e3 keeps that under 1e-6, while
# a wrong formula (bias correction, decoupled decay) would still be off by ~1e-4 or more.
ADAMW = ("adamw", {"lr": 1e-3, "betas": (0.9, 0.99), "eps": 1e-6, "weight_decay": 0.1})
STEPS = 3

CASES_4 = [
    ("mlp", "dp", {"dp": 4}), ("mlp", "fsdp", {"dp": 4}), ("mlp", "megatron", {"tp": 4}),
    ("mlp", "sp", {"tp": 4}), ("mlp", "fsdp+tp", {"dp": 2, "tp": 2}),
    ("gpt2_tiny", "fsdp", {"dp": 4}), ("gpt2_tiny", "megatron", {"tp": 4}),
    ("gpt2_tiny", "fsdp+tp", {"dp": 2, "tp": 2}),
    ("llama_tiny", "fsdp", {"dp": 4}), ("llama_tiny", "megatron", {"tp": 4}),
    ("mlp:batch=6,d_hidden=30", "fsdp+tp", {"dp": 2, "tp": 2}),  # uneven shards
]
CASES_2 = [("mlp:batch=5,d_hidden=31", "fsdp", {"dp": 2}), ("gpt2_tiny", "megatron", {"tp": 2})]
CASES_8 = [("mlp", "fsdp+tp", {"dp": 2, "tp": 4}), ("mlp:batch=16", "dp", {"dp": 8}),
           ("gpt2_tiny:batch=4", "fsdp+tp", {"dp": 4, "tp": 2}), ("llama_tiny", "fsdp", {"dp": 8})]


def _factory(workload: str):
    name, _, sizes = workload.partition(":")  # "mlp:batch=6,d_hidden=30" -> factory(batch=6, d_hidden=30)
    kwargs = {k: int(v) for k, v in (kv.split("=") for kv in sizes.split(",") if kv)}
    return importlib.import_module(f"spmdc.examples.{name}").factory(**kwargs)


def run_api_cases(cases: list) -> list[dict]:
    """Rank worker (module level, for spawn): every case through spmdc.compile on this rank."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import spmdc
    from spmdc.sharding.mesh import Mesh

    dist.init_process_group("gloo")
    meshes: dict = {}
    out = []
    try:
        for workload, plan, axes in cases:
            t0 = time.perf_counter()
            mesh = Mesh(axes)
            key = tuple(axes.items())
            if key not in meshes:
                meshes[key] = init_device_mesh("cpu", mesh.shape, mesh_dim_names=mesh.axis_names)
            dm = meshes[key]
            model, (inputs, targets), loss_fn = _factory(workload)
            cm = spmdc.compile(model, inputs, mesh=axes if len(axes) > 1 else mesh, plan=plan, train=True,
                               loss_fn=loss_fn, loss_inputs=targets, optimizer=SGD, device_mesh=dm)
            t1 = time.perf_counter()
            r: dict = {"compile_s": t1 - t0}
            r["forward"] = cm(*inputs, full=True)
            r["forward_dtensor"] = cm(*inputs).full_tensor()
            batch_dt = [distribute_tensor(x, dm, [Shard(0)] + [Replicate()] * (len(axes) - 1)) for x in inputs]
            r["forward_from_dtensor"] = cm(*batch_dt, full=True)
            initial = cm.full_state_dict()
            r["initial"] = initial
            r["param_dtensors"] = {n: (p.detach().full_tensor().clone(), tuple(p.to_local().shape), tuple(p.placements))
                                   for n, p in cm.named_parameters()}
            r["sgd_losses"] = [float(cm.step(*inputs, *targets)) for _ in range(STEPS)]
            r["sgd_params"] = cm.full_state_dict()
            cm.load_state_dict(initial)
            cm.set_optimizer(ADAMW)
            r["adamw_losses"] = [float(cm.step(*inputs, *targets)) for _ in range(STEPS)]
            r["adamw_params"] = cm.full_state_dict()
            cm.backward(*inputs, *targets)   # gradients into p.grad (step() clears them)
            r["grad_names"] = [n for n, g in cm.named_grads() if tuple(g.shape) == tuple(r["initial"][n].shape)]
            r["run_s"] = time.perf_counter() - t1
            out.append(r)
    finally:
        dist.destroy_process_group()
    return out


def eager_reference(workload: str) -> dict:
    model, (inputs, targets), loss_fn = _factory(workload)
    ref: dict = {"forward": model(*inputs).detach(), "initial": {k: v.clone() for k, v in model.state_dict().items()}}
    for name, (kind, opts) in (("sgd", SGD), ("adamw", ADAMW)):
        model, (inputs, targets), loss_fn = _factory(workload)
        opt = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}[kind](model.parameters(), **opts)
        losses = []
        for _ in range(STEPS):
            opt.zero_grad()
            loss = loss_fn(model(*inputs), *targets)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        ref[f"{name}_losses"] = losses
        ref[f"{name}_params"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return ref


_REFS: dict = {}


def _ref(workload: str) -> dict:
    if workload not in _REFS:
        _REFS[workload] = eager_reference(workload)
    return _REFS[workload]


@pytest.fixture(scope="module")
def runs4():
    t = time.perf_counter()
    res = launch(run_api_cases, 4, (CASES_4,))
    print(f"4-rank launch: {time.perf_counter() - t:.1f}s")
    return res


@pytest.fixture(scope="module")
def runs2():
    return launch(run_api_cases, 2, (CASES_2,))


@pytest.fixture(scope="module")
def runs8():
    return launch(run_api_cases, 8, (CASES_8,))


def max_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).abs().max()) if got.numel() else 0.0


def check_case(results: dict, case: int, workload: str) -> None:
    ref = _ref(workload)
    errs = {"fwd": max(max_err(r[case]["forward"], ref["forward"]) for r in results.values())}
    for opt in ("sgd", "adamw"):
        errs[f"{opt}_loss"] = max(max_err(torch.tensor(r[case][f"{opt}_losses"]), torch.tensor(ref[f"{opt}_losses"]))
                                  for r in results.values())
        errs[f"{opt}_param"] = max(max_err(r[case][f"{opt}_params"][k], v)
                                   for r in results.values() for k, v in ref[f"{opt}_params"].items())
    times = ", ".join(f"{k}={results[0][case][k]:.1f}s" for k in ("compile_s", "run_s"))
    print(f"max abs err {workload}: " + ", ".join(f"{k}={v:.1e}" for k, v in errs.items()) + f" ({times})")
    for rank, per_rank in results.items():
        r = per_rank[case]
        where = f"rank {rank}"
        for key in ("forward", "forward_dtensor", "forward_from_dtensor"):
            torch.testing.assert_close(r[key], ref["forward"], rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"{where} {key}: {m}")
        assert r["initial"].keys() == ref["initial"].keys()
        for k, v in ref["initial"].items():
            torch.testing.assert_close(r["initial"][k], v, rtol=0, atol=0)
        for n, (full, _local_shape, _pl) in r["param_dtensors"].items():
            torch.testing.assert_close(full, ref["initial"][n], rtol=0, atol=0,
                                       msg=lambda m: f"{where} DTensor {n} {_pl}: {m}")
        assert r["grad_names"] == list(r["param_dtensors"])  # every parameter got a gradient DTensor
        for opt in ("sgd", "adamw"):
            torch.testing.assert_close(torch.tensor(r[f"{opt}_losses"]), torch.tensor(ref[f"{opt}_losses"]),
                                       rtol=1e-4, atol=1e-5, msg=lambda m: f"{where} {opt} losses: {m}")
            for k, v in ref[f"{opt}_params"].items():
                torch.testing.assert_close(r[f"{opt}_params"][k], v, rtol=1e-4, atol=1e-5,
                                           msg=lambda m: f"{where} {opt} param {k}: {m}")


@pytest.mark.parametrize("case", range(len(CASES_4)), ids=[f"{w}-{p}" for w, p, _ in CASES_4])
def test_four_ranks_match_one_device(runs4, case):
    check_case(runs4, case, CASES_4[case][0])


@pytest.mark.parametrize("case", range(len(CASES_2)), ids=[f"{w}-{p}" for w, p, _ in CASES_2])
def test_two_ranks_match_one_device(runs2, case):
    check_case(runs2, case, CASES_2[case][0])


@pytest.mark.parametrize("case", range(len(CASES_8)), ids=[f"{w}-{p}" for w, p, _ in CASES_8])
def test_eight_ranks_match_one_device(runs8, case):
    check_case(runs8, case, CASES_8[case][0])


def test_parameters_are_local_shards_as_dtensors(runs4):
    # mlp under fsdp on dp=4: fc1.weight [32, 16] stored S(0) -> every rank holds [8, 16]
    case = CASES_4.index(("mlp", "fsdp", {"dp": 4}))
    for per_rank in runs4.values():
        full, local_shape, placements = per_rank[case]["param_dtensors"]["fc1.weight"]
        assert tuple(full.shape) == (32, 16)
        assert local_shape == (8, 16)
        assert [type(p).__name__ for p in placements] == ["Shard"]


def test_uneven_shards_keep_torch_chunk_sizes(runs2):
    # fc1.weight [31, 16] stored S(0) on dp=2: 16 rows on rank 0, 15 on rank 1 (as torch.chunk)
    assert [runs2[r][0]["param_dtensors"]["fc1.weight"][1] for r in (0, 1)] == [(16, 16), (15, 16)]


def test_optimizer_spec_forms():
    from spmdc.api.entry import Optimizer, make_optimizer

    p = [torch.zeros(3)]
    sgd = make_optimizer(("sgd", {"lr": 0.1, "momentum": 0.9}), p)
    assert type(sgd) is torch.optim.SGD and sgd.defaults["lr"] == 0.1 and sgd.defaults["momentum"] == 0.9
    adamw = make_optimizer("adamw", p)
    assert (type(adamw) is torch.optim.AdamW
            and adamw.defaults["lr"] == torch.optim.AdamW([torch.zeros(1)]).defaults["lr"])
    named = make_optimizer(Optimizer("adamw", lr=1e-3, weight_decay=0.5), p)
    assert type(named) is torch.optim.AdamW and (named.defaults["lr"], named.defaults["weight_decay"]) == (1e-3, 0.5)
    custom = make_optimizer(lambda ps: torch.optim.Adam(ps, lr=0.25), p)
    assert type(custom) is torch.optim.Adam and custom.param_groups[0]["params"] == p and custom.defaults["lr"] == 0.25
    with pytest.raises(ValueError, match="unknown optimizer 'lion'"):
        make_optimizer(("lion", {}), p)


def test_compile_needs_a_distributed_job():
    import spmdc
    from spmdc.examples import mlp
    from spmdc.sharding.mesh import Mesh

    model, ((x,), _), _ = mlp.factory()
    with pytest.raises(RuntimeError, match="initialized torch.distributed job"):
        spmdc.compile(model, (x,), mesh=Mesh({"dp": 2}))
