"""Where a compiled module's parameters live on this rank: the parameter store.

Every layout kind (one mesh, device groups, pipeline stages) holds its parameters the same way:
each as an ``nn.Parameter`` wrapping a DTensor in its *storage layout* on this rank's mesh (for a
ragged layout, which DTensor cannot express, the plain local piece), under the model's names. The
store knows each parameter's storage layout and global shape and moves values between layouts:

    store = ParameterStore(mesh, rank, device_mesh, comm, device)
    store.storage["w"] = (Shard(0), Replicate())       # fsdp over dp, replicated over tp
    store.shapes["w"] = (8, 4)
    piece = store.cut(full_w, store.storage["w"])        # this rank's piece of a full tensor
    arg = store.relayout(piece, store.storage["w"], prog_layout, (8, 4))   # as a program takes it
    whole = store.full(piece, store.storage["w"], (8, 4))                  # a collective

and it serves the state interface every kind shares (``state_pieces``, ``full_state_tensor``,
``load_state_piece`` of :class:`~spmdc.api.compiled_module.CompiledModule`, which
:mod:`spmdc.api.switch` and :mod:`spmdc.runtime.checkpointing` read): :meth:`pieces`,
:meth:`full_tensor`, :meth:`load_piece`.

A device-group module's mesh is its virtual ``grp × group axes`` mesh (``group_axis=True``): its
layouts lead with the ``grp`` entry, which its group's DeviceMesh does not have.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from spmdc.dialects.shard import RaggedShard, Replicate
from spmdc.runtime.collectives import CountingComm
from spmdc.runtime.dtensors import contiguous_stride, dtensor_placements
from spmdc.runtime.executor import local_piece, to_full


class ParameterStore:
    """This rank's parameters' storage layouts and shapes, and the moves between layouts."""

    def __init__(self, mesh: Any, rank: int, device_mesh: Any, comm: Any, device: torch.device,
                 group_axis: bool = False):
        self.mesh, self.rank, self.device_mesh, self.comm, self.device = mesh, rank, device_mesh, comm, device
        self.group_axis = group_axis
        self.storage: dict[str, tuple[Any, ...]] = {}   # canonical name -> layout on ``mesh``
        self.shapes: dict[str, tuple[int, ...]] = {}    # canonical name -> global shape

    # -- layouts --------------------------------------------------------------------------------
    def dt(self, layout: Sequence[Any]) -> tuple[Any, ...]:
        """DTensor placements of ``layout`` on the DeviceMesh (a device group's mesh has no ``grp``
        axis: values there are whole per group)."""
        if self.group_axis:
            if not isinstance(layout[0], Replicate):
                raise ValueError(f"a value laid out {layout[0]} across device groups has no DTensor on one group's "
                                 "mesh (outputs of a heterogeneous plan's forward are split across the groups)")
            layout = layout[1:]
        return dtensor_placements(layout)

    def own(self, layout: Sequence[Any]) -> tuple[Any, ...]:
        """``layout`` on this rank's DeviceMesh (a device group's: without the ``grp`` entry)."""
        return tuple(layout[1:] if self.group_axis else layout)

    def cut(self, full: Any, layout: Sequence[Any]) -> Any:
        """This rank's piece of the full tensor ``full`` laid out as ``layout`` (a copy on the device)."""
        return local_piece(full.detach(), layout, self.mesh, self.rank).to(self.device).clone()

    def dtensor(self, local: Any, layout: Sequence[Any], shape: tuple[int, ...]) -> Any:
        from torch.distributed.tensor import DTensor

        return DTensor.from_local(local, self.device_mesh, self.dt(layout), run_check=False,
                                  shape=tuple(shape), stride=contiguous_stride(shape))

    def stored(self, local: Any, layout: Sequence[Any], shape: tuple[int, ...]) -> Any:
        """A parameter-like value as the module holds it: a DTensor, or for a ragged layout (which
        DTensor cannot express) this rank's piece as a plain tensor."""
        return local if ragged(layout) else self.dtensor(local, layout, shape)

    def relayout(self, local: Any, src: Sequence[Any], dst: Sequence[Any], shape: tuple[int, ...]) -> Any:
        """This rank's piece of a value laid out ``src``, laid out ``dst`` (collectives as needed)."""
        if tuple(src) == tuple(dst):
            return local
        if ragged(src) or ragged(dst):   # through the full value (no collective from R)
            return local_piece(self.full(local, src, shape), dst, self.mesh, self.rank).to(self.device)
        if not self.group_axis and all(isinstance(q, Replicate) for q in dst):
            # (whole: spmdc's own gathers, counted -- an optimizer storing parameters whole takes
            # every gradient whole; :func:`spmdc.api.predict.storage_moves` predicts them)
            return to_full(local, tuple(shape), tuple(src), CountingComm(self.comm))
        return self.dtensor(local, src, shape).redistribute(self.device_mesh, self.dt(dst)).to_local()

    def full(self, local: Any, layout: Sequence[Any], shape: tuple[int, ...]) -> Any:
        """The whole value of a piece laid out ``layout`` (a collective unless replicated)."""
        if all(isinstance(p, Replicate) for p in layout):
            return local.clone()
        return to_full(local, tuple(shape), tuple(layout), self.comm)

    # -- the state interface: one parameter and its optimizer state ------------------------------
    def pieces(self, p: Any, optimizer: Any) -> dict[str, Any]:
        """This rank's piece of parameter ``p`` (``"param"``) and of each optimizer state entry
        (tensors laid out like the parameter: their local pieces; scalars such as ``step`` as they are)."""
        out = {"param": local_of(p)}
        for k, v in (optimizer.state.get(p, {}) if optimizer is not None else {}).items():
            out[k] = v.to_local() if is_dtensor(v) else v
        return out

    def full_tensor(self, fqn: str, local: Any) -> Any:
        """The whole value of this rank's piece ``local`` of ``fqn`` (or of its optimizer state):
        a collective over the rank's DeviceMesh (device groups: each group's)."""
        lay = self.own(self.storage[fqn])
        if all(isinstance(q, Replicate) for q in lay):
            return local.clone()
        return to_full(local, tuple(self.shapes[fqn]), lay, self.comm)

    def load_piece(self, fqn: str, p: Any, optimizer: Any, slot: str, value: Any, full: bool) -> None:
        """Set this rank's piece of parameter ``p`` (``slot="param"``, in place) or of its optimizer
        state entry ``slot`` from ``value``: this rank's piece, or with ``full=True`` the whole
        tensor (cut here). A non-tensor or 0-d ``value`` of an optimizer slot (``step``) is stored as it is."""
        lay, shape = self.storage[fqn], self.shapes[fqn]
        if slot != "param" and not (torch.is_tensor(value) and (full or value.dim() > 0)):
            optimizer.state.setdefault(p, {})[slot] = value
            return
        piece = self.cut(value, lay) if full else value.to(self.device)
        with torch.no_grad():
            if slot == "param":
                local_of(p).copy_(piece)
            else:
                optimizer.state.setdefault(p, {})[slot] = self.stored(piece.clone(), lay, shape)


def ragged(layout: Sequence[Any]) -> bool:
    return any(isinstance(p, RaggedShard) for p in layout)


def local_of(p: Any) -> Any:
    """A stored parameter's local piece (a DTensor's local tensor, or the plain piece itself)."""
    return p.to_local() if is_dtensor(p) else p.detach()


def is_dtensor(x: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(x, DTensor)
