"""Plans: how parameters, inputs and outputs are laid out over a mesh.

    plan = Plan(params={"blocks.*.mlp.fc1.weight": ParamLayout("S(0)", dims={"tp": ...})})
    plan = Plan.from_dict({"params": {"*.weight": {"storage": ["S(0)", "R"], "compute": ["R", "R"]}},
                           "inputs": [["S(0)", "R"]]}, mesh)
    plan = preset("fsdp", mesh, params)          # dp | fsdp | megatron | sp | fsdp+tp

Parameter patterns are globs over fully-qualified names, tried in order; every
pattern must match something, and two patterns that match one parameter must agree.
A parameter has a *storage* layout (how it and its gradient and optimizer state are
kept) and an optional *compute* layout (how it is used: FSDP stores ``S(0)`` and
computes at ``R``, i.e. gathers on use). Unnamed parameters are replicated.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spmdc.dialects.attrs import checkpoint_every
from spmdc.dialects.shard import (
    Partial,
    Placement,
    RaggedShard,
    Replicate,
    Shard,
    StridedShard,
    shard_dim,
    strided_problem,
)
from spmdc.sharding.blocks import block_of
from spmdc.sharding.mesh import Mesh, to_placements

Layout = tuple[Placement, ...]


class PlanError(ValueError):
    """An invalid plan: names the parameter (or pattern) and the reason."""


PLAN_KEYS = ("params", "inputs", "outputs", "reshard_after_forward", "name", "checkpoint", "buckets",
             "fsdp_shard", "preset", "mesh")
LAYOUT_KEYS = ("storage", "compute")
KeyPath = tuple[Any, ...]


@dataclass(frozen=True)
class Places:
    """Where the keys of a plan were written: ``file:line:col`` from a plan file's node marks,
    else the key path of a Python mapping (``plan['params']['h.0.x']``). ``prefix``: the path of
    this (nested) mapping inside the whole plan, e.g. ``('groups', 0, 'plan')``."""

    file: str | None = None
    marks: Mapping[KeyPath, tuple[int, int]] = field(default_factory=dict)
    prefix: KeyPath = ()

    def at(self, *keys: Any) -> Places:
        """The places of the mapping under ``keys``."""
        return Places(self.file, self.marks, self.prefix + keys)

    def where(self, keys: KeyPath) -> str:
        """``file:line:col`` of the key path (its nearest written ancestor), or ``plan[...]``."""
        full = self.prefix + tuple(keys)
        if self.file is None:
            return "plan" + "".join(f"[{k!r}]" for k in full)
        for n in range(len(full), -1, -1):
            if full[:n] in self.marks:
                line, col = self.marks[full[:n]]
                return f"{self.file}:{line}:{col}"
        return self.file

    def error(self, keys: KeyPath, message: str) -> PlanError:
        """A located plan error: ``file:line:col: error: ...`` or ``plan['a']['b']: ...``."""
        where = self.where(keys)
        return PlanError(f"{where}: error: {message}" if self.file is not None else f"{where}: {message}")


def check_keys(d: Mapping[str, Any], known: Sequence[str], places: Places, keys: KeyPath, what: str) -> None:
    """Every key of ``d`` (at ``keys``) is one of ``known``; else a located error with the near match."""
    for k in d:
        if k not in known:
            near = difflib.get_close_matches(str(k), known, n=1, cutoff=0.6)
            raise places.error((*keys, k), f"unknown key '{k}' in {what} (keys: {', '.join(known)})"
                                           + (f"; did you mean '{near[0]}'?" if near else ""))


def _key_marks(text: str) -> dict[KeyPath, tuple[int, int]]:
    """Key path → (line, column) of every mapping key and sequence item of a YAML (or JSON) text;
    empty when the text does not compose as YAML."""
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    out: dict[KeyPath, tuple[int, int]] = {}

    def walk(node: Any, path: KeyPath) -> None:
        if isinstance(node, yaml.MappingNode):
            for knode, vnode in node.value:
                key = path + (knode.value,)
                out.setdefault(key, (knode.start_mark.line + 1, knode.start_mark.column + 1))
                walk(vnode, key)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                out.setdefault(path + (i,), (item.start_mark.line + 1, item.start_mark.column + 1))
                walk(item, path + (i,))
    if root is not None:
        walk(root, ())
    return out


@dataclass
class ParamLayout:
    storage: Any
    compute: Any = None


@dataclass
class ResolvedParam:
    fqn: str
    storage: Layout
    compute: Layout
    pattern: str | None


@dataclass
class Plan:
    params: dict[str, Any] = field(default_factory=dict)      # pattern -> placements | ParamLayout
    inputs: list[Any] | dict[str, Any] = field(default_factory=list)  # per user input
    outputs: list[Any] = field(default_factory=list)           # per model output (loss: R)
    reshard_after_forward: bool | str | list[str] = True
    """Which gathered parameters the backward re-gathers (FSDP's reshard-after-forward):
    ``True`` all, ``False`` none (kept from the forward: more memory, fewer all-gathers),
    ``"blocks"`` those in repeated blocks (``h.3``, ``layers.0``) while root-level ones
    (embeddings, final norm, head) are kept, as FSDP2 does for its root module; or a list of
    FQN globs to re-gather."""
    name: str = "custom"
    checkpoint: str | None = None   # "blocks": recompute every repeated block in the backward; "blocks/K": every K-th
    buckets: list[str] | str = field(default_factory=list)
    """Manual buckets, as ``fully_shard`` groups: FQN globs, each one bucket of collectives
    (the parameters' all-gathers, their gradients' reductions); parameters matching none are
    bucketed automatically (per block). ``["wte.*", "wpe.*", "h.0.*", "h.1.*"]``. Or
    ``"auto"``: parameter gathers bucketed by the cost model instead of by block."""
    fsdp_shard: str = "even"
    """How ``fsdp``/``hsdp`` cut parameters over dp: ``"even"``, ``S(0)`` (torch.chunk rows, FSDP2's
    layout), or ``"whole"``: every parameter whole on one dp rank, ``RS(0, [0, .., n, .., 0])``
    (veScale's RaggedShard), ranks chosen to balance the bytes of each block's parameters (and of
    the whole model), so that a per-matrix optimizer (Muon) runs on each rank's matrices with no
    gather, and one bucketed all-gather per block still moves about one block."""
    preset: str | None = None
    """A preset this plan refines: its layouts for the model's parameters and inputs, with this
    plan's ``buckets``, ``reshard_after_forward`` and ``checkpoint`` (``params`` must be empty)."""
    mesh: str | None = None
    """The mesh the plan is for (``"dp=2,tp=2"``), as ``spmdc plan --search`` writes it: ``spmdc run``
    and ``spmdc plan`` take it when ``--mesh`` is not given (a different ``--mesh`` is refused)."""

    @staticmethod
    def from_dict(d: Mapping[str, Any], places: Places | None = None) -> Plan:
        """A plan from its mapping; every key is checked (top level and each parameter's layout):
        an unknown one is refused naming its place (``places``: a file's lines, else the key path
        ``plan['params']['h.0.x']``) and the near match."""
        places = places or Places()
        check_keys(d, PLAN_KEYS, places, (), "a plan")
        raw = d.get("params") or {}
        if not isinstance(raw, Mapping):
            raise places.error(("params",), f"'params' must map parameter patterns to layouts, got {raw!r}")
        params = {}
        for pat, spec in raw.items():
            if isinstance(spec, Mapping):
                check_keys(spec, LAYOUT_KEYS, places, ("params", pat), f"the layout of plan pattern '{pat}'")
                if "storage" not in spec:
                    raise places.error(("params", pat), f"the layout of plan pattern '{pat}' has no 'storage' "
                                                        "(how the parameter is kept; 'compute' is optional)")
                params[pat] = ParamLayout(spec.get("storage"), spec.get("compute"))
            else:
                params[pat] = spec
        checkpoint = d.get("checkpoint")
        try:
            checkpoint_every(checkpoint)
        except ValueError as e:
            raise PlanError(f"checkpoint: {e}") from None
        base = d.get("preset")
        if base is not None and (not isinstance(base, str) or base not in PRESETS):
            near = difflib.get_close_matches(str(base), PRESETS, n=1)
            raise PlanError(f"preset: unknown preset {base!r} (presets: {', '.join(PRESETS)})"
                            + (f"; did you mean {near[0]!r}?" if near else ""))
        if base is not None and (params or d.get("inputs") or d.get("outputs")):
            raise PlanError(f"a plan based on preset '{base}' takes its layouts from the preset: give 'buckets', "
                            "'reshard_after_forward' or 'checkpoint', not 'params', 'inputs' or 'outputs'")
        reshard = d.get("reshard_after_forward", "blocks" if base else True)
        if not (isinstance(reshard, bool) or reshard == "blocks"
                or isinstance(reshard, list) and all(isinstance(g, str) for g in reshard)):
            raise PlanError(f"reshard_after_forward: expected true, false, 'blocks' or a list of FQN globs, "
                            f"got {reshard!r}")
        buckets = d.get("buckets") or []
        if buckets != "auto" and (not isinstance(buckets, list) or not all(isinstance(g, str) for g in buckets)):
            raise PlanError(f"buckets: expected a list of FQN globs or 'auto', got {buckets!r}")
        fsdp_shard = d.get("fsdp_shard", "even")
        check_fsdp_shard(fsdp_shard, base)
        mesh = d.get("mesh")
        if mesh is not None:
            from spmdc.sharding.mesh import Mesh

            try:
                mesh = str(Mesh.parse(str(mesh)))
            except ValueError as e:
                raise places.error(("mesh",), f"mesh: {e}") from None
        return Plan(params, list(d.get("inputs") or []), list(d.get("outputs") or []),
                    reshard, str(d.get("name", base or "custom")), checkpoint,
                    buckets if buckets == "auto" else list(buckets), fsdp_shard, base, mesh)

    @staticmethod
    def load(path: str) -> Plan:
        """A plan from a ``.json`` or ``.yaml``/``.yml`` file; syntax errors name file, line and column."""
        try:
            with open(path, encoding="utf-8-sig") as f:
                text = f.read()
        except OSError as e:
            raise PlanError(f"cannot read plan '{path}': {e.strerror or e}") from None
        except UnicodeDecodeError:
            raise PlanError(f"plan '{path}' is not UTF-8 text") from None
        if path.endswith((".yaml", ".yml")):
            import yaml

            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else path
                problem = getattr(e, "problem", None) or str(e).splitlines()[0]
                raise PlanError(f"{where}: error: invalid YAML plan: {problem}") from None
        else:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                raise PlanError(f"{path}:{e.lineno}:{e.colno}: error: invalid JSON plan: {e.msg}") from None
        if not isinstance(data, Mapping):
            raise PlanError(f"{path}: a plan file must hold a mapping with 'params', 'inputs', 'outputs'")
        places = Places(path, _key_marks(text))
        if "groups" in data:   # device groups with their own plans (spmdc.sharding.device_groups)
            from spmdc.sharding.device_groups import HeteroPlan

            return HeteroPlan.from_dict(data, places)  # type: ignore[return-value]
        if "stages" in data:   # pipeline stages over device groups (spmdc.sharding.pipeline_plan)
            from spmdc.sharding.pipeline_plan import PipelinePlan

            return PipelinePlan.from_dict(data, places)  # type: ignore[return-value]
        return Plan.from_dict(data, places)

    # -- resolution --------------------------------------------------------------------------
    def reshards(self, fqn: str, fqns: Iterable[str]) -> bool:
        """Whether the backward re-gathers parameter ``fqn`` (see ``reshard_after_forward``);
        ``fqns``: every parameter (``"blocks"`` re-gathers all when the model has no blocks)."""
        r = self.reshard_after_forward
        if isinstance(r, bool):
            return r
        if r == "blocks":
            return block_of(fqn) is not None or all(block_of(f) is None for f in fqns)
        return any(fnmatch.fnmatchcase(fqn, g) for g in r)

    def bucket_of(self, fqns: Iterable[str]) -> dict[str, str]:
        """FQN → the first of ``buckets`` matching it (checking that every glob matches)."""
        fqns = list(fqns)
        out: dict[str, str] = {}
        for glob in ([] if self.buckets == "auto" else self.buckets):
            hits = [f for f in fqns if fnmatch.fnmatchcase(f, glob)]
            if not hits:
                near = difflib.get_close_matches(glob, fqns, n=3, cutoff=0.4)
                hint = f"; near matches: {', '.join(near)}" if near else ""
                raise PlanError(f"plan bucket '{glob}' matches no parameter{hint}")
            for f in hits:
                out.setdefault(f, glob)
        return out

    def resolve_params(self, mesh: Mesh, params: Mapping[str, tuple[int, ...]]) -> dict[str, ResolvedParam]:
        """FQN → storage/compute layouts, checking every pattern and shard dim."""
        rep = tuple(Replicate() for _ in mesh.axes)
        out = {fqn: ResolvedParam(fqn, rep, rep, None) for fqn in params}
        for pattern, spec in self.params.items():
            hits = [fqn for fqn in params if fnmatch.fnmatchcase(fqn, pattern)]
            if not hits:
                raise _matches_nothing(pattern, list(params))
            layout = spec if isinstance(spec, ParamLayout) else ParamLayout(spec)
            try:
                storage = to_placements(layout.storage, mesh)
                compute = to_placements(layout.compute, mesh) if layout.compute is not None else storage
            except (ValueError, TypeError) as e:
                raise PlanError(f"plan pattern '{pattern}': {e}") from None
            for what, lay in (("storage", storage), ("compute", compute)):
                if any(isinstance(p, Partial) for p in lay):
                    raise PlanError(f"parameter '{hits[0]}' (plan pattern '{pattern}'): {what} layout {_fmt(lay)} "
                                    "is Partial, which is not a layout a parameter can have: a parameter is held "
                                    "whole (R) or in pieces (S(d)); Partial values only arise inside a program")
            for fqn in hits:
                shape = params[fqn]
                for what, lay in (("storage", storage), ("compute", compute)):
                    _check_dims(fqn, shape, lay, mesh, what)
                prev = out[fqn]
                if prev.pattern is not None and (prev.storage, prev.compute) != (storage, compute):
                    raise PlanError(
                        f"parameter '{fqn}': plan patterns '{prev.pattern}' ({_fmt(prev.storage)}) and "
                        f"'{pattern}' ({_fmt(storage)}) disagree")
                out[fqn] = ResolvedParam(fqn, storage, compute, pattern)
        return out

    def resolve_inputs(self, mesh: Mesh, shapes: Sequence[tuple[int, ...]], names: Sequence[str],
                       complete: bool = True) -> list[Layout]:
        """Layouts of the user inputs. ``complete``: ``shapes`` are all the inputs there are (a
        training step), so layouts for more inputs, or for unknown names, are errors."""
        rep = tuple(Replicate() for _ in mesh.axes)
        if isinstance(self.inputs, Mapping) and complete:
            unknown = [k for k in self.inputs if k not in names]
            if unknown:
                near = difflib.get_close_matches(unknown[0], list(names), n=2, cutoff=0.4)
                raise PlanError(f"plan input '{unknown[0]}' is not an input of the model (inputs: "
                                f"{', '.join(names) or 'none'})" + (f"; did you mean '{near[0]}'?" if near else ""))
        elif complete and len(self.inputs) > len(shapes):
            raise PlanError(f"the plan lays out {len(self.inputs)} inputs but the model takes {len(shapes)} "
                            f"({', '.join(names[:len(shapes)]) or 'none'})")
        out = []
        for i, shape in enumerate(shapes):
            spec = None
            if isinstance(self.inputs, Mapping):
                spec = self.inputs.get(names[i]) if i < len(names) else None
            elif i < len(self.inputs):
                spec = self.inputs[i]
            lay = rep if spec is None else to_placements(spec, mesh)
            _check_dims(f"input #{i}" + (f" ({names[i]})" if i < len(names) else ""), shape, lay, mesh, "layout")
            out.append(lay)
        return out

    def resolve_outputs(self, mesh: Mesh, shapes: Sequence[tuple[int, ...]]) -> list[Layout | None]:
        if len(self.outputs) > len(shapes):
            raise PlanError(f"the plan lays out {len(self.outputs)} outputs but the model returns {len(shapes)}")
        out: list[Layout | None] = []
        for i, shape in enumerate(shapes):
            spec = self.outputs[i] if i < len(self.outputs) else None
            lay = None if spec is None else to_placements(spec, mesh)
            if lay is not None:
                _check_dims(f"output #{i}", shape, lay, mesh, "layout")
            out.append(lay)
        return out


def axes_sharded_by(layouts: Iterable[Layout], mesh: Mesh) -> set[str]:
    """The mesh axes over which some layout shards (``S``/``SS``/``RS``) or is partial."""
    used: set[str] = set()
    for lay in layouts:
        used.update(a for a, p in zip(mesh.axis_names, lay) if not isinstance(p, Replicate))
    return used


def check_axes_used(mesh: Mesh, used: Collection[str], plan_name: str) -> None:
    """Every mesh axis of size > 1 is used by some layout of the plan: an axis no layout shards
    (or is partial over) replicates everything over it, and its ranks would repeat each other."""
    unused = [(a, n) for a, n in mesh.axes if n > 1 and a not in used]
    if not unused:
        return
    copies = 1
    for _, n in unused:
        copies *= n
    names = " and ".join(f"'{a}' (size {n})" for a, n in unused)
    what = f"mesh axis {names} is" if len(unused) == 1 else f"mesh axes {names} are"
    raise PlanError(f"{what} used by no layout of plan '{plan_name}': {mesh.size - mesh.size // copies} of the "
                    f"{mesh.size} ranks would duplicate the others' work; drop the "
                    f"{'axis' if len(unused) == 1 else 'axes'}, or use a plan that shards over "
                    f"{'it' if len(unused) == 1 else 'them'}")


def written_layouts(plan: Plan, mesh: Mesh) -> list[Layout] | None:
    """The layouts a plan without a preset writes (parameters' storage and compute, inputs,
    outputs) on ``mesh``; None when one of them does not parse (compiling reports it)."""
    specs: list[Any] = []
    for spec in plan.params.values():
        layout = spec if isinstance(spec, ParamLayout) else ParamLayout(spec)
        specs += [layout.storage] + ([layout.compute] if layout.compute is not None else [])
    specs += list(plan.inputs.values()) if isinstance(plan.inputs, Mapping) else list(plan.inputs)
    specs += list(plan.outputs)
    try:
        return [to_placements(x, mesh) for x in specs if x is not None]
    except (ValueError, TypeError):
        return None


def check_patterns(plan: Plan, fqns: Sequence[str]) -> None:
    """Every parameter pattern of ``plan`` matches a parameter (else refused with near matches)."""
    for pattern in plan.params:
        if not any(fnmatch.fnmatchcase(f, pattern) for f in fqns):
            raise _matches_nothing(pattern, fqns)


def _matches_nothing(pattern: str, fqns: Sequence[str]) -> PlanError:
    near = difflib.get_close_matches(pattern, list(fqns), n=3, cutoff=0.4)
    hint = f"; near matches: {', '.join(near)}" if near else ""
    return PlanError(f"plan pattern '{pattern}' matches no parameter{hint}")


FSDP_SHARDS = ("even", "whole")


def check_fsdp_shard(value: Any, base: str | None) -> None:
    """``fsdp_shard`` is one of :data:`FSDP_SHARDS`, and ``"whole"`` refines ``fsdp``/``hsdp``."""
    if value not in FSDP_SHARDS:
        near = difflib.get_close_matches(str(value), FSDP_SHARDS, n=1)
        raise PlanError(f"fsdp_shard: expected 'even' (S(0) rows) or 'whole' (each parameter whole on one dp "
                        f"rank), got {value!r}" + (f"; did you mean {near[0]!r}?" if near else ""))
    if value == "whole" and base not in ("fsdp", "hsdp"):
        raise PlanError(f"fsdp_shard 'whole' places the parameters of the 'fsdp' or 'hsdp' preset; "
                        f"{'preset ' + repr(base) if base else 'a plan without a preset'} has no such choice "
                        "(write RS(0, [...]) layouts in 'params' for a plan of your own)")


def whole_owners(params: Mapping[str, tuple[int, ...]], n: int, itemsize: int = 4) -> dict[str, int]:
    """The dp rank holding each parameter whole: per block (``h.0``, ``layers.3``; root-level
    parameters one group), largest first, each to the rank with the fewest bytes of that block
    so far, ties broken by the fewest bytes overall, then the lowest rank. A block's bucketed
    gather then pads each rank's part to the largest of ``n`` nearly equal parts.

    >>> whole_owners({"a": (4, 4), "b": (4,), "c": (4,)}, 2)
    {'a': 0, 'b': 1, 'c': 1}
    """
    groups: dict[str | None, list[str]] = {}
    for fqn in params:
        groups.setdefault(block_of(fqn), []).append(fqn)
    total = [0] * n
    out: dict[str, int] = {}
    for members in groups.values():
        block = [0] * n
        for fqn in sorted(members, key=lambda f: -_numel(params[f])):
            r = min(range(n), key=lambda i: (block[i], total[i], i))
            out[fqn] = r
            block[r] += _numel(params[fqn]) * itemsize
            total[r] += _numel(params[fqn]) * itemsize
    return {fqn: out[fqn] for fqn in params}


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _fmt(lay: Layout) -> str:
    return "[" + ", ".join(map(str, lay)) + "]"


def _check_dims(what: str, shape: tuple[int, ...], lay: Layout, mesh: Mesh, kind: str) -> None:
    who = what if what.startswith(('input', 'output')) else 'parameter ' + repr(what)
    for axis, p in zip(mesh.axis_names, lay):
        d = shard_dim(p)
        if d is not None and not 0 <= d < len(shape):
            raise PlanError(f"{who}: {kind} placement {p} on mesh axis '{axis}' is out of range for a "
                            f"rank-{len(shape)} tensor of shape {list(shape)}")
    why = strided_problem(tuple(lay), tuple(shape), mesh.axis_names, mesh.shape)
    if why:
        raise PlanError(f"{who} of shape {list(shape)}: {kind} {why}")


# -- presets ------------------------------------------------------------------------------------

COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "fc1", "c_fc", "w1", "w3",
                   "query", "key", "value", "fc_in", "dense_h_to_4h")
ROW_PARALLEL = ("o_proj", "out_proj", "down_proj", "fc2", "c_proj", "w2", "fc_out", "proj", "dense_4h_to_h")
KV_PROJECTIONS = ("k_proj", "v_proj", "key", "value")
# fused q|k|v projections (three equal parts along the output features): GPT-2's c_attn, a ViT's
# packed qkv. nn.MultiheadAttention's in_proj_weight is not among them: its functional form folds
# heads into the batch dim, which costs more moved as SS than gathering (2 all-gathers per layer).
FUSED_QKV = ("c_attn", "qkv", "qkv_proj", "Wqkv")
# fused gate|up projections (two equal parts, chunked in the MLP): Phi-3's gate_up_proj
FUSED_GATE_UP = ("gate_up_proj",)
PRESETS = ("dp", "fsdp", "hsdp", "megatron", "sp", "fsdp+tp", "ep", "fsdp+ep", "fsdp+tp+ep")


def _layer_of(fqn: str) -> tuple[str, str]:
    parts = fqn.split(".")
    return (parts[-2] if len(parts) >= 2 else ""), parts[-1]


def preset(name: str, mesh: Mesh, params: Mapping[str, tuple[int, ...]],
           input_ranks: Sequence[int] = (), output_ranks: Sequence[int] = (), *,
           reshard_after_forward: bool | str | list[str] = "blocks",
           kv_heads: Mapping[str, int] | None = None, heads: Mapping[str, int] | None = None,
           transposed: Collection[str] = (), fsdp_shard: str = "even") -> Plan:
    """A built-in plan for ``mesh`` (axes ``dp`` and/or ``tp``) over the given parameters.

    * ``dp``: parameters replicated on dp, batch (input dim 0) ``S(0)``: gradients all-reduced.
    * ``fsdp``: parameters stored ``S(0)`` on dp, computed at ``R``; gradients reduce-scattered.
    * ``hsdp``: on a 2-D mesh ``rep × dp``, parameters replicated on rep and stored ``S(0)`` on
      dp (fsdp within a replica, ddp across), the batch split over both: each gradient is
      reduce-scattered over dp, then all-reduced over rep.
    * ``megatron``: ``nn.Linear`` weights column-parallel (``S(0)`` of ``[out, in]``, bias ``S(0)``)
      for q/k/v/up/gate/fc1, row-parallel (``S(1)``) for o/down/fc2/c_proj; the rest replicated.
      Grouped-query attention: ``kv_heads`` maps an attention module's path to its number of
      key/value heads; when tp does not divide it, sharding k/v would cut a head (the reshape
      to heads would then move data), so that module's k/v projections stay replicated.
      Fused q|k|v projections (GPT-2's ``c_attn``, ``qkv``, ``qkv_proj``, ``Wqkv``) are
      sharded by heads within each of the three parts, ``SS(out, 3)``,
      when their output splits in three equal parts and tp divides the module's ``heads``
      (fused gate|up ``gate_up_proj``: ``SS(out, 2)``)
      (read from the model where known); otherwise they stay replicated. ``transposed`` names
      the modules whose weight is ``[in, out]`` (HuggingFace ``Conv1D``): their column/row
      dims swap.
      Stacked expert weights of a mixture of experts (3-D ``[E, out, in]``, ``[E, in, out]`` for
      modules in ``transposed``; named as in HuggingFace and torchtitan: ``gate_up_proj``, ``up_proj``,
      ``gate_proj``, ``w1``, ``w3`` column-parallel — ``gate_up_proj`` as ``SS(out, 2)`` —,
      ``down_proj``, ``w2`` row-parallel): tensor parallelism inside every expert; the router stays
      replicated.
    * ``sp``: megatron plus sequence-parallel activations at the boundaries (input/output ``S(0)``
      of the token dim for 2-D inputs, ``S(1)`` for ``[batch, seq, ...]``).
    * ``fsdp+tp``: megatron on tp, fsdp on dp (2-D mesh); a weight whose dim 0 is
      tp-sharded is dp-sharded on dim 1, and a 1-D parameter sharded on tp stays
      replicated on dp (its gradient is all-reduced there).
    * ``ep``: expert parallelism on mesh axis ``ep``: stacked expert weights (``[E, ...]`` named as
      above) stored and computed ``S(0)`` — each rank holds and runs its ``E/ep`` experts (the
      grouped matmul's expert dim is a sum: its groups' rows, zeros elsewhere) —, the rest
      replicated, the batch split over ep. Tokens reach the experts' ranks by all-gather and the
      expert outputs come back summed (an all-reduce dispatch; the all_to_all dispatch is
      ``docs/expert-parallel.md``'s next step).
    * ``fsdp+ep`` / ``fsdp+tp+ep``: ``ep`` for the experts with fsdp over dp for every parameter
      (an expert weight on its dim 1 or 2) and, with tp, megatron inside attention and experts;
      the batch split over dp and ep.

    ``fsdp_shard="whole"`` (``fsdp``/``hsdp``): each parameter whole on one dp rank,
    ``RS(0, [0, .., n, .., 0])``, owners from :func:`whole_owners`.
    """
    if name not in PRESETS:
        near = difflib.get_close_matches(name, PRESETS, n=2)
        raise PlanError(f"unknown plan preset '{name}' (presets: {', '.join(PRESETS)})"
                        + (f"; did you mean {near[0]!r}?" if near else ""))
    axes = mesh.axis_names
    need = {"dp": ("dp",), "fsdp": ("dp",), "hsdp": ("rep", "dp"), "megatron": ("tp",), "sp": ("tp",),
            "fsdp+tp": ("dp", "tp"), "ep": ("ep",), "fsdp+ep": ("dp", "ep"), "fsdp+tp+ep": ("dp", "tp", "ep")}[name]
    missing = [a for a in need if a not in axes]
    if missing:
        raise PlanError(f"plan preset '{name}' needs mesh axis '{missing[0]}' (mesh axes: {', '.join(axes)})")
    check_fsdp_shard(fsdp_shard, name)
    dp = mesh.shape[axes.index("dp")] if "dp" in axes else 1
    owners = whole_owners({f: s for f, s in params.items() if s}, dp) if fsdp_shard == "whole" else {}
    specs: dict[str, ParamLayout] = {}
    for fqn, shape in params.items():
        storage: dict[str, Any] = {}
        compute: dict[str, Any] = {}
        if name in ("megatron", "sp", "fsdp+tp", "fsdp+tp+ep"):
            lay = _tensor_parallel(fqn, shape, mesh.shape[axes.index("tp")], kv_heads or {}, heads or {},
                                   set(transposed))
            if lay is not None:
                storage["tp"] = compute["tp"] = lay
        if "ep" in need and is_expert_weight(fqn, shape) and shape[0] % mesh.shape[axes.index("ep")] == 0:
            storage["ep"] = compute["ep"] = Shard(0)   # each rank its E/ep experts
        if name in ("fsdp", "fsdp+tp", "hsdp", "fsdp+ep", "fsdp+tp+ep") and shape:
            # dp shards dim 0, or the first dim no other axis shards: a dim sharded by two
            # axes is chunked by dp first, so gathering dp alone would not be contiguous.
            taken = {shard_dim(storage[a]) for a in ("tp", "ep") if a in storage}
            dp_dim = next((d for d in range(len(shape)) if d not in taken), None)
            if fqn in owners:
                storage["dp"] = RaggedShard(0, tuple(shape[0] if r == owners[fqn] else 0 for r in range(dp)))
                compute["dp"] = Replicate()
            elif dp_dim is not None:
                storage["dp"] = Shard(dp_dim)
                compute["dp"] = Replicate()
        if storage:
            specs[fqn] = ParamLayout(dict(storage), dict(compute) if compute != storage else None)
    def boundary(r: int) -> dict[str, Any]:
        """Layout of a model input/output of rank ``r``: batch on dp, sequence on tp for sp."""
        lay: dict[str, Any] = {}
        if "dp" in need and r >= 1:
            lay["dp"] = Shard(0)
        if "ep" in need and r >= 1:
            lay["ep"] = Shard(0)
        if "rep" in need and r >= 1:
            lay["rep"] = Shard(0)
        if name == "sp" and r >= 1:
            lay["tp"] = Shard(0 if r <= 2 else 1)
        return lay

    inputs = [boundary(r) for r in input_ranks]
    outputs = [boundary(r) for r in output_ranks]
    return Plan({_escape(k): v for k, v in specs.items()}, inputs, outputs, reshard_after_forward, name,
                fsdp_shard=fsdp_shard)


def _tensor_parallel(fqn: str, shape: tuple[int, ...], tp: int, kv_heads: Mapping[str, int],
                     heads: Mapping[str, int], transposed: set[str]) -> Placement | None:
    """Megatron's tp placement of one parameter (None: replicated)."""
    layer, leaf = _layer_of(fqn)
    module = fqn.rsplit(".", 1)[0] if "." in fqn else ""
    owner = module.rsplit(".", 1)[0] if "." in module else ""
    is_t = module in transposed
    if len(shape) == 3 and (leaf in EXPERT_COLUMN or leaf in EXPERT_ROW):
        return _expert_parallel(leaf, shape, tp, is_t)
    if leaf not in ("weight", "bias") or not shape:
        return None
    out_dim = 0 if leaf == "bias" or not is_t else len(shape) - 1
    if layer in FUSED_QKV:
        n_heads = heads.get(owner)
        if shape[out_dim] % 3 or (shape[out_dim] // 3) % tp or (n_heads is not None and n_heads % tp):
            return None   # three equal parts, each split by whole heads, or replicated
        if leaf == "weight" and len(shape) == 2 and shape[out_dim] != 3 * shape[1 - out_dim]:
            return None   # q, k, v of unequal widths (grouped-query packed projections)
        return StridedShard(out_dim, 3)
    if layer in FUSED_GATE_UP:
        return None if shape[out_dim] % (2 * tp) else StridedShard(out_dim, 2)
    n_kv = kv_heads.get(owner)
    if layer in KV_PROJECTIONS and n_kv is not None and n_kv % tp:
        return None   # fewer (or indivisible) key/value heads than ranks: replicated k/v
    if layer in COLUMN_PARALLEL:
        return Shard(out_dim)
    if layer in ROW_PARALLEL and leaf == "weight" and len(shape) == 2:
        return Shard(0 if is_t else 1)
    return None


# stacked expert weights [E, out, in] (HuggingFace's experts, torchtitan's GroupedExperts stores
# [E, in, out]: its w1/w3/w2 are transposed)
EXPERT_COLUMN = ("gate_up_proj", "up_proj", "gate_proj", "w1", "w3")
EXPERT_ROW = ("down_proj", "w2")


def is_expert_weight(fqn: str, shape: tuple[int, ...]) -> bool:
    """A stacked ``[E, ...]`` expert weight (HuggingFace's experts, torchtitan's GroupedExperts)."""
    leaf = fqn.rsplit(".", 1)[-1]
    return len(shape) == 3 and (leaf in EXPERT_COLUMN or leaf in EXPERT_ROW)


def _expert_parallel(leaf: str, shape: tuple[int, ...], tp: int, is_t: bool) -> Placement | None:
    """Megatron inside each expert of a stacked ``[E, out, in]`` (``[E, in, out]`` when ``is_t``) weight."""
    out_dim, in_dim = (2, 1) if is_t else (1, 2)
    if leaf in EXPERT_ROW:
        return None if shape[in_dim] % tp else Shard(in_dim)
    if leaf == "gate_up_proj":
        return None if shape[out_dim] % (2 * tp) else StridedShard(out_dim, 2)
    return None if shape[out_dim] % tp else Shard(out_dim)


def _escape(fqn: str) -> str:
    return fqn.replace("[", "[[]")
