"""``kernel.fused`` regions → one readable ``@triton.jit`` kernel each, plus its launcher.

Three templates, chosen by the region's ``kind`` (set by ``fuse-kernels``):

* ``elementwise``: 1-D blocks over the flattened (row-major) iteration space, masked for
  any size; each input is read through index arithmetic (size-1 dims broadcast, any
  strides, so non-contiguous views need no copy);
* ``reduction``: one program per row, a loop over column blocks, fp32 accumulation;
  the elementwise prologue is recomputed in each pass (var: 2 passes, softmax: 3);
* ``matmul``: tiles ``BLOCK_M x BLOCK_N`` (batch dims on grid axis 2), a K loop with an
  fp32 accumulator (``tl.dot`` in IEEE precision), then the epilogue ops on the tile.

What the generated source looks like (``--dump-codegen``)::

    @triton.jit
    def _fused_0_kernel(x, b, out0, x_s0, x_s1, b_s0, BLOCK: tl.constexpr):
        # elementwise over [8, 16] (128 points), one program per BLOCK points
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < 128
        i0 = offs // 16
        i1 = offs % 16
        v_x = tl.load(x + i0 * x_s0 + i1 * x_s1, mask=mask)
        v_b = tl.load(b + i1 * b_s0, mask=mask)
        v_add = (v_x + v_b)
        v_relu = tl.maximum(v_add, 0.0)
        tl.store(out0 + offs, v_relu, mask=mask)


    def _fused_0(x, b):
        out0 = torch.empty((8, 16), dtype=torch.float32, device=x.device)
        _fused_0_kernel[(1,)](x, b, out0, x.stride(0), x.stride(1), b.stride(0), BLOCK=128)
        return [out0]
"""

from __future__ import annotations

from math import prod

from spmdc.codegen.names import Namer, literal, shape_literal
from spmdc.dialects.tensor.base import TRITON_HELPERS, dtype_source, triton_type
from spmdc.ir.core import Operation, Value
from spmdc.ir.types import TensorType

MAX_BLOCK = 1024
# names the templates use inside kernels; inputs and values never take them
_KERNEL_LOCALS = frozenset({"tl", "triton", "torch", *TRITON_HELPERS, "_philox_word", "offs", "mask", "row", "cols",
                            "zero", "acc",
                            "res", "c0", "k0", "mean", "d", "row_max", "denom", "pid_m", "pid_n", "pid_b", "rm", "rn",
                            "rk", "a", "b", "BLOCK", "BLOCK_M", "BLOCK_N", "BLOCK_K"}
                           | {f"{p}{i}" for p in "irb" for i in range(16)})
MATMUL_BLOCK = 32


def next_pow2(n: int) -> int:
    return 1 << max(0, (max(1, n) - 1).bit_length())


def helpers_used(chunks: list[list[str]]) -> list[str]:
    """Sources of the Triton helpers (``_tanh``) that the kernels call."""
    text = "\n".join(line for chunk in chunks for line in chunk)
    return [src for name, src in TRITON_HELPERS.items() if f"{name}(" in text]


def splat_literal(op: Operation) -> str:
    """A splat ``tensor.constant`` as a kernel scalar: an f32 literal, else a typed ``tl.full``."""
    v = op.attributes["value"].values[0]  # type: ignore[attr-defined]
    t = op.result.tensor_type
    if t.element_type == "i1":
        v = bool(v)
    elif t.is_float:
        v = float(v)
    else:
        v = int(v)
    if t.element_type == "f32":
        return literal(v)
    return f"tl.full([], {literal(v)}, {triton_type(t)})"


def triton_expr(op: Operation, ins: list[str], index: dict[int, str] | None = None,
                space: tuple[int, ...] | None = None) -> str:
    """``op`` on block values ``ins``: its declared Triton expression (``fuse-kernels`` only
    puts ops that have one into regions). Ops whose value depends on the position (counter-based
    random draws) get the kernel's index variables: ``index[d]`` for dim ``d`` of ``space``."""
    if hasattr(op, "triton_index_expr") and index is not None and space is not None:
        expr = op.triton_index_expr(ins, index, space)  # type: ignore[attr-defined]
    else:
        expr = op.triton_expr(ins) if hasattr(op, "triton_expr") else None  # type: ignore[attr-defined]
    if expr is None:
        raise op.emit_error("has no Triton lowering")
    return expr



def delinearize(space, dims, flat: str, prefix: str) -> tuple[dict[int, str], list[str]]:
    """Kernel lines recovering the index of each non-unit dim of ``space`` (row-major) from the
    flat index ``flat``: ``i1 = (offs // 4) % 8``; returns {dim: variable} and the lines."""
    index: dict[int, str] = {}
    lines: list[str] = []
    inner = 1
    for d in reversed(list(dims)):
        if space[d] != 1:
            e = flat if inner == 1 else f"({flat} // {inner})"
            if d > 0 and prod(space[:d]) > 1:
                e = f"{e} % {space[d]}"
            index[d] = f"{prefix}{d}"
            lines.append(f"    {prefix}{d} = {e}")
        inner *= space[d]
    return index, lines

