"""Builder and rewriter: the only sanctioned way passes change the IR.

    b = Builder.before(op)                       # insertion point
    add = b.create(AddOp, [x, y])                # infers the result type
    rewriter.replace_op(op, add.results)         # uses of op now use add; op erased

Pattern rewriting (``canonicalize``) uses :class:`RewritePattern` and
:func:`apply_patterns_greedily`, which revisits ops until nothing changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from spmdc.ir.attributes import Attribute
from spmdc.ir.core import Block, Operation, Value
from spmdc.ir.location import UNKNOWN, Location
from spmdc.ir.types import Type

OpT = TypeVar("OpT", bound=Operation)


@dataclass
class InsertPoint:
    """Insert into ``block`` before ``before`` (or at the end when None)."""

    block: Block
    before: Operation | None = None


class Builder:
    def __init__(self, point: InsertPoint):
        self.point = point

    @staticmethod
    def before(op: Operation) -> Builder:
        assert op.parent is not None
        return Builder(InsertPoint(op.parent, op))

    @staticmethod
    def after(op: Operation) -> Builder:
        assert op.parent is not None
        block = op.parent
        i = block.index_of(op)
        nxt = block.ops[i + 1] if i + 1 < len(block.ops) else None
        return Builder(InsertPoint(block, nxt))

    @staticmethod
    def at_end(block: Block) -> Builder:
        return Builder(InsertPoint(block, None))

    def insert(self, op: OpT) -> OpT:
        if self.point.before is None:
            self.point.block.append(op)
        else:
            self.point.block.insert_before(self.point.before, op)
        return op

    def create(self, cls: type[OpT], operands: Sequence[Value] = (), attributes: dict[str, object] | None = None,
               result_types: Sequence[Type] | None = None, location: Location = UNKNOWN) -> OpT:
        return self.insert(cls.create(operands, attributes, result_types, location=location))


class Rewriter:
    """Mutations with use-list bookkeeping; counts changes so drivers know when to stop."""

    def __init__(self) -> None:
        self.changed = False
        self.erased: set[int] = set()

    def replace_all_uses_with(self, old: Value, new: Value) -> None:
        if old is not new and old.uses:
            old.replace_all_uses_with(new)
            self.changed = True

    def replace_op(self, op: Operation, new_values: Sequence[Value]) -> None:
        """Replace every result of ``op`` by ``new_values`` and erase ``op``."""
        if len(new_values) != len(op.results):
            raise ValueError(f"replacing '{op.name}' needs {len(op.results)} values, got {len(new_values)}")
        for r, v in zip(op.results, new_values):
            if r.name_hint and v.name_hint is None:
                v.name_hint = r.name_hint
            r.replace_all_uses_with(v)
        self.erase_op(op)

    def erase_op(self, op: Operation) -> None:
        op.erase()
        self.erased.add(id(op))
        self.changed = True

    def insert_before(self, anchor: Operation, op: OpT) -> OpT:
        assert anchor.parent is not None
        anchor.parent.insert_before(anchor, op)
        self.changed = True
        return op

    def move_before(self, op: Operation, anchor: Operation) -> None:
        op.detach()
        self.insert_before(anchor, op)

    def move_after(self, op: Operation, anchor: Operation) -> None:
        op.detach()
        assert anchor.parent is not None
        anchor.parent.insert_after(anchor, op)
        self.changed = True

    def update_attr(self, op: Operation, key: str, value: Attribute | None) -> None:
        if value is None:
            op.attributes.pop(key, None)
        else:
            op.attributes[key] = value
        self.changed = True


class RewritePattern:
    """Override :meth:`match_and_rewrite`; return True when the IR was changed."""

    def match_and_rewrite(self, op: Operation, rewriter: Rewriter) -> bool:
        raise NotImplementedError


def apply_patterns_greedily(root: Operation, patterns: Iterable[RewritePattern], max_iterations: int = 10) -> bool:
    """Apply ``patterns`` to every op under ``root`` until a fixed point; True if anything changed."""
    patterns = list(patterns)
    any_change = False
    for _ in range(max_iterations):
        rewriter = Rewriter()
        for op in list(root.walk())[1:]:
            if id(op) in rewriter.erased or op.parent is None:
                continue
            for pat in patterns:
                if pat.match_and_rewrite(op, rewriter):
                    break
        if not rewriter.changed:
            break
        any_change = True
    return any_change
