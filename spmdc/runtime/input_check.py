"""Ranks fed the wrong data: one checksum collective on the first call of every program.

    check = InputCheck.for_mesh(mesh, members, mode="local", group=group, device=device)
    check(key, values, names, layouts)   # the first time ``key`` is seen: one all_gather, else nothing

Every rank of a compiled module passes each input either whole (``inputs="global"``: the same
tensor on every rank) or as its piece (``inputs="local"``: the same piece on the ranks whose
coordinates differ only along mesh axes the input's layout does not split). Nothing in a
program can tell a wrong batch from a right one, so the first call of every program (one per
program cache entry: a new shape or mode checks again) compares, across the ranks, a few
float64 checksums per input — dtype, shape, number of elements, sum, sum of squares, a sum
weighted by position (so a reordering shows) and the NaN count — gathered for all inputs at
once by one ``all_gather``. Every rank then judges the same table, so a refusal is the same
error on every rank (no rank hangs in the program's next collective), naming the input, the
ranks, the mesh axis and the likely cause. Inputs given as DTensors carry their own layout and
are not checked.

The participants are the ranks of the module's group in group order, each with its mesh
coordinates: one mesh (:meth:`InputCheck.for_mesh`), or device groups / pipeline stages
(:meth:`InputCheck.for_groups`: coordinates ``{grp: g, <the group's axes>}``, every input whole
on every rank of the job).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from spmdc.dialects.shard import Partial, Replicate

MAX_DIMS = 8   # shape slots per input (a tensor of more dims folds the rest into the last slot)
_FLAG, _DTYPE, _NDIM, _DIMS = 0, 1, 2, 3
_NUMEL, _SUM, _SUMSQ, _WSUM, _NANS = (_DIMS + MAX_DIMS + k for k in range(5))
SLOTS = _NANS + 1
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
           torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)
OFF_HINT = "check_inputs=False turns this check off"
PIECES_HINT = ("with inputs='global' (the default) every rank passes the whole batch; these look like per-rank pieces: "
               "pass inputs='local' to spmdc.compile, or give every rank the same batch")


@dataclass(frozen=True)
class Participant:
    """One rank that takes part in the check: its job rank and its mesh coordinates."""

    rank: int
    coords: dict[str, int]

    def where(self) -> str:
        return ",".join(f"{a}={c}" for a, c in self.coords.items())


@dataclass
class InputCheck:
    """The check of one compiled module (see the module doc). ``mode``: ``"global"`` (every
    input the same on every participant) or ``"local"`` (the same piece where the layout
    says so); ``mesh_axes``: the mesh's axes and sizes, in order (local mode); ``me``: this
    rank's index among ``participants``; ``enabled=False``: never checks."""

    participants: list[Participant]
    me: int
    mode: str
    group: Any = None
    device: Any = None
    mesh_axes: dict[str, int] = field(default_factory=dict)
    enabled: bool = True
    where: str = "spmdc.compile"
    hint: str = PIECES_HINT
    """The likely cause of a global input that differs between ranks, in words."""
    seen: set[tuple] = field(default_factory=set)
    collectives: int = 0
    """How many checks (one ``all_gather`` each) this rank has issued."""

    @staticmethod
    def for_mesh(axes: dict[str, int], members: Sequence[int], *, mode: str, me: int, group: Any, device: Any,
                 enabled: bool = True, where: str = "spmdc.compile") -> InputCheck:
        """The check of a module on one mesh (``axes``: names and sizes) over ``members`` (job
        ranks in mesh order), gathering over ``group`` (None: the whole job)."""
        order = _group_ranks(group, members)
        parts = [Participant(r, _coords(axes, members.index(r))) for r in order]
        return InputCheck(parts, order.index(members[me]), mode, group, device, dict(axes), enabled, where)

    @staticmethod
    def for_groups(groups: Sequence[Any], axis: str, *, rank: int, device: Any, hint: str, enabled: bool = True,
                   where: str = "spmdc.compile") -> InputCheck:
        """Device groups or pipeline stages (each with ``ranks`` and ``mesh``): global inputs,
        the same on every rank of the job; coordinates ``{axis: group, <the group's axes>}``;
        ``hint``: what every rank must pass, in words."""
        import torch.distributed as dist

        world = dist.get_world_size()
        parts: list[Participant | None] = [None] * world
        for k, g in enumerate(groups):
            axes = dict(zip(g.mesh.axis_names, g.mesh.shape))
            for i, r in enumerate(g.ranks):
                parts[r] = Participant(r, {axis: k, **_coords(axes, i)})
        return InputCheck([p for p in parts if p is not None], rank, "global", None, device, {}, enabled, where, hint)

    def __call__(self, key: tuple, values: Sequence[Any], names: Sequence[str],
                 layouts: Sequence[Sequence[Any]] | None = None) -> None:
        """Check ``values`` (this rank's inputs, in program order) the first time ``key`` (the
        program cache key) is seen; ``layouts``: each input's layout over the mesh (local mode)."""
        if not self.enabled or key in self.seen or not values:
            return
        table = self._gather(values)
        lays = list(layouts) if layouts is not None and self.mode == "local" else None
        problem = verdict(table, list(names), self.participants, self.mode, lays, self.mesh_axes, self.hint)
        if problem is not None:   # (not seen: the next call checks again)
            raise ValueError(f"{self.where}: {problem} ({OFF_HINT})")
        self.seen.add(key)

    def _gather(self, values: Sequence[Any]) -> torch.Tensor:
        """Every participant's checksums: a ``(participants, inputs, SLOTS)`` float64 table."""
        import torch.distributed as dist

        mine = torch.stack([checksums(v) for v in values]).reshape(-1).to(self.device)
        out = mine.new_empty((len(self.participants) * mine.numel(),))
        dist.all_gather_into_tensor(out, mine, group=self.group)
        self.collectives += 1
        return out.cpu().view(len(self.participants), len(values), SLOTS)


