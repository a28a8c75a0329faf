"""Reading and writing the layouts of values (``shard.sharding`` attributes).

A layout is a tuple with one placement per mesh axis. Op results carry
``shard.sharding = [#shard<@mesh, [...]>, ...]``; function arguments and results
carry ``shard.sharding`` in their argument/result attribute dictionaries.
"""

from __future__ import annotations

from spmdc.dialects.func import FuncOp
from spmdc.dialects.shard import SHARDING_ATTR as SHARDING
from spmdc.dialects.shard import MeshOp, Placement, ShardingAttr
from spmdc.ir.attributes import ArrayAttr
from spmdc.ir.core import BlockArgument, Operation, Value
from spmdc.ir.diagnostics import DiagnosticError

Layout = tuple[Placement, ...]


def func_mesh(module: Operation, func: FuncOp) -> MeshOp | None:
    """The mesh that ``func``'s shardings name; the module's only mesh if none is named.
    Union layouts (device groups) are refused here, named: the sharding passes do not handle
    them yet, and reading one as "no layout" would silently replicate the value."""
    from spmdc.dialects.shard.union import UnionShardingAttr

    for where, attrs in [*((f"argument #{i}", func.arg_attrs(i)) for i in range(len(func.function_type.inputs))),
                         *((f"result #{i}", func.res_attrs(i)) for i in range(len(func.function_type.results)))]:
        if isinstance(attrs.get(SHARDING), UnionShardingAttr):
            raise func.emit_error(f"{where} has a union layout {attrs[SHARDING]}: device groups are not yet "
                                  "supported by spmdc's sharding passes (only the IR, its verifier and printer)")
    names: set[str] = set()
    for i in range(len(func.function_type.inputs)):
        s = func.arg_attrs(i).get(SHARDING)
        if isinstance(s, ShardingAttr):
            names.add(s.mesh)
    for i in range(len(func.function_type.results)):
        s = func.res_attrs(i).get(SHARDING)
        if isinstance(s, ShardingAttr):
            names.add(s.mesh)
    for op in func.walk():
        for key in ("sharding", "from", "to"):
            s = op.attributes.get(key)
            if isinstance(s, ShardingAttr):
                names.add(s.mesh)
        arr = op.attributes.get(SHARDING)
        if isinstance(arr, ArrayAttr):
            names.update(s.mesh for s in arr if isinstance(s, ShardingAttr))
    meshes = [op for op in module.body.ops if isinstance(op, MeshOp)]
    if len(names) > 1:
        raise func.emit_error(f"uses several meshes ({', '.join('@' + n for n in sorted(names))}); "
                              "one mesh per function is supported")
    found = None
    if names:
        name = names.pop()
        found = next((m for m in meshes if m.sym_name == name), None)
        if found is None:
            raise func.emit_error(f"refers to unknown mesh '@{name}'")
    elif len(meshes) == 1:
        found = meshes[0]
    if found is not None and found.devices != tuple(range(found.num_devices)):
        raise func.emit_error(f"mesh '@{found.sym_name}' spans devices {list(found.devices)}: meshes over other "
                              "ranks than 0..n-1 (device groups) are not yet supported by spmdc's sharding passes")
    return found


def layout_of(v: Value) -> Layout | None:
    """The layout recorded for ``v`` (argument attribute or producer's ``shard.sharding``)."""
    if isinstance(v, BlockArgument):
        owner = v.block.parent_op
        if isinstance(owner, FuncOp):
            s = owner.arg_attrs(v.index).get(SHARDING)
            return s.placements if isinstance(s, ShardingAttr) else None
        return None
    op = v.defining_op()
    arr = op.attributes.get(SHARDING) if op is not None else None
    if isinstance(arr, ArrayAttr) and len(arr) > v.index:  # type: ignore[attr-defined]
        s = arr[v.index]  # type: ignore[attr-defined]
        return s.placements if isinstance(s, ShardingAttr) else None
    return None


def require_layout(v: Value, user: Operation) -> Layout:
    lay = layout_of(v)
    if lay is None:
        which = next((f" #{i}" for i, x in enumerate(user.operands) if x is v), "")
        raise DiagnosticError(f"'{user.name}' op operand{which} has no 'shard.sharding'; "
                              "run sharding-propagation first", user.location)
    return lay


def set_result_layouts(op: Operation, mesh: str, layouts: list[Layout]) -> None:
    op.attributes[SHARDING] = ArrayAttr(tuple(ShardingAttr(mesh, tuple(layout)) for layout in layouts))
