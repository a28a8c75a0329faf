"""One ``tensor`` op inside a ``kernel.fused`` region → a Triton expression on blocks.

    triton_expr(op, ["x", "b"])      # 'x + b' for tensor.add

Scalars (splat constants) become literals; every attribute reaches the source through
:func:`~spmdc.codegen.names.literal`. The pass ``fuse-kernels`` only puts ops into regions
that this table can express (``spmdc.passes.fuse_kernels.ELEMENTWISE``).
"""

from __future__ import annotations

from spmdc.codegen.names import literal
from spmdc.ir.core import Operation
from spmdc.ir.types import TensorType

TL_DTYPES = {"f64": "tl.float64", "f32": "tl.float32", "f16": "tl.float16", "bf16": "tl.bfloat16",
             "i64": "tl.int64", "i32": "tl.int32", "i16": "tl.int16", "i8": "tl.int8", "i1": "tl.int1"}

_BINARY = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
           "maximum": "tl.maximum({0}, {1})", "minimum": "tl.minimum({0}, {1})",
           "and": "({0} & {1})", "or": "({0} | {1})", "xor": "({0} ^ {1})"}
_UNARY = {"neg": "(-{0})", "exp": "tl.exp({0})", "log": "tl.log({0})", "sqrt": "tl.sqrt({0})",
          "rsqrt": "tl.rsqrt({0})", "tanh": "_tanh({0})", "sigmoid": "tl.sigmoid({0})", "sin": "tl.sin({0})",
          "cos": "tl.cos({0})", "erf": "tl.erf({0})", "abs": "tl.abs({0})",
          "silu": "({0} * tl.sigmoid({0}))"}
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}

# integer exponents a pow by a splat constant may have (as repeated products), and square roots
POW_EXPONENTS = (-4.0, -3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, 4.0)

TANH_HELPER = '''@triton.jit
def _tanh(x):
    # tanh(x) = sign(x) * (1 - e) / (1 + e), e = exp(-2|x|); a Taylor series near 0 avoids cancellation
    ax = tl.abs(x)
    e = tl.exp(-2.0 * ax)
    big = (1.0 - e) / (1.0 + e)
    x2 = x * x
    small = ax * (1.0 + x2 * (-0.3333333333333333 + x2 * (0.13333333333333333 + x2 * -0.05396825396825397)))
    t = tl.where(ax < 0.125, small, big)
    return tl.where(x < 0, -t, t)'''


def splat_literal(op: Operation) -> str:
    """A splat ``tensor.constant`` as a kernel scalar: an f32 literal, else a typed ``tl.full``."""
    v = op.attributes["value"].values[0]  # type: ignore[attr-defined]
    t = op.result.type
    if t.element_type == "i1":  # type: ignore[attr-defined]
        v = bool(v)
    elif t.is_float:  # type: ignore[attr-defined]
        v = float(v)
    else:
        v = int(v)
    if t.element_type == "f32":  # type: ignore[attr-defined]
        return literal(v)
    return f"tl.full([], {literal(v)}, {TL_DTYPES[t.element_type]})"  # type: ignore[attr-defined]


def pow_exponent(op: Operation) -> float | None:
    c = op.operand(1).defining_op()
    if c is None or c.name != "tensor.constant":
        return None
    vals = getattr(c.attributes["value"], "values", ())
    if len(vals) != 1 or float(vals[0]) not in POW_EXPONENTS:
        return None
    return float(vals[0])


def triton_expr(op: Operation, ins: list[str], const_exponent: float | None = None) -> str:
    kind = op.name.split(".", 1)[1]
    t = op.result.type
    if kind in _BINARY:
        return _BINARY[kind].format(*ins)
    if kind in _UNARY:
        return _UNARY[kind].format(*ins)
    if kind == "relu":
        return f"tl.maximum({ins[0]}, {'0.0' if t.is_float else '0'})"
    if kind == "gelu":
        x = ins[0]
        if op.attr_value("approximate", "none") == "tanh":
            return f"(0.5 * {x} * (1.0 + _tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x}))))"
        return f"(0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476)))"
    if kind == "sign":
        one, zero = ("1.0", "0.0") if t.is_float else ("1", "0")
        return f"tl.where({ins[0]} > {zero}, {one}, tl.where({ins[0]} < {zero}, -{one}, {zero})).to({TL_DTYPES[t.element_type]})"
    if kind == "clamp":
        x = ins[0]
        lo, hi = op.attr_value("min"), op.attr_value("max")
        if lo is not None:
            x = f"tl.maximum({x}, {literal(lo)})"
        if hi is not None:
            x = f"tl.minimum({x}, {literal(hi)})"
        return x
    if kind == "cast":
        x = ins[0] if ins[0].isidentifier() or ins[0].startswith("tl.full(") else f"tl.full([], {ins[0]}, tl.float32)"
        return f"{x}.to({TL_DTYPES[t.element_type]})"
    if kind == "compare":
        return f"({ins[0]} {_COMPARE[str(op.attr_value('predicate'))]} {ins[1]})"
    if kind == "select":
        return f"tl.where({ins[0]}, {ins[1]}, {ins[2]})"
    if kind == "not":
        return f"({ins[0]} == 0)" if t.element_type == "i1" else f"(~{ins[0]})"
    if kind == "pow":
        p = const_exponent if const_exponent is not None else pow_exponent(op)
        x = ins[0]
        if p is None:
            raise op.emit_error("pow needs a splat constant exponent in a Triton kernel")
        if p == 0.0:
            return f"({x} * 0.0 + 1.0)"
        if abs(p) == 0.5:
            return f"tl.sqrt({x})" if p > 0 else f"tl.rsqrt({x})"
        prod = " * ".join([x] * int(abs(p)))
        return f"({prod})" if p > 0 else f"(1.0 / ({prod}))"
    raise op.emit_error("has no Triton lowering")
