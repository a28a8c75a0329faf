"""Random numbers that are the same on every rank count: ``tensor.random`` and ``tensor.rng_seed``.

Two modes, one op::

    // eager mode: the numbers torch's default generator gives on one device
    %m = tensor.random {distribution = "bernoulli", p = 0.9} : tensor<8x16xf32>
    // after partition (rank 1 of S(0) over 2 ranks): draw the global tensor, keep the piece
    %m = tensor.random {distribution = "bernoulli", global_shape = [8, 16], offset = [4, 0], p = 0.9}
           : tensor<4x16xf32>

    // counter mode (``philox-rng`` pass): Philox-4x32-10 keyed by a per-step seed
    %s = tensor.rng_seed : tensor<i64>
    %m = tensor.random %s {distribution = "bernoulli", p = 0.9, stream = 0}
           : (tensor<i64>) -> tensor<8x16xf32>

Distributions and their attributes: ``uniform`` (``low``, ``high``: ``torch.rand``,
``uniform_``), ``normal`` (``mean``, ``std``: ``torch.randn``, ``normal_``), ``bernoulli``
(``p``, the probability of 1: ``bernoulli_(p)``, dropout masks), ``randint`` (``low``,
``high``, integers in ``[low, high)``: ``torch.randint``, ``random_``).

**Eager mode** reproduces single-device PyTorch bitwise: every rank draws the *global*
tensor from torch's default generator with the same call eager PyTorch makes
(``torch.empty(shape, dtype).bernoulli_(p)``), in program order, and keeps its piece. All
ranks' generators therefore stay equal to the single-device generator. The cost: each rank
draws (and briefly holds) the whole tensor, not its piece.

**Counter mode** draws only the piece: element ``i`` (its row-major index in the *global*
tensor) gets Philox-4x32-10 with key = the step's seed (``tensor.rng_seed`` draws one 63-bit
number from torch's generator per program run) and counter ``(i mod 2^32, i >> 32, stream,
0)``, the first output word made a float as ``tl.rand`` does. The numbers do not depend on
the mesh, the plan or the rank, only on the seed, the op's ``stream`` and the global index;
Triton kernels compute the same bits (``tl.philox``: bernoulli, uniform and randint draws are
elementwise ops in fused kernels). They are not the numbers eager PyTorch draws. ``normal``
uses Box-Muller on the first two words (a torch call on every target).

Sharding rule: every dim is a free factor (a piece is computed where it is needed); the
result is never ``Partial``. Random ops are not ``Pure``: they are never merged, removed or
moved past each other (the generator's order is part of the semantics).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spmdc.dialects.pyexpr import literal, shape_literal
from spmdc.dialects.shard.rules import OpShardingRule, RuleBuilder
from spmdc.dialects.tensor.base import TRITON_HELPERS, TensorOp, dtype_source, triton_type
from spmdc.ir.attributes import ArrayAttr, FloatAttr, IntegerAttr, StringAttr
from spmdc.ir.types import TensorType

DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "uniform": ("low", "high"),
    "normal": ("mean", "std"),
    "bernoulli": ("p",),
    "randint": ("low", "high"),
}
_TRITON_DISTRIBUTIONS = ("bernoulli", "uniform", "randint")
# the in-place torch method eager PyTorch calls for each distribution
_EAGER_METHOD = {"uniform": "uniform_", "normal": "normal_", "bernoulli": "bernoulli_", "randint": "random_"}


def _ints(a: Any) -> list[int] | None:
    if not isinstance(a, ArrayAttr) or not all(isinstance(x, IntegerAttr) for x in a.values):
        return None
    return [x.value for x in a.values]  # type: ignore[union-attr]


class RandomOp(TensorOp):
    """Random numbers of the result's type; see the module doc for the two modes.

    ``%m = tensor.random {distribution = "bernoulli", p = 0.9} : tensor<8x16xf32>``
    """

    name = "tensor.random"
    traits = frozenset({"Random"})
    required_attrs = {"distribution": StringAttr}
    optional_attrs = {"p": (FloatAttr, IntegerAttr), "low": (FloatAttr, IntegerAttr),
                      "high": (FloatAttr, IntegerAttr), "mean": (FloatAttr, IntegerAttr),
                      "std": (FloatAttr, IntegerAttr), "stream": IntegerAttr,
                      "global_shape": ArrayAttr, "offset": ArrayAttr}
    kernel = "none"

    # -- accessors ---------------------------------------------------------------------
    @property
    def distribution(self) -> str:
        return self.attributes["distribution"].value  # type: ignore[attr-defined]

    @property
    def params(self) -> tuple[float | int, ...]:
        return tuple(self.attributes[k].value for k in DISTRIBUTIONS[self.distribution])  # type: ignore[attr-defined]

    @property
    def is_counter_based(self) -> bool:
        return len(self.operands) == 1

    @property
    def global_shape(self) -> tuple[int, ...]:
        g = _ints(self.attributes.get("global_shape"))
        return tuple(g) if g is not None else self.result.tensor_type.shape

    @property
    def offset(self) -> tuple[int, ...]:
        o = _ints(self.attributes.get("offset"))
        return tuple(o) if o is not None else (0,) * self.result.tensor_type.rank

    def verify_(self) -> None:
        t = self.result.type
        if not isinstance(t, TensorType):
            raise self.emit_error(f"result must be a tensor, got {t}")
        dist = self.attributes["distribution"].value  # type: ignore[attr-defined]
        if dist not in DISTRIBUTIONS:
            raise self.emit_error(f"unknown distribution '{dist}'; expected one of {', '.join(DISTRIBUTIONS)}")
        for key in DISTRIBUTIONS[dist]:
            if key not in self.attributes:
                raise self.emit_error(f"distribution '{dist}' needs attribute '{key}'")
        extra = set(self.attributes) & {k for ks in DISTRIBUTIONS.values() for k in ks} - set(DISTRIBUTIONS[dist])
        if extra:
            raise self.emit_error(f"attribute '{sorted(extra)[0]}' is not a parameter of distribution '{dist}'")
        if dist == "randint":
            if t.element_type == "i1":
                raise self.emit_error(f"randint needs an integer or float result, got {t}")
            lo, hi = self.params
            if not (isinstance(lo, int) and isinstance(hi, int) and lo < hi):
                raise self.emit_error(f"randint needs integers low < high, got [{lo}, {hi})")
        elif not t.is_float:
            raise self.emit_error(f"distribution '{dist}' needs a floating-point result, got {t}")
        if dist == "bernoulli" and not 0.0 <= float(self.params[0]) <= 1.0:
            raise self.emit_error(f"bernoulli probability p = {self.params[0]} is outside [0, 1]")
        if len(self.operands) > 1:
            raise self.emit_error(f"takes at most one operand (the counter mode's seed), got {len(self.operands)}")
        if self.is_counter_based:
            s = self.operand(0).type
            if not (isinstance(s, TensorType) and s.rank == 0 and s.element_type == "i64"):
                raise self.emit_error(f"seed operand must be tensor<i64>, got {s}")
            if "stream" not in self.attributes:
                raise self.emit_error("counter mode (a seed operand) needs attribute 'stream'")
        elif "stream" in self.attributes:
            raise self.emit_error("attribute 'stream' needs the counter mode's seed operand")
        g, o = _ints(self.attributes.get("global_shape")), _ints(self.attributes.get("offset"))
        if (g is None) != (o is None) or ("global_shape" in self.attributes and g is None) \
                or ("offset" in self.attributes and o is None):
            raise self.emit_error("attributes 'global_shape' and 'offset' go together, as integer arrays")
        if g is not None and o is not None:
            ok = len(g) == len(o) == t.rank and all(
                0 <= off and off + n <= full for off, n, full in zip(o, t.shape, g))
            if not ok:
                raise self.emit_error(f"piece {list(t.shape)} at offset {o} does not fit global shape {g}")

    # -- semantics ---------------------------------------------------------------------
    def torch_expr(self, ins: Sequence[str]) -> str:
        t = self.result.tensor_type
        dt = dtype_source(t)
        args = ", ".join(literal(v) for v in self.params)
        if self.is_counter_based:
            stream = self.attributes["stream"].value  # type: ignore[attr-defined]
            return (f"spmdc_ops.philox_random({ins[0]}, {literal(stream)}, {literal(self.distribution)}, "
                    f"{literal(list(self.params))}, {shape_literal(t.shape)}, {shape_literal(self.global_shape)}, "
                    f"{shape_literal(self.offset)}, {dt})")
        draw = f"torch.empty({shape_literal(self.global_shape)}, dtype={dt}).{_EAGER_METHOD[self.distribution]}({args})"
        if self.global_shape == t.shape:
            return draw
        index = ", ".join(f"{o}:{o + n}" for o, n in zip(self.offset, t.shape))
        return f"{draw}[{index}]"

    # -- Triton (counter mode) ------------------------------------------------------------
    def kernel_role(self) -> str | None:
        """Counter-mode bernoulli / uniform / randint draws are elementwise in Triton kernels
        (the same bits as :meth:`torch_expr`); eager draws and normal samples stay torch calls."""
        ok = self.is_counter_based and self.distribution in _TRITON_DISTRIBUTIONS
        return "elementwise" if ok and isinstance(self.result.type, TensorType) else None

    def triton_expr(self, ins: Sequence[str]) -> str | None:
        """On blocks indexed by ``i0, i1, ...`` over the result's own shape."""
        t = self.result.tensor_type
        return self.triton_index_expr(ins, {d: f"i{d}" for d in range(t.rank) if t.shape[d] != 1}, t.shape)

    def triton_index_expr(self, ins: Sequence[str], index: dict[int, str], space: Sequence[int]) -> str | None:
        """The draw at the point of the kernel's iteration ``space`` whose dim ``d`` is ``index[d]``
        (the result broadcasts to ``space``: its size-1 dims read index 0)."""
        if self.kernel_role() is None:
            return None
        t = self.result.tensor_type
        lead = len(space) - t.rank
        terms, stride = [], 1
        for d in reversed(range(t.rank)):
            pos = index.get(lead + d) if t.shape[d] != 1 else None
            off = self.offset[d]
            term = f"({pos}.to(tl.int64) + {off})" if pos is not None else (str(off) if off else None)
            if term is not None:
                terms.append(term if stride == 1 else f"{term} * {stride}")
            stride *= self.global_shape[d]
        gidx = " + ".join(reversed(terms)) if terms else "0"
        word = f"_philox_word({ins[0]}, {gidx}, {self.attributes['stream'].value})"  # type: ignore[attr-defined]
        out = triton_type(t)
        if self.distribution == "bernoulli":
            return f"(tl.uint_to_uniform_float({word}) < {literal(float(self.params[0]))}).to({out})"
        if self.distribution == "uniform":
            low, high = (float(v) for v in self.params)
            return f"(tl.uint_to_uniform_float({word}) * {literal(high - low)} + {literal(low)}).to({out})"
        low, high = (int(v) for v in self.params)
        return f"(({word} % {high - low}).to(tl.int64) + {low}).to({out})"

    def sharding_rule(self) -> OpShardingRule:
        b = RuleBuilder()
        fs = [b.factor(s) for s in self.result.tensor_type.shape]
        operands = [[] for _ in self.operands]
        return b.build(operands, [fs])

    def localize(self, shape: tuple[int, ...], offset: tuple[int, ...]) -> None:
        """``partition``: this rank computes the piece ``shape`` at ``offset`` of the global tensor."""
        if tuple(shape) == self.global_shape:
            return
        self.attributes["global_shape"] = ArrayAttr(tuple(IntegerAttr(s) for s in self.global_shape))
        self.attributes["offset"] = ArrayAttr(tuple(IntegerAttr(o) for o in offset))


