"""Rank side of test_autograd.py: autograd through ``cm(x)`` on 4 gloo ranks (one launch).

Every case trains or differentiates the way a PyTorch user writes it (own loss on the module's
output, ``loss.backward()``, a torch optimizer and scheduler) and returns what the test compares
with the same loop in plain PyTorch (and FSDP2) on the global batch; refusals are returned as
their messages."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

import spmdc

STEPS = 10
HF_GPT2 = str(Path(__file__).resolve().parents[2] / "models" / "hf_tiny.py") + ":gpt2"   # dropout 0.1, Conv1D
GROUPS = {"name": "tp-and-fsdp", "groups": [   # two device groups, the batch split between them
    {"name": "tp", "ranks": [0, 1], "mesh": "tp=2", "plan": "megatron", "share": 1},
    {"name": "fsdp", "ranks": [2, 3], "mesh": "dp=2", "plan": "fsdp", "share": 1}]}
MAX_NORM = 0.05   # small enough that every step clips


class Net(nn.Module):
    """fc1 / fc2 as the tensor-parallel presets name them, dropout between (random numbers)."""

    def __init__(self, d_in: int = 12, hidden: int = 32, d_out: int = 6, p: float = 0.25) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.drop = nn.Dropout(p)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(torch.tanh(self.fc1(x))))


class BNNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


class Sandwich(nn.Module):
    """Eager layers around compiled ones: an embedding in front (gradients reach it through the
    module's input), a head behind, and (``two``) a second compiled module."""

    def __init__(self, two: bool = False) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 12)
        self.trunk = Net(12, 32, 12, p=0.0)
        self.mid = Net(12, 16, 12, p=0.0) if two else nn.Identity()
        self.head = nn.Linear(12, 5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.mid(self.trunk(self.emb(tokens)))))