def checksums(x: Any) -> torch.Tensor:
    """An input's row of the table (``SLOTS`` float64 values; a DTensor: flagged, not checked)."""
    from torch.distributed.tensor import DTensor

    row = torch.zeros(SLOTS, dtype=torch.float64)
    if isinstance(x, DTensor):
        row[_FLAG] = 1.0
        return row
    row[_DTYPE] = _DTYPES.index(x.dtype) if x.dtype in _DTYPES else len(_DTYPES)
    row[_NDIM] = x.dim()
    dims = list(x.shape)
    if len(dims) > MAX_DIMS:
        dims = dims[:MAX_DIMS - 1] + [math.prod(dims[MAX_DIMS - 1:])]
    row[_DIMS:_DIMS + len(dims)] = torch.tensor(dims, dtype=torch.float64)
    flat = x.detach().reshape(-1)
    flat = (torch.view_as_real(flat).reshape(-1) if flat.is_complex() else flat).to(torch.float64)
    nans = torch.isnan(flat)
    flat = torch.where(nans, torch.zeros_like(flat), flat)
    weights = torch.arange(1, flat.numel() + 1, dtype=torch.float64, device=flat.device) / max(1, flat.numel())
    row[_NUMEL] = x.numel()
    row[_SUM], row[_SUMSQ] = flat.sum().cpu(), (flat * flat).sum().cpu()
    row[_WSUM], row[_NANS] = (flat * weights).sum().cpu(), nans.sum().cpu()
    return row


def verdict(table: torch.Tensor, names: list[str], parts: list[Participant], mode: str,
            layouts: list[Sequence[Any]] | None, mesh_axes: dict[str, int], hint: str = PIECES_HINT) -> str | None:
    """What is wrong with the gathered ``table`` (the first input at fault, in order), or None.
    Pure: every rank computes the same message from the same table."""
    for i, name in enumerate(names):
        rows = table[:, i]
        checked = [p for p in range(len(parts)) if rows[p, _FLAG] == 0]
        if not checked:
            continue
        if mode == "local" and layouts is not None:
            problem = _local_problem(rows, name, checked, parts, tuple(layouts[i]), mesh_axes)
        else:
            problem = _global_problem(rows, name, checked, parts, hint)
        if problem is not None:
            return problem
    return None


def _global_problem(rows: torch.Tensor, name: str, checked: list[int], parts: list[Participant],
                    hint: str) -> str | None:
    """Global inputs: every participant holds what the first one holds."""
    a = checked[0]
    for b in checked[1:]:
        what = _difference(rows, a, b, parts)
        if what is not None:
            return f"{name} {what}, but {_axes_phrase(parts[a], parts[b])}; {hint}"
    return None


