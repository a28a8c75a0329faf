"""A stable SHA-256 of what a compile job's result depends on, or none when it cannot be sure.

    fp = Fingerprint()
    fp.add("model", model)            # structure and code (every class, method, referenced global)
    fp.add_inputs("inputs", (x,))     # example tensors by shape / dtype / requires_grad, not values
    fp.add("plan", plan)
    fp.hexdigest()
    Fingerprint().add("loss", lambda o, y: (o - w).sum())   # raises Uncacheable: closes over a tensor

What goes in, by kind of value (:meth:`Fingerprint.value`):

* plain values (None, bool, int, float, str, bytes, torch dtypes/devices/sizes, enums), containers
  (tuple, list, dict, set), dataclasses and plain objects (class, then their fields / ``__dict__``);
* ``nn.Module``: class, ``training``, parameter and buffer names / shapes / dtypes / requires_grad
  / device type (ties kept: a tensor seen twice is a reference), every other attribute (hooks by
  order, configs by their fields, tensors that are neither parameters nor buffers by value: they
  become constants of the program), children; an ``fx.GraphModule`` adds its code and graph;
* functions: library ones (torch, the standard library, spmdc, installed packages: their versions
  are in the key) by name plus their defaults and closure; user ones by code object (bytecode,
  constants, names), defaults, closure and every global their code names;
* classes: library ones by name; user ones by ``inspect.getsource`` (when there is one), every
  method and class attribute (as above) and their bases.

What cannot be hashed reliably raises :class:`Uncacheable` with the reason: an object with no
fields (a process group, a generator), a tensor without values (meta, fake) where its values would
be baked in, a function closing over (or naming a global) tensor, more than
:data:`MAX_NODES` values or :data:`MAX_TENSOR_BYTES` of tensor data.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import inspect
import os
import site
import sys
import sysconfig
import types
from collections.abc import Iterator, Mapping
from typing import Any

MAX_NODES = 200_000
MAX_TENSOR_BYTES = 64 << 20
_SKIP_CLASS_ATTRS = {"__dict__", "__weakref__", "__module__", "__qualname__", "_abc_impl", "__parameters__",
                     "__orig_bases__", "__firstlineno__", "__static_attributes__"}
_STRUCTURAL = {"_parameters", "_buffers", "_modules", "training", "_non_persistent_buffers_set"}
_GRAPH_MODULE_SKIP = {"_graph", "_code", "_lineno_map", "_prologue_start", "meta"}
_NODE_META_SKIP = {"from_node", "seq_nr", "stack_trace"}   # provenance: ids and counters, never the meaning
_UNSTABLE_ATTRS = {"_original_object_hash"}   # hash(str) of a HF GenerationConfig: differs per process (PYTHONHASHSEED)


class Uncacheable(Exception):
    """Something of the job cannot be hashed reliably; the message says what and why."""


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    paths = set(site.getsitepackages()) | {site.getusersitepackages()}
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(name)
        if p:
            paths.add(p)
    return tuple(os.path.realpath(p) + os.sep for p in paths if p)


@functools.lru_cache(maxsize=4096)
def is_library(module_name: str | None) -> bool:
    """Code whose identity the key holds by version: spmdc (hashed by its sources), the standard
    library and installed packages (site-packages). Anything else (a script, a test file, an
    editable package) is user code, hashed by its code."""
    if not module_name:
        return False
    top = module_name.split(".")[0]
    if top in ("spmdc", "builtins", "torch") or top in sys.stdlib_module_names:
        return True
    mod = sys.modules.get(module_name) or sys.modules.get(top)
    file = getattr(mod, "__file__", None)
    if file is None:
        return False
    return os.path.realpath(file).startswith(_library_roots())


@functools.lru_cache(maxsize=1)
def _distributions() -> Mapping[str, list[str]]:
    from importlib import metadata

    try:
        return metadata.packages_distributions()
    except Exception:   # noqa: BLE001 - a broken install: versions by __version__ only
        return {}


@functools.lru_cache(maxsize=256)
def distribution_id(dist: str) -> str:
    """``"<name> <version> <sha256 of its RECORD>"``: the RECORD lists a hash of every installed
    file, so a package reinstalled with changed files under the same version is another package.
    Raises ``PackageNotFoundError`` when ``dist`` is not installed."""
    from importlib import metadata

    d = metadata.distribution(dist)
    record = d.read_text("RECORD") or ""
    return f"{d.metadata['Name']} {d.version} {hashlib.sha256(record.encode()).hexdigest()[:16]}"


@functools.lru_cache(maxsize=1024)
def library_version(module_name: str) -> str:
    """The identity of the package ``module_name`` belongs to (:func:`distribution_id`, else its
    ``__version__``; Python's version for the standard library)."""
    from importlib import metadata

    top = module_name.split(".")[0]
    if top in sys.stdlib_module_names or top == "builtins":
        return "python " + sys.version
    if top == "spmdc":
        return "spmdc"   # (its own version and source hash are part of every key)
    for dist in _dist_candidates(top):
        try:
            return distribution_id(dist)
        except (metadata.PackageNotFoundError, ValueError):
            continue
    v = getattr(sys.modules.get(top), "__version__", None)
    if v is None:
        raise Uncacheable(f"the version of package '{top}' is unknown (no distribution, no __version__)")
    return f"{top} {v}"


def _dist_candidates(top: str) -> Iterator[str]:
    """The distributions that may hold module ``top``: ``top`` itself first (most distributions are named
    as their module), then those ``packages_distributions()`` names (scanned only when needed: 0.1 s)."""
    yield top
    yield from _distributions().get(top, [])


def _module_of(obj: Any) -> str | None:
    mod = getattr(obj, "__module__", None)
    if mod is None and isinstance(getattr(obj, "__globals__", None), dict):
        mod = obj.__globals__.get("__name__")
    return mod if isinstance(mod, str) else None


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c)
    return names


