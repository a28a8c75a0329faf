"""A compiled module's programs on this rank: compiled per (kind, module modes, input shapes).

    cache = ProgramCache(model, options, build)     # build: the layout kind's compile (one mesh, groups)
    run = cache.get("train", [x, y])                # compiled the first time (every rank together)
    run = cache.get("train", [x, y])                # the same RankRunner
    cache.get("forward", [x2])                      # a new batch size: a new program
    model.eval(); cache.get("forward", [x])         # a new mode: a new program, never a stale one

Kinds: ``"forward"`` (the model's outputs), ``"train"`` (loss, gradients, the gradient norm under
``clip_grad_norm``), ``"train_partial"`` (a micro-batch's gradients left unreduced, for
``grad_accum``). The key holds every module's own training flag (a frozen submodule in eval
inside a model in training) and the global inputs' shapes and dtypes. A miss first checks that
the ranks compiling together have the same module modes (one rank's capture serves them all),
then captures from global tensors (local batches arrive as DTensors) and builds a runner per
program through ``build`` — the part that differs between layout kinds
(:class:`~spmdc.api.compiled_module.CompiledModule` gives one mesh's or the device groups').
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spmdc.api.parameter_store import is_dtensor
from spmdc.frontend.export import ModuleModes, module_flags


def signature(tensors: Sequence[Any]) -> tuple:
    """The global inputs' ``(shape, dtype)``s: part of a program's key."""
    return tuple((tuple(t.shape), str(t.dtype)) for t in tensors)


@dataclass
class ProgramCache:
    """This rank's runners by ``(kind, module flags, input signature)`` (see the module doc)."""

    model: Any
    options: Any                 # CompileOptions
    loss_fn: Callable | None
    n_loss: int                  # loss inputs after the model's
    kw_names: list[str]          # keyword inputs, the programs' last inputs in this order
    dump: Any
    # build(jobs) -> one runner per job (capture, passes, this rank's program), collectively
    build: Callable[[list[dict[str, Any]]], list[Any]]
    modes_group: Any = None      # the process group compiling together (None: the job)
    runners: dict[tuple, Any] = field(default_factory=dict)

    def get(self, kind: str, tensors: Sequence[Any], forward_too: Sequence[Any] | None = None) -> Any:
        """The runner for ``kind`` in the model's current modes at these global input shapes,
        compiled (on every rank together) the first time; ``forward_too``: compile the forward
        program of these inputs in the same capture (a training module's first compile)."""
        flags = module_flags(self.model)   # every module's own mode
        key = (kind, flags, signature(tensors))
        if key in self.runners:
            return self.runners[key]
        self._same_modes_everywhere(ModuleModes.of(self.model))
        tensors = [t.full_tensor() if is_dtensor(t) else t for t in tensors]
        if forward_too is not None:
            forward_too = [t.full_tensor() if is_dtensor(t) else t for t in forward_too]
        jobs = self._jobs(kind, tensors, forward_too)
        for job, runner in zip(jobs, self.build(jobs)):
            sig = signature(job["inputs"] + job.get("loss_inputs", []) + list(job["kwargs"].values()))
            self.runners[("forward" if not job["train"] else kind, flags, sig)] = runner
        return self.runners[key]

    def _jobs(self, kind: str, tensors: list[Any], forward_too: list[Any] | None) -> list[dict[str, Any]]:
        """What to compile: the programs' inputs split into model, loss and keyword inputs."""
        opts, nk = self.options, len(self.kw_names)
        if kind.startswith("vjp:"):
            return [self._vjp_job(kind, tensors)]
        n_model = len(tensors) - (self.n_loss if kind != "forward" else 0) - nk
        kw = dict(zip(self.kw_names, tensors[len(tensors) - nk:]))
        model_in = list(tensors[:n_model])
        jobs = []
        if kind == "forward" or forward_too is not None:
            fwd_in, fwd_kw = model_in, kw
            if kind != "forward":   # the forward of the whole batch (a training step may take micro-batches)
                n_fwd = len(forward_too) - nk
                fwd_in, fwd_kw = list(forward_too)[:n_fwd], dict(zip(self.kw_names, list(forward_too)[n_fwd:]))
            jobs.append(dict(inputs=fwd_in, train=False, dump=self.dump, kwargs=fwd_kw, options=opts))
        if kind != "forward":
            jobs.append(dict(inputs=model_in, train=True, loss_fn=self.loss_fn, dump=self.dump, kwargs=kw,
                             loss_inputs=list(tensors[n_model:n_model + self.n_loss]),
                             options=opts if kind == "train" else opts.replace(clip_grad_norm=None),
                             partial_grads=kind == "train_partial"))
        return jobs

    def _vjp_job(self, kind: str, tensors: list[Any]) -> dict[str, Any]:
        """The vjp program of ``cm(x)`` under autograd (:mod:`spmdc.api.autograd_call`): the model's
        inputs (those whose gradient is wanted requiring grad), one gradient per floating output as
        loss inputs, then the keyword inputs."""
        from spmdc.api.autograd_call import VjpLoss, parse_vjp_kind

        n_cot, needs, saved = parse_vjp_kind(kind)
        nk = len(self.kw_names)
        n_model = len(tensors) - n_cot - nk
        user = list(tensors[:n_model]) + list(tensors[len(tensors) - nk:])
        user = [t.detach().requires_grad_(n) if n else t for t, n in zip(user, needs)]
        return dict(inputs=user[:n_model], train=True, loss_fn=VjpLoss(), dump=self.dump,
                    kwargs=dict(zip(self.kw_names, user[n_model:])), loss_inputs=list(tensors[n_model:n_model + n_cot]),
                    options=self.options.replace(clip_grad_norm=None, grad_accum=1,
                                                 vjp_pause=(n_model, n_cot) if saved else None),
                    partial_grads=False)

    def _same_modes_everywhere(self, modes: ModuleModes) -> None:
        """Refuse to compile when the model's modes differ between the ranks compiling together (one
        rank's capture serves them all)."""
        import torch.distributed as dist

        group = self.modes_group
        every: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(every, modes, group=group)
        if any(m != modes for m in every):
            ranks = dist.get_process_group_ranks(group) if group is not None else range(len(every))
            seen = "; ".join(f"rank {r}: {m.describe()}" for r, m in zip(ranks, every) if m != every[0])
            raise ValueError(f"the model's module modes differ between ranks (rank {list(ranks)[0]}: "
                             f"{every[0].describe()}; {seen}): set them alike on every rank before calling")

    def first(self, kind: str | None = None) -> Any:
        """A runner of ``kind`` (any kind's programs take the same plan layouts), else any runner."""
        return next((r for k, r in self.runners.items() if kind is None or k[0].startswith(kind)), None) \
            or next(iter(self.runners.values()))

    def latest(self) -> dict[str, Any]:
        """The latest program per kind (``forward``, ``train``)."""
        out = {}
        for (kind, _mode, _sig), run in self.runners.items():
            out["train" if kind.startswith("train") else kind.split(":")[0]] = run.program
        return out

    def __len__(self) -> int:
        return len(self.runners)
