"""Every op is defined in one place: its class declares all the compiler needs.

For each ``tensor`` op class: a torch implementation (``torch`` or ``torch_expr``), a
sharding rule (``sharding_rule``, ``replicated_rule`` said explicitly), how it enters a
Triton kernel (``kernel`` and, for elementwise ops, a Triton expression; for row ops a
row template), known traits, and a docstring with an IR example. For every instance in
the op samples, the declarations produce well-formed results. A deliberately incomplete
op shows that the check fails when something is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spmdc.dialects.pyexpr import TorchImpl
from spmdc.dialects.shard.rules import OpShardingRule
from spmdc.dialects.tensor import TensorOp
from spmdc.dialects.tensor.base import KERNEL_FORMS, TRAITS
from spmdc.ir import parse_module
from spmdc.ir.core import Operation
from spmdc.ir.registry import all_ops

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = [ROOT / "tests/unit/ir/all_ops.mlir", *sorted((ROOT / "tests/lit/dialects/tensor").glob("ops*.mlir")),
           ROOT / "tests/lit/dialects/comm/ops.mlir"]
ROW_TEMPLATES = ("sum", "max", "mean", "var", "softmax", "log_softmax")   # what spmdc.codegen.triton_emitter has


def _overrides(cls: type, name: str, base: type) -> bool:
    return getattr(cls, name) is not getattr(base, name)


def class_problems(cls: type[Operation]) -> list[str]:
    """What a tensor op class fails to declare (empty: complete)."""
    out = []
    if not issubclass(cls, TensorOp):
        return ["is not a TensorOp"]
    if (cls.torch is None and not _overrides(cls, "torch_expr", TorchImpl)
            and not _overrides(cls, "reference", TorchImpl)):
        out.append("no torch implementation (torch or torch_expr)")
    if not _overrides(cls, "sharding_rule", TensorOp):
        out.append("no sharding rule (sharding_rule, or replicated_rule said explicitly)")
    if cls.kernel not in KERNEL_FORMS:
        out.append(f"kernel form {cls.kernel!r} is not one of {KERNEL_FORMS}")
    if cls.kernel == "elementwise" and cls.triton is None and not _overrides(cls, "triton_expr", TensorOp):
        out.append("an elementwise kernel form without a Triton expression (triton or triton_expr)")
    if cls.kernel == "row" and cls.row_kernel not in ROW_TEMPLATES:
        out.append(f"a row kernel form without a known row template (row_kernel={cls.row_kernel!r})")
    if cls.kernel != "row" and cls.row_kernel is not None:
        out.append("a row template on an op whose kernel form is not 'row'")
    if not cls.traits <= TRAITS:
        out.append(f"unknown traits {sorted(cls.traits - TRAITS)}")
    if "StridedView" in cls.traits and "View" not in cls.traits:
        out.append("StridedView without View")
    if not cls.__doc__ or cls.name not in cls.__doc__:
        out.append("no docstring with an IR example")
    return out


TENSOR_OPS = sorted((c for c in all_ops() if c.name.startswith("tensor.")), key=lambda c: c.name)


@pytest.mark.parametrize("cls", TENSOR_OPS, ids=[c.name for c in TENSOR_OPS])
def test_tensor_op_declares_everything(cls):
    assert class_problems(cls) == []


def test_an_incomplete_op_is_reported():
    class HalfDoneOp(TensorOp):
        name = "tensor.half_done"

    class WrongKernelOp(TensorOp):
        """``%r = tensor.wrong %a : tensor<4xf32>``."""

        name = "tensor.wrong"
        torch = "torch.abs({0})"
        kernel = "elementwise"
        traits = TensorOp.traits | {"Fancy"}

        def sharding_rule(self):
            raise AssertionError

    half = class_problems(HalfDoneOp)
    assert any("torch implementation" in p for p in half) and any("sharding rule" in p for p in half)
    assert any("kernel form ''" in p for p in half) and any("docstring" in p for p in half)
    wrong = class_problems(WrongKernelOp)
    assert any("without a Triton expression" in p for p in wrong) and any("unknown traits" in p for p in wrong)
    assert len(wrong) == 2


def _instances() -> list[Operation]:
    ops = []
    for path in SAMPLES:
        ops += [op for op in parse_module(path.read_text(), str(path)).walk()
                if op.name.startswith(("tensor.", "comm.", "shard.annotate", "shard.redistribute"))]
    return ops


INSTANCES = _instances()


def test_every_registered_op_has_a_sample():
    seen = {op.name for op in INSTANCES}
    want = {c.name for c in all_ops() if c.name.startswith(("tensor.", "comm."))}
    assert want - seen == set()


@pytest.mark.parametrize("op", INSTANCES, ids=[f"{i}-{op.name}" for i, op in enumerate(INSTANCES)])
def test_declarations_are_well_formed_on_every_sample(op):
    names = [f"x{i}" for i in range(len(op.operands))]
    expr = op.torch_expr(names)
    assert expr is not None or op.name == "tensor.constant"
    if expr is not None:
        compile(expr, "<torch_expr>", "eval")  # one Python expression
    if not isinstance(op, TensorOp):
        return
    rule = op.sharding_rule()
    assert isinstance(rule, OpShardingRule)
    assert len(rule.operands) == len(op.operands) and len(rule.results) == len(op.results)
    for dims, v in zip(rule.operands + rule.results, list(op.operands) + list(op.results)):
        assert len(dims) == v.type.rank and all(f is None or 0 <= f < rule.num_factors for f in dims)
    role = op.kernel_role()
    assert role in (None, "elementwise", "row", "matmul")
    if role == "elementwise":
        compile(op.triton_expr(names), "<triton_expr>", "eval")


def test_every_op_of_every_dialect_documents_its_ir_form():
    undocumented = [c.name for c in all_ops() if not c.__doc__ or c.name not in c.__doc__]
    assert undocumented == []