def _local_problem(rows: torch.Tensor, name: str, checked: list[int], parts: list[Participant],
                   layout: tuple[Any, ...], mesh_axes: dict[str, int]) -> str | None:
    """Local pieces: equal shapes and dtypes everywhere (even pieces), the same piece on ranks
    that differ only along axes the layout does not split."""
    lay = "[" + ", ".join(map(str, layout)) + "]"
    a = checked[0]
    for b in checked[1:]:
        if _shape(rows[a]) != _shape(rows[b]) or rows[a, _DTYPE] != rows[b, _DTYPE]:
            what = _difference(rows, a, b, parts)
            n, split = _split_size(layout, mesh_axes)
            return (f"{name} {what}: with inputs='local' every rank passes an equal piece of the global input, "
                    f"which its layout {lay} splits {n} ways{split} (a batch size that {n} divides, "
                    "DistributedSampler(..., drop_last=True))")
    index = {tuple(p.coords.values()): k for k, p in enumerate(parts)}
    whole = [ax for ax, pl in zip(mesh_axes, layout) if isinstance(pl, Replicate)]   # (P: pieces differ)
    for ax in whole:
        for b in checked:
            if parts[b].coords[ax] == 0:
                continue
            a = index.get(tuple({**parts[b].coords, ax: 0}.values()))
            if a is None or a not in checked or _difference(rows, a, b, parts) is None:
                continue
            return (f"{name} differs between ranks {parts[a].rank} and {parts[b].rank} ({parts[a].where()} vs "
                    f"{parts[b].where()}), which differ only along mesh axis '{ax}' that its layout {lay} does not "
                    f"split, so they must pass the same piece; {_sampler_hint(layout, mesh_axes, len(parts))}")
    return None


def _difference(rows: torch.Tensor, a: int, b: int, parts: list[Participant]) -> str | None:
    """How participant ``b``'s input differs from ``a``'s, in words (None: it does not)."""
    ra, rb = parts[a].rank, parts[b].rank
    if rows[a, _DTYPE] != rows[b, _DTYPE]:
        return f"is {_dtype(rows[b])} on rank {rb} but {_dtype(rows[a])} on rank {ra}"
    if _shape(rows[a]) != _shape(rows[b]):
        return f"has shape {_shape(rows[b])} on rank {rb} but {_shape(rows[a])} on rank {ra}"
    if not _same(rows[a], rows[b]):
        return f"differs between ranks {ra} and {rb} (same shape {_shape(rows[a])}, other values)"
    return None


