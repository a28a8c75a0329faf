"""``spmdc run --check``: the same job on one device in eager PyTorch, and the comparison.

The reference replays what the ranks did, step for step: the same seed, the same optimizer
(a ``torch.optim`` class by name, with ``--lr``), the same micro-batches with ``--grad-accum N``
(each micro-batch's loss / N, backward, accumulated), ``clip_grad_norm_`` with
``--clip-grad-norm``. A run resumed with ``--load`` is compared with the uninterrupted run:
the reference trains the checkpoint's steps first (with the settings it was saved with), then
the new ones, and only the new ones are compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TrainSettings:
    """What a stretch of training steps ran with (saved in a checkpoint, replayed by --check)."""

    optimizer: str = "sgd"
    lr: float = 0.05
    clip_grad_norm: float | None = None
    grad_accum: int = 1
    mixed_precision: str | None = None   # "bf16" / "fp16": FSDP2-style param_dtype, float32 reduction
    batch: int | None = None   # the workload's batch (--batch, a plan's batch: None, the factory's default)

    def as_dict(self) -> dict[str, Any]:
        return dict(optimizer=self.optimizer, lr=self.lr, clip_grad_norm=self.clip_grad_norm,
                    grad_accum=self.grad_accum, mixed_precision=self.mixed_precision, batch=self.batch)


def first_tensor(out: Any) -> Any:
    """The first tensor a model returned (a tensor, a tuple, or a ModelOutput/dict): what the
    forward run reports, as the ranks do with the program's first output."""
    import torch

    if isinstance(out, torch.Tensor):
        return out
    values = list(out.values()) if hasattr(out, "values") else list(out)
    return next(v for v in values if isinstance(v, torch.Tensor))


def _micro_batches(w: Any, n: int) -> list[tuple[tuple, tuple, dict]]:
    if n == 1:
        return [(tuple(w.inputs), tuple(w.loss_inputs), dict(w.kwargs))]
    split = [list(t.chunk(n, dim=0)) for t in (*w.inputs, *w.loss_inputs, *w.kwargs.values())]
    out = []
    for k in range(n):
        pieces = [s[k] for s in split]
        a, b = len(w.inputs), len(w.inputs) + len(w.loss_inputs)
        out.append((tuple(pieces[:a]), tuple(pieces[a:b]), dict(zip(w.kwargs, pieces[b:]))))
    return out


def eager_reference(workload: str, steps: int, train: bool, seed: int, settings: TrainSettings,
                    before: tuple[int, TrainSettings] | None = None, dtype: Any = None,
                    workload_args: dict[str, Any] | None = None, replay: Any = None) -> dict[str, Any]:
    """Losses (or output norms) of ``steps`` steps on one device and the final state.
    ``before``: (steps, settings) trained first and not reported (a resumed run's history, on the
    batch it trained on: ``settings.batch``).
    ``dtype=torch.float64``: the same run in double precision (floating inputs and parameters
    converted; dropout draws the same masks in either precision; ops without float64 kernels
    computed by their definition, :class:`spmdc.tools.float64_ops.Float64Kernels`).
    ``replay``: hooks around each compared step (``replay.before(k, model, optimizer)``, ``replay.after(k,
    loss, model)``): --check's step-by-step opinion (:mod:`spmdc.tools.step_replay`)."""
    import contextlib

    import torch

    from spmdc.tools.float64_ops import Float64Kernels

    with Float64Kernels() if dtype == torch.float64 else contextlib.nullcontext():
        return _eager_run(workload, steps, train, seed, settings, before, dtype, workload_args, replay)


