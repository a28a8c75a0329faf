"""torch-mlir ``torch`` dialect -> spmdc ``tensor`` dialect.

Input: the module :func:`~spmdc.frontend.torch_mlir_bridge.import_to_torch_mlir` made from an
:class:`~spmdc.frontend.export.ExportedProgramInfo`. Output: a ``builtin.module`` holding
``func.func @main`` whose

* arguments are the parameters and buffers (``{spmdc.param = "<fqn>"}``; buffers also carry
  ``spmdc.buffer``; a tied weight lists its other names in ``spmdc.tied``), then the user
  inputs (plain, named after the graph placeholders);
* results are the model outputs (plain), the loss (``{spmdc.loss}``) and the gradients
  (``{spmdc.grad_of = "<fqn>"}``); a training step carries ``attributes {spmdc.train_step}``;
* ops carry ``loc("<module path>/aten.<op>")`` and results are named after FX nodes::

    %mm = tensor.matmul %x, %permute : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>

Each torch op is handled by one entry of :func:`spmdc.frontend.aten.handler_table`; an op
without an entry raises :class:`UnsupportedOpError` naming the op and its module.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Any

from spmdc.dialects.attrs import (
    BUFFER_ATTR,
    BUFFER_UPDATE_ATTR,
    CAPTURE_LOC,
    GRAD_OF_ATTR,
    GRAD_OF_INPUT_ATTR,
    LOSS_ATTR,
    PARAM_ATTR,
    RECOMPUTE_ATTR,
    TIED_ATTR,
    TRAIN_STEP_ATTR,
)
from spmdc.frontend.aten import TranslationError, UnsupportedOpError, UnsupportedOpsError, handler_table
from spmdc.frontend.aten.base import Emitter, Unavailable, Uninitialized, torch_op_label
from spmdc.ir.attributes import ArrayAttr, DenseAttr, DictAttr, IntegerAttr, StringAttr, UnitAttr
from spmdc.ir.core import InferError, Value
from spmdc.ir.location import NameLoc
from spmdc.ir.printer import _HINT_OK
from spmdc.ir.rewriter import Builder
from spmdc.ir.types import TensorType, element_type_of_torch

__all__ = ["TranslationStats", "UnsupportedOpError", "check_supported", "fx_op_name", "supported_ops",
           "translate"]


@dataclass
class TranslationStats:
    seconds: float = 0.0
    torch_ops: int = 0
    spmdc_ops: int = 0
    by_torch_op: dict[str, int] = field(default_factory=dict)


def supported_ops() -> list[str]:
    """torch-dialect op names the frontend translates (``torch.aten.mm`` ...)."""
    return sorted(handler_table())


def fx_op_name(target: Any) -> str:
    """torch-mlir's name for an FX call target: ``aten.add.Tensor`` -> ``torch.aten.add.Tensor``."""
    from spmdc.frontend.torch_compat import op_overload_parts

    parts = op_overload_parts(target)
    if parts is None:
        return f"torch.operator {getattr(target, '__name__', str(target))}"
    ns, packet, overload = parts
    return f"torch.{ns}.{packet}" + ("" if overload == "default" else f".{overload}")


def _describe(info: Any, fx_node: str | None) -> dict:
    node = info.nodes.get(fx_node) if fx_node else None
    source = None
    if node is not None and node.stack_trace:
        lines = [ln.strip() for ln in node.stack_trace.strip().splitlines() if ln.strip()]
        if len(lines) >= 2 and lines[-2].startswith("File "):
            source = f"{lines[-2]}: {lines[-1]}"
        elif lines:
            source = lines[-1]
    return {"fx_node": fx_node, "module_type": node.module_type if node else None, "source": source}


def check_supported(info: Any) -> None:
    """Fail fast, before torch-mlir runs, on graph ops without a handler: all of them in one
    error (each distinct op and module path once, with its source line)."""
    import operator

    table = handler_table()
    found: dict[tuple[str, str | None], UnsupportedOpError] = {}
    sized_at_run_time = False
    for n in info.graph_module.graph.nodes:
        if n.op != "call_function" or n.target is operator.getitem:
            continue
        name = fx_op_name(n.target)
        if name not in table:
            node = info.nodes.get(n.name)
            label = torch_op_label(name) if name.startswith("torch.") else str(n.target)
            path = node.module_path if node else None
            reason = RUN_TIME_SIZED.get(label.removesuffix(".default")) or _complex_reason(label)
            sized_at_run_time |= reason is not None
            found.setdefault((label, path), UnsupportedOpError(label, path, reason=reason, **_describe(info, n.name)))
    if sized_at_run_time:   # the symbolic-size bookkeeping around such an op is not worth listing
        found = {k: v for k, v in found.items() if not _symbolic_bookkeeping(k[0])}
    if len(found) == 1:
        raise next(iter(found.values()))
    if found:
        raise UnsupportedOpsError(list(found.values()))


