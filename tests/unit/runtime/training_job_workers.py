"""Rank workers for test_training_job.py (module level: launched ranks import them by name)."""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

import torch
import torch.nn.functional as F

ADAMW = {"lr": 1e-2, "betas": (0.9, 0.99), "eps": 1e-6, "weight_decay": 0.1}


def mlp_job(batch: int = 8):
    """A 3-layer MLP with uneven sizes and a mean-reduced loss (fc1/fc2 named as megatron knows them:
    column- then row-parallel on tp, so a tp axis does work; the head stays replicated)."""
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(OrderedDict(fc1=nn.Linear(12, 30), act1=nn.GELU(), fc2=nn.Linear(30, 18), act2=nn.Tanh(),
                                      head=nn.Linear(18, 6)))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(batch, 12, generator=g), torch.randn(batch, 6, generator=g)
    return model, x, y, F.mse_loss


def eager_steps(model, batches, opt_fn, clip=None, steps=None):
    """Single-device reference: losses, grad norms and final state over ``batches``."""
    model = copy.deepcopy(model)
    opt = opt_fn(model.parameters())
    losses, norms = [], []
    for x, y in batches:
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        if clip is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
        opt.step()
        losses.append(float(loss))
    return losses, norms, {k: v.detach().clone() for k, v in model.state_dict().items()}, opt


def _init(dims=None):
    import torch.distributed as dist

    dist.init_process_group("gloo")
    return dist.get_rank()


