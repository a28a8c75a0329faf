"""A pipeline executor's parameters: this rank's stages' pieces, tied groups, checkpoints, state.

    ex._install()                 # every stage of this rank: its parameters cut to this rank's pieces
    view = ex.checkpoint_view(opt)   # what spmdc.runtime.checkpointing saves and loads for this rank
    ex.full_state_dict()          # the whole model's parameters and buffers on every rank
    ex.state_holdings()           # {name: (the stage's MeshSpec, layout, shape)}: what switch moves

The parameter side of :class:`~spmdc.api.pipeline_executor.PipelineExecutor` (which inherits it):
its stages' parameters as DTensors on the stage's mesh (a meta model's replayed for this rank's
pieces only), the process groups of parameters several stages share, and the one-mesh checkpoint
format every layout kind writes (a tied parameter by its first stage).
"""

from __future__ import annotations

from typing import Any

import torch


class StageParameters:
    """Parameters, buffers and checkpoints of a rank's pipeline stages (mixed into the executor)."""

    def _install(self) -> None:
        """This stage's parameters, cut to this rank's pieces (DTensors on the stage's mesh)."""
        from torch.distributed.tensor import DTensor

        from spmdc.runtime.dtensors import contiguous_stride, dtensor_parameter, dtensor_placements
        from spmdc.runtime.executor import local_piece

        prog = self._programs.backward.program
        module = self.mine.module
        self.buffers: dict[int, Any] = {}   # (params, _storage: every stage's of the rank, see __init__)
        mesh = self.plan.stages[self.stage].mesh
        made = self._materialize(prog)   # a meta model: this stage's values, replayed here
        for i, kind in enumerate(prog.step.arg_kinds):
            if not kind.startswith("param:"):
                continue
            name = kind[6:]
            if name in self.params:   # (read by two of this rank's stages: one parameter)
                continue
            full = module.get_parameter(name) if i not in prog.step.buffers else module.get_buffer(name)
            if i not in prog.step.buffers and name in made:   # (already this rank's piece)
                local = made[name]
            else:
                full_value = self._init_buffers.get(name, full) if i in prog.step.buffers else full
                local = local_piece(full_value.detach(), prog.arg_layouts[i], mesh, self.index).to(self.device).clone()
            if i in prog.step.buffers:
                self.buffers[i] = local
                continue
            self._storage[name] = prog.arg_layouts[i]
            dt = DTensor.from_local(local, self.device_mesh, dtensor_placements(prog.arg_layouts[i]),
                                    run_check=False, shape=tuple(full.shape), stride=contiguous_stride(full.shape))
            self.params[name] = dtensor_parameter(dt, full.requires_grad)
        fwd = self._programs.forward
        if fwd is not None:
            for i, kind in enumerate(fwd.program.step.arg_kinds):
                if kind.startswith("param:") and kind[6:] in self._storage \
                        and tuple(fwd.program.arg_layouts[i]) != tuple(self._storage[kind[6:]]):
                    raise NotImplementedError(f"parameter '{kind[6:]}' is laid out differently in stage "
                                              f"{self.stage}'s forward and backward programs")

    def _materialize(self, prog: Any) -> dict[str, Any]:
        """A meta model's (:mod:`spmdc.frontend.deferred_init`) values this stage reads, by
        replaying its recorded initialization: this rank's piece of each of the stage's
        parameters (cut as the backward program stores it; the full tensor one parameter at a
        time) and the stage's buffers whole (in :attr:`_init_buffers`), bitwise what one device
        builds; nothing of the other stages' tensors is computed. Empty for a real model."""
        from spmdc.frontend.deferred_init import TAPE_ATTR, is_meta_model, kept_storages, replay
        from spmdc.runtime.executor import local_piece

        self._init_buffers: dict[str, Any] = {}
        if not is_meta_model(self.mine.module):
            return {}
        tape = getattr(self._model, TAPE_ATTR)   # (the entry refuses a meta model without one)
        module, mesh = self.mine.module, self.plan.stages[self.stage].mesh
        layouts = {k[6:]: prog.arg_layouts[i] for i, k in enumerate(prog.step.arg_kinds)
                   if k.startswith("param:") and i not in prog.step.buffers}
        mine = {id(t): n for n, t in [*module.named_parameters(), *module.named_buffers()] if t.device.type == "meta"}
        local = {}   # the model's name of each of this stage's tensors -> its name in the stage
        for name, t in [*self._model.named_parameters(remove_duplicate=False),
                        *self._model.named_buffers(remove_duplicate=False)]:
            if id(t) in mine:
                local[name] = mine[id(t)]
        out: dict[str, Any] = {}

        def keep(name: str, full: Any, _rows: Any = None) -> None:
            at = local.get(name)
            if at is None or at in out or at in self._init_buffers:
                return
            if at in layouts:
                out[at] = local_piece(full, layouts[at], mesh, self.index).to(self.device).clone()
            else:
                self._init_buffers[at] = full.clone()

        finals = {k: refs for k, refs in kept_storages(self._model, tape).items() if any(n in local for n, _ in refs)}
        replay(tape, finals, keep)
        missing = sorted(set(local.values()) - set(out) - set(self._init_buffers))
        if missing:
            raise ValueError(f"stage {self.stage}: the meta model's recorded initialization never sets "
                             f"'{missing[0]}'" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        return out

    def _tie_groups(self) -> dict[str, tuple[list[int], Any, bool]]:
        """Per parameter several stages share: ``(its stages, this rank's process group, by pieces)``.
        By pieces (:func:`tied_by_pieces`: every such stage has the same mesh and stores it in the same
        layout) the group is the ranks at this rank's place on each stage's mesh, which hold the same
        piece: the stages' gradients are summed piece by piece (none when this rank is alone in it).
        Otherwise one group over every rank of those stages sums the whole gradient. Every rank of the
        job creates every group, in the same order."""
        import torch.distributed as dist

        out: dict[str, tuple[list[int], Any, bool]] = {}
        made: dict[tuple[int, ...], Any] = {}
        for name, stages in sorted(self.split.shared.items()):
            stages = sorted(stages)
            specs = [self.plan.stages[k] for k in stages]
            pieces = tied_by_pieces([s.mesh for s in specs], [_param_layout(self._layouts, k, name) for k in stages])
            if pieces:
                columns = [sorted({s.ranks[i] for s in specs}) for i in range(specs[0].mesh.size)]
            else:
                columns = [sorted({r for s in specs for r in s.ranks})]
            mine = None
            for ranks in columns:
                key = tuple(ranks)
                if key not in made:   # (a group of one rank sums nothing)
                    made[key] = dist.new_group(ranks) if len(ranks) > 1 else None
                if self.rank in ranks:
                    mine = made[key]
            out[name] = (stages, mine, pieces)
        return out

    def load_full_state(self, state: dict[str, Any]) -> None:
        """Set this stage's parameters from full tensors under the model's names (as
        :meth:`full_state_dict` gives)."""
        with torch.no_grad():
            for name, p in self.params.items():
                full = next((state[a] for a in self._aliases(name) if a in state), None)
                if full is None:
                    raise KeyError(f"no value for parameter '{name}' (or its aliases {self._aliases(name)})")
                p.to_local().copy_(self._cut(full, self._storage[name]))

    def checkpoint_view(self, optimizer: Any) -> Any:
        """This rank's part of the model as :mod:`spmdc.runtime.checkpointing` saves and loads it:
        its stage's parameters and persistent buffers under the model's names (DTensors on the
        stage's mesh); the whole model's entries, for checking a checkpoint; which of the entries
        held here an earlier stage writes. The first call exchanges what each stage holds."""
        import torch.distributed as dist

        from spmdc.runtime.checkpointing import CheckpointView

        held = self._held_entries()
        if getattr(self, "_writer_stage", None) is None:
            every: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(every, (self.stage, sorted(held)))
            self._writer_stage: dict[str, int] = {}
            for stage, keys in sorted(every):
                for k in keys:
                    self._writer_stage.setdefault(k, stage)
        model_sd = self._model.state_dict()
        if self.rank == 0:   # entries no stage reads (unused by the programs): written from the model
            held.update({k: v.detach().clone() for k, v in model_sd.items() if k not in self._writer_stage})
        view = CheckpointView(_state_module(held), optimizer, True, self.plan.name, self.plan.describe(),
                              self.device)
        view.entries = {k: tuple(v.shape) for k, v in model_sd.items()}
        view.written_elsewhere = frozenset(k for k in held if self._writer_stage.get(k, self.stage) != self.stage)
        view.params = [n for n, _ in self._model.named_parameters()]
        return view

    def _held_entries(self) -> dict[str, Any]:
        """This stage's parameters (every name of each) and persistent buffers, by the model's names."""
        from torch.distributed.tensor import DTensor

        from spmdc.runtime.dtensors import contiguous_stride, dtensor_placements

        out: dict[str, Any] = {}
        for name, p in self.params.items():
            for alias in self._aliases(name):
                out[alias] = p
        persistent = set(self._model.state_dict())
        names = {}
        for n, b in self._model.named_buffers(remove_duplicate=False):
            names.setdefault(id(b), []).append(n)
        for st in self._per_stage.values():   # (each of the rank's stages' buffers)
            prog, buffers = st["_programs"].backward.program, st["buffers"]
            for i in sorted(prog.step.buffers):
                if i not in buffers:
                    continue
                full = st["mine"].module.get_buffer(prog.step.arg_kinds[i][6:])
                keys = [n for n in names.get(id(full), []) if n in persistent]
                if keys:
                    dt = DTensor.from_local(buffers[i], self.device_mesh, dtensor_placements(prog.arg_layouts[i]),
                                            run_check=False, shape=tuple(full.shape),
                                            stride=contiguous_stride(full.shape))
                    out.update(dict.fromkeys(keys, dt))
        return out

    def full_state_dict(self) -> dict[str, Any]:
        """Every parameter and persistent buffer as a full tensor (CPU), under the model's names
        (as a one-mesh module's); a collective every rank calls."""
        import torch.distributed as dist

        mine = {}
        full: dict[int, Any] = {}
        for key, v in self._held_entries().items():
            if id(v) not in full:
                full[id(v)] = v.full_tensor().detach().cpu().clone()
            mine[key] = full[id(v)]
        out: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(out, mine if self.index == 0 else {})
        merged: dict[str, Any] = {}
        for d in out:
            for k, v in d.items():
                merged.setdefault(k, v)
        return merged

    def _aliases(self, name: str) -> list[str]:
        for st in self._per_stage.values():   # (the rank's stage that holds it)
            try:
                t = st["mine"].module.get_parameter(name)
            except AttributeError:
                continue
            return self.split.aliases.get(id(t), [name])
        raise KeyError(f"no stage of rank {self.rank} holds parameter '{name}'")

    # -- the training state tensor by tensor (spmdc.api.switch) -----------------------------------------
    def state_holdings(self) -> dict[str, tuple[Any, tuple[Any, ...], tuple[int, ...]]]:
        """This stage's parameters under the model's names: ``{name: (MeshSpec of the stage's ranks,
        layout on it, global shape)}``; their optimizer state is laid out alike."""
        from spmdc.sharding.slices import MeshSpec

        spec = self.plan.stages[self.stage]
        mesh = MeshSpec(tuple(spec.mesh.axis_names), tuple(spec.mesh.shape), tuple(spec.ranks))
        return {self._aliases(n)[0]: (mesh, tuple(self._storage[n]), tuple(p.shape)) for n, p in self.params.items()}


def _state_module(entries: dict[str, Any]) -> torch.nn.Module:
    """An ``nn.Module`` holding ``entries`` (parameters as parameters, other tensors as buffers)
    under their names: what torch's ``get_state_dict`` / ``set_state_dict`` read and write."""
    root = torch.nn.Module()
    for name, value in entries.items():
        *path, leaf = name.split(".")
        owner = root
        for part in path:
            if part not in owner._modules:
                owner.add_module(part, torch.nn.Module())
            owner = owner._modules[part]
        if isinstance(value, torch.nn.Parameter):
            owner.register_parameter(leaf, value)
        else:
            owner.register_buffer(leaf, value)
    return root


def _param_layout(layouts: dict[int, dict[str, Any]], stage: int, name: str) -> Any:
    """The layout stage ``stage``'s training program stores parameter ``name`` in (None: it does not
    read it), from every stage's program layouts (``PipelineExecutor._layouts``, ``program_layouts``)."""
    args, _, kinds, _ = layouts[stage]["B"]
    key = f"param:{name}"
    return tuple(args[kinds.index(key)]) if key in kinds else None


def tied_by_pieces(meshes: list[Any], layouts: list[Any]) -> bool:
    """Whether a parameter several stages share can have its gradient summed piece by piece: every
    stage has the same mesh (axis names and sizes) and stores it in the same layout, so the ranks at
    one place on each stage's mesh hold the same piece.

        tied_by_pieces([Mesh({"dp": 4})] * 2, [(Shard(0),), (Shard(0),)])   # True
    """
    first = (meshes[0].axis_names, meshes[0].shape)
    return (all((m.axis_names, m.shape) == first for m in meshes)
            and all(lay is not None and tuple(lay) == tuple(layouts[0]) for lay in layouts))