# ops whose result size is known only at run time (torch.export gives them an unbacked size)
RUN_TIME_SIZED = {
    "aten.bincount": ("has a result length of max(input) + 1, known only at run time; for counts per expert use "
                      "torch.histc(ids.float(), bins=E, min=0, max=E - 1) or F.one_hot(ids, E).sum(0), whose size "
                      "is static"),
    "aten.nonzero": "has a result length (the number of non-zero elements) known only at run time",
    "aten.masked_select": "has a result length (the number of true mask elements) known only at run time",
    "aten._unique2": "has a result length (the number of distinct values) known only at run time",
    "aten.unique_consecutive": "has a result length (the number of runs) known only at run time",
    "aten.repeat_interleave.Tensor": "has a result length (the sum of the repeats) known only at run time",
}


def _complex_reason(label: str) -> str | None:
    """FFTs and complex views: spmdc's element types are real."""
    if label.startswith(("aten.fft_", "aten._fft_", "aten.view_as_complex", "aten.view_as_real", "aten.complex")):
        return "computes with complex numbers; spmdc's element types are real, so it is refused"
    return None


def _symbolic_bookkeeping(label: str) -> bool:
    return label.startswith(("operator ", "<built-in", "aten.sym_", "aten._assert_", "aten.sym_constrain"))


def _tensor_type(shape: tuple[int, ...], dtype: Any) -> TensorType:
    elt = element_type_of_torch(dtype)
    if elt is None:
        raise TranslationError(f"unsupported element type {dtype}")
    return TensorType(tuple(shape), elt)


def translate(torch_module: Any, info: Any, *, func_name: str = "main",
              stats: TranslationStats | None = None, user_names: dict[int, str] | None = None):
    """Translate the imported torch-dialect module; returns the (unverified) spmdc module.

    ``user_names`` (user input index -> name) overrides the placeholder names of user inputs.
    """
    t0 = time.perf_counter()
    stats = stats if stats is not None else TranslationStats()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # building thousands of small objects: collector passes cost more than the work
    try:
        module = _translate(torch_module, info, func_name, stats, user_names)
    finally:
        if gc_was_enabled:
            gc.enable()
    stats.seconds += time.perf_counter() - t0
    return module