class RngSeedOp(TensorOp):
    """One 63-bit seed drawn from torch's default generator (the same on every rank): the key
    of the counter mode's random ops for this run of the program.

    ``%s = tensor.rng_seed : tensor<i64>``
    """

    name = "tensor.rng_seed"
    traits = frozenset({"Random"})
    num_operands = 0
    num_results = 1
    kernel = "none"
    torch = "torch.empty((), dtype=torch.int64).random_(0, 2 ** 63 - 1)"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        return [TensorType((), "i64")]

    def sharding_rule(self) -> OpShardingRule:
        return RuleBuilder().build([], [[]])


class RandpermOp(TensorOp):
    """A random permutation of ``0 .. n-1`` (``n``: the result's length), drawn from torch's
    default generator by the call eager PyTorch makes, ``torch.randperm(n, dtype=...)``, in
    program order: the numbers are eager's on one device, and every rank draws the same.

    Eager mode only: ``philox-rng`` leaves it alone (a counter-based permutation would be a
    different distribution of numbers), so it draws from the generator after the run's
    ``tensor.rng_seed`` there, still the same on every rank. Runs replicated (every rank
    draws the whole permutation; a piece is a slice of it).

    ``%p = tensor.randperm : tensor<6xi64>``
    """

    name = "tensor.randperm"
    traits = frozenset({"Random"})
    num_operands = 0
    num_results = 1
    kernel = "none"

    def verify_(self) -> None:
        t = self.result.type
        if not isinstance(t, TensorType) or t.rank != 1 or t.element_type == "i1":
            raise self.emit_error(f"result must be a rank-1 numeric tensor, got {t}")

    def torch_expr(self, ins: Sequence[str]) -> str:
        t = self.result.tensor_type
        return f"torch.randperm({literal(t.shape[0])}, dtype={dtype_source(t)})"

    def sharding_rule(self) -> OpShardingRule:
        b = RuleBuilder()
        n = b.factor(self.result.tensor_type.shape[0])
        return b.build([], [[n]], blocked=frozenset({n}))


OPS = [RandomOp, RngSeedOp, RandpermOp]


TRITON_HELPERS["_philox_word"] = '''@triton.jit
def _philox_word(seed, gidx, stream):
    # first word of Philox-4x32-10 at counter (gidx mod 2^32, gidx >> 32, stream, 0), keyed by seed
    # (spmdc.dialects.torch_helpers.philox_random computes the same bits with torch ops)
    c0 = (gidx & 0xFFFFFFFF).to(tl.uint32)
    c1 = ((gidx >> 32) & 0xFFFFFFFF).to(tl.uint32)
    c2 = (c0 * 0 + stream).to(tl.uint32)
    w0, _, _, _ = tl.philox(seed, c0, c1, c2, c0 * 0)
    return w0'''
