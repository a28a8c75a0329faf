"""Dedicated emitters: one IR op → one torch/aten expression.

An emitter takes the op and the Python names of its operands and returns the
expression of its single result, or ``None`` to decline (the op then goes through the
generic reference fallback). Every attribute reaches the source through
:func:`~spmdc.codegen.names.literal`; operand names are already safe identifiers.

    EMITTERS["tensor.matmul"](op, ["x", "w"])      # 'torch.matmul(x, w)'
"""

from __future__ import annotations

from typing import Callable

from spmdc.codegen.names import literal, shape_literal
from spmdc.dialects.tensor.base import TORCH_DTYPES
from spmdc.ir.core import Operation
from spmdc.ir.types import TensorType

OpEmitter = Callable[[Operation, list[str]], "str | None"]
EMITTERS: dict[str, OpEmitter] = {}

_PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge")


def dtype(t: TensorType) -> str:
    return "torch." + TORCH_DTYPES[t.element_type]


def _ints(op: Operation, key: str) -> list[int]:
    return [int(v) for v in op.attr_value(key)]  # type: ignore[union-attr]


def _int(op: Operation, key: str) -> int:
    return int(op.attr_value(key))  # type: ignore[arg-type]


def _call(fn: str, arity: int | None = None) -> OpEmitter:
    return lambda op, ins: f"{fn}({', '.join(ins)})" if arity in (None, len(ins)) else None


for _n, _fn in {"add": "torch.add", "sub": "torch.sub", "mul": "torch.mul", "maximum": "torch.maximum",
                "minimum": "torch.minimum", "matmul": "torch.matmul", "select": "torch.where",
                "and": "torch.bitwise_and", "or": "torch.bitwise_or", "xor": "torch.bitwise_xor"}.items():
    EMITTERS["tensor." + _n] = _call(_fn, 3 if _n == "select" else 2)
for _n, _fn in {"neg": "torch.neg", "exp": "torch.exp", "log": "torch.log", "sqrt": "torch.sqrt",
                "rsqrt": "torch.rsqrt", "tanh": "torch.tanh", "relu": "torch.relu", "sigmoid": "torch.sigmoid",
                "sin": "torch.sin", "cos": "torch.cos", "erf": "torch.erf", "abs": "torch.abs",
                "sign": "torch.sign", "silu": "torch.nn.functional.silu", "not": "torch.bitwise_not"}.items():
    EMITTERS["tensor." + _n] = _call(_fn, 1)


def emitter(name: str) -> Callable[[OpEmitter], OpEmitter]:
    def deco(fn: OpEmitter) -> OpEmitter:
        EMITTERS[name] = fn
        return fn
    return deco


@emitter("tensor.div")
def _div(op, ins):
    if op.operand(0).type.is_float:
        return f"torch.div({ins[0]}, {ins[1]})"
    return f"torch.div({ins[0]}, {ins[1]}, rounding_mode='trunc')"


@emitter("tensor.pow")
def _pow(op, ins):
    if op.operand(1).type.rank == 0:  # the Tensor_Scalar kernel, as the reference picks
        return f"torch.pow({ins[0]}, {ins[1]}.item())"
    return f"torch.pow({ins[0]}, {ins[1]})"


@emitter("tensor.gelu")
def _gelu(op, ins):
    return f"torch.nn.functional.gelu({ins[0]}, approximate={literal(str(op.attr_value('approximate', 'none')))})"


@emitter("tensor.clamp")
def _clamp(op, ins):
    return f"torch.clamp({ins[0]}, {literal(op.attr_value('min'))}, {literal(op.attr_value('max'))})"


@emitter("tensor.cast")
def _cast(op, ins):
    return f"{ins[0]}.to({dtype(op.result.type)})"


@emitter("tensor.compare")
def _compare(op, ins):
    pred = op.attr_value("predicate")
    return f"torch.{pred}({ins[0]}, {ins[1]})" if pred in _PREDICATES else None


def _reduce(fn: str, keep_dtype: bool = False) -> OpEmitter:
    def emit(op, ins):
        dims = _ints(op, "dims")
        if not dims:
            return f"{ins[0]}.clone()"
        extra = f", dtype={dtype(op.operand(0).type)}" if keep_dtype else ""
        return f"{fn}({ins[0]}, dim={literal(dims)}, keepdim={literal(bool(op.attr_value('keepdim', False)))}{extra})"
    return emit


EMITTERS["tensor.sum"] = _reduce("torch.sum", keep_dtype=True)
EMITTERS["tensor.max"] = _reduce("torch.amax")
EMITTERS["tensor.mean"] = _reduce("torch.mean")


@emitter("tensor.var")
def _var(op, ins):
    dims, keep = _ints(op, "dims"), bool(op.attr_value("keepdim", False))
    if not dims:  # torch.var(dim=[]) reduces everything; the op reduces nothing: use the reference
        return None
    return (f"torch.var({ins[0]}, dim={literal(dims)}, correction={literal(op.attr_value('correction'))}, "
            f"keepdim={literal(keep)})")


for _n, _fn in {"softmax": "torch.softmax", "log_softmax": "torch.log_softmax"}.items():
    EMITTERS["tensor." + _n] = (lambda fn: lambda op, ins: f"{fn}({ins[0]}, {_int(op, 'dim')})")(_fn)