def _eager_run(workload: str, steps: int, train: bool, seed: int, settings: TrainSettings,
               before: tuple[int, TrainSettings] | None, dtype: Any,
               workload_args: dict[str, Any] | None, replay: Any = None) -> dict[str, Any]:
    """:func:`eager_reference`'s run."""
    import torch

    from spmdc.frontend.loss import extract_loss
    from spmdc.frontend.mixed_precision import MixedPrecision, call_model
    from spmdc.frontend.workloads import load_workload
    from spmdc.runtime.optimizers import Optimizer

    def cast(t: Any) -> Any:
        return t.to(dtype) if dtype is not None and isinstance(t, torch.Tensor) and t.is_floating_point() else t

    def batch_of(args: dict[str, Any]) -> Any:
        """The workload's data as built with ``args`` (floating tensors in ``dtype``)."""
        b = load_workload(workload, **args)
        b.inputs, b.loss_inputs = tuple(map(cast, b.inputs)), tuple(map(cast, b.loss_inputs))
        b.kwargs = {k: cast(v) for k, v in b.kwargs.items()}
        return b

    args = dict(workload_args or {})
    w = batch_of(args)
    model = w.model
    if dtype is not None:
        model.to(dtype)
    torch.manual_seed(seed)   # as every rank does before its first step
    if not train:
        with torch.no_grad():
            policy = MixedPrecision.parse(settings.mixed_precision)
            norms = [float(first_tensor(call_model(model, w.inputs, w.kwargs, policy)).float().norm())
                     for _ in range(steps)]
        return {"losses": norms, "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
    stretches = ([before] if before and before[0] else []) + [(steps, settings)]
    opt, losses = None, []
    for stretch, (n_steps, s) in enumerate(stretches):
        hooks = replay if stretch == len(stretches) - 1 else None   # (the compared steps only)
        if opt is None:
            opt = Optimizer(s.optimizer, lr=s.lr).build(list(model.parameters()))
        for group in opt.param_groups:   # a resumed run may change the learning rate
            group["lr"] = s.lr
        losses = []
        policy = MixedPrecision.parse(s.mixed_precision)
        own = {k: v for k, v in args.items() if k != "batch"} | ({"batch": s.batch} if s.batch is not None else {})
        data = w
        if s.batch is not None and own != args:   # a resumed run's history, trained on another batch
            state = torch.get_rng_state()   # (building it re-seeds: the steps go on drawing as they did)
            data = batch_of(own)
            torch.set_rng_state(state)
        for k in range(n_steps):
            if hooks is not None:
                hooks.before(k, model, opt)
            opt.zero_grad()
            micro = _micro_batches(data, s.grad_accum)
            total = 0.0
            for inputs, loss_inputs, kwargs in micro:
                out = call_model(model, tuple(inputs), dict(kwargs), policy)
                loss = w.loss_fn(out, *loss_inputs) if w.loss_fn else extract_loss(out)
                (loss / len(micro)).backward()
                total += loss.item()
            if s.clip_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), s.clip_grad_norm)
            opt.step()
            losses.append(total / len(micro))
            if hooks is not None:
                hooks.after(k, losses[-1], model)
    return {"losses": losses, "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}


@dataclass
class Row:
    """One compared value of ``--check``: its largest differences and the verdict."""

    name: str
    max_abs: float
    max_rel: float
    ok: bool
    noise: str = ""   # when only the float64 comparison passes it: "spmdc e1 vs eager fp32 e2"


def _pairs(ref: dict[str, Any], got: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    import torch

    pairs = [("losses", torch.tensor(ref["losses"]), torch.tensor(got["losses"]))]
    for k, v in ref["state"].items():
        if got["state"] is not None and k in got["state"] and v.is_floating_point():
            pairs.append((k, v, got["state"][k]))
    return pairs


def compare(ref: dict[str, Any], got: dict[str, Any], rtol: float = 1e-4, atol: float = 1e-5) -> tuple[bool, list[Row]]:
    """Max abs/rel differences of losses and parameters; ok when every one is within tolerance."""
    import torch

    rows = []
    for name, a, b in _pairs(ref, got):
        diff = (a.double() - b.double()).abs()
        rel = (diff / a.double().abs().clamp_min(1e-12)).max().item() if diff.numel() else 0.0
        good = bool(torch.allclose(b.double(), a.double(), rtol=rtol, atol=atol))
        rows.append(Row(name, diff.max().item() if diff.numel() else 0.0, rel, good))
    return all(r.ok for r in rows), rows


NOISE_FACTOR = 4.0


def judge_by_float64(rows: list[Row], ref32: dict[str, Any], ref64: dict[str, Any], got: dict[str, Any],
                     atol: float, rtol: float = 1e-4, split: dict[str, Any] | None = None) -> bool:
    """Second opinion for the values over tolerance: is spmdc as close to the float64 run as
    single-device float32 PyTorch is? Rounding differences (another summation order) are
    amplified by training itself, above all by Adam where a gradient is zero up to rounding (a
    key bias under softmax): its update is then lr·sign(noise), whoever computes it. A value
    passes as noise when spmdc's largest error against float64 is at most NOISE_FACTOR times
    eager float32's own (+ atol), or when, as a few sign flips are, it has about as few elements
    over tolerance against float64 as eager float32 has (at most twice as many + 2) and none
    further off than NOISE_FACTOR times eager float32's largest error in any parameter of the run:
    such flips land in one parameter or another by chance (a 16-layer Llama under AdamW: eager
    float32 0-6 elements per parameter over tolerance, spmdc 0-4; one parameter where eager has
    none and spmdc one). A real bug moves many elements, or one far, and shows up as errors far
    above eager's.

    ``split``: eager float32 with the batch split into pieces (each piece's gradient summed in, as
    data-parallel ranks or gradient accumulation sum them): another summation order, as legitimate
    as eager's own; a value's error and elements over tolerance count as the larger of the two
    eager runs'. Eager float32 can land close to float64 by chance where one rounding more moves an
    element far: HF Falcon under AdamW (an element of ``query_key_value`` whose gradient is 5e-9
    beside others of 6e-2) is 8.6e-6 from float64 as eager float32, 1.3e-4 with the batch in 2
    pieces, 1.8e-4 under spmdc on one rank."""
    import torch

    def over(exact: Any, x: Any) -> int:
        return int((~torch.isclose(x.double(), exact.double(), rtol=rtol, atol=atol)).sum())

    eagers = [{name: b for name, _, b in _pairs(ref64, other)} for other in (ref32, split) if other is not None]

    def err(name: str, exact: Any) -> float:   # the larger eager float32 run's error on ``name``
        return max((e[name].double() - exact.double()).abs().max().item() for e in eagers if name in e)

    d32 = eagers[0]
    scale = max((err(name, exact) for name, exact, _ in _pairs(ref64, got)
                 if name in d32 and name != "losses" and exact.numel()), default=0.0)
    for r, (name, exact, mine) in zip(rows, _pairs(ref64, got)):
        if r.ok or name not in d32:
            continue
        e_spmdc = (mine.double() - exact.double()).abs().max().item()
        e_eager = err(name, exact)
        r.noise = f"{e_spmdc:.1e} vs {e_eager:.1e}"
        flips = name != "losses" and over(exact, mine) <= 2 * max(over(exact, e[name]) for e in eagers
                                                                  if name in e) + 2 \
            and e_spmdc <= NOISE_FACTOR * scale + atol
        r.ok = e_spmdc <= NOISE_FACTOR * e_eager + atol or flips
    return all(r.ok for r in rows)


def judge_by_float32(rows: list[Row], ref: dict[str, Any], ref32: dict[str, Any], got: dict[str, Any],
                     rtol: float, atol: float, split: dict[str, Any] | None = None) -> bool:
    """Second opinion under mixed precision, where a float64 run is no arbiter (both sides round to
    bf16/fp16 on purpose): is spmdc as close to eager low precision as eager float32 is? The elements
    of a parameter whose gradient is zero up to rounding (a key bias under softmax, a rarely seen
    embedding row) get an Adam update of lr·sign(noise) whoever computes them, so a few elements of
    many parameters sit about 2·lr apart after one step. A parameter over tolerance passes as noise
    when at most twice as many of its elements (+2) are over tolerance as eager float32's against
    eager low precision, and none is further off than NOISE_FACTOR times the largest difference eager
    float32 has from eager low precision in any parameter of the run (+ atol). ``split``: eager low
    precision with the batch split as the ranks split it (each piece's gradient rounded, then summed
    in float32, as data-parallel ranks do): its elements over tolerance and largest difference count
    as eager float32's do (partial sums that cancel round further from the whole batch's gradient).
    Losses are not judged again: they must be within tolerance. A real bug moves many elements, or
    one far."""
    import torch

    def over(a: Any, b: Any) -> int:
        return int((~torch.isclose(b.double(), a.double(), rtol=rtol, atol=atol)).sum())

    others = [{name: (a, b) for name, a, b in _pairs(ref, other)} for other in (ref32, split) if other is not None]
    eager = others[0]
    scale = max(((b.double() - a.double()).abs().max().item() for pairs in others for name, (a, b) in pairs.items()
                 if name != "losses" and b.numel()), default=0.0)
    for r, (name, want, mine) in zip(rows, _pairs(ref, got)):
        if r.ok or name == "losses" or name not in eager:
            continue
        n_spmdc, n_eager = over(want, mine), max(over(*pairs[name]) for pairs in others if name in pairs)
        r.noise = f"{n_spmdc} vs {n_eager} of {want.numel()}"
        r.ok = n_spmdc <= 2 * n_eager + 2 and r.max_abs <= NOISE_FACTOR * scale + atol
    return all(r.ok for r in rows)