def batch(step: int, rows: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(rows, 12, generator=g), torch.randn(rows, 6, generator=g)


def fsdp2_loop(model: nn.Module, params: Any, forward: Callable[[torch.Tensor], torch.Tensor],
               clip: Callable[[], Any], steps: int = STEPS) -> dict[str, Any]:
    """PyTorch's FSDP2 tutorial loop: AdamW + cosine schedule, own loss on the output,
    ``loss.backward()``, clipping, ``opt.step()``; the same data and dropout seed on every rank."""
    opt = torch.optim.AdamW(params, lr=0.02, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    losses, norms = [], []
    for step in range(steps):
        x, y = batch(step)
        torch.manual_seed(step)
        loss = F.mse_loss(forward(x), y)
        loss.backward()
        norms.append(float(_full(clip())))
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(float(loss))
    return {"losses": losses, "norms": norms}


def _full(x: Any) -> Any:
    return x.full_tensor() if hasattr(x, "full_tensor") else x


def state(cm: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in cm.full_state_dict().items()}


def plain_ref(make: Callable[[], nn.Module]) -> dict[str, Any]:
    model = make()
    out = fsdp2_loop(model, model.parameters(), model,
                     lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM))
    out["state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return out


def fsdp2_ref(make: Callable[[], nn.Module]) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = make()
    mesh = init_device_mesh("cpu", (4,))
    fully_shard(model.fc1, mesh=mesh)
    fully_shard(model, mesh=mesh)
    out = fsdp2_loop(model, model.parameters(), model,
                     lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM))
    out["state"] = {k: v.full_tensor().detach().clone() for k, v in model.state_dict().items()}
    return out


def make_net() -> nn.Module:
    torch.manual_seed(0)
    return Net()


def spmdc_loop(mesh: str, plan: str, outputs: str, clip: str = "torch", **kw: Any) -> dict[str, Any]:
    """The FSDP2 loop with ``fully_shard`` replaced by ``spmdc.compile``."""
    x0, _ = batch(0)
    cm = spmdc.compile(make_net(), (x0,), mesh=mesh, plan=plan, outputs=outputs, **kw)

    def forward(x: torch.Tensor) -> torch.Tensor:
        out = cm(x)
        return out.full_tensor() if outputs == "dtensor" else out

    def clipper() -> Any:
        if clip == "torch":
            return torch.nn.utils.clip_grad_norm_(cm.parameters(), MAX_NORM)
        return cm.clip_grad_norm_(MAX_NORM)

    out = fsdp2_loop(cm, cm.parameters(), forward, clipper)
    out["state"] = state(cm)
    out["vjp_programs"] = sum(1 for k in cm.program_cache.runners if k[0].startswith("vjp"))
    out["grad_fn"] = type(cm(x0).grad_fn).__name__
    return out


class HeadOnTrunk(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = Net(12, 32, 12)
        self.head = nn.Linear(12, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.trunk(x)))


def make_head_on_trunk() -> nn.Module:
    torch.manual_seed(0)
    return HeadOnTrunk()


def head_plain() -> dict[str, Any]:
    return plain_ref(make_head_on_trunk)


def head_loop(mesh: str, plan: str) -> dict[str, Any]:
    """The FSDP2 loop on an eager head over a compiled trunk (outputs whole on every rank), the
    head clipped together with the trunk (``cm.clip_grad_norm_(..., also=head.parameters())``)."""
    model = make_head_on_trunk()
    x0, _ = batch(0)
    model.trunk = spmdc.compile(model.trunk, (x0,), mesh=mesh, plan=plan, outputs="full")
    out = fsdp2_loop(model, model.parameters(), model,
                     lambda: model.trunk.clip_grad_norm_(MAX_NORM, also=model.head.parameters()))
    out["state"] = {**{f"trunk.{k}": v for k, v in state(model.trunk).items()},
                    **{k: v.detach().clone() for k, v in model.state_dict().items() if k.startswith("head")}}
    return out


def local_loop(mesh: str, plan: str) -> dict[str, Any]:
    """inputs='local': each rank its DistributedSampler piece (spmdc.sampler_args), its own mean
    loss on its own piece of the output; the parameters as one device training on the whole batch."""
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    g = torch.Generator().manual_seed(7)
    ds = TensorDataset(torch.randn(64, 12, generator=g), torch.randn(64, 6, generator=g))
    x0 = torch.zeros(8, 12)
    cm = spmdc.compile(make_net(), (x0,), mesh=mesh, plan=plan, inputs="local")
    num_replicas, rank = spmdc.sampler_args(cm)
    loader = DataLoader(ds, batch_size=16 // num_replicas,
                        sampler=DistributedSampler(ds, num_replicas=num_replicas, rank=rank, shuffle=False))
    opt = torch.optim.AdamW(cm.parameters(), lr=0.02)
    losses, shapes = [], set()
    for step, (x, y) in enumerate(loader):
        torch.manual_seed(step)
        out = cm(x)
        shapes.add((type(out).__name__, tuple(out.shape)))
        loss = F.mse_loss(out, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
    return {"losses": losses, "state": state(cm), "sampler": (num_replicas, rank), "shapes": sorted(shapes),
            "before_compile": spmdc.sampler_args(mesh=mesh, plan=plan)}


def local_plain() -> dict[str, Any]:
    """One device on the same data: batches of 16 in order (the pieces of every rank together)."""
    g = torch.Generator().manual_seed(7)
    xs, ys = torch.randn(64, 12, generator=g), torch.randn(64, 6, generator=g)
    model = make_net()
    opt = torch.optim.AdamW(model.parameters(), lr=0.02)
    losses = []
    for step in range(4):
        # the samplers' pieces of batch ``step`` are rows step*4 + k*16... : DistributedSampler deals
        # rows round-robin (rank r gets rows r, r+n, ...), so batch ``step`` holds these rows
        torch.manual_seed(step)
        loss = F.mse_loss(model(xs[_rows(step)]), ys[_rows(step)])
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
    return {"losses": losses, "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}


def _rows(step: int, n: int = 2, per: int = 8) -> list[int]:
    """Global rows in batch ``step`` when n replicas each take ``per`` rows of their round-robin share."""
    return [r + n * (step * per + i) for r in range(n) for i in range(per)]


def sandwich(mesh: str, plan: str, two: bool) -> dict[str, Any]:
    """Gradients through eager layers before and after one (or two) compiled modules."""
    torch.manual_seed(1)
    ref = Sandwich(two)
    model = copy.deepcopy(ref)
    tokens = torch.randint(0, 20, (8,), generator=torch.Generator().manual_seed(2))
    target = torch.randint(0, 5, (8,), generator=torch.Generator().manual_seed(3))
    h = torch.randn(8, 12)
    model.trunk = spmdc.compile(model.trunk, (h,), mesh=mesh, plan=plan, outputs="full")
    if two:
        model.mid = spmdc.compile(model.mid, (h,), mesh=mesh, plan=plan, outputs="full")
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.5)
    losses = []
    for _ in range(3):
        loss = F.cross_entropy(model(tokens), target)
        loss.backward()
        rl = F.cross_entropy(ref(tokens), target)
        rl.backward()
        grads = {"emb.weight": (model.emb.weight.grad.clone(), ref.emb.weight.grad.clone()),
                 "head.weight": (model.head.weight.grad.clone(), ref.head.weight.grad.clone()),
                 "trunk.fc1.weight": (_full(model.trunk.fc1.weight.grad).clone(), ref.trunk.fc1.weight.grad.clone())}
        opt.step()
        ropt.step()
        opt.zero_grad()
        ropt.zero_grad()
        losses.append((float(loss), float(rl)))
    ref_state = {k: v for k, v in ref.state_dict().items()}
    got = {f"trunk.{k}": v for k, v in model.trunk.full_state_dict().items()}
    if two:
        got.update({f"mid.{k}": v for k, v in model.mid.full_state_dict().items()})
    got.update({k: v.detach() for k, v in model.state_dict().items() if k.startswith(("emb", "head"))})
    return {"losses": losses, "grads": grads, "state": got, "ref_state": ref_state}


def local_sandwich(mesh: str, plan: str) -> dict[str, Any]:
    """inputs='local' with eager layers around the module: the embedding's gradient comes back
    through the module's input as this rank's own loss's (DDP-averaged by the user, as for any
    module FSDP2 does not wrap); everything equals one device on the whole batch."""
    import torch.distributed as dist

    torch.manual_seed(1)
    ref = Sandwich(False)
    model = copy.deepcopy(ref)
    tokens = torch.randint(0, 20, (16,), generator=torch.Generator().manual_seed(2))
    target = torch.randint(0, 5, (16,), generator=torch.Generator().manual_seed(3))
    n, r = spmdc.sampler_args(mesh=mesh, plan=plan)
    tok, tgt = tokens.chunk(n)[r], target.chunk(n)[r]
    model.trunk = spmdc.compile(model.trunk, (torch.randn(16 // n, 12),), mesh=mesh, plan=plan, inputs="local")
    F.cross_entropy(model(tok), tgt).backward()
    F.cross_entropy(ref(tokens), target).backward()
    world = dist.get_world_size()
    grads = {}
    for name in ("emb.weight", "head.weight", "head.bias"):   # the eager layers: averaged as DDP would
        g = model.get_parameter(name).grad.clone()
        dist.all_reduce(g)
        grads[name] = (g / world, ref.get_parameter(name).grad.clone())
    grads["trunk.fc1.weight"] = (_full(model.trunk.fc1.weight.grad).clone(), ref.trunk.fc1.weight.grad.clone())
    return {"grads": grads}


def accumulate(mesh: str, plan: str) -> dict[str, Any]:
    """Gradient accumulation by repeated backward: two half batches (loss / 2 each) = the batch."""
    x, y = batch(0)
    model = Net(p=0.0)
    ref = copy.deepcopy(model)
    cm = spmdc.compile(model, (x[:8],), mesh=mesh, plan=plan, outputs="full")
    for half in (slice(0, 8), slice(8, 16)):
        (F.mse_loss(cm(x[half]), y[half]) / 2).backward()
    F.mse_loss(ref(x), y).backward()
    return {"grads": {n: (_full(p.grad).clone(), dict(ref.named_parameters())[n].grad.clone())
                      for n, p in cm.named_parameters()}}


def evaluation(mesh: str, plan: str) -> dict[str, Any]:
    """no_grad / inference_mode: the forward program only, no graph; eval mode turns dropout off."""
    x, _ = batch(0)
    model = make_net()
    cm = spmdc.compile(model, (x,), mesh=mesh, plan=plan, outputs="full")
    cm.eval()
    with torch.no_grad():
        a = cm(x)
    with torch.inference_mode():
        b = cm(x)
    ref = make_net().eval()
    with torch.no_grad():
        want = ref(x)
    return {"no_grad": (a.grad_fn is None, a.requires_grad, b.requires_grad), "out": (a, b, want),
            "programs": sorted({k[0] for k in cm.program_cache.runners})}


def batchnorm(mesh: str, plan: str) -> dict[str, Any]:
    """BatchNorm in training: one output (not the buffer updates), the running statistics updated
    once per forward, as eager; the gradients as one device's."""
    torch.manual_seed(0)
    model = BNNet()
    ref = copy.deepcopy(model)
    x, y = batch(0)
    cm = spmdc.compile(model, (x,), mesh=mesh, plan=plan, outputs="full")
    outs = cm(x)
    F.mse_loss(outs, y).backward()
    F.mse_loss(ref(x), y).backward()
    with torch.no_grad():
        cm(x)
        ref(x)
    buffers = {k: (cm.get_buffer(k).clone(), ref.get_buffer(k).clone())
               for k in ("bn.running_mean", "bn.running_var", "bn.num_batches_tracked")}
    grads = {n: (_full(p.grad).clone(), dict(ref.named_parameters())[n].grad.clone())
             for n, p in cm.named_parameters()}
    return {"is_tensor": isinstance(outs, torch.Tensor), "buffers": buffers, "grads": grads}


def one_backward(cm: Any, ref: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    """One ``mse_loss(...).backward()`` through the compiled module and the reference (the same
    dropout draws): each trainable parameter's gradient next to one device's."""
    torch.manual_seed(5)
    F.mse_loss(cm(x), y).backward()
    torch.manual_seed(5)
    F.mse_loss(ref(x), y).backward()
    rp = dict(ref.named_parameters())
    return {n: (_full(p.grad).clone(), rp[n].grad.clone()) for n, p in cm.named_parameters() if p.requires_grad}


def frozen(mesh: str, plan: str) -> dict[str, Any]:
    """A frozen parameter (fine-tuning): no gradient; the others as one device's."""
    model = make_net()
    model.fc1.weight.requires_grad_(False)
    ref = copy.deepcopy(model)
    x, y = batch(0)
    cm = spmdc.compile(model, (x,), mesh=mesh, plan=plan, outputs="full")
    grads = one_backward(cm, ref, x, y)
    return {"fc1_grad": cm.fc1.weight.grad, "grads": grads}


def eager_mode(mesh: str, plan: str) -> dict[str, Any]:
    """spmdc.eager (the global program op by op) under autograd."""
    model = make_net()
    ref = copy.deepcopy(model)
    x, y = batch(0)
    cm = spmdc.eager(model, (x,), mesh=mesh, plan=plan, outputs="full")
    return {"grads": one_backward(cm, ref, x, y)}


def activations(mesh: str, plan: str, execution: str = "compiled") -> dict[str, Any]:
    """autograd_activations='saved' against 'recompute': the gradients of one step and of a double
    backward (``retain_graph=True``: the saved run's forward half runs again with the forward's
    random numbers), the collectives one training step and one no-grad forward issue, the
    programs compiled, and whether a program suspends (``func.suspend``)."""
    x, y = batch(0)
    out: dict[str, Any] = {}
    for mode in ("saved", "recompute"):
        model = make_net()
        ref = copy.deepcopy(model)
        compile = spmdc.eager if execution == "eager" else spmdc.compile
        cm = compile(model, (x,), mesh=mesh, plan=plan, outputs="full", autograd_activations=mode)
        first = one_backward(cm, ref, x, y)
        cm.comm.stats.counts.clear()
        for p in list(cm.parameters()) + list(ref.parameters()):
            p.grad = None
        torch.manual_seed(6)
        loss = F.mse_loss(cm(x), y)
        loss.backward(retain_graph=True)
        step = dict(cm.comm.stats.counts)
        loss.backward()
        torch.manual_seed(6)
        ref_loss = F.mse_loss(ref(x), y)
        ref_loss.backward(retain_graph=True)
        ref_loss.backward()
        rp = dict(ref.named_parameters())
        twice = {n: (_full(p.grad).clone(), rp[n].grad.clone()) for n, p in cm.named_parameters()}
        cm.comm.stats.counts.clear()
        with torch.no_grad():
            cm(x)
        out[mode] = {"first": first, "twice": twice, "step": step, "forward": dict(cm.comm.stats.counts),
                     "kinds": sorted({k[0] for k in cm.program_cache.runners}),
                     "suspends": [k[0] for k, r in cm.program_cache.runners.items()
                                  if any(op.name == "func.suspend" for op in r.program.module.walk())]}
    return out


def hf_gpt2(mesh: str, plan: str) -> dict[str, Any]:
    """HuggingFace GPT-2 at its defaults (dropout 0.1, Conv1D): ``cm(input_ids=...)`` gives its
    ``ModelOutput``; the user's own next-token loss on ``.logits``; gradients as one device's."""
    from spmdc.frontend.workloads import load_workload

    torch.manual_seed(0)
    w = load_workload(HF_GPT2, batch=4)
    ref = copy.deepcopy(w.model)
    ids = w.kwargs["input_ids"]
    cm = spmdc.compile(w.model, (), example_kwargs={"input_ids": ids}, mesh=mesh, plan=plan, outputs="full")

    def loss_of(out: Any) -> Any:
        return F.cross_entropy(out.logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())

    torch.manual_seed(3)
    out = cm(input_ids=ids)
    loss = loss_of(out)
    loss.backward()
    torch.manual_seed(3)
    ref_loss = loss_of(ref(input_ids=ids))
    ref_loss.backward()
    rp = dict(ref.named_parameters())
    return {"type": type(out).__name__, "loss": (float(loss), float(ref_loss)),
            "grads": {n: (_full(p.grad).clone(), rp[n].grad.clone()) for n, p in cm.named_parameters()}}


def bf16(mesh: str, plan: str) -> dict[str, Any]:
    """mixed_precision='bf16': loss.backward() through cm(x) and cm.backward (model and loss in one
    program) give the same gradients up to bf16 rounding."""
    x, y = batch(0)
    model = Net(p=0.0)
    ref = copy.deepcopy(model)
    cm = spmdc.compile(model, (x,), mesh=mesh, plan=plan, train=True, loss_fn=F.mse_loss, loss_inputs=(y,),
                       outputs="full", mixed_precision="bf16")
    cm.backward(x, y)
    fused = {n: _full(p.grad).clone() for n, p in cm.named_parameters()}
    cm.zero_grad(set_to_none=True)
    F.mse_loss(cm(x), y).backward()
    F.mse_loss(ref(x), y).backward()
    rp = dict(ref.named_parameters())
    return {"grads": {n: (_full(p.grad).clone(), fused[n], rp[n].grad.clone()) for n, p in cm.named_parameters()},
            "dtypes": sorted({str(p.grad.dtype) for p in cm.parameters()})}


def refusals() -> dict[str, Any]:
    x, y = batch(0)
    out: dict[str, Any] = {}
    cm = spmdc.compile(make_net(), (x,), mesh="dp=4", plan="fsdp", outputs="full", clip_grad_norm=1.0)
    try:
        F.mse_loss(cm(x), y).backward()
        out["clip"] = None
    except (RuntimeError, ValueError) as e:
        out["clip"] = str(e)
    try:
        spmdc.compile(make_net(), (x,), mesh="dp=4", plan="fsdp", outputs="halves")
        out["bad_option"] = None
    except ValueError as e:
        out["bad_option"] = str(e)
    for mode in ("saved", "recompute"):   # an input, then a parameter, changed between forward and backward
        cm = spmdc.compile(make_net(), (x,), mesh="dp=4", plan="fsdp", outputs="full", autograd_activations=mode)
        xi = x.clone()
        for what in ("input", "parameter"):
            loss = F.mse_loss(cm(xi), y)
            with torch.no_grad():
                xi.mul_(2) if what == "input" else cm.fc2.bias.add_(1.0)
            try:
                loss.backward()
                out[f"{what}_{mode}"] = None
            except RuntimeError as e:
                out[f"{what}_{mode}"] = str(e)
    from spmdc.frontend.workloads import load_workload
    from spmdc.sharding.device_groups import HeteroPlan

    torch.manual_seed(0)
    w = load_workload("gpt2-tiny", batch=4)
    kw = dict(train=True, loss_fn=w.loss_fn, loss_inputs=tuple(w.loss_inputs))
    for name, mesh, plan in (("pipeline", "pp=2,dp=2", "fsdp"), ("groups", None, HeteroPlan.from_dict(GROUPS))):
        cm = spmdc.compile(w.model, tuple(w.inputs), mesh=mesh, plan=plan, **kw)
        try:
            cm(*w.inputs)
            out[name] = None
        except NotImplementedError as e:
            out[name] = str(e)
    return out


CASES: dict[str, tuple] = {   # name: (function, args[, keyword args])
    "plain": (plain_ref, (make_net,)),
    "fsdp2": (fsdp2_ref, (make_net,)),
    "fsdp_full": (spmdc_loop, ("dp=4", "fsdp", "full")),
    "fsdp_tp_dtensor": (spmdc_loop, ("dp=2,tp=2", "fsdp+tp", "dtensor")),
    "fsdp_tp_full_cmclip": (spmdc_loop, ("dp=2,tp=2", "fsdp+tp", "full", "spmdc")),
    "fsdp_tp_recompute": (spmdc_loop, ("dp=2,tp=2", "fsdp+tp", "full"), {"autograd_activations": "recompute"}),
    "megatron_full": (spmdc_loop, ("tp=4", "megatron", "full")),
    "head_plain": (head_plain, ()),
    "head_fsdp": (head_loop, ("dp=4", "fsdp")),
    "head_fsdp_tp": (head_loop, ("dp=2,tp=2", "fsdp+tp")),
    "local_fsdp_tp": (local_loop, ("dp=2,tp=2", "fsdp+tp")),
    "local_plain": (local_plain, ()),
    "sandwich": (sandwich, ("dp=2,tp=2", "fsdp+tp", False)),
    "sandwich_two": (sandwich, ("dp=4", "fsdp", True)),
    "local_sandwich": (local_sandwich, ("dp=2,tp=2", "fsdp+tp")),
    "local_sandwich_dp4": (local_sandwich, ("dp=4", "fsdp")),
    "accumulate": (accumulate, ("dp=2,tp=2", "fsdp+tp")),
    "evaluation": (evaluation, ("dp=4", "fsdp")),
    "batchnorm": (batchnorm, ("dp=4", "fsdp")),
    "frozen": (frozen, ("dp=2,tp=2", "fsdp+tp")),
    "eager": (eager_mode, ("dp=4", "fsdp")),
    "activations_fsdp": (activations, ("dp=4", "fsdp")),
    "activations_megatron": (activations, ("tp=4", "megatron")),
    "activations_eager": (activations, ("dp=2,tp=2", "fsdp+tp", "eager")),
    "hf_gpt2": (hf_gpt2, ("dp=2,tp=2", "fsdp+tp")),
    "bf16": (bf16, ("dp=4", "fsdp")),
    "refusals": (refusals, ()),
}


def run_case(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any] | None = None) -> Any:
    return fn(*args, **(kwargs or {}))


def autograd_cases() -> dict[str, Any]:
    import rank_checks

    return rank_checks.run_cases_in_gloo(run_case, CASES)