class Fingerprint:
    """An incremental SHA-256 over values (see the module doc); shared objects become references."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self._memo: dict[int, int] = {}
        self._alive: list[Any] = []   # keeps memoized objects alive, so that their ids stay theirs
        self._nodes = 0
        self._tensor_bytes = 0
        self._where: list[str] = []

    # -- the stream --------------------------------------------------------------------------
    def _emit(self, tag: str, payload: str | bytes = b"") -> None:
        data = payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else payload
        self._h.update(f"{tag}:{len(data)}:".encode())
        self._h.update(data)
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise Uncacheable(f"more than {MAX_NODES} values to hash (at {self.where()})")

    def where(self) -> str:
        return "/".join(self._where) or "<top>"

    def _seen(self, obj: Any) -> bool:
        """True (and a reference emitted) when ``obj`` was hashed before."""
        ref = self._memo.get(id(obj))
        if ref is not None:
            self._emit("ref", str(ref))
            return True
        self._memo[id(obj)] = len(self._memo)
        self._alive.append(obj)
        return False

    def hexdigest(self) -> str:
        return self._h.hexdigest()

    def add(self, name: str, value: Any) -> Fingerprint:
        """Hash ``value`` under ``name`` (see the module doc); raises :class:`Uncacheable`."""
        self._emit("field", name)
        self._where.append(name)
        self.value(value)
        self._where.pop()
        return self

    def add_inputs(self, name: str, values: Any) -> Fingerprint:
        """Example inputs: tensors by type, shape, dtype, requires_grad and device type (their
        values do not make the program), other values as values; positions and keyword names kept."""
        self._emit("inputs", name)
        items = list(values.items()) if isinstance(values, Mapping) else list(enumerate(values))
        self._emit("n", str(len(items)))
        for k, v in items:
            self._emit("key", repr(k))
            if _is_tensor(v):
                self._tensor_meta(v)
            else:
                self._where.append(f"{name}[{k!r}]")
                self.value(v)
                self._where.pop()
        return self

    # -- values ------------------------------------------------------------------------------
    def value(self, x: Any, values_ok: bool = True) -> None:
        """Hash one value; ``values_ok=False`` (closures, globals): a tensor refuses the key."""
        if x is None or isinstance(x, (bool, int, float, complex, str, bytes, slice, range)) or x is ...:
            self._emit(type(x).__name__, repr(x))
            return
        if isinstance(x, enum.Enum):
            self._class(type(x))
            self._emit("enum", x.name)
            return
        if _is_tensor(x):
            self._tensor_value(x, values_ok)
            return
        import torch

        if isinstance(x, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            self._emit("torch", repr(x))
            return
        if isinstance(x, type):
            self._class(x)
            return
        if isinstance(x, types.ModuleType):
            self._module_object(x)
            return
        if self._seen(x):
            return
        if isinstance(x, (tuple, list)):
            if type(x) not in (tuple, list):
                self._class(type(x))   # a namedtuple, torch.Size
            self._emit(type(x).__name__, str(len(x)))
            for v in x:
                self.value(v, values_ok)
        elif isinstance(x, Mapping):
            self._class(type(x))
            self._emit("map", str(len(x)))
            for k, v in x.items():
                self.value(k, values_ok)
                self.value(v, values_ok)
        elif isinstance(x, (set, frozenset)):
            subs = []
            for v in x:
                sub = Fingerprint()
                sub.value(v, values_ok)
                subs.append(sub.hexdigest())
            self._emit("set", ",".join(sorted(subs)))
        elif isinstance(x, functools.partial):
            self._emit("partial")
            self.value(x.func, values_ok)
            self.value(x.args, values_ok)
            self.value(x.keywords, values_ok)
        elif isinstance(x, types.FunctionType):
            self._function(x)
        elif isinstance(x, types.MethodType):
            self._emit("method")
            self.value(x.__func__, values_ok)
            self.value(x.__self__, values_ok)
        elif isinstance(x, (staticmethod, classmethod)):
            self._emit(type(x).__name__)
            self.value(x.__func__, values_ok)
        elif isinstance(x, property):
            self._emit("property")
            for f in (x.fget, x.fset, x.fdel):
                self.value(f, values_ok)
        elif _is_builtin_callable(x):
            self._builtin(x)
        elif isinstance(x, torch.nn.Module):
            self._nn_module(x)
        elif dataclasses.is_dataclass(x):
            self._class(type(x))
            for f in dataclasses.fields(x):
                self._emit("field", f.name)
                self.value(getattr(x, f.name, None), values_ok)
        else:
            self._object(x, values_ok)

    def _object(self, x: Any, values_ok: bool) -> None:
        cls = type(x)
        state = getattr(x, "__dict__", None)
        slots = [s for c in cls.__mro__ for s in getattr(c, "__slots__", ()) if isinstance(s, str)]
        if not isinstance(state, dict) and not slots:
            raise Uncacheable(f"a {cls.__module__}.{cls.__qualname__} (an object with no fields to hash) "
                              f"at {self.where()}")
        self._class(cls)
        for name in sorted(state or {}):
            if name in _UNSTABLE_ATTRS:
                continue
            self._emit("attr", name)
            self.value(state[name], values_ok)
        for name in slots:
            if name not in ("__dict__", "__weakref__") and hasattr(x, name):
                self._emit("slot", name)
                self.value(getattr(x, name), values_ok)

    # -- tensors ------------------------------------------------------------------------------
    def _tensor_meta(self, t: Any) -> None:
        if self._seen(t):
            return
        self._emit("tensor", f"{type(t).__qualname__}|{tuple(t.shape)}|{t.dtype}|{t.requires_grad}|"
                             f"{t.device.type}")

    def _tensor_value(self, t: Any, values_ok: bool) -> None:
        if not values_ok:
            raise Uncacheable(f"a function closes over or names a tensor ({self.where()}); its values would "
                              "be part of the program")
        if self._seen(t):
            return
        import torch

        if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.device.type == "meta":
            raise Uncacheable(f"a {type(t).__name__} on {t.device.type} at {self.where()} has no values to hash")
        n = t.numel() * t.element_size()
        self._tensor_bytes += n
        if self._tensor_bytes > MAX_TENSOR_BYTES:
            raise Uncacheable(f"more than {MAX_TENSOR_BYTES >> 20} MiB of tensor constants (at {self.where()})")
        self._tensor_meta_fields(t)
        data = t.detach().cpu().contiguous().reshape(-1)
        self._emit("bytes", data.view(torch.uint8).numpy().tobytes() if n else b"")

    def _tensor_meta_fields(self, t: Any) -> None:
        self._emit("tensor", f"{type(t).__qualname__}|{tuple(t.shape)}|{t.dtype}|{t.requires_grad}")

    # -- code ---------------------------------------------------------------------------------
    def _class(self, cls: type) -> None:
        if self._seen(cls):
            return
        mod = _module_of(cls) or "?"
        self._emit("class", f"{mod}.{cls.__qualname__}")
        for base in cls.__bases__:
            self._class(base)
        if is_library(mod):
            self._emit("version", library_version(mod))
            return
        try:
            self._emit("source", inspect.getsource(cls))
        except (OSError, TypeError):
            self._emit("source", "<unavailable: hashed by its methods' code>")
        self._where.append(cls.__qualname__)
        for name in sorted(cls.__dict__):
            if name in _SKIP_CLASS_ATTRS:
                continue
            v = cls.__dict__[name]
            if isinstance(v, (types.MemberDescriptorType, types.GetSetDescriptorType)):
                continue   # (made from __slots__, which is hashed)
            self._emit("attr", name)
            self.value(v, values_ok=False)
        self._where.pop()

    def _function(self, fn: types.FunctionType) -> None:
        mod = _module_of(fn) or "?"
        self._emit("function", f"{mod}.{fn.__qualname__}")
        self._where.append(fn.__qualname__)
        if is_library(mod):
            self._emit("version", library_version(mod))
        else:
            self._code(fn.__code__)
            names = _code_names(fn.__code__)
            for name in sorted(names & set(fn.__globals__)):
                self._emit("global", name)
                self.value(fn.__globals__[name], values_ok=False)
        self.value(fn.__defaults__, values_ok=False)
        self.value(fn.__kwdefaults__, values_ok=False)
        for cell in fn.__closure__ or ():
            try:
                contents = cell.cell_contents
            except ValueError:
                self._emit("cell", "<empty>")
                continue
            self._emit("cell")
            self.value(contents, values_ok=False)
        self._where.pop()

    def _code(self, code: types.CodeType) -> None:
        self._emit("code", code.co_code)
        self._emit("sig", f"{code.co_qualname}|{code.co_argcount}|{code.co_posonlyargcount}|"
                          f"{code.co_kwonlyargcount}|{code.co_flags}")
        for part in (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars):
            self._emit("names", "\0".join(part))
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                self._code(c)
            else:
                self.value(c, values_ok=False)

    def _builtin(self, fn: Any) -> None:
        import torch

        if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            self._emit("op", str(fn))
            return
        owner = getattr(fn, "__self__", None)
        mod = _module_of(fn) or (owner.__name__ if isinstance(owner, types.ModuleType) else None)
        if mod is None and owner is not None and not isinstance(owner, types.ModuleType):
            mod = _module_of(type(owner))
        if mod is None:
            mod = _module_of(getattr(fn, "__objclass__", None))
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or str(fn)
        self._emit("builtin", f"{mod}.{name}")
        if mod is None or not is_library(mod):
            raise Uncacheable(f"a built-in callable '{name}' of unknown origin at {self.where()}")
        self._emit("version", library_version(mod))
        if owner is not None and not isinstance(owner, (types.ModuleType, type)):
            self.value(owner, values_ok=False)   # a bound method of a C object: its object

    def _module_object(self, m: types.ModuleType) -> None:
        if self._seen(m):
            return
        self._emit("module", m.__name__)
        if is_library(m.__name__):
            self._emit("version", library_version(m.__name__))
            return
        file = getattr(m, "__file__", None)
        try:
            with open(file, "rb") as f:   # type: ignore[arg-type]
                self._emit("file", f.read())
        except (OSError, TypeError):
            raise Uncacheable(f"user module '{m.__name__}' has no readable source file") from None

    # -- modules ------------------------------------------------------------------------------
    def _nn_module(self, m: Any) -> None:
        import torch

        from spmdc.frontend.deferred_init import TAPE_ATTR  # a meta model's recorded construction: values only

        self._class(type(m))
        self._emit("training", str(bool(m.training)))
        self._where.append(type(m).__name__)
        for kind in ("_parameters", "_buffers"):
            table = m.__dict__.get(kind, {})
            self._emit(kind, str(len(table)))
            for name, t in table.items():
                self._emit("name", name)
                if t is None:
                    self._emit("none")
                else:
                    self._tensor_meta(t)
        self.value(sorted(m.__dict__.get("_non_persistent_buffers_set", ())))
        if isinstance(m, torch.fx.GraphModule):
            self._graph(m)
        hook_ids = sorted({k for name, v in m.__dict__.items() if "hooks" in name and isinstance(v, Mapping)
                           for k in v})
        order = {k: i for i, k in enumerate(hook_ids)}
        for name in sorted(m.__dict__):
            if name in _STRUCTURAL or name == TAPE_ATTR or (isinstance(m, torch.fx.GraphModule)
                                                             and name in _GRAPH_MODULE_SKIP):
                continue
            v = m.__dict__[name]
            self._emit("attr", name)
            self._where.append(name)
            if "hooks" in name and isinstance(v, Mapping):   # keyed by global handle ids: hashed by order
                self.value([(order.get(k, k), h) for k, h in v.items()])
            else:
                self.value(v)
            self._where.pop()
        children = m.__dict__.get("_modules", {})
        self._emit("children", str(len(children)))
        for name, child in children.items():
            self._emit("child", name)
            self._where.append(name)
            if child is None:
                self._emit("none")
            elif not self._seen(child):
                self._nn_module(child)
            self._where.pop()
        self._where.pop()

    def _graph(self, gm: Any) -> None:
        """An fx graph: its generated code, then every node's op, target and meta (example values
        by shape and dtype; provenance — ids, counters, stack traces — left out)."""
        self._emit("fx-code", gm.code)
        self.value(getattr(gm.graph, "_codegen", None), values_ok=False)   # (its pytree specs)
        names = {}
        for node in gm.graph.nodes:
            names[node] = node.name
            self._emit("node", f"{node.op}|{node.name}")
            target = node.target
            self.value(target if not isinstance(target, str) else f"<{target}>", values_ok=False)
            self.value(_node_refs(node.args, names), values_ok=False)
            self.value(_node_refs(node.kwargs, names), values_ok=False)
            for key in sorted(node.meta):
                if key in _NODE_META_SKIP:
                    continue
                self._emit("meta", key)
                self.value(_shape_tree(node.meta[key]), values_ok=False)


def _is_tensor(x: Any) -> bool:
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def _is_builtin_callable(x: Any) -> bool:
    if isinstance(x, (types.BuiltinFunctionType, types.BuiltinMethodType, types.WrapperDescriptorType,
                      types.MethodWrapperType, types.MethodDescriptorType, types.ClassMethodDescriptorType)):
        return True
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, (t._ops.OpOverload, t._ops.OpOverloadPacket))


def _node_refs(x: Any, names: Mapping[Any, str]) -> Any:
    """fx node arguments with nodes replaced by ``%name``."""
    if isinstance(x, (list, tuple)):
        return [_node_refs(v, names) for v in x]
    if isinstance(x, Mapping):
        return {k: _node_refs(v, names) for k, v in x.items()}
    if type(x).__name__ == "Node" and hasattr(x, "op") and hasattr(x, "graph"):
        return f"%{x.name}"
    return x


def _shape_tree(x: Any) -> Any:
    """Tensors (fake ones too) as ``(shape, dtype, requires_grad)`` inside containers."""
    if _is_tensor(x):
        return ("tensor", tuple(x.shape), str(x.dtype), bool(x.requires_grad))
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return [_shape_tree(v) for v in x]
    if isinstance(x, Mapping):
        return {k: _shape_tree(v) for k, v in x.items()}
    return x

