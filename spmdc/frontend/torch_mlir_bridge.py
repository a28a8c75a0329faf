"""Import an :class:`~spmdc.frontend.export.ExportedProgramInfo` into torch-mlir.

Entry points:

* :func:`import_to_torch_mlir` -> ``(module, context, mapping)``: a ``builtin.module``
  with one ``func.func @main`` whose ops are ``torch.aten.*`` on value-semantics tensors
  (``!torch.vtensor<[..],f32>``) plus the scalar/list constant ops that feed them
  (``torch.constant.int``, ``torch.prim.ListConstruct`` ...).  No torch-mlir lowering
  pipeline is run (the raw FX import is already at that level).
* :func:`iter_ops` -> yields one :class:`OpRecord` per op of the function.

How state is handled: torch-mlir's ``FxImporter.import_frozen_program`` bakes
parameters in as ``torch.vtensor.literal`` and ``import_program`` imports them lazily as
literals unless hooks are installed.  We instead import the ExportedProgram's graph with
``import_stateless_graph``: every placeholder (parameters, buffers -- persistent or not --,
lifted constants, user inputs, in ``graph_signature.input_specs`` order) becomes a function
argument, so argument ``i`` <-> ``info.inputs[i]`` and result ``j`` <-> ``info.outputs[j]``.
Both are also written onto the function as ``arg_attrs`` / ``res_attrs``
(``{spmdc.kind = "parameter", spmdc.fqn = "blocks.0.attn.c_attn.weight"}``).

Locations: every op imported from FX node ``n`` gets
``loc("<n.name>@<module path>"(<file:line callsite of the source>))`` so diagnostics name
the module; :func:`iter_ops` parses it back into ``fx_node`` / ``module_path``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from spmdc.dialects.attrs import FQN_ATTR, KIND_ATTR, NAME_ATTR, TRAIN_STEP_ATTR, USER_INDEX_ATTR
from spmdc.frontend import torch_compat
from spmdc.frontend.program import ExportedProgramInfo, InputInfo, OutputInfo

torch_compat.check_torch_mlir_version()

from torch_mlir import ir  # noqa: E402  (after the version check)
from torch_mlir.dialects import torch as torch_d  # noqa: E402
from torch_mlir.extras.fx_importer import FxImporter  # noqa: E402

__all__ = [
    "BridgeMapping",
    "OpRecord",
    "import_to_torch_mlir",
    "iter_ops",
    "torch_op_names",
    "parse_vtensor_type",
]


@dataclass
class BridgeMapping:
    func_name: str
    args: list[InputInfo]  # func argument i <-> args[i]
    results: list[OutputInfo]  # func result j <-> results[j]
    info: ExportedProgramInfo

    def arg_index(self, fqn: str) -> int:
        return self.info.input_by_fqn(fqn).index

    def result_index_of_gradient(self, fqn: str) -> int:
        fqn = self.info.tied_parameters.get(fqn, fqn)
        for r in self.results:
            if r.kind == "gradient" and r.fqn == fqn:
                return r.index
        raise KeyError(fqn)


@dataclass
class OpRecord:
    name: str  # e.g. "torch.aten.mm"
    operation: Any  # ir.Operation
    operands: list[Any]  # ir.Value
    operand_names: list[str]  # SSA names ("%arg3", "%12")
    constant_operands: dict[int, Any]  # operand index -> python value (int/float/list/None...)
    results: list[Any]
    result_names: list[str]
    result_types: list[tuple[tuple[int, ...] | None, str | None]]  # (shape, dtype)
    attributes: dict[str, Any]
    location: str
    fx_node: str | None = None
    module_path: str | None = None


# ---------------------------------------------------------------------------------


def _node_locator(ctx: Any, module_paths: dict[str, str]):
    """Location callback for the importer: NameLocs ``"<node>@<module path>"``.

    ``default`` is torch-mlir's file:line callsite for the node (None without a stack
    trace); it becomes the child location.
    """

    def locate(node: torch.fx.Node, default: Any) -> Any:
        child = default if default is not None else ir.Location.unknown(context=ctx)
        if node.op == "output":
            return ir.Location.name("output", childLoc=child, context=ctx)
        if node.op != "call_function":
            return child
        path = module_paths.get(node.name, "")
        return ir.Location.name(f"{node.name}@{path}", childLoc=child, context=ctx)

    return locate


def _graph_for_import(info: ExportedProgramInfo) -> torch.fx.Graph:
    gm = info.exported_program.graph_module
    if any(
        n.op == "call_function" and n.target is torch.ops.aten.as_strided.default
        for n in gm.graph.nodes
    ):
        # torch-mlir rewrites as_strided in place: work on a copy, keep placeholder names.
        new_gm = copy.deepcopy(gm)
        for old, new in zip(gm.graph.nodes, new_gm.graph.nodes):
            if new.op == "placeholder":
                new.name = old.name
        return new_gm.graph
    return gm.graph


def _dict_attr(ctx, entries: dict[str, str]):
    return ir.DictAttr.get({k: ir.StringAttr.get(v, context=ctx) for k, v in entries.items()},
                           context=ctx)


def import_to_torch_mlir(
    info: ExportedProgramInfo,
    *,
    func_name: str = "main",
    context: ir.Context | None = None,
    pipeline: str | None = None,
) -> tuple[ir.Module, ir.Context, BridgeMapping]:
    """Import ``info`` into a new MLIR module in torch-mlir's ``torch`` dialect.

    ``pipeline``: optional pass pipeline string run afterwards (e.g.
    ``"builtin.module(func.func(canonicalize))"``); default none.
    """
    ctx = context or ir.Context()
    torch_d.register_dialect(ctx)
    importer = FxImporter(context=ctx)
    module_paths = {name: n.module_path for name, n in info.nodes.items()}
    torch_compat.install_node_locations(importer, _node_locator(ctx, module_paths))

    graph = _graph_for_import(info)
    n_ph = sum(1 for n in graph.nodes if n.op == "placeholder")
    if n_ph != len(info.inputs):
        raise RuntimeError(f"graph has {n_ph} placeholders but info lists {len(info.inputs)} inputs")
    try:
        func_op = importer.import_stateless_graph(graph, func_name=func_name)
    except Exception as e:
        raise RuntimeError(f"torch-mlir FX import failed: {type(e).__name__}: {e}") from e

    with ctx:
        ftype = ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value)
        if len(ftype.results) != len(info.outputs):
            raise RuntimeError(
                f"imported function has {len(ftype.results)} results, info lists {len(info.outputs)}"
            )
        arg_attrs = []
        for i in info.inputs:
            d = {KIND_ATTR: i.kind, NAME_ATTR: i.name}
            if i.fqn is not None:
                d[FQN_ATTR] = i.fqn
            if i.user_index is not None:
                d[USER_INDEX_ATTR] = str(i.user_index)
            arg_attrs.append(_dict_attr(ctx, d))
        res_attrs = []
        for o in info.outputs:
            d = {KIND_ATTR: o.kind}
            if o.fqn is not None:
                d[FQN_ATTR] = o.fqn
            if o.user_index is not None:
                d[USER_INDEX_ATTR] = str(o.user_index)
            res_attrs.append(_dict_attr(ctx, d))
        func_op.attributes["arg_attrs"] = ir.ArrayAttr.get(arg_attrs)
        func_op.attributes["res_attrs"] = ir.ArrayAttr.get(res_attrs)
        if info.train:
            func_op.attributes[TRAIN_STEP_ATTR] = ir.UnitAttr.get()

    module = importer.module
    if pipeline:
        from torch_mlir.passmanager import PassManager

        with ctx:
            PassManager.parse(pipeline).run(module.operation)
    if not module.operation.verify():  # pragma: no cover - verify raises on failure
        raise RuntimeError("imported module does not verify")
    mapping = BridgeMapping(func_name=func_name, args=list(info.inputs),
                            results=list(info.outputs), info=info)
    return module, ctx, mapping


# ---------------------------------------------------------------------------------
# Walking
# ---------------------------------------------------------------------------------

_VTENSOR_RE = re.compile(r"^!torch\.(v?tensor)<\[([^\]]*)\],([^>,]+)")
_LOC_NAME_RE = re.compile(r'^loc\("([^"]*)"')
_CONSTANT_OPS = {
    "torch.constant.int",
    "torch.constant.float",
    "torch.constant.bool",
    "torch.constant.str",
    "torch.constant.none",
    "torch.constant.device",
    "torch.constant.number",
}

# Scalar conversion ops the importer emits on literals (e.g. ``full_like(x, True)``).
_SCALAR_CASTS = {"torch.aten.Int.bool": int, "torch.aten.Float.Scalar": float,
                 "torch.aten.Int.Scalar": int, "torch.aten.Bool.Scalar": bool}


def parse_vtensor_type(t: Any) -> tuple[tuple[int, ...] | None, str | None]:
    """``!torch.vtensor<[2,8],f32>`` -> ((2, 8), "f32"); non-tensors -> (None, type str)."""
    s = str(t)
    m = _VTENSOR_RE.match(s)
    if not m:
        return None, s
    dims = m.group(2).strip()
    shape = tuple(-1 if d.strip() == "?" else int(d) for d in dims.split(",")) if dims else ()
    return shape, m.group(3)


def _attr_to_py(a: Any) -> Any:
    try:
        a = a.maybe_downcast() if hasattr(a, "maybe_downcast") else a
    except Exception:  # pragma: no cover
        pass
    if isinstance(a, ir.BoolAttr):
        return bool(a.value)
    if isinstance(a, (ir.IntegerAttr, ir.FloatAttr, ir.StringAttr)):
        return a.value
    if isinstance(a, ir.TypeAttr):
        return str(a.value)
    return str(a)


def _constant_value(v: Any, _depth: int = 0) -> tuple[bool, Any]:
    """If ``v`` is produced by a constant-like op, return (True, python value)."""
    owner = v.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)):
        return False, None  # block argument
    op = owner.operation if isinstance(owner, ir.OpView) else owner
    name = op.name
    if name == "torch.constant.none":
        return True, None
    if name in _CONSTANT_OPS:
        if "value" in op.attributes:
            return True, _attr_to_py(op.attributes["value"])
        return True, None
    if name in _SCALAR_CASTS and _depth < 4 and len(op.operands) == 1:
        ok, pv = _constant_value(op.operands[0], _depth + 1)
        if ok and pv is not None:
            return True, _SCALAR_CASTS[name](pv)
        return False, None
    if name == "torch.prim.ListConstruct" and _depth < 4:
        vals = []
        for o in op.operands:
            ok, pv = _constant_value(o, _depth + 1)
            if not ok:
                return False, None
            vals.append(pv)
        return True, vals
    return False, None


def _ssa_name(v: Any, state: Any) -> str:
    try:
        return v.get_name(state)
    except Exception:  # pragma: no cover
        return v.get_name()


def _parse_loc(loc: Any) -> tuple[str, str | None, str | None]:
    s = str(loc)
    m = _LOC_NAME_RE.match(s)
    if not m or "@" not in m.group(1):
        return s, None, None
    node, _, path = m.group(1).partition("@")
    return s, node, path


def iter_ops(
    module: ir.Module,
    *,
    func_name: str | None = None,
    include_constants: bool = False,
) -> Iterator[OpRecord]:
    """Yield an :class:`OpRecord` for every op in the function body(ies), in order.

    Constant-like ops (``torch.constant.*`` and fully-constant ``torch.prim.ListConstruct``)
    are skipped unless ``include_constants``; their values show up in the consumer's
    ``constant_operands`` instead.  ``func.return`` is yielded too.
    """
    state = ir.AsmState(module.operation)
    for fop in module.body.operations:
        op = fop.operation
        if op.name != "func.func":
            continue
        sym = ir.StringAttr(op.attributes["sym_name"]).value
        if func_name is not None and sym != func_name:
            continue
        for block in op.regions[0].blocks:
            for inner in block.operations:
                o = inner.operation
                name = o.name
                if not include_constants:
                    if name in _CONSTANT_OPS:
                        continue
                    if name in _SCALAR_CASTS and _constant_value(o.results[0])[0]:
                        continue
                    if name == "torch.prim.ListConstruct" and _constant_value(o.results[0])[0]:
                        continue
                operands = list(o.operands)
                consts: dict[int, Any] = {}
                for i, v in enumerate(operands):
                    ok, pv = _constant_value(v)
                    if ok:
                        consts[i] = pv
                results = list(o.results)
                attrs = {}
                for na in o.attributes:
                    if isinstance(na, str):  # newer bindings iterate names
                        attrs[na] = _attr_to_py(o.attributes[na])
                    else:  # older bindings yield NamedAttribute
                        attrs[na.name] = _attr_to_py(na.attr)
                loc_s, node, path = _parse_loc(o.location)
                yield OpRecord(
                    name=name,
                    operation=o,
                    operands=operands,
                    operand_names=[_ssa_name(v, state) for v in operands],
                    constant_operands=consts,
                    results=results,
                    result_names=[_ssa_name(v, state) for v in results],
                    result_types=[parse_vtensor_type(r.type) for r in results],
                    attributes=attrs,
                    location=loc_s,
                    fx_node=node,
                    module_path=path,
                )


def torch_op_names(module: ir.Module) -> list[str]:
    """Sorted distinct names of the non-constant ops in ``module`` (without func.return)."""
    return sorted({r.name for r in iter_ops(module)} - {"func.return"})