def _same(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Equal checksums (a relative 1e-12: the same data reduces to the same bits on one kind
    of device; the margin only absorbs a backend's summation order)."""
    a, b = x[_NUMEL:], y[_NUMEL:]
    return bool(torch.all((a == b) | ((a - b).abs() <= 1e-12 * torch.maximum(a.abs(), b.abs()))))


def _axes_phrase(a: Participant, b: Participant) -> str:
    """``they must pass the same tensor (dp=0,tp=0 vs dp=0,tp=1: mesh axis 'tp')``."""
    keys = list(dict.fromkeys([*a.coords, *b.coords]))
    axes = [k for k in keys if a.coords.get(k) != b.coords.get(k)]
    which = ("mesh axis " if len(axes) == 1 else "mesh axes ") + ", ".join(f"'{x}'" for x in axes)
    return f"ranks {a.rank} and {b.rank} must pass the same tensor ({a.where()} vs {b.where()}: {which})"


def _split_size(layout: tuple[Any, ...], mesh_axes: dict[str, int]) -> tuple[int, str]:
    """How many pieces ``layout`` makes and along which axes (``" (along 'dp')"``)."""
    axes = [ax for ax, pl in zip(mesh_axes, layout) if not isinstance(pl, (Replicate, Partial))]
    n = math.prod(mesh_axes[ax] for ax in axes)
    return n, (f" (along {' x '.join(repr(ax) for ax in axes)})" if axes else "")


def _sampler_hint(layout: tuple[Any, ...], mesh_axes: dict[str, int], world: int) -> str:
    n, _ = _split_size(layout, mesh_axes)
    axes = [ax for ax, pl in zip(mesh_axes, layout) if not isinstance(pl, (Replicate, Partial))]
    if not axes:
        return "its layout does not split it at all: every rank passes it whole"
    coord = " x ".join(axes)
    return (f"a DistributedSampler over all {world} ranks? use num_replicas={n}, rank=<{coord} coordinate>, as "
            "spmdc.sampler_args(cm) returns")


def sampler_args(layout: Sequence[Any], mesh_axes: dict[str, int], coords: dict[str, int]) -> tuple[int, int]:
    """``(num_replicas, rank)`` of a DistributedSampler for an input laid out ``layout``: the
    number of pieces its batch dim (dim 0) is cut into and this rank's piece, the axes that
    split dim 0 taken in mesh order (the first one outermost)."""
    n, r = 1, 0
    for ax, pl in zip(mesh_axes, layout):
        if getattr(pl, "dim", None) == 0:   # S(0), SS(0, k), RS(0, [...])
            n, r = n * mesh_axes[ax], r * mesh_axes[ax] + coords[ax]
    return n, r


def _shape(row: torch.Tensor) -> tuple[int, ...]:
    nd = int(row[_NDIM])
    return tuple(int(d) for d in row[_DIMS:_DIMS + min(nd, MAX_DIMS)])


def _dtype(row: torch.Tensor) -> str:
    k = int(row[_DTYPE])
    return str(_DTYPES[k]).removeprefix("torch.") if k < len(_DTYPES) else "another dtype"


def _coords(axes: dict[str, int], index: int) -> dict[str, int]:
    """Row-major coordinates of mesh position ``index``."""
    out: dict[str, int] = {}
    for ax, size in reversed(list(axes.items())):
        out[ax] = index % size
        index //= size
    return {ax: out[ax] for ax in axes}


def _group_ranks(group: Any, members: Sequence[int]) -> list[int]:
    """The job ranks of ``group`` in group-rank order (None: the whole job)."""
    import torch.distributed as dist

    if group is None:
        return list(range(dist.get_world_size()))
    return list(dist.get_process_group_ranks(group))


def batch_axes(plan: Any, mesh: Any, ndim: int) -> list[str]:
    """The axes of ``mesh`` along which ``plan`` (a preset name or a plan refining one) splits
    dim 0 of a first user input of ``ndim`` dims: its data-parallel axes, in mesh order."""
    from spmdc.sharding.plan import preset

    lays = preset(getattr(plan, "preset", None) or plan, mesh, {}, [ndim]).inputs
    lay = lays[0] if lays else {}
    return [a for a in mesh.axis_names if getattr(lay.get(a) if hasattr(lay, "get") else None, "dim", None) == 0]


def batch_replicas(plan: Any, mesh: Any, ndim: int) -> int:
    """How many data-parallel pieces ``plan`` on ``mesh`` splits dim 0 of a first input of ``ndim``
    dims into: the product of its :func:`batch_axes`' sizes (``fsdp+tp`` on dp=2,tp=2: 2)."""
    import math

    return math.prod(mesh.axis_size(a) for a in batch_axes(plan, mesh, ndim))


@dataclass
class LocalBatches:
    """``inputs="local"`` for device groups and pipeline stages: each rank passes its
    data-parallel replica's piece of the global batch; every step one ``all_gather`` per input
    over the job brings every piece to every rank, which concatenates one piece per replica
    (replica order) into the global batch and runs on it as with ``inputs="global"``.

        lb = LocalBatches.for_stages(plan.stages, ndim=2, where="pipeline plan 'pp'")
        lb.sampler_args(rank)           # (num_replicas, this rank's replica)
        x, y = lb.assemble([x_piece, y_piece], ["input #0", "input #1"], device)

    Replicas: the coordinates along a group's data-parallel axes (:func:`batch_axes`). Pipeline
    stages all hold the same replicas (the ranks at the same dp coordinate across stages are one
    replica; stages whose dp sizes differ are refused); device groups stack theirs (group 0's
    replicas first), ``num_replicas`` = the sum of the groups' dp sizes. On the first step of each
    shape (``check``) the ranks of one replica must pass the same piece, and on every step the
    pieces' shapes and dtypes must agree on every rank; a refusal is the same error on every rank."""

    replicas: int
    replica_of: list[int]          # job rank -> its replica
    labels: list[str]              # job rank -> where it is ("stage 1, dp=0")
    where: str
    check: bool = True
    seen: set[tuple] = field(default_factory=set)
    gathers: int = 0
    """How many ``all_gather`` calls (per step: one of the shapes, one per input) this rank has issued."""

    @staticmethod
    def _table(groups: Sequence[Any], ndim: int, word: str) -> list[tuple[int, int, int, str]]:
        """(job rank, group's dp size, replica within the group, label) of every rank."""
        out = []
        for k, g in enumerate(groups):
            axes = dict(zip(g.mesh.axis_names, g.mesh.shape))
            dp = batch_axes(g.plan, g.mesh, ndim)
            for i, r in enumerate(g.ranks):
                n, rep = sampler_args([_Dim0() if a in dp else Replicate() for a in axes], axes, _coords(axes, i))
                coords = ",".join(f"{a}={c}" for a, c in _coords(axes, i).items() if a in dp)
                out.append((r, n, rep, f"{word} {k}" + (f" {coords}" if coords else "")))
        return sorted(out)

    @staticmethod
    def for_stages(stages: Sequence[Any], *, ndim: int, where: str, check: bool = True) -> LocalBatches:
        table = LocalBatches._table(stages, ndim, "stage")
        sizes = {}
        for k, s in enumerate(stages):
            sizes[k] = next(n for r, n, _, _ in table if r == s.ranks[0])
        if len(set(sizes.values())) > 1:
            raise ValueError(f"{where}: inputs='local' needs every stage to split the batch into the same number of "
                             f"data-parallel pieces, but the stages' dp sizes are {list(sizes.values())}: a rank's "
                             "piece would not be one replica's on every stage; use inputs='global', or give every "
                             "stage the same dp size")
        return LocalBatches(sizes[0], [rep for _, _, rep, _ in table], [lab for *_, lab in table], where, check)

    @staticmethod
    def for_groups(groups: Sequence[Any], *, ndim: int, where: str, check: bool = True) -> LocalBatches:
        table = LocalBatches._table(groups, ndim, "group")
        offset, starts = 0, []
        for g in groups:
            starts.append(offset)
            offset += next(n for r, n, _, _ in table if r == g.ranks[0])
        group_of = {r: k for k, g in enumerate(groups) for r in g.ranks}
        return LocalBatches(offset, [starts[group_of[r]] + rep for r, _, rep, _ in table],
                            [lab for *_, lab in table], where, check)

    def sampler_args(self, rank: int) -> tuple[int, int]:
        """``(num_replicas, rank)`` of job rank ``rank``'s ``DistributedSampler``."""
        return self.replicas, self.replica_of[rank]

    def _source(self, replica: int) -> int:
        return self.replica_of.index(replica)

    def assemble(self, values: Sequence[Any], names: Sequence[str], device: Any, step: bool = True) -> list[Any]:
        """The global batch from every rank's pieces (see the class doc): one small ``all_gather``
        of the pieces' shapes and dtypes (every step: a rank whose piece differs would hang the
        next one), then one ``all_gather`` per input. ``step=False`` (the example inputs): the
        replicas' pieces are compared, and the first step of the shape compares them again."""
        import torch.distributed as dist

        world = dist.get_world_size()
        head = torch.tensor([[_DTYPES.index(v.dtype) if v.dtype in _DTYPES else -1, v.dim(),
                              *[int(d) for d in v.shape[:MAX_DIMS]], *[-1] * (MAX_DIMS - min(v.dim(), MAX_DIMS))]
                             for v in values], dtype=torch.int64, device=device).reshape(len(values), MAX_DIMS + 2)
        heads = [torch.empty_like(head) for _ in range(world)]
        dist.all_gather(heads, head)
        self.gathers += 1
        bad = next((r for r in range(world) if not torch.equal(heads[r], heads[0])), None)
        if bad is not None:
            i = next(i for i in range(len(values)) if not torch.equal(heads[bad][i], heads[0][i]))

            def shown(h: Any) -> str:
                return f"{tuple(int(d) for d in h[2:2 + int(h[1])])} {_dtype_name(int(h[0]))}"
            raise ValueError(f"{self.where}: inputs='local': {names[i]} is {shown(heads[0][i])} on rank 0 but "
                             f"{shown(heads[bad][i])} on rank {bad}: every rank passes a piece of one shape and "
                             "dtype (a DistributedSampler with drop_last=True)")
        key = tuple((tuple(v.shape), str(v.dtype)) for v in values)
        first = self.check and key not in self.seen   # (the same decision on every rank: one shape)
        out = []
        for v, name in zip(values, names):
            v = v.to(device).contiguous()
            got = [torch.empty_like(v) for _ in range(world)]
            dist.all_gather(got, v)
            self.gathers += 1
            if first:
                for r in range(world):
                    src = self._source(self.replica_of[r])
                    if not torch.equal(got[r], got[src]):
                        raise ValueError(
                            f"{self.where}: inputs='local': {name} differs between ranks {src} ({self.labels[src]}) "
                            f"and {r} ({self.labels[r]}), which are data-parallel replica {self.replica_of[r]} of "
                            f"{self.replicas} and must pass the same piece; a DistributedSampler over every rank? "
                            f"use num_replicas={self.replicas}, rank=<replica>, as spmdc.sampler_args(cm) returns "
                            f"({OFF_HINT})")
            out.append(torch.cat([got[self._source(j)] for j in range(self.replicas)]))
        if step:
            self.seen.add(key)
        return out


def _dtype_name(k: int) -> str:
    return str(_DTYPES[k]).removeprefix("torch.") if 0 <= k < len(_DTYPES) else "another dtype"


class _Dim0:
    """A placement that splits dim 0 (what :func:`sampler_args` reads)."""

    dim = 0
