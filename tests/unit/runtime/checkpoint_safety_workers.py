"""Rank workers for test_checkpoint_safety.py (module level: launched ranks import them by name).

One 2-rank launch runs every case and returns what each observed: the error or warning text,
state after a load, losses after resuming. The test compares them with eager PyTorch."""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch
import torch.nn.functional as F

LR = 1e-2
STOPS = ("shards", "metadata", "aside", "renamed")


def mlp(hidden: int = 30, layers: int = 3) -> torch.nn.Module:
    """The MLP of the tests (12 → hidden → 18 → 6; ``layers=2``: 12 → hidden → 6; 4: one more 6 → 6)."""
    torch.manual_seed(0)
    if layers == 2:
        return torch.nn.Sequential(torch.nn.Linear(12, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, 6))
    mods = [torch.nn.Linear(12, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, 18), torch.nn.Tanh(),
            torch.nn.Linear(18, 6)]
    if layers == 4:
        mods += [torch.nn.Tanh(), torch.nn.Linear(6, 6)]
    return torch.nn.Sequential(*mods)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 12, generator=g), torch.randn(8, 6, generator=g)


def _compile(model: Any = None, optimizer: Any = ("adamw", {"lr": LR}), train: bool = True) -> Any:
    import spmdc

    x, y = batch()
    return spmdc.compile(model if model is not None else mlp(), (x,), mesh={"dp": 2}, plan="fsdp", train=train,
                         loss_fn=F.mse_loss, loss_inputs=(y,), optimizer=optimizer)


def _error(fn: Any) -> str | None:
    """The CheckpointError ``fn`` raises (its message), or None when it returns."""
    from spmdc.runtime.checkpointing import CheckpointError

    try:
        fn()
    except CheckpointError as e:
        return str(e)
    return None


def _warned(fn: Any) -> list[str]:
    """The CheckpointWarnings ``fn`` gives."""
    from spmdc.runtime.checkpointing import CheckpointWarning

    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in got if issubclass(w.category, CheckpointWarning)]


def _steps(cm: Any, n: int) -> list[float]:
    x, y = batch()
    return [float(cm.step(x, y)) for _ in range(n)]


def _opt_state(cm: Any, opt: Any) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    _, osd = get_state_dict(cm, opt)
    return {f"{k}.{s}": (v.full_tensor() if hasattr(v, "full_tensor") else v).clone()
            for k, stats in osd["state"].items() for s, v in stats.items()}


def settings_cases(tmp: str) -> dict[str, Any]:
    """Issue 6: the caller's optimizer settings win over the saved ones (one warning naming each
    difference); another optimizer class is refused."""
    out: dict[str, Any] = {}
    adam = _compile(optimizer=("adam", {"lr": LR}))
    _steps(adam, 2)
    adam.save(f"{tmp}/adam")
    adamw = _compile(optimizer=("adamw", {"lr": LR, "weight_decay": 0.1}))
    out["adam_into_adamw"] = _error(lambda: adamw.load(f"{tmp}/adam"))
    # AdamW saved with weight_decay 0, loaded into AdamW(weight_decay=0.1, eps=1e-6): state loaded, settings kept
    saved = _compile(optimizer=("adamw", {"lr": LR, "weight_decay": 0.0}))
    out["wd0_before"] = _steps(saved, 2)
    saved.save(f"{tmp}/wd0")
    out["wd0_state"] = _opt_state(saved, saved.optimizer)
    out["wd_warnings"] = _warned(lambda: adamw.load(f"{tmp}/wd0"))
    out["wd_group"] = {k: adamw.optimizer.param_groups[0][k] for k in ("lr", "weight_decay", "eps")}
    out["wd_state"] = _opt_state(adamw, adamw.optimizer)
    out["wd_after"] = _steps(adamw, 2)
    out["same_warnings"] = _warned(lambda: saved.load(f"{tmp}/wd0"))   # its own settings: nothing to say
    # a learning rate an LR scheduler drives is schedule state: the checkpoint's, without a warning
    sched_cm = _compile(optimizer=("adamw", {"lr": LR, "weight_decay": 0.0}))
    torch.optim.lr_scheduler.StepLR(sched_cm.optimizer, step_size=1, gamma=0.5)
    saved.optimizer.param_groups[0]["lr"] = LR / 4
    saved.save(f"{tmp}/lr_quarter")
    out["sched_warnings"] = _warned(lambda: sched_cm.load(f"{tmp}/lr_quarter"))
    out["sched_lr"] = sched_cm.optimizer.param_groups[0]["lr"]
    return out


