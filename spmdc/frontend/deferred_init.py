"""Models bigger than one device: build on the meta device, initialize only each rank's shards.

    model = spmdc.deferred_init(GPT, config)        # meta tensors; how they were made is recorded
    cm = spmdc.compile(model, (x,), mesh=..., plan="fsdp", ...)   # each rank materializes its shards

``deferred_init`` runs the constructor under a dispatch mode that creates every tensor a factory
op would put on the CPU on the meta device instead, and records every aten op touching a meta
tensor (a *tape*: ``empty``,
``uniform_``, ``normal_``, ``copy_``, ``arange``, ...). Nothing is allocated. :func:`replay`
later runs the tape on real tensors in the recorded order, from the random-generator state the
constructor started with, so every random op draws exactly what it drew in a single-device
construction: the initialization is bitwise equal to ``torch.manual_seed(s); GPT(config)``.

Memory: the tape is replayed lazily. A value is only computed if something that is kept needs
it, and a parameter's storage is allocated at the *last* op that overwrites it whole (a Linear's
``kaiming_uniform_`` later overwritten by a model's own ``_init_weights``: the first one only
advances the generator, drawn into a scratch tensor of the same size and dropped). When no later
op touches a parameter, ``on_final(name, tensor)`` receives it (the runtime cuts the rank's
shard) and the full tensor is freed. The peak is the rank's shards plus about one full
parameter at a time, not the model.

Identity: tensors are followed by their storage (``p``, ``p.data``, ``p[0]`` and ``p.view(-1)``
all alias one storage), each use re-derived with ``as_strided`` from the recorded size, stride
and offset, so views and ``.data`` behave as they did on the meta device. Not supported (refused
at replay with the op's name): dtype-reinterpreting views, and ops whose results are not tensors.
Random ops on real (non-meta) tensors during construction advance the generator at record time
and are not replayed: build everything on the meta device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

from spmdc.frontend.torch_compat import (
    dispatch_mode_base,
    fake_tensor_mode,
    meta_noop_inits,
    storage_key,
    tree_leaves,
    tree_map,
)

TAPE_ATTR = "_spmdc_init_tape"

# in-place ops that overwrite all of their target without reading it
_OVERWRITE = {"uniform_", "normal_", "zero_", "fill_", "copy_", "random_", "bernoulli_", "exponential_",
              "geometric_", "log_normal_", "cauchy_", "trunc_normal_", "orthogonal_", "dirac_", "sparse_"}
# ops that draw from the generator (advance it even when their result is not needed)
_RANDOM = {"uniform_", "normal_", "random_", "bernoulli_", "exponential_", "geometric_", "log_normal_", "cauchy_",
           "rand", "randn", "randint", "randperm", "bernoulli", "normal", "rand_like", "randn_like", "randint_like",
           "multinomial", "poisson", "native_dropout", "uniform", "trunc_normal_", "orthogonal_", "sparse_"}
# torch.nn.init functions that return early on a meta tensor (recorded whole, replayed by calling them)
_META_NOOP_INITS = meta_noop_inits()


@dataclass(frozen=True)
class TRef:
    """A meta tensor on the tape: a view (size, stride, offset) of storage ``key``."""

    key: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    dtype: torch.dtype


@dataclass
class Entry:
    func: Any
    args: tuple
    kwargs: dict
    outs: list[TRef]
    name: str
    reseed: Any = None   # the generator state to set first (someone seeded it since the last draw)

    @property
    def base_name(self) -> str:
        return self.name.split(".")[0]


@dataclass
class Storage:
    key: int
    nbytes: int
    dtype: torch.dtype


@dataclass
class Tape:
    """What a meta model's construction did, in order, and the generator state it started from."""

    entries: list[Entry] = field(default_factory=list)
    storages: dict[int, Storage] = field(default_factory=dict)
    rng_state: Any = None
    last_state: Any = None
    keep_alive: list[Any] = field(default_factory=list)   # storage keys must not be reused while recording

    def add(self, entry: Entry) -> None:
        if entry.base_name in _RANDOM:
            # draws on meta leave the generator alone, so a change since the last draw is a
            # torch.manual_seed (or set_rng_state) in the constructor: replay it there
            state = torch.get_rng_state()
            if self.last_state is None or not torch.equal(state, self.last_state):
                entry.reseed = self.last_state = state
        self.entries.append(entry)

    def ref(self, t: torch.Tensor) -> TRef:
        key = storage_key(t)
        if key not in self.storages:
            self.storages[key] = Storage(key, t.untyped_storage().nbytes(), t.dtype)
            self.keep_alive.append(t)
        return TRef(key, tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)


