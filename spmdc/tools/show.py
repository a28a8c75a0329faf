"""``spmdc show FILE.mlir``: a readable summary of an IR file.

For every function: its signature size and kind (forward / training step), a table of its
parameters (FQN, shape, dtype, role), its other inputs and results, and op counts.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from spmdc.dialects.attrs import (
    BUFFER_ATTR,
    BUFFER_UPDATE_ATTR,
    GRAD_OF_ATTR,
    GROUP_ATTR,
    LOSS_ATTR,
    PARAM_ATTR,
    TIED_ATTR,
    TRAIN_STEP_ATTR,
)
from spmdc.ir.attributes import ArrayAttr, StringAttr
from spmdc.ir.types import TensorType


def _shape(t: Any) -> str:
    if isinstance(t, TensorType):
        return "[" + ", ".join(str(d) for d in t.shape) + "]"
    return str(t)


def _dtype(t: Any) -> str:
    return t.element_type if isinstance(t, TensorType) else "-"


def _elements(t: Any) -> int:
    return t.num_elements if isinstance(t, TensorType) else 0


def summarize(module: Any) -> list[dict]:
    """One dict per function: name, train_step, params, inputs, results, op_counts."""
    from spmdc.dialects.func import FuncOp

    out = []
    for op in module.body.ops:
        if not isinstance(op, FuncOp):
            continue
        grads = {}
        results = []
        for i, t in enumerate(op.function_type.results):
            a = op.res_attrs(i)
            g = a.get(GRAD_OF_ATTR)
            if isinstance(g, StringAttr):
                grads[g.value] = i
                role = f"grad of {g.value}"
            elif LOSS_ATTR in a:
                role = "loss"
            elif isinstance(a.get(BUFFER_UPDATE_ATTR), StringAttr):
                role = f"new value of {a[BUFFER_UPDATE_ATTR].value}"  # type: ignore[attr-defined]
            else:
                role = "output"
            results.append({"index": i, "role": role, "shape": _shape(t), "dtype": _dtype(t)})
        params, inputs = [], []
        for i, (arg, t) in enumerate(zip(op.args, op.function_type.inputs)):
            a = op.arg_attrs(i)
            p = a.get(PARAM_ATTR)
            if isinstance(p, StringAttr):
                tied = a.get(TIED_ATTR)
                params.append({"fqn": p.value, "shape": _shape(t), "dtype": _dtype(t), "elements": _elements(t),
                               "kind": "buffer" if BUFFER_ATTR in a else "parameter",
                               "grad": p.value in grads,
                               "tied": [x.value for x in tied] if isinstance(tied, ArrayAttr) else [],
                               "sharding": str(a["shard.sharding"]) if "shard.sharding" in a else ""})
            else:
                inputs.append({"index": i, "name": arg.name_hint or f"arg{i}", "shape": _shape(t), "dtype": _dtype(t)})
        counts = Counter(o.name for o in op.walk() if o is not op)
        out.append({"name": op.sym_name, "train_step": TRAIN_STEP_ATTR in op.attributes, "params": params,
                    "inputs": inputs, "results": results, "op_counts": dict(counts.most_common())})
    return out


def comm_table(module: Any) -> list[dict]:
    """Collectives grouped by (device group, op, mesh, axes): count and operand bytes per rank (an
    async ``comm.*_start`` counts as its collective). The group is the function's ``spmdc.group``
    (a heterogeneous plan's programs side by side), else ``-``; a ``comm.split_all_reduce`` runs
    across the groups, on the holder sets it lists."""
    from spmdc.dialects.comm import SplitAllReduceOp, collective_kind
    from spmdc.dialects.func import FuncOp

    rows: dict[tuple, dict] = {}
    funcs = [op for op in module.body.ops if isinstance(op, FuncOp)] or [module]
    for func in funcs:
        g = func.attributes.get(GROUP_ATTR) if isinstance(func, FuncOp) else None
        group = g.value if isinstance(g, StringAttr) else "-"
        for op in func.walk():
            kind = collective_kind(op)
            if kind is None:
                continue
            if isinstance(op, SplitAllReduceOp):
                mesh, axes = "(across groups)", " ".join("{" + ",".join(map(str, s)) + "}" for s in op.holder_sets)
            else:
                mesh = op.symbol_ref("mesh") or "?"
                axes = ", ".join(map(str, op.attr_value("axes", None) or [op.attr_value("axis", "?")]))
            key = (group, kind, mesh, axes)
            r = rows.setdefault(key, {"group": group, "op": kind, "mesh": mesh, "axes": axes, "count": 0, "bytes": 0})
            r["count"] += 1
            r["bytes"] += sum(v.type.num_bytes for v in op.operands if isinstance(v.type, TensorType))
    return list(rows.values())


def memory_rows(module: Any) -> list[dict]:
    """Per function: arguments' bytes, the static peak of what it allocates beyond them
    (:func:`spmdc.passes.memory.profile`), the op where the peak is reached, and the largest
    tensors alive there."""
    from spmdc.dialects.func import FuncOp
    from spmdc.ir.types import HandleType
    from spmdc.passes.memory import live_at, profile

    out = []
    for op in module.body.ops:
        if not isinstance(op, FuncOp):
            continue
        ops = list(op.body.ops)
        prof = profile(ops)
        at = ops[prof.at] if ops else None
        live = live_at(ops, prof.at) if ops else []
        biggest = sorted(live, key=lambda v: -v.type.num_bytes)[:5]
        out.append({"name": op.sym_name, "args": sum(getattr(a.type, "num_bytes", 0) for a in op.args),
                    "peak": prof.peak, "at": f"#{prof.at} {at.name}" if at is not None else "",
                    "loc": str(at.location) if at is not None else "",
                    "in_flight": sum(1 for v in live if isinstance(v.type, HandleType)),
                    "largest": [(f"%{v.name_hint or '?'}", str(v.type), v.type.num_bytes) for v in biggest]})
    return out


def kernel_summary(module: Any) -> str:
    """Kernels per step after ``fuse-kernels`` (on a copy) versus aten ops before fusion."""
    from spmdc.codegen.kernel_stats import kernel_stats
    from spmdc.passes.manager import PassManager
    from spmdc.passes.registry import parse_pipeline

    fused = module.clone()
    PassManager(parse_pipeline("fuse-kernels,dce")).run(fused)
    return kernel_stats(fused, before=module).summary()


def plain_console(**kw: Any) -> Any:
    """A rich console that prints text as given: no markup, emoji or highlighting of user text
    (a path like ``data[/tmp]/x.py`` or a name like ``factory:`` stays as written)."""
    from rich.console import Console

    console = Console(markup=False, emoji=False, highlight=False, **kw)
    if not console.is_terminal and "width" not in kw:  # files and pipes: never truncate FQNs
        console = Console(markup=False, emoji=False, highlight=False, width=160, **kw)
    return console


def show(path: str, console: Any = None, comm: bool = False, kernels: bool = False, memory: bool = False) -> int:
    from rich.table import Table
    from rich.text import Text

    from spmdc.ir.parser import parse_module
    from spmdc.ir.verifier import verify
    from spmdc.tools.errors import read_text

    console = console or plain_console()
    module = parse_module(read_text(path), path)
    verify(module)
    for fn in summarize(module):
        kind = "training step (forward + backward)" if fn["train_step"] else "forward"
        n_el = sum(p["elements"] for p in fn["params"] if p["kind"] == "parameter")
        console.print(Text(f"func @{fn['name']}", style="bold"),
                      f"— {kind}; {len(fn['params'])} parameters/buffers "
                      f"({n_el:,} parameter elements), {len(fn['inputs'])} inputs, {len(fn['results'])} results, "
                      f"{sum(fn['op_counts'].values())} ops")
        if fn["params"]:
            t = Table(title="parameters and buffers", title_justify="left")
            t.add_column("FQN", no_wrap=True)
            for col in ("shape", "dtype", "kind", "grad", "notes"):
                t.add_column(col)
            for p in fn["params"]:
                notes = []
                if p["tied"]:
                    notes.append("tied: " + ", ".join(p["tied"]))
                if p["sharding"]:
                    notes.append(p["sharding"])
                t.add_row(p["fqn"], p["shape"], p["dtype"], p["kind"], "yes" if p["grad"] else "", "; ".join(notes))
            console.print(t)
        if fn["inputs"]:
            t = Table(title="inputs", title_justify="left")
            for col in ("#", "name", "shape", "dtype"):
                t.add_column(col)
            for i in fn["inputs"]:
                t.add_row(str(i["index"]), "%" + i["name"], i["shape"], i["dtype"])
            console.print(t)
        t = Table(title="results", title_justify="left")
        for col in ("#", "role", "shape", "dtype"):
            t.add_column(col)
        for r in fn["results"]:
            if not r["role"].startswith("grad of"):
                t.add_row(str(r["index"]), r["role"], r["shape"], r["dtype"])
        n_grads = sum(1 for r in fn["results"] if r["role"].startswith("grad of"))
        if n_grads:
            t.add_row("", f"{n_grads} gradients (one per parameter marked 'grad')", "", "")
        console.print(t)
        t = Table(title="op counts", title_justify="left")
        t.add_column("op")
        t.add_column("count", justify="right")
        for name, n in fn["op_counts"].items():
            t.add_row(name, str(n))
        console.print(t)
    if comm:
        t = Table(title="collectives per step (bytes: operand bytes per rank)", title_justify="left")
        rows = comm_table(module)
        grouped = any(r["group"] != "-" for r in rows)   # device groups: one block of rows per group
        for col in (("group",) if grouped else ()) + ("op", "mesh", "axes", "count", "bytes per rank"):
            t.add_column(col, justify="right" if col in ("count", "bytes per rank") else "left")
        for r in rows:
            mesh = r["mesh"] if r["mesh"].startswith("(") else "@" + r["mesh"]
            t.add_row(*((r["group"],) if grouped else ()), r["op"], mesh, r["axes"], str(r["count"]),
                      f"{r['bytes']:,}")
        groups = sorted({r["group"] for r in rows}) if grouped else ["-"]
        for g in groups:
            mine = [r for r in rows if r["group"] == g]
            t.add_row(*((g,) if grouped else ()), "total", "", "", str(sum(r["count"] for r in mine)),
                      f"{sum(r['bytes'] for r in mine):,}", style="bold")
        console.print(t)
        if any(r["op"].startswith("comm.expert_") for r in rows):
            console.print("comm.expert_dispatch / comm.expert_combine: bytes of the whole slot buffers (the "
                          "capacity); at run time they move only the routed rows (spmdc run's table counts those)")
    if kernels:
        console.print("kernels (triton target): " + kernel_summary(module))
    if memory:
        for r in memory_rows(module):
            console.print(Text(f"memory of @{r['name']}", style="bold"),
                          f"(static liveness, per rank): arguments {r['args']:,} B; peak beyond them "
                          f"{r['peak']:,} B after op {r['at']} {r['loc']}, {r['in_flight']} collective(s) in flight")
            t = Table(title="largest tensors alive at the peak", title_justify="left")
            for col in ("value", "type", "bytes"):
                t.add_column(col, justify="right" if col == "bytes" else "left")
            for n, ty, b in r["largest"]:
                if ty.startswith("!comm.handle<"):
                    ty = f"!comm.handle<{ty.count('tensor<')} tensors> (in flight)"
                t.add_row(n, ty, f"{b:,}")
            console.print(t)
    return 0