def external_cases(tmp: str) -> dict[str, Any]:
    """Issue 7: an optimizer of the user's own is saved and loaded (found when not passed), and a
    checkpoint's optimizer state is never silently dropped or made up."""
    out: dict[str, Any] = {}
    x, y = batch()
    cm = _compile(optimizer=None)
    opt = torch.optim.AdamW(cm.parameters(), lr=LR)
    before = []
    for _ in range(2):
        before.append(float(cm.backward(x, y)))
        opt.step()
        opt.zero_grad()
    out["own_before"] = before
    cm.save(f"{tmp}/own")                      # not passed: the live optimizer over cm's parameters
    out["own_state"] = _opt_state(cm, opt)
    fresh = _compile(mlp(hidden=30), optimizer=None)
    out["no_optimizer_refused"] = _error(lambda: fresh.load(f"{tmp}/own"))
    out["model_only"] = _error(lambda: fresh.load(f"{tmp}/own", model_only=True))
    out["model_only_params"] = fresh.full_state_dict()
    out["saved_params"] = cm.full_state_dict()
    opt2 = torch.optim.AdamW(fresh.parameters(), lr=LR)
    fresh.load(f"{tmp}/own")                   # not passed: found
    out["own_loaded_state"] = _opt_state(fresh, opt2)
    after = []
    for _ in range(2):
        after.append(float(fresh.backward(x, y)))
        opt2.step()
        opt2.zero_grad()
    out["own_after"] = after
    # two optimizers over the parameters: which one to save is not guessed
    torch.optim.SGD(list(fresh.parameters())[:2], lr=LR).step()
    extra_opt = torch.optim.SGD(list(fresh.parameters())[:2], lr=LR)
    out["two_refused"] = _error(lambda: fresh.save(f"{tmp}/two"))
    del extra_opt
    # a module without any optimizer writes "no optimizer state"; asking for it then is refused
    bare = _compile(optimizer=None)
    bare.save(f"{tmp}/bare")
    from spmdc.runtime.checkpointing import read_meta

    out["bare_record"] = read_meta(f"{tmp}/bare")["optimizer"]
    withopt = _compile()
    out["no_state_refused"] = _error(lambda: withopt.load(f"{tmp}/bare"))
    out["no_state_model_only"] = _error(lambda: withopt.load(f"{tmp}/bare", model_only=True))
    # a forward-only module loads the model alone (an optimizer has no place there)
    fwd = _compile(optimizer=None, train=False)
    out["forward_only"] = _error(lambda: fwd.load(f"{tmp}/own"))
    return out


def model_cases(tmp: str) -> dict[str, Any]:
    """Another shape or layer count: the first parameter that differs, named with both shapes."""
    cm = _compile()
    _steps(cm, 1)
    cm.save(f"{tmp}/mlp")
    out = {}
    for name, model in (("wider", mlp(hidden=32)), ("deeper", mlp(layers=4)), ("shallower", mlp(layers=2))):
        out[name] = _error(lambda m=model: _compile(m).load(f"{tmp}/mlp"))
    out["damage"] = damage_cases(tmp, cm)
    return out


def damage_cases(tmp: str, cm: Any) -> dict[str, Any]:
    """A damaged copy of ``cm``'s checkpoint ``mlp`` on ranks: one CheckpointError naming the
    file, cut short or of the right length with zeros inside (DCP's own failure), on every rank."""
    import shutil

    import torch.distributed as dist

    out = {}
    for name, damage in (("truncated", lambda f: open(f, "r+b").truncate(os.path.getsize(f) // 2)),
                         ("garbage", _garbage)):
        path = f"{tmp}/{name}"
        if dist.get_rank() == 0:
            shutil.copytree(f"{tmp}/mlp", path)
            damage(f"{path}/__1_0.distcp")
        dist.barrier()
        out[name] = _error(lambda p=path: cm.load(p))
    out["good_after"] = _error(lambda: cm.load(f"{tmp}/mlp"))   # the job goes on
    return out


def _garbage(file: str) -> None:
    """Overwrite the tensor data of ``file`` with zeros, keeping its length."""
    size = os.path.getsize(file)
    with open(file, "r+b") as f:
        f.write(b"\0" * size)


def atomic_cases(tmp: str) -> dict[str, Any]:
    """A save stopped at each point leaves a checkpoint that loads and resumes as the
    uninterrupted run; the next save tidies up what the stopped one left."""
    import torch.distributed as dist

    from spmdc.runtime.checkpointing import STOP_ENV, located

    root = os.path.join(tmp, "atomic")
    os.makedirs(root, exist_ok=True)
    path = f"{root}/ckpt"
    runs, back = _compile(), _compile()
    out: dict[str, Any] = {"whole": _steps(runs, 2)}
    runs.save(path, extra={"step": 2})
    out["whole"] += _steps(runs, 2)   # at step 4: the state the stopped saves write
    for point in STOPS:
        os.environ[STOP_ENV] = f"{point}:raise"
        try:
            err = _error(lambda: runs.save(path, extra={"step": 4}))
        finally:
            del os.environ[STOP_ENV]
        res: dict[str, Any] = {"error": err, "located": os.path.basename(located(path)),
                               "listing": sorted(os.listdir(root))}
        dist.barrier()   # every rank has looked before any rank loads (a load changes nothing on disk)
        res["step"] = back.load(path)["step"]
        res["resumed"] = _steps(back, 2)
        out[point] = res
    runs.save(path, extra={"step": 4})   # a clean save after the stopped ones leaves nothing beside it
    out["tidy_listing"] = sorted(os.listdir(root))
    out["whole"] += _steps(runs, 2)   # steps 5-6: what a run resumed from step 4 gives
    out["tidy_step"] = back.load(path)["step"]
    return out


def fresh_cases(tmp: str) -> dict[str, Any]:
    """A save before the first step must not change the training: torch's get_state_dict makes up
    an optimizer's state by a step of lr 0 (AdamW's step count 1), after which the first real step
    counted 2. Saved at step 0, then trained; trained without a save; resumed from that save."""
    out: dict[str, Any] = {}
    saved = _compile()
    saved.save(f"{tmp}/fresh")
    out["fresh_state_after_save"] = len(saved.optimizer.state)
    out["saved_then_trained"] = _steps(saved, 3)
    out["trained"] = _steps(_compile(), 3)
    resumed = _compile()
    resumed.load(f"{tmp}/fresh")
    out["resumed"] = _steps(resumed, 3)
    return out


def all_cases(tmp: str) -> dict[str, Any]:
    """Every case on this rank (2 gloo ranks)."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        out = {"settings": settings_cases(tmp), "external": external_cases(tmp), "model": model_cases(tmp),
               "atomic": atomic_cases(tmp), "fresh": fresh_cases(tmp)}
    finally:
        dist.destroy_process_group()
    return out