def _translate(torch_module: Any, info: Any, func_name: str, stats: TranslationStats,
               user_names: dict[int, str] | None):
    from spmdc.dialects.func import FuncOp, ReturnOp
    from spmdc.dialects.tensor import ConstantOp
    from spmdc.frontend.torch_mlir_bridge import iter_ops
    from spmdc.ir.module import ModuleOp

    aliases: dict[str, list[str]] = {}
    for alias, canon in info.tied_parameters.items():
        aliases.setdefault(canon, []).append(alias)

    # -- signature ---------------------------------------------------------------------
    arg_types, arg_attrs, arg_names, arg_slots = [], [], [], []
    for inp in info.inputs:
        if inp.kind == "constant":
            continue  # lifted constants are values, not state: they become tensor.constant
        arg_types.append(_tensor_type(inp.shape, inp.dtype))
        attrs: dict[str, Any] = {}
        if inp.kind in ("parameter", "buffer"):
            attrs[PARAM_ATTR] = StringAttr(inp.fqn)
            if inp.kind == "buffer":
                attrs[BUFFER_ATTR] = UnitAttr()
            if inp.fqn in aliases:
                attrs[TIED_ATTR] = ArrayAttr(tuple(StringAttr(a) for a in sorted(aliases[inp.fqn])))
            name = inp.fqn if _HINT_OK.match(inp.fqn) else inp.name
        else:
            name = (user_names or {}).get(inp.user_index, inp.name)
        arg_attrs.append(attrs)
        arg_names.append(name)
        arg_slots.append(inp.index)

    func = FuncOp.build(func_name, arg_types, [], location=NameLoc(func_name))
    if any(arg_attrs):  # one ArrayAttr at once (set_arg_attr per entry is quadratic)
        func.attributes["arg_attrs"] = ArrayAttr(tuple(DictAttr.of(d) for d in arg_attrs))
    module = ModuleOp.build_empty(location=NameLoc(CAPTURE_LOC))
    module.body.append(func)
    if info.train:
        func.set_attr(TRAIN_STEP_ATTR, UnitAttr())
    builder = Builder.at_end(func.body)
    env: dict[str, Any] = {}
    # torch-mlir names its function arguments %arg0.. in placeholder order
    for slot, (arg, name) in zip(arg_slots, zip(func.args, arg_names)):
        arg.name_hint = name
        env[f"%arg{slot}"] = arg
    e = Emitter(builder, env, lambda rec: _describe(info, rec.fx_node),
                lambda name: info.nodes.get(name) if name else None)
    for inp in info.inputs:
        if inp.kind == "constant":
            value = info.state[inp.fqn]
            t = _tensor_type(tuple(value.shape), value.dtype)
            c = builder.create(ConstantOp, [], {"value": DenseAttr(t, tuple(value.flatten().tolist()))},
                               location=NameLoc(inp.fqn))
            c.result.name_hint = inp.name
            env[f"%arg{inp.index}"] = c.result

    # -- body --------------------------------------------------------------------------
    table = handler_table()
    returned: list[Value] = []
    for rec in iter_ops(torch_module, func_name=func_name):
        if rec.name == "func.return":
            returned = [e.as_value(env[n]) for n in rec.operand_names]
            break
        if rec.name == "torch.operator" and isinstance(rec.attributes.get("name"), str):
            rec.name = rec.attributes["name"]   # an op torch-mlir has no class for: its name says which
        stats.torch_ops += 1
        stats.by_torch_op[rec.name] = stats.by_torch_op.get(rec.name, 0) + 1
        handler = table.get(rec.name)
        e.begin(rec)
        if handler is None:
            raise e.unsupported("has no translation to spmdc's tensor dialect")
        try:
            results = handler(e)
        except InferError as err:   # operands no op of the dialect takes (e.g. bf16 @ f32): name the op
            raise e.unsupported(str(err)) from err
        if len(results) != len(rec.results):
            raise TranslationError(f"handler of '{rec.name}' gave {len(results)} results for "
                                   f"{len(rec.results)}", e.loc)
        created = {id(op) for op in e.created}
        for j, (name, value) in enumerate(zip(rec.result_names, results)):
            _check_and_name(e, j, value, created, rec)
            env[name] = value
        if rec.fx_node:  # helper ops (casts, broadcasts, ...) read as "<node>.<op>"
            for op in e.created:
                if op.results and op.results[0].name_hint is None and not e.is_cached_constant(op.results[0]):
                    op.results[0].name_hint = f"{rec.fx_node}.{op.name.split('.', 1)[1]}"
        recompute = getattr(info.nodes.get(rec.fx_node) if rec.fx_node else None, "recompute", None)
        if recompute is not None:   # a checkpointed op recomputed for the backward: CSE must keep it apart
            for op in e.created:
                if op.results and not e.is_cached_constant(op.results[0]):
                    op.attributes[RECOMPUTE_ATTR] = IntegerAttr(recompute)
        stats.spmdc_ops += len(e.created)

    # -- results -----------------------------------------------------------------------
    res_attrs = []
    for out in info.outputs:
        attrs = {}
        if out.kind == "loss":
            attrs[LOSS_ATTR] = UnitAttr()
        elif out.kind == "gradient":
            attrs[GRAD_OF_ATTR] = StringAttr(out.fqn)
        elif out.kind == "input_gradient":
            attrs[GRAD_OF_INPUT_ATTR] = IntegerAttr(out.user_index)
        elif out.kind == "buffer_mutation":
            attrs[BUFFER_UPDATE_ATTR] = StringAttr(out.fqn)
        elif out.kind == "user_input_mutation":
            raise UnsupportedOpError("in-place update of a model input", None,
                                     reason=f"(input '{out.fqn}') cannot be expressed in a functional program")
        res_attrs.append(attrs)
    if len(returned) != len(info.outputs):
        raise TranslationError(f"the graph returns {len(returned)} values, expected {len(info.outputs)}")
    from spmdc.ir.types import FunctionType

    func.set_function_type(FunctionType(tuple(arg_types), tuple(v.type for v in returned)))
    if any(res_attrs):
        func.attributes["res_attrs"] = ArrayAttr(tuple(DictAttr.of(d) for d in res_attrs))
    builder.create(ReturnOp, returned, result_types=[], location=NameLoc("output"))
    return module


def _check_and_name(e: Emitter, j: int, value: Any, created: set[int], rec: Any) -> None:
    base = rec.fx_node
    items = value if isinstance(value, list) else [value]
    for k, v in enumerate(items):
        if isinstance(v, (Uninitialized, Unavailable)) or v is None or not isinstance(v, Value):
            continue
        if not isinstance(value, list):
            want = e.out_type(j)
            if v.type != want:
                raise TranslationError(f"translation of '{rec.name}' gives {v.type}, torch says {want}", e.loc)
        owner = v.defining_op()
        shared = owner is not None and owner.name == "tensor.constant" and e.is_cached_constant(v)
        if base and owner is not None and id(owner) in created and v.name_hint is None and not shared:
            suffix = f"_{k}" if isinstance(value, list) else (f"_{j}" if len(rec.results) > 1 else "")
            v.name_hint = base + suffix
