"""An op's torch implementation, written once as a Python expression.

Every compute op says what it computes as one Python expression over its operands'
names, with ``torch`` (and, for collectives, ``comm``: the rank's collectives) in scope.
The same text is what :mod:`spmdc.codegen` writes into a generated program and what the
reference interpreter evaluates, so the two cannot disagree::

    class AddOp(BinaryOp):
        name = "tensor.add"
        torch = "torch.add({0}, {1})"

    op.torch_expr(["x", "b"])     # 'torch.add(x, b)'   (generated code)
    op.reference(x, b)            # evaluates 'torch.add(_0, _1)' (interpreter)

Ops whose expression depends on attributes or types override :meth:`TorchImpl.torch_expr`;
an implementation longer than one expression is a function in
:mod:`spmdc.dialects.torch_helpers`, called as ``spmdc_ops.<name>(...)``.
Attribute values reach the text only through :func:`literal` (``repr`` of a plain
number, bool or string, or a list of them), so an IR file cannot inject code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, ClassVar


def literal(value: object) -> str:
    """Python source for a plain value from an attribute (numbers, bools, strings, lists, None)."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        v = float(value)
        if math.isnan(v):
            return "float('nan')"
        if math.isinf(v):
            return "float('inf')" if v > 0 else "float('-inf')"
        return repr(v)
    if isinstance(value, str):
        return repr(str(value))
    if isinstance(value, (list, tuple)):
        items = ", ".join(literal(v) for v in value)
        if isinstance(value, tuple):
            return f"({items},)" if len(value) == 1 else f"({items})"
        return f"[{items}]"
    raise TypeError(f"no Python literal for {type(value).__name__}")


def shape_literal(shape: Sequence[int]) -> str:
    """``(8, 16)``: a shape as a Python tuple."""
    return literal(tuple(int(s) for s in shape))


class TorchImpl:
    """Mixin for ops with a torch implementation (``tensor``, ``comm`` and ``shard`` ops).

    ``torch``: a ``str.format`` template over the operand names (``{0}``, ``{1}``, ...);
    or override :meth:`torch_expr`. ``None`` from ``torch_expr`` means "no expression":
    the op must then override :meth:`reference` (large constants do).
    """

    name: ClassVar[str]
    torch: ClassVar[str | None] = None

    def torch_expr(self, ins: Sequence[str]) -> str | None:
        """Python source computing the op's result (a list of them for multi-result ops)."""
        return None if self.torch is None else self.torch.format(*ins)

    def reference(self, *args: Any, comm: Any = None) -> Any:
        """Evaluate :meth:`torch_expr` on tensors (``comm``: collectives for ``comm`` ops)."""
        expr = self.torch_expr([f"_{i}" for i in range(len(args))])
        if expr is None:
            raise NotImplementedError(f"'{self.name}' has no torch implementation")
        return compiled(expr, len(args))(comm, *args)


@lru_cache(maxsize=16384)
def compiled(expr: str, arity: int) -> Callable[..., Any]:
    """``lambda comm, _0, _1, ...: <expr>`` with ``torch`` and ``spmdc_ops`` in scope (cached by text)."""
    import torch

    from spmdc.dialects import torch_helpers

    params = ", ".join(["comm"] + [f"_{i}" for i in range(arity)])
    return eval(f"lambda {params}: {expr}", {"torch": torch, "spmdc_ops": torch_helpers})  # noqa: S307