class TritonEmitter:
    """Emits the kernel and launcher of one region; ``reserved``: names taken at module level."""

    def __init__(self, op: Operation, fname: str, reserved: frozenset[str]):
        self.op = op
        self.fname = fname
        self.kname = f"{fname}_kernel"
        self.names = Namer(set(reserved) | _KERNEL_LOCALS | {fname, self.kname})
        self.body = op.body
        self.ins = [self.names.fresh(a.name_hint or f"in{i}") for i, a in enumerate(self.body.args)]
        term = self.body.ops[-1]
        self.outs = [self.names.fresh(f"out{i}") for i in range(len(term.operands))]
        self.out_values = list(term.operands)
        self.strides: list[tuple[int, int]] = []      # (input #, dim) passed as kernel arguments
        self.env: dict[Value, str] = {}
        self.vnames: dict[Value, str] = {}             # stable local names across passes

    # -- public --------------------------------------------------------------------------------
    def emit(self) -> tuple[list[str], list[str]]:
        kind = self.op.attr_value("kind", "elementwise")
        if kind == "reduction":
            kernel, launch = self.reduction()
        elif kind == "matmul":
            kernel, launch = self.matmul()
        else:
            kernel, launch = self.elementwise()
        return kernel, launch

    # -- shared pieces ----------------------------------------------------------------------------
    def stride(self, i: int, d: int) -> str:
        if (i, d) not in self.strides:
            self.strides.append((i, d))
        return f"{self.ins[i]}_s{d}"

    def offset(self, i: int, space: tuple[int, ...], index: dict[int, str], full: set[int], zero: str) -> str:
        """Element offset of input ``i`` at the point whose dim ``d`` of ``space`` is ``index[d]``."""
        shape = self.body.args[i].type.shape  # type: ignore[attr-defined]
        lead = len(space) - len(shape)
        terms, covered = [], False
        for j, s in enumerate(shape):
            d = lead + j
            if s == 1 or d not in index:
                continue
            terms.append(f"{index[d]} * {self.stride(i, j)}")
            covered = covered or d in full
        if not covered:
            terms.append(zero)
        return " + ".join(terms)

    def body_lines(self, space, index, full, zero, indent: str, stop: Operation | None = None,
                   mask: str = "mask") -> list[str]:
        """Loads and the compute ops of the region up to (not including) ``stop``."""
        lines: list[str] = []
        self.env = {}
        used = {v for o in self.body.ops for v in o.operands}
        for i, a in enumerate(self.body.args):
            if a not in used:
                continue
            name = self.local(a)
            lines.append(f"{indent}{name} = tl.load({self.ins[i]} + {self.offset(i, space, index, full, zero)}, "
                         f"mask={mask})")
        for o in self.body.ops[:-1]:
            if o is stop:
                break
            if o.name == "tensor.constant":
                self.env[o.result] = splat_literal(o)
                continue
            if o.name == "tensor.matmul":
                self.env[o.result] = "acc"
                continue
            expr = triton_expr(o, [self.env[v] for v in o.operands], index, space)
            lines.append(f"{indent}{self.local(o.result)} = {expr}")
        return lines

    def local(self, v: Value) -> str:
        if v not in self.vnames:
            self.vnames[v] = self.names.fresh("v_" + (v.name_hint or "t"))
        self.env[v] = self.vnames[v]
        return self.env[v]

    def launcher(self, grid: str, consts: dict[str, int], skip: bool) -> list[str]:
        first = self.ins[0] if self.ins else None
        lines = [f"def {self.fname}({', '.join(self.ins)}):"]
        for name, v in zip(self.outs, self.out_values):
            t = v.type
            device = f", device={first}.device" if first else ""
            lines.append(f"    {name} = torch.empty({shape_literal(t.shape)}, dtype={dtype_source(t)}{device})")  # type: ignore[arg-type,attr-defined]
        strides = [f"{self.ins[i]}.stride({d})" for i, d in self.strides]
        args = ", ".join(self.ins + self.outs + strides + [f"{k}={v}" for k, v in consts.items()])
        if not skip:
            lines.append(f"    {self.kname}[{grid}]({args})")
        lines.append(f"    return [{', '.join(self.outs)}]")
        return lines

    def signature(self, consts: list[str]) -> str:
        strides = [f"{self.ins[i]}_s{d}" for i, d in self.strides]
        params = self.ins + self.outs + strides + [f"{c}: tl.constexpr" for c in consts]
        return f"def {self.kname}({', '.join(params)}):"

    # -- elementwise -----------------------------------------------------------------------------
    def elementwise(self) -> tuple[list[str], list[str]]:
        space = self.out_values[0].type.shape  # type: ignore[attr-defined]
        numel = prod(space)
        full = set(range(len(space)))
        index, idx_lines = delinearize(space, range(len(space)), "offs", "i")
        body = self.body_lines(space, index, full, "offs * 0", "    ")
        block = min(next_pow2(numel), MAX_BLOCK)
        lines = ["@triton.jit", "",
                 f"    # elementwise over {list(space)} ({numel} points), one program per BLOCK points",
                 "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", f"    mask = offs < {numel}"]
        lines += sorted(idx_lines) + body
        lines += [f"    tl.store({o} + offs, {self.env[v]}, mask=mask)" for o, v in zip(self.outs, self.out_values)]
        lines[1] = self.signature(["BLOCK"])
        grid = f"({(numel + block - 1) // block},)"
        return lines, self.launcher(grid, {"BLOCK": block}, numel == 0)

    # -- row reductions ---------------------------------------------------------------------------
    def reduction(self) -> tuple[list[str], list[str]]:
        red = next(o for o in self.body.ops if getattr(o, "row_kernel", None) is not None)
        space = red.operand(0).type.shape  # type: ignore[attr-defined]
        n = space[-1]
        rows = prod(space[:-1])
        index, idx_lines = delinearize(space[:-1], range(len(space) - 1), "row", "r")
        index[len(space) - 1] = "cols"
        full = {len(space) - 1}
        block = min(next_pow2(n), MAX_BLOCK)
        kind = red.row_kernel  # type: ignore[attr-defined]
        lines = ["@triton.jit", "",
                 f"    # {kind} over the last dim of {list(space)}: one program per row ({rows} rows), "
                 f"BLOCK columns at a time, fp32 accumulation",
                 "    row = tl.program_id(0)"] + sorted(idx_lines)

        def loop(acc_init: str | None) -> list[str]:
            out = [f"    acc = {acc_init}"] if acc_init else []
            out += [f"    for c0 in range(0, {n}, BLOCK):", "        cols = c0 + tl.arange(0, BLOCK)",
                    f"        mask = cols < {n}"]
            out += self.body_lines(space, index, full, "cols * 0", "        ", stop=red)
            return out

        x = lambda: f"{self.env[red.operand(0)]}.to(tl.float32)"  # noqa: E731
        zeros = "tl.zeros([BLOCK], dtype=tl.float32)"
        prologue_stores = [(o, v) for o, v in zip(self.outs, self.out_values) if v is not red.result]
        first = loop(zeros if kind != "max" else "tl.full([BLOCK], float('-inf'), tl.float32)")
        first += [f"        tl.store({o} + row * {n} + cols, {self.env[v]}, mask=mask)" for o, v in prologue_stores]
        if kind in ("sum", "mean", "var"):
            first.append(f"        acc += tl.where(mask, {x()}, 0.0)")
            first.append("    res = tl.sum(acc, axis=0)" + (f" / {n}" if kind in ("mean", "var") else ""))
        else:  # max, softmax, log_softmax: the row maximum first
            first.append(f"        acc = tl.maximum(acc, tl.where(mask, {x()}, float('-inf')))")
            first.append("    res = tl.max(acc, axis=0)")
        lines += first
        if kind == "var":
            corr = float(red.attr_value("correction"))  # type: ignore[arg-type]
            lines.append("    mean = res")
            lines += loop(zeros)
            lines += [f"        d = tl.where(mask, {x()} - mean, 0.0)", "        acc += d * d",
                      f"    res = tl.sum(acc, axis=0) / {float(n) - corr}"]
        if kind in ("softmax", "log_softmax"):
            lines.append("    row_max = res")
            lines += loop(zeros)
            lines += [f"        acc += tl.where(mask, tl.exp({x()} - row_max), 0.0)", "    denom = tl.sum(acc, axis=0)"]
            lines += loop(None)
            val = f"tl.exp({x()} - row_max) / denom" if kind == "softmax" else f"{x()} - row_max - tl.log(denom)"
            o = self.outs[self.out_values.index(red.result)]
            lines.append(f"        tl.store({o} + row * {n} + cols, {val}, mask=mask)")
        else:
            o = self.outs[self.out_values.index(red.result)]
            lines.append(f"    tl.store({o} + row, res)")
        lines[1] = self.signature(["BLOCK"])
        return lines, self.launcher(f"({rows},)", {"BLOCK": block}, rows == 0 or n == 0)

    # -- matmul + epilogue ------------------------------------------------------------------------
    def matmul(self) -> tuple[list[str], list[str]]:
        mm = next(o for o in self.body.ops if o.name == "tensor.matmul")
        space = mm.result.type.shape  # type: ignore[attr-defined]
        m, n = space[-2], space[-1]
        k = mm.operand(0).type.shape[-1]  # type: ignore[attr-defined]
        batch = space[:-2]
        nb = prod(batch)
        r = len(space)
        index = {r - 2: "rm[:, None]", r - 1: "rn[None, :]"}
        b_lines, inner = [], 1
        for d in reversed(range(r - 2)):
            if space[d] != 1:
                e = "pid_b" if inner == 1 else f"(pid_b // {inner})"
                if d > 0 and prod(space[:d]) > 1:
                    e = f"{e} % {space[d]}"
                index[d] = f"b{d}"
                b_lines.append(f"    b{d} = {e}")
            inner *= space[d]
        a_i, b_i = (self.body.args.index(v) for v in mm.operands)  # type: ignore[arg-type]

        def operand_base(i: int, rows: str, cols: str) -> str:
            shape = self.body.args[i].type.shape  # type: ignore[attr-defined]
            lead = r - len(shape)
            terms = [f"{index[lead + j]} * {self.stride(i, j)}" for j in range(len(shape) - 2)
                     if shape[j] != 1 and lead + j in index]
            terms += [f"{rows} * {self.stride(i, len(shape) - 2)}", f"{cols} * {self.stride(i, len(shape) - 1)}"]
            return f"{self.ins[i]} + " + " + ".join(terms)

        lines = ["@triton.jit", "",
                 f"    # matmul [{'x'.join(map(str, batch)) + ' x ' if batch else ''}{m}x{k}] @ [{k}x{n}], "
                 f"BLOCK_M x BLOCK_N tiles, fp32 accumulation, epilogue on the tile",
                 "    pid_m = tl.program_id(0)", "    pid_n = tl.program_id(1)", "    pid_b = tl.program_id(2)"]
        lines += sorted(b_lines)
        lines += ["    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
                  "    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
                  "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                  f"    for k0 in range(0, {k}, BLOCK_K):", "        rk = k0 + tl.arange(0, BLOCK_K)",
                  f"        a = tl.load({operand_base(a_i, 'rm[:, None]', 'rk[None, :]')}, "
                  f"mask=(rm[:, None] < {m}) & (rk[None, :] < {k}), other=0.0)",
                  f"        b = tl.load({operand_base(b_i, 'rk[:, None]', 'rn[None, :]')}, "
                  f"mask=(rk[:, None] < {k}) & (rn[None, :] < {n}), other=0.0)",
                  "        acc += tl.dot(a, b, input_precision=\"ieee\")",
                  f"    mask = (rm[:, None] < {m}) & (rn[None, :] < {n})",
                  "    zero = rm[:, None] * 0 + rn[None, :] * 0"]
        lines += self.epilogue_lines(space, index)
        flat = " + ".join(([f"pid_b * {m * n}"] if nb > 1 else []) + [f"rm[:, None] * {n}", "rn[None, :]"])
        lines += [f"    tl.store({o} + {flat}, {self.env[v]}, mask=mask)" for o, v in zip(self.outs, self.out_values)]
        lines[1] = self.signature(["BLOCK_M", "BLOCK_N", "BLOCK_K"])
        bm, bn, bk = (max(16, min(MATMUL_BLOCK, next_pow2(s))) for s in (m, n, k))
        grid = f"({(m + bm - 1) // bm}, {(n + bn - 1) // bn}, {nb})"
        return lines, self.launcher(grid, {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, m * n * nb == 0)

    def epilogue_lines(self, space, index) -> list[str]:
        """Loads of the epilogue's other inputs (full-tile pointers) and its ops."""
        mm = next(o for o in self.body.ops if o.name == "tensor.matmul")
        self.env = {}
        used = {v for o in self.body.ops if o is not mm for v in o.operands}
        lines = []
        for i, a in enumerate(self.body.args):
            if a in used:
                off = self.offset(i, space, index, set(), "zero")
                lines.append(f"    {self.local(a)} = tl.load({self.ins[i]} + {off}, mask=mask)")
        for o in self.body.ops[:-1]:
            if o.name == "tensor.constant":
                self.env[o.result] = splat_literal(o)
            elif o is mm:
                self.env[o.result] = "acc"
            else:
                expr = triton_expr(o, [self.env[v] for v in o.operands], index, space)
                lines.append(f"    {self.local(o.result)} = {expr}")
        return lines



def emit_triton(op: Operation, fname: str, reserved: frozenset[str]) -> tuple[list[str], list[str]]:
    """``(kernel lines, launcher lines)`` for one ``kernel.fused`` op."""
    for v in list(op.operands) + list(op.results):
        if not isinstance(v.type, TensorType):
            raise op.emit_error("has a non-tensor operand or result; no Triton kernel")
    return TritonEmitter(op, fname, reserved).emit()