@emitter("tensor.cumsum")
def _cumsum(op, ins):  # keep the element type (torch widens integer scans to int64)
    return f"torch.cumsum({ins[0]}, {_int(op, 'dim')}, dtype={ins[0]}.dtype)"


@emitter("tensor.permute")
def _permute(op, ins):
    return f"{ins[0]}.permute({', '.join(str(p) for p in _ints(op, 'perm'))})"


@emitter("tensor.reshape")
def _reshape(op, ins):
    return f"{ins[0]}.reshape({shape_literal(op.result.type.shape)})"


@emitter("tensor.broadcast")
def _broadcast(op, ins):
    return f"{ins[0]}.expand({shape_literal(op.result.type.shape)})"


@emitter("tensor.slice")
def _slice(op, ins):
    dim, start, end, step = (_int(op, k) for k in ("dim", "start", "end", "step"))
    idx = [":"] * dim + [f"{start}:{end}" + (f":{step}" if step != 1 else "")]
    return f"{ins[0]}[{', '.join(idx)}]"


@emitter("tensor.insert_slice")
def _insert_slice(op, ins):
    dim, start, end, step = (_int(op, k) for k in ("dim", "start", "end", "step"))
    return f"torch.slice_scatter({ins[0]}, {ins[1]}, {dim}, {start}, {end}, {step})"


@emitter("tensor.reverse")
def _reverse(op, ins):
    return f"torch.flip({ins[0]}, {literal(_ints(op, 'dims'))})"


@emitter("tensor.concat")
def _concat(op, ins):
    return f"torch.cat([{', '.join(ins)}], dim={_int(op, 'dim')})"


@emitter("tensor.pad")
def _pad(op, ins):
    pad: list[int] = []
    for lo, hi in reversed(list(zip(_ints(op, "low"), _ints(op, "high")))):
        pad += [lo, hi]
    return f"torch.nn.functional.pad({ins[0]}, {literal(pad)}, value={literal(op.attr_value('value'))})"


@emitter("tensor.embedding")
def _embedding(op, ins):
    return f"torch.nn.functional.embedding({ins[1]}, {ins[0]})"


@emitter("tensor.gather")
def _gather(op, ins):
    return f"torch.gather({ins[0]}, {_int(op, 'dim')}, {ins[1]})"


@emitter("tensor.scatter")
def _scatter(op, ins):
    fn = "scatter_add" if op.attr_value("reduce") == "add" else "scatter"
    return f"{ins[0]}.{fn}({_int(op, 'dim')}, {ins[1]}, {ins[2]})"


def _tuple(names: list[str]) -> str:
    return f"({names[0]},)" if len(names) == 1 else f"({', '.join(names)})"


@emitter("tensor.index")
def _index(op, ins):
    return f"{ins[0]}[{', '.join(ins[1:])}]"


@emitter("tensor.index_put")
def _index_put(op, ins):
    acc = literal(bool(op.attr_value("accumulate", False)))
    return f"{ins[0]}.index_put({_tuple(ins[1:-1])}, {ins[-1]}, accumulate={acc})"


# -- collectives: the runtime's Collectives methods, every argument a literal ---------------------

@emitter("comm.all_reduce")
def _all_reduce(op, ins):
    axes = [str(a) for a in op.attr_value("axes")]  # type: ignore[union-attr]
    return f"comm.all_reduce({ins[0]}, {literal(axes)}, {literal(str(op.attr_value('op')))})"


@emitter("comm.all_gather")
def _all_gather(op, ins):
    return (f"comm.all_gather({ins[0]}, {literal(str(op.attr_value('axis')))}, {_int(op, 'dim')}, "
            f"{shape_literal(op.result.type.shape)})")


@emitter("comm.all_slice")
def _all_slice(op, ins):
    return f"comm.all_slice({ins[0]}, {literal(str(op.attr_value('axis')))}, {_int(op, 'dim')})"


@emitter("comm.reduce_scatter")
def _reduce_scatter(op, ins):
    return (f"comm.reduce_scatter({ins[0]}, {literal(str(op.attr_value('axis')))}, {_int(op, 'dim')}, "
            f"{literal(str(op.attr_value('op')))})")


MULTI_RESULT = frozenset({"comm.all_gather_bucket", "comm.reduce_scatter_bucket"})


@emitter("comm.all_gather_bucket")
def _all_gather_bucket(op, ins):
    shapes = "[" + ", ".join(shape_literal(r.type.shape) for r in op.results) + "]"
    return (f"comm.all_gather_bucket([{', '.join(ins)}], {literal(str(op.attr_value('axis')))}, "
            f"{literal(_ints(op, 'dims'))}, {shapes})")


@emitter("comm.reduce_scatter_bucket")
def _reduce_scatter_bucket(op, ins):
    return (f"comm.reduce_scatter_bucket([{', '.join(ins)}], {literal(str(op.attr_value('axis')))}, "
            f"{literal(_ints(op, 'dims'))}, {literal(str(op.attr_value('op')))})")


@emitter("comm.all_to_all")
def _all_to_all(op, ins):
    return (f"comm.all_to_all({ins[0]}, {literal(str(op.attr_value('axis')))}, {_int(op, 'split_dim')}, "
            f"{_int(op, 'concat_dim')}, {shape_literal(op.result.type.shape)})")