def features_four(tmp: str) -> dict[str, Any]:
    """4 ranks: nn.Module surface, clipping, accumulation, optimizers, DCP, reshard within 4 ranks."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.device_mesh import init_device_mesh

    import spmdc

    rank = _init()
    out: dict[str, Any] = {}
    try:
        model, x, y, loss_fn = mlp_job()
        # -- a DeviceMesh as the mesh; parameters(), .grad, clip_grad_norm_ -----------------------------
        dm = init_device_mesh("cpu", (4,), mesh_dim_names=("dp",))
        cm = spmdc.compile(model, (x,), mesh=dm, plan="fsdp", train=True, loss_fn=loss_fn, loss_inputs=(y,))
        loss = cm.backward(x, y)
        out["params_are_dtensors"] = all(type(p).__name__ in ("Parameter", "DTensor") and hasattr(p, "placements")
                                         for p in cm.parameters())
        out["grads_are_dtensors"] = all(hasattr(p.grad, "placements") for p in cm.parameters())
        out["clip_norm"] = float(torch.nn.utils.clip_grad_norm_(cm.parameters(), 1e9))
        out["loss"] = float(loss)
        out["grad_full"] = {n: p.grad.full_tensor() for n, p in cm.named_parameters()}
        # your own optimizer and scheduler on the module's parameters (FSDP2 style)
        opt = torch.optim.AdamW(cm.parameters(), **ADAMW)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        opt.step()
        sched.step()
        opt.zero_grad()
        cm.backward(x, y)
        opt.step()
        out["own_optimizer_state"] = cm.full_state_dict()
        try:   # a matrix optimizer on sharded parameters: refused, not silently wrong
            cm.set_optimizer(lambda ps: torch.optim.Adafactor(ps, lr=1e-2))
            out["refused"] = None
        except ValueError as e:
            out["refused"] = str(e)

        # -- clipping inside the program ------------------------------------------------------------
        cmc = spmdc.compile(model, (x,), mesh={"dp": 2, "tp": 2}, plan="fsdp+tp", train=True, loss_fn=loss_fn,
                            loss_inputs=(y,), optimizer=("sgd", {"lr": 0.1}), clip_grad_norm=0.05)
        out["clip_losses"], out["clip_norms"] = [], []
        for _ in range(2):
            out["clip_losses"].append(float(cmc.step(x, y)))
            out["clip_norms"].append(float(cmc.last_grad_norm))
        out["clip_program"] = cmc.programs["train"].comm_ops
        noclip = spmdc.compile(model, (x,), mesh={"dp": 2, "tp": 2}, plan="fsdp+tp", train=True, loss_fn=loss_fn,
                               loss_inputs=(y,), optimizer=("sgd", {"lr": 0.1}))
        out["noclip_program"] = noclip.programs["train"].comm_ops
        _, xb, yb, _ = mlp_job(batch=32)   # micro-batches of 8 or 16 rows: 2+ rows per rank each
        # clipping with accumulation: the norm of the accumulated gradients, one scalar all-reduce
        cmac = spmdc.compile(model, (xb,), mesh={"dp": 4}, plan="fsdp", train=True, loss_fn=loss_fn,
                             loss_inputs=(yb,), optimizer=("sgd", {"lr": 0.1}), grad_accum=2, clip_grad_norm=0.05)
        out["accum_clip_losses"] = [float(cmac.step(xb, yb)) for _ in range(2)]
        out["accum_clip_norm"] = float(cmac.last_grad_norm)
        out["accum_clip_state"] = cmac.full_state_dict()
        out["clip_state"] = cmc.full_state_dict()
        out["clip_ir"] = cmc.programs["train"].step.global_ir.count("spmdc.grad_norm")

        # -- gradient accumulation: 4 micro-batches = one big batch ----------------------------------
        cma = spmdc.compile(model, (xb,), mesh={"dp": 4}, plan="fsdp", train=True, loss_fn=loss_fn,
                            loss_inputs=(yb,), optimizer=("sgd", {"lr": 0.1}), grad_accum=4)
        out["accum_losses"] = [float(cma.step(xb, yb))]
        cma.comm.stats.counts.clear()
        out["accum_losses"].append(float(cma.step(xb, yb)))
        out["accum_issued"] = dict(cma.comm.stats.counts)
        out["accum_state"] = cma.full_state_dict()
        out["accum_program"] = cma.programs["train"].comm_ops

        # -- a new batch size compiles a new program; local batches ------------------------------------
        model2, x2, y2, _ = mlp_job(batch=12)
        out["bigger_batch_loss"] = float(cm.backward(x2, y2))
        cml = spmdc.compile(model, (x,), mesh={"dp": 4}, plan="fsdp", train=True, loss_fn=loss_fn, loss_inputs=(y,),
                            inputs="local")
        out["local_loss"] = float(cml.backward(x.chunk(4)[rank], y.chunk(4)[rank]))

        # -- DCP through get_state_dict: optimizer state sharded like the parameters ------------------
        cmo = spmdc.compile(model, (x,), mesh={"dp": 4}, plan="fsdp", train=True, loss_fn=loss_fn,
                            loss_inputs=(y,), optimizer=("adamw", ADAMW))
        for _ in range(2):
            cmo.step(x, y)
        msd, osd = get_state_dict(cmo, cmo.optimizer)
        out["optim_keys"] = sorted(osd["state"])
        first = osd["state"][out["optim_keys"][0]]["exp_avg"]
        out["exp_avg_placements"] = str(first.placements)
        out["exp_avg_full"] = {k: v["exp_avg"].full_tensor().clone() for k, v in osd["state"].items()}

        # -- checkpoints: save fsdp(4) and fsdp+tp(2x2); load fsdp+tp into dp(4) and megatron(tp 4) ---------
        res = {}
        for name, mesh, plan in (("fsdp4", {"dp": 4}, "fsdp"), ("fsdptp", {"dp": 2, "tp": 2}, "fsdp+tp")):
            cmk = spmdc.compile(model, (x,), mesh=mesh, plan=plan, train=True, loss_fn=loss_fn, loss_inputs=(y,),
                                optimizer=("adamw", ADAMW))
            before = [float(cmk.step(x, y)) for _ in range(2)]
            cmk.save(f"{tmp}/{name}", extra={"step": 2})
            saved_params = cmk.full_state_dict()
            _, osd = get_state_dict(cmk, cmk.optimizer)
            saved_opt = {k: v["exp_avg_sq"].full_tensor().clone() for k, v in osd["state"].items()}
            after = [float(cmk.step(x, y)) for _ in range(2)]
            res[name] = {"before": before, "after": after, "params": saved_params, "exp_avg_sq": saved_opt}
        for name, mesh, plan in (("to_dp4", {"dp": 4}, "dp"), ("to_megatron4", {"tp": 4}, "megatron")):
            fresh, _, _, _ = mlp_job()
            for p in fresh.parameters():   # a different starting point: the checkpoint must replace it
                torch.nn.init.zeros_(p)
            cmr = spmdc.compile(fresh, (x,), mesh=mesh, plan=plan, train=True, loss_fn=loss_fn, loss_inputs=(y,),
                                optimizer=("adamw", ADAMW))
            extra = cmr.load(f"{tmp}/fsdptp")
            _, osd = get_state_dict(cmr, cmr.optimizer)
            res[name] = {"extra": extra, "params": cmr.full_state_dict(),
                         "exp_avg_sq": {k: v["exp_avg_sq"].full_tensor().clone() for k, v in osd["state"].items()},
                         "after": [float(cmr.step(x, y)) for _ in range(2)]}
        # a model megatron really shards (attention and MLP linears): fsdp on 4 -> megatron on 4
        g, tok, tgt = gpt2_job()
        torch.manual_seed(0)
        gpt = g.GPT2(128, 16, 32, 4, 2)
        opt = ("adamw", ADAMW)
        cmg = spmdc.compile(gpt, (tok,), mesh={"dp": 4}, plan="fsdp", train=True, loss_fn=g.lm_loss,
                            loss_inputs=(tgt,), optimizer=opt)
        before = [float(cmg.step(tok, tgt)) for _ in range(2)]
        cmg.save(f"{tmp}/gpt_fsdp", extra={"step": 2})
        _, osd = get_state_dict(cmg, cmg.optimizer)
        res["gpt_fsdp"] = {"before": before, "params": cmg.full_state_dict(),
                           "exp_avg": {k: v["exp_avg"].full_tensor().clone() for k, v in osd["state"].items()},
                           "after": [float(cmg.step(tok, tgt)) for _ in range(2)]}
        torch.manual_seed(1)
        cmm = spmdc.compile(g.GPT2(128, 16, 32, 4, 2), (tok,), mesh={"tp": 4}, plan="megatron", train=True,
                            loss_fn=g.lm_loss, loss_inputs=(tgt,), optimizer=opt)
        cmm.load(f"{tmp}/gpt_fsdp")
        _, osd = get_state_dict(cmm, cmm.optimizer)
        res["gpt_megatron"] = {"params": cmm.full_state_dict(),
                               "sharded": sorted(n for n, lay in cmm.placements().items()
                                                 if any(p.is_shard() for p in lay)),
                               "exp_avg": {k: v["exp_avg"].full_tensor().clone() for k, v in osd["state"].items()},
                               "after": [float(cmm.step(tok, tgt)) for _ in range(2)]}
        try:   # a checkpoint of another model: one clear error, before DCP reads anything
            cmm.load(f"{tmp}/fsdp4")
            res["wrong_model"] = None
        except ValueError as e:
            res["wrong_model"] = str(e)
        # the module's own state_dict round trip: full tensors in, DTensors out
        fresh = g.GPT2(128, 16, 32, 4, 2)
        cmm.load_state_dict(fresh.state_dict())
        res["load_full"] = cmm.full_state_dict()
        res["load_dtensor"] = cmm.load_state_dict(cmg.state_dict()) is not None and cmm.full_state_dict()
        res["fresh"] = {k: v.clone() for k, v in fresh.state_dict().items()}
        res["cmg_now"] = cmg.full_state_dict()
        out["ckpt"] = res

        # -- a 2-D DeviceMesh; full state dicts through DCP's options; eval() / train() -------------------
        dm2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        cm2 = spmdc.compile(model, (x,), mesh=dm2, plan="fsdp+tp", train=True, loss_fn=loss_fn, loss_inputs=(y,),
                            optimizer=("adamw", ADAMW))
        out["devmesh2_losses"] = [float(cm2.step(x, y)) for _ in range(2)]
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        out["dcp_full"] = get_model_state_dict(cm2, options=StateDictOptions(full_state_dict=True))
        out["devmesh2_state"] = cm2.full_state_dict()
        torch.manual_seed(0)
        drop = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 6))
        cmd = spmdc.compile(drop, (x,), mesh={"dp": 4}, plan="fsdp")
        cmd.eval()
        out["eval_out"] = cmd(x, full=True)
        cmd.train()
        torch.manual_seed(5)
        out["train_out"] = cmd(x, full=True)
        out["eval_programs"] = sorted({(k[0], k[1]) for k in cmd.program_cache.runners})
        # -- empty shards (3 rows on 4 ranks) with AdamW and clipping -----------------------------------
        torch.manual_seed(0)
        thin = torch.nn.Sequential(torch.nn.Linear(12, 3), torch.nn.Tanh(), torch.nn.Linear(3, 6))
        cme = spmdc.compile(thin, (x,), mesh={"dp": 4}, plan="fsdp", train=True, loss_fn=loss_fn, loss_inputs=(y,),
                            optimizer=("adamw", ADAMW), clip_grad_norm=0.05)
        out["empty_shard_rows"] = cme.get_parameter("0.weight").to_local().shape[0]
        out["empty_losses"] = [float(cme.step(x, y)) for _ in range(2)]
        out["empty_state"] = cme.full_state_dict()

        # -- a model built on the meta device: each rank materializes only its shards ------------------
        out.update(meta_init_cases())
        out.update(hf_accumulation_case())

        # -- optimizers that are not elementwise: Adafactor and a Muon-style orthogonalization ----------
        out["adafactor"] = _optimizer_run(model, x, y, loss_fn, lambda ps: torch.optim.Adafactor(ps, lr=1e-2))
        out["muon"] = _optimizer_run(model, x, y, loss_fn, lambda ps: Muon(ps, lr=2e-2))
    finally:
        dist.destroy_process_group()
    return out


def _optimizer_run(model, x, y, loss_fn, factory):
    import spmdc

    cm = spmdc.compile(model, (x,), mesh={"dp": 2, "tp": 2}, plan="fsdp+tp", train=True, loss_fn=loss_fn,
                       loss_inputs=(y,), optimizer=factory)
    losses = [float(cm.step(x, y)) for _ in range(3)]
    return {"losses": losses, "state": cm.full_state_dict()}


class Muon(torch.optim.Optimizer):
    """A few lines of Muon: momentum, then each 2-D update orthogonalized by Newton-Schulz
    iterations (a matrix operation on the whole parameter: not elementwise)."""

    def __init__(self, params, lr=0.02, momentum=0.9, steps=3):
        super().__init__(params, {"lr": lr, "momentum": momentum, "steps": steps})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("momentum", torch.zeros_like(p))
                buf.mul_(group["momentum"]).add_(p.grad)
                update = buf
                if p.dim() == 2:
                    x = update / (update.norm() + 1e-7)
                    for _ in range(group["steps"]):
                        x = 1.5 * x - 0.5 * (x @ x.T) @ x
                    update = x
                p.add_(update, alpha=-group["lr"])


def doc_loop(tmp: str, steps: int = 4, resume_at: int | None = None) -> list[float]:
    """The training loop of docs/runtime.md ("A training loop, next to FSDP2"): a meta-device
    model, local batches, the user's AdamW and cosine schedule, clip_grad_norm_, a checkpoint."""
    import torch.distributed as dist

    import spmdc

    g, tok, tgt = gpt2_job()
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = spmdc.deferred_init(g.GPT2, 128, 16, 32, 4, 2)
    cm = spmdc.compile(model, (tok.chunk(n)[rank],), mesh={"dp": n}, plan="fsdp", train=True, loss_fn=g.lm_loss,
                       loss_inputs=(tgt.chunk(n)[rank],), inputs="local")
    opt = torch.optim.AdamW(cm.parameters(), 3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    step0 = cm.load(f"{tmp}/doc", opt)["step"] if resume_at is not None else 0
    losses = []
    for step in range(step0, steps):
        x, y = tok.chunk(n)[rank], tgt.chunk(n)[rank]   # a DistributedSampler's piece
        loss = cm.backward(x, y)
        torch.nn.utils.clip_grad_norm_(cm.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(float(loss))
        if step + 1 == 2 and resume_at is None:
            cm.save(f"{tmp}/doc", opt, extra={"step": step + 1})
    return losses


def reshard_two(tmp: str) -> dict[str, Any]:
    """2 ranks: the fsdp checkpoint of 4 ranks loads into megatron on 2 and training resumes;
    the documented training loop, whole and resumed from its checkpoint."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict

    import spmdc

    _init()
    try:
        doc = {"whole": doc_loop(tmp), "resumed": doc_loop(tmp, resume_at=2)}
        fresh, x, y, loss_fn = mlp_job()
        for p in fresh.parameters():
            torch.nn.init.zeros_(p)
        cm = spmdc.compile(fresh, (x,), mesh={"tp": 2}, plan="megatron", train=True, loss_fn=loss_fn,
                           loss_inputs=(y,), optimizer=("adamw", ADAMW))
        extra = cm.load(f"{tmp}/fsdp4")
        _, osd = get_state_dict(cm, cm.optimizer)
        return {"extra": extra, "params": cm.full_state_dict(),
                "exp_avg_sq": {k: v["exp_avg_sq"].full_tensor().clone() for k, v in osd["state"].items()},
                "after": [float(cm.step(x, y)) for _ in range(2)], "doc": doc}
    finally:
        dist.destroy_process_group()


def reset_all(model):
    """A whole-model init, as a user's ``init_weights`` would be: every module's reset_parameters."""
    for m in model.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()


def gpt2_job():
    import spmdc.examples.gpt2_tiny as g

    g_ = torch.Generator().manual_seed(5)
    tok, tgt = torch.randint(0, 128, (4, 8), generator=g_), torch.randint(0, 128, (4, 8), generator=g_)
    return g, tok, tgt


def meta_init_cases() -> dict[str, Any]:
    import spmdc

    g, tok, tgt = gpt2_job()
    torch.manual_seed(11)
    meta = spmdc.deferred_init(g.GPT2, 128, 16, 32, 4, 2)
    assert all(p.device.type == "meta" for p in meta.parameters())
    cm = spmdc.compile(meta, (tok,), mesh={"dp": 4}, plan="fsdp", train=True, loss_fn=g.lm_loss, loss_inputs=(tgt,),
                       optimizer=("adamw", {"lr": 1e-3}))
    out = {"meta_state": cm.full_state_dict(), "meta_peak": cm.init_peak_bytes,
           "meta_local_bytes": sum(p.to_local().numel() * 4 for p in cm.parameters()),
           "meta_after": torch.rand(2), "meta_losses": [float(cm.step(tok, tgt)) for _ in range(2)]}
    # a plain meta model and the user's own init function
    with torch.device("meta"):
        model = mlp_job()[0]
    _, x, y, loss_fn = mlp_job()
    torch.manual_seed(3)
    cmi = spmdc.compile(model, (x,), mesh={"dp": 2, "tp": 2}, plan="fsdp+tp", train=True, loss_fn=loss_fn,
                        loss_inputs=(y,), init=reset_all)
    out["init_fn_state"] = cmi.full_state_dict()
    try:
        spmdc.compile(model, (x,), mesh={"dp": 4}, plan="fsdp")
        out["meta_refused"] = None
    except ValueError as e:
        out["meta_refused"] = str(e)
    return out


def hf_accumulation_case() -> dict[str, Any]:
    """A HuggingFace model at its defaults (loss from ``labels=``), built on the meta device,
    2 micro-batches, clipping, AdamW: keyword inputs are split into micro-batches too."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2] / "models"))
    import hf_tiny

    import spmdc

    meta = spmdc.deferred_init(hf_tiny.build, "llama")
    x, y = hf_tiny.batch()
    cm = spmdc.compile(meta, (x,), mesh={"dp": 2, "tp": 2}, plan="fsdp+tp", train=True, example_kwargs={"labels": y},
                       optimizer=("adamw", ADAMW), grad_accum=2, clip_grad_norm=1.0)
    torch.manual_seed(0)
    return {"hf_losses": [float(cm.step(x, labels=y)) for _ in range(2)], "hf_state": cm.full_state_dict()}
