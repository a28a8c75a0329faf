"""``fuse-bias-add``: a bf16/fp16 matrix product whose only use adds a bias vector becomes one
``tensor.linear`` (``torch.addmm``), rounded once as eager PyTorch's linear layer rounds it.

The capture decomposes ``addmm`` (a linear layer with a bias) into ``tensor.matmul`` then
``tensor.add``, one op each for sharding. In low precision that rounds the product to bf16 before
the bias is added, where eager's kernel adds the bias in its float32 accumulator and rounds once;
where the bias nearly cancels the product, the sum keeps the product's whole rounding error
(gpt2-tiny under bf16 AdamW, a step whose loss spikes: ``h.1.attn.v_proj.weight``'s gradient
4.4e-2 from float64 with the two ops, 1.7e-2 fused, eager bf16 2.0e-2). On a rank's program the
two are the same value (``a @ b + bias`` whatever the layouts: a partial product plus a partial
bias is still the partial sum), so the pair is fused there, for the ``torch`` target (a Triton
matmul kernel adds its epilogue in the accumulator already). Float32 programs are left as they are.

Before::

    %mm = tensor.matmul %x, %w : (tensor<16x32xbf16>, tensor<32x64xbf16>) -> tensor<16x64xbf16>
    %y = tensor.add %mm, %b : (tensor<16x64xbf16>, tensor<64xbf16>) -> tensor<16x64xbf16>

After::

    %y = tensor.linear %x, %w, %b : (tensor<16x32xbf16>, tensor<32x64xbf16>, tensor<64xbf16>) -> tensor<16x64xbf16>
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spmdc.ir.core import Operation, Value
from spmdc.ir.rewriter import Builder
from spmdc.ir.types import TensorType
from spmdc.passes.pass_base import ModulePass

LOW_PRECISION = ("bf16", "f16")


def _bias_of(add: Operation) -> tuple[Operation, Value] | None:
    """``(matmul, bias)`` when ``add`` adds a vector to a low-precision matrix product used nowhere else."""
    from spmdc.dialects.tensor import MatmulOp

    out = add.results[0].type if len(add.results) == 1 else None
    if add.name != "tensor.add" or len(add.operands) != 2 or not isinstance(out, TensorType) or out.rank != 2 \
            or out.element_type not in LOW_PRECISION or add.attributes:
        return None
    for i in (0, 1):
        mm, bias = add.operand(i).defining_op(), add.operand(1 - i)
        if not isinstance(mm, MatmulOp) or len(add.operand(i).uses) != 1 or mm.results[0].type != out:
            continue
        if any(not isinstance(v.type, TensorType) or v.type.rank != 2 for v in mm.operands):
            continue
        if isinstance(bias.type, TensorType) and bias.type.shape == (out.shape[1],) \
                and bias.type.element_type == out.element_type and not mm.attributes:
            return mm, bias
    return None


def fuse_bias_adds(ops: list[Operation]) -> int:
    """Fuse the pairs of one block; returns how many."""
    from spmdc.dialects.tensor import LinearOp

    fused = 0
    for add in ops:
        found = _bias_of(add)
        if found is None:
            continue
        mm, bias = found
        linear = Builder.before(add).create(LinearOp, [mm.operand(0), mm.operand(1), bias], location=add.location)
        linear.results[0].name_hint = add.results[0].name_hint
        add.results[0].replace_all_uses_with(linear.results[0])
        add.erase()
        mm.erase()
        fused += 1
    return fused


@dataclass
class FuseBiasAdd(ModulePass):
    """Low-precision ``matmul`` + bias ``add`` pairs as one ``tensor.linear`` (each function body)."""

    name: ClassVar[str] = "fuse-bias-add"

    def run(self, module: Operation) -> None:
        for region in module.regions:
            for block in region.blocks:
                for func in list(block.ops):
                    for body in func.regions:
                        for b in body.blocks:
                            fuse_bias_adds(list(b.ops))


PASS = FuseBiasAdd