class _Recorder(dispatch_mode_base()):  # type: ignore[misc]
    def __init__(self, tape: Tape):
        super().__init__()
        self.tape = tape

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        dev = kwargs.get("device")
        if dev is not None and torch.device(dev).type == "cpu":   # a factory: make it on meta instead
            kwargs["device"] = torch.device("meta")
        out = func(*args, **kwargs)
        flat = tree_leaves((args, kwargs, out))
        if any(isinstance(t, torch.Tensor) and t.device.type == "meta" for t in flat):
            tape = self.tape

            def enc(x: Any) -> Any:
                if isinstance(x, torch.Tensor):
                    if x.device.type != "meta":
                        return x.detach().clone()   # a real constant (small, made during construction)
                    return tape.ref(x)
                return x
            outs = [tape.ref(t) for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            tape.add(Entry(func, tree_map(enc, tuple(args)), tree_map(enc, dict(kwargs)), outs, func.__name__))
        return out


class _RecordedInits:
    """torch.nn.init functions that skip meta tensors are recorded as one call each."""

    def __init__(self, tape: Tape):
        self.tape, self.saved = tape, {}

    def __enter__(self) -> None:
        import torch.nn.init as init

        for attr, name in _META_NOOP_INITS.items():
            orig = getattr(init, attr)
            self.saved[attr] = orig

            def wrapper(tensor: Any, *args: Any, _orig: Any = orig, _name: str = name, **kwargs: Any) -> Any:
                if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                    r = self.tape.ref(tensor)
                    self.tape.add(Entry(_orig, (r, *args), dict(kwargs), [r], _name))
                    return tensor
                return _orig(tensor, *args, **kwargs)
            setattr(init, attr, wrapper)

    def __exit__(self, *exc: Any) -> None:
        import torch.nn.init as init

        for attr, orig in self.saved.items():
            setattr(init, attr, orig)


def record(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Tape]:
    """``fn(*args, **kwargs)`` on the meta device, recorded; returns (its result, the tape)."""
    tape = Tape(rng_state=torch.get_rng_state())
    tape.last_state = tape.rng_state
    with _Recorder(tape), _RecordedInits(tape):   # not torch.device("meta"): libraries skip init under it (HF)
        result = fn(*args, **kwargs)
    return result, tape


def deferred_init(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Build a model with ``fn(*args, **kwargs)`` (a class or a factory) on the meta device and
    remember how: :func:`spmdc.compile` then materializes only each rank's shards, bitwise equal
    to building it on one device with the same generator state."""
    model, tape = record(fn, *args, **kwargs)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"deferred_init: {getattr(fn, '__name__', fn)!r} returned {type(model).__name__}, "
                        "not an nn.Module")
    object.__setattr__(model, TAPE_ATTR, tape)
    return model


def record_init(model: Any, init: Callable[[Any], Any]) -> Tape:
    """Record ``init(model)`` on a meta model (e.g. ``lambda m: m.apply(m._init_weights)`` or
    ``lambda m: m.reset_parameters()``), to be replayed like a constructor's tape; the storages
    that exist before it start uninitialized."""
    tape = Tape(rng_state=torch.get_rng_state())
    tape.last_state = tape.rng_state
    with _Recorder(tape), _RecordedInits(tape):
        init(model)
    return tape


def kept_storages(model: Any, tape: Tape) -> dict[int, list[tuple[str, TRef]]]:
    """Storage key → [(name, view)] of the model's meta parameters and buffers (tied names share
    one); real ones (a ``torch.tensor(...)`` constant made in the constructor) keep their value."""
    out: dict[int, list[tuple[str, TRef]]] = {}
    for name, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        if t is not None and t.device.type == "meta":
            r = tape.ref(t)
            out.setdefault(r.key, []).append((name, r))
    return out


def materialize(model: Any, tape: Tape | None = None, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Every parameter and buffer of a meta model, computed by replaying its tape (one device:
    for checking and small models); the generator ends where the construction left it."""
    tape = tape if tape is not None else getattr(model, TAPE_ATTR)
    out: dict[str, torch.Tensor] = {}
    replay(tape, kept_storages(model, tape), lambda name, t, _rows: out.__setitem__(name, t.clone()), device)
    for name, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        if t is not None and t.device.type != "meta":
            out[name] = t.detach().clone()
    return out


def is_meta_model(model: Any) -> bool:
    return any(t.device.type == "meta" for t in list(model.parameters()) + list(model.buffers()))


# -- replay ----------------------------------------------------------------------------------------
class ReplayError(RuntimeError):
    """The tape cannot be replayed exactly (an op spmdc cannot redo on real tensors)."""


def _tensor_refs(x: Any) -> list[TRef]:
    return [t for t in tree_leaves(x) if isinstance(t, TRef)]


def _covers(r: TRef, st: Storage) -> bool:
    """Whether the view ``r`` is its whole storage, contiguous."""
    numel = 1
    for s in r.size:
        numel *= s
    contiguous = r.stride == tuple(torch.empty(r.size, device="meta").stride())
    return r.offset == 0 and contiguous and numel * r.dtype.itemsize == st.nbytes


def _plan(tape: Tape, finals: set[int]) -> tuple[list[bool], dict[int, int]]:
    """Backward liveness: which entries compute something kept; the last needed touch of each
    storage (when a final one is handed over and any other freed)."""
    live = set(finals)
    needed = [False] * len(tape.entries)
    last: dict[int, int] = {}
    for i in range(len(tape.entries) - 1, -1, -1):
        e = tape.entries[i]
        reads = {r.key for r in _tensor_refs((e.args, e.kwargs))}
        writes = {r.key for r in e.outs}
        if not writes & live:
            continue
        needed[i] = True
        for k in reads | writes:
            last.setdefault(k, i)
        live -= writes - reads   # storages this op creates did not exist before it
        target = _overwritten(e, tape)
        if target is not None and target not in {r.key for r in _tensor_refs((e.args[1:], e.kwargs))}:
            reads.discard(target)   # its old value is not needed
            live.discard(target)
        live |= reads
    return needed, last


def _overwritten(e: Entry, tape: Tape) -> int | None:
    """The storage ``e`` overwrites whole without reading it (``p.normal_()``, ``p.zero_()``)."""
    if e.base_name in _OVERWRITE and e.args and isinstance(e.args[0], TRef):
        t = e.args[0]
        return t.key if _covers(t, tape.storages[t.key]) else None
    return None


_CHUNK = 1 << 18   # elements per streamed draw (a multiple of 16: see _chunk_draws_match)
_STREAM_CHECKED: dict[tuple[str, torch.dtype], bool] = {}


def _chunks(n: int) -> list[tuple[int, int]]:
    out, i = [], 0
    while i < n:
        j = min(n, i + _CHUNK)
        if 0 < n - j < 16:   # the last piece keeps at least 16 elements (torch's normal_ tail)
            j = n
        out.append((i, j))
        i = j
    return out


def _chunk_draws_match(op: str, dtype: torch.dtype) -> bool:
    """Whether drawing a tensor in pieces (multiples of 16 elements) gives exactly the numbers
    and generator state of one draw on this build of torch (checked once per op and dtype)."""
    key = (op, dtype)
    if key not in _STREAM_CHECKED:
        n, saved = 3 * 48 + 21, torch.get_rng_state()
        try:
            torch.manual_seed(1234)
            whole, after = getattr(torch.empty(n, dtype=dtype), op)(), torch.rand(1)
            torch.manual_seed(1234)
            cuts = [(0, 48), (48, 96), (96, n)]
            parts = [getattr(torch.empty(j - i, dtype=dtype), op)() for i, j in cuts]
            _STREAM_CHECKED[key] = torch.equal(torch.cat(parts), whole) and torch.equal(torch.rand(1), after)
        finally:
            torch.set_rng_state(saved)
    return _STREAM_CHECKED[key]


def _streamable(e: Entry, tape: Tape) -> bool:
    """A whole-storage ``normal_``/``uniform_`` with plain numbers: drawn piece by piece."""
    return (e.base_name in ("normal_", "uniform_") and _overwritten(e, tape) is not None
            and not _tensor_refs((e.args[1:], e.kwargs)) and e.kwargs.get("generator") is None
            and _chunk_draws_match(e.base_name, e.args[0].dtype))


def _piece_bytes(e: Entry) -> int:
    n = 1
    for d in e.args[0].size:
        n *= d
    return min(n, _CHUNK) * e.args[0].dtype.itemsize


def _stream(e: Entry, device: str, keep: tuple[int, int] | None) -> torch.Tensor | None:
    """Draw ``e``'s tensor in pieces, keeping the flat elements ``keep`` (start, stop) only."""
    r = e.args[0]
    n = 1
    for d in r.size:
        n *= d
    out = torch.empty(keep[1] - keep[0], dtype=r.dtype, device=device) if keep is not None else None
    for i, j in _chunks(n):
        piece = getattr(torch.empty(j - i, dtype=r.dtype, device=device), e.base_name)(*e.args[1:], **e.kwargs)
        if out is not None and j > keep[0] and i < keep[1]:
            a, b = max(i, keep[0]), min(j, keep[1])
            out[a - keep[0]:b - keep[0]] = piece[a - i:b - i]
    return out


def replay(tape: Tape, finals: dict[int, list[tuple[str, TRef]]],
           on_final: Callable[..., None], device: str = "cpu",
           rows: Callable[[str], tuple[int, int] | None] | None = None) -> int:
    """Run ``tape`` on ``device``; ``finals``: storage key → [(name, view)] of what is kept (a
    parameter, a buffer), each handed to ``on_final(name, tensor, row_range)`` once nothing later
    touches its storage. ``rows(name)``: the rows (dim 0) the caller keeps of a parameter, or
    None for all; a parameter made by one whole ``normal_``/``uniform_`` is then drawn piece by
    piece and only those rows kept (``row_range`` tells which; None: the full tensor). Returns
    the high-water mark of the transient bytes held at once (full storages, draw pieces; not
    the kept rows)."""
    needed, last = _plan(tape, set(finals))
    touched: dict[int, int] = {}
    for i, e in enumerate(tape.entries):
        if needed[i]:
            for k in {r.key for r in _tensor_refs((e.args, e.kwargs))} | {r.key for r in e.outs}:
                touched[k] = touched.get(k, 0) + 1
    bases: dict[int, torch.Tensor] = {}
    live_bytes = peak = 0
    torch.set_rng_state(tape.rng_state)   # and it ends where the construction left the generator

    def base(key: int, create: bool) -> torch.Tensor:
        nonlocal live_bytes, peak
        if key not in bases:
            if not create:
                raise ReplayError(f"a tensor is read before anything on the tape wrote it (storage of "
                                  f"{tape.storages[key].nbytes} bytes)")
            st = tape.storages[key]
            bases[key] = torch.empty(st.nbytes // st.dtype.itemsize, dtype=st.dtype, device=device)
            live_bytes += st.nbytes
            peak = max(peak, live_bytes)
        return bases[key]

    def view(r: TRef, create: bool = False) -> torch.Tensor:
        b = base(r.key, create)
        if b.dtype != r.dtype:
            raise ReplayError(f"a {r.dtype} view of a {b.dtype} storage cannot be replayed")
        return b.as_strided(r.size, r.stride, r.offset)

    def drop(key: int) -> None:
        nonlocal live_bytes
        if key in bases:
            live_bytes -= tape.storages[key].nbytes
            del bases[key]

    for i, e in enumerate(tape.entries):
        if e.reseed is not None:
            torch.set_rng_state(e.reseed)
        if not needed[i]:
            if e.base_name in _RANDOM:   # not kept, but it advances the generator: draw into scratch
                if _streamable(e, tape):
                    _stream(e, device, None)
                    peak = max(peak, live_bytes + _piece_bytes(e))
                    continue
                scratch = _run(e, lambda r: torch.empty(r.size, dtype=r.dtype, device=device), device)
                peak = max(peak, live_bytes + sum(t.untyped_storage().nbytes() for t in scratch))
            continue
        key = e.args[0].key if e.args and isinstance(e.args[0], TRef) else None
        names = finals.get(key, ()) if key is not None else ()
        kept = rows(names[0][0]) if rows is not None and names else None
        if (kept is not None and touched.get(key) == 1 and all(r == e.args[0] for _, r in names)
                and _streamable(e, tape)):
            # a parameter made by one draw and nothing else: keep only the caller's rows
            row = 1
            for d in e.args[0].size[1:]:
                row *= d
            piece = _stream(e, device, (kept[0] * row, kept[1] * row)).view((kept[1] - kept[0], *e.args[0].size[1:]))
            peak = max(peak, live_bytes + _piece_bytes(e))   # the rows are kept: not transient
            for name, _ in names:
                on_final(name, piece, kept)
            continue
        target = e.args[0] if _overwritten(e, tape) is not None else None
        outs = _run(e, lambda r, target=target: view(r, create=r is target), device)
        for r, t in zip(e.outs, outs):
            if r.key not in bases:   # a fresh storage: this op made it
                bases[r.key] = _as_storage(t, r, tape.storages[r.key])
                live_bytes += tape.storages[r.key].nbytes
                peak = max(peak, live_bytes)
        for key in {r.key for r in _tensor_refs((e.args, e.kwargs))} | {r.key for r in e.outs}:
            if last.get(key) == i:
                for name, r in finals.get(key, ()):
                    on_final(name, view(r), None)
                drop(key)
    for key, items in finals.items():
        if key not in last:
            raise ReplayError(f"'{items[0][0]}' is never initialized by the recorded construction")
    return peak


def _as_storage(t: torch.Tensor, r: TRef, st: Storage) -> torch.Tensor:
    """The whole storage (1-D, its dtype) of an op's fresh result ``t``, laid out as on meta."""
    numel = st.nbytes // st.dtype.itemsize
    if (t.dtype == st.dtype and tuple(t.stride()) == r.stride and t.storage_offset() == r.offset
            and t.untyped_storage().nbytes() == st.nbytes):
        return torch.empty(0, dtype=st.dtype, device=t.device).set_(t.untyped_storage(), 0, (numel,), (1,))
    flat = torch.empty(numel, dtype=st.dtype, device=t.device)
    flat.as_strided(r.size, r.stride, r.offset).copy_(t)
    return flat


def _run(e: Entry, resolve: Callable[[TRef], torch.Tensor], device: str) -> list[torch.Tensor]:
    def dec(x: Any) -> Any:
        if isinstance(x, TRef):
            return resolve(x)
        if isinstance(x, torch.device) and x.type == "meta":
            return torch.device(device)
        return x
    args, kwargs = tree_map(dec, e.args), tree_map(dec, e.kwargs)
    if kwargs.get("device") is not None and getattr(kwargs["device"], "type", kwargs["device"]) == "meta":
        kwargs["device"] = torch.device(device)
    try:
        out = e.func(*args, **kwargs)
    except Exception as exc:   # noqa: BLE001 - name the op that cannot be redone
        raise ReplayError(f"replaying '{e.func}' of the recorded construction failed: {exc}") from exc
    return [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]


def cpu_examples(tree: Any) -> Any:
    """``tree`` (example inputs) with each meta tensor an uninitialised CPU tensor of its shape,
    strides and dtype: a meta model is exported with fake CPU parameters (:class:`fake_parameters`),
    and inputs left on meta met CPU tensors inside torch's decompositions (the embedding backward's
    ``masked_fill``: "found at least two devices, meta and cpu")::

        ids = torch.randint(0, 128256, (512, 2048), device="meta")   # a user's real-size batch
        cpu_examples({"input_ids": ids})["input_ids"].device          # cpu (8 MiB, never written)

    A meta tensor gets the same CPU tensor each time (while it lives): one tensor passed twice
    (``input_ids`` as ``labels``) stays one, and a capture of the same inputs is reused
    (:func:`~spmdc.frontend.capture.reusing_captures` keys on their identity: the layout search
    compiles a 70B model under ~180 plans)."""
    def cpu(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.device.type == "meta":
            if x not in _CPU_EXAMPLES:
                t = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype)
                _CPU_EXAMPLES[x] = t.requires_grad_() if x.requires_grad else t
            return _CPU_EXAMPLES[x]
        return x
    return tree_map(cpu, tree)


_CPU_EXAMPLES: Any = WeakIdKeyDictionary()
"""Each meta example tensor's CPU stand-in (:func:`cpu_examples`), kept while the meta one lives."""


class fake_parameters:
    """``with fake_parameters(model):`` the meta parameters and buffers of ``model`` are fake CPU
    tensors (shapes, dtypes, ties kept; no memory), so torch.export can capture it with real
    example inputs; the meta tensors are back afterwards."""

    def __init__(self, model: Any):
        self.model = model
        self.saved: list[tuple[Any, str, str, Any]] = []

    def __enter__(self) -> Any:
        mode = fake_tensor_mode()
        made: dict[int, Any] = {}

        def fake(t: torch.Tensor) -> torch.Tensor:
            if id(t) not in made:
                with mode:
                    f = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
                made[id(t)] = torch.nn.Parameter(f, requires_grad=t.requires_grad) if isinstance(
                    t, torch.nn.Parameter) else f
            return made[id(t)]
        for mod in self.model.modules():
            for kind in ("_parameters", "_buffers"):
                table = getattr(mod, kind)
                for k, t in list(table.items()):
                    if t is not None and t.device.type == "meta":
                        self.saved.append((mod, kind, k, t))
                        table[k] = fake(t)
        return self.model

    def __exit__(self, *exc: Any) -> None:
        for mod, kind, k, t in reversed(self.saved):
            getattr(mod, kind)[k] = t
        self.saved.clear()
