"""SSA core of the spmdc IR: values with use lists, operations, blocks and regions.

An op is an instance of a subclass of :class:`Operation` whose class attribute
``name`` is its full name, e.g. ``"tensor.add"``::

    %0 = tensor.add %a, %b : tensor<4xf32>

Structure (MLIR's): an operation holds operands (SSA values), results, an attribute
dictionary and regions; a region holds blocks; a block holds block arguments and an
ordered list of operations. Every value knows its uses, so rewrites are cheap.
Mutate the IR through the methods here or :mod:`spmdc.ir.rewriter`, never by
editing the lists directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import ClassVar, TypeVar

from spmdc.ir.attributes import Attribute, SymbolRefAttr, unwrap
from spmdc.ir.attributes import attr as to_attr
from spmdc.ir.diagnostics import DiagnosticError
from spmdc.ir.location import UNKNOWN, Location
from spmdc.ir.types import TensorType, Type


class Use:
    """One use of a value: operand ``index`` of operation ``owner``."""

    __slots__ = ("owner", "index")

    def __init__(self, owner: Operation, index: int):
        self.owner = owner
        self.index = index

    def __repr__(self) -> str:
        return f"Use({self.owner.name}#{self.index})"


class Value:
    """An SSA value. ``name_hint`` is the preferred printed name (without ``%``)."""

    __slots__ = ("type", "uses", "name_hint")

    def __init__(self, type: Type, name_hint: str | None = None):
        self.type = type
        self.uses: list[Use] = []
        self.name_hint = name_hint

    @property
    def tensor_type(self) -> TensorType:
        assert isinstance(self.type, TensorType), f"expected a tensor, got {self.type}"
        return self.type

    @property
    def users(self) -> list[Operation]:
        seen: dict[int, Operation] = {}
        for u in self.uses:
            seen.setdefault(id(u.owner), u.owner)
        return list(seen.values())

    def has_uses(self) -> bool:
        return bool(self.uses)

    def replace_all_uses_with(self, new: Value) -> None:
        if new is self:
            return
        for use in list(self.uses):
            use.owner.set_operand(use.index, new)

    def defining_op(self) -> Operation | None:
        return None

    def parent_block(self) -> Block | None:
        return None


class OpResult(Value):
    __slots__ = ("op", "index")

    def __init__(self, type: Type, op: Operation, index: int):
        super().__init__(type)
        self.op = op
        self.index = index

    def defining_op(self) -> Operation:
        return self.op

    def parent_block(self) -> Block | None:
        return self.op.parent

    def __repr__(self) -> str:
        return f"<result #{self.index} of {self.op.name}: {self.type}>"


class BlockArgument(Value):
    __slots__ = ("block", "index")

    def __init__(self, type: Type, block: Block, index: int, name_hint: str | None = None):
        super().__init__(type, name_hint)
        self.block = block
        self.index = index

    def parent_block(self) -> Block:
        return self.block

    def __repr__(self) -> str:
        return f"<block argument #{self.index}: {self.type}>"


OpT = TypeVar("OpT", bound="Operation")


class Operation:
    """Base of every op class.

    Class attributes describe the op to the verifier and the parser:

    * ``name`` — ``"dialect.op"``;
    * ``num_operands`` / ``num_results`` / ``num_regions`` — fixed counts, or None
      for variadic;
    * ``required_attrs`` / ``optional_attrs`` — attribute name → attribute class
      (or tuple of classes);
    * ``traits`` — e.g. ``Pure``, ``Terminator``, ``IsolatedFromAbove``, ``Symbol``,
      ``Commutative``, ``SameOperandsAndResultType``.

    Subclasses override :meth:`infer_result_types` (shape/dtype inference),
    :meth:`verify_` (op-specific checks) and, for compute ops, :meth:`reference`
    (torch implementation used by the interpreter).
    """

    name: ClassVar[str] = ""
    num_operands: ClassVar[int | None] = None
    num_results: ClassVar[int | None] = None
    num_regions: ClassVar[int] = 0
    required_attrs: ClassVar[dict[str, type | tuple[type, ...]]] = {}
    optional_attrs: ClassVar[dict[str, type | tuple[type, ...]]] = {}
    traits: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        operands: Sequence[Value] = (),
        result_types: Sequence[Type] = (),
        attributes: dict[str, Attribute] | None = None,
        regions: Sequence[Region] = (),
        location: Location = UNKNOWN,
        name: str | None = None,
    ):
        if name is not None:
            self.name = name  # unregistered ops carry their own name
        self._operands: list[Value] = []
        for v in operands:
            self._append_operand(v)
        self.results: list[OpResult] = [OpResult(t, self, i) for i, t in enumerate(result_types)]
        self.attributes: dict[str, Attribute] = dict(attributes or {})
        self.regions: list[Region] = []
        for r in regions:
            self.add_region(r)
        self.location = location
        self.parent: Block | None = None

    # -- construction ----------------------------------------------------------------
    @classmethod
    def create(
        cls: type[OpT],
        operands: Sequence[Value] = (),
        attributes: dict[str, object] | None = None,
        result_types: Sequence[Type] | None = None,
        regions: Sequence[Region] = (),
        location: Location = UNKNOWN,
    ) -> OpT:
        """Build an op; result types are inferred when not given."""
        attrs = {k: to_attr(v) for k, v in (attributes or {}).items()}
        if result_types is None:
            inferred = cls.infer_result_types([v.type for v in operands], attrs)
            if inferred is None:
                raise ValueError(f"'{cls.name}' cannot infer its result types; pass result_types")
            result_types = inferred
        return cls(operands, result_types, attrs, regions, location)

    @classmethod
    def infer_result_types(cls, operand_types: list[Type], attrs: dict[str, Attribute]) -> list[Type] | None:
        """Result types from operand types and attributes; None when not inferable.

        Raise :class:`InferError` with a message when the operands are invalid.
        """
        return None

    # -- operands ----------------------------------------------------------------------
    @property
    def operands(self) -> tuple[Value, ...]:
        return tuple(self._operands)

    def _append_operand(self, v: Value) -> None:
        if not isinstance(v, Value):
            raise TypeError(f"operand of '{self.name}' must be a Value, got {type(v).__name__}")
        v.uses.append(Use(self, len(self._operands)))
        self._operands.append(v)

    def set_operand(self, index: int, new: Value) -> None:
        old = self._operands[index]
        for i, u in enumerate(old.uses):
            if u.owner is self and u.index == index:
                del old.uses[i]
                break
        self._operands[index] = new
        new.uses.append(Use(self, index))

    def set_operands(self, values: Sequence[Value]) -> None:
        self.drop_operands()
        for v in values:
            self._append_operand(v)

    def drop_operands(self) -> None:
        for i, v in enumerate(self._operands):
            v.uses = [u for u in v.uses if not (u.owner is self and u.index == i)]
        self._operands = []

    def operand(self, i: int) -> Value:
        return self._operands[i]

    # -- results, attributes, regions ------------------------------------------------
    @property
    def result(self) -> OpResult:
        if len(self.results) != 1:
            raise ValueError(f"'{self.name}' has {len(self.results)} results, not one")
        return self.results[0]

    @property
    def result_types(self) -> list[Type]:
        return [r.type for r in self.results]

    def get_attr(self, key: str) -> Attribute | None:
        return self.attributes.get(key)

    def attr_value(self, key: str, default: object = None) -> object:
        """The plain Python value of attribute ``key`` (int, list, str, ...)."""
        a = self.attributes.get(key)
        return default if a is None else unwrap(a)

    def set_attr(self, key: str, value: object) -> None:
        self.attributes[key] = to_attr(value)

    def symbol_ref(self, key: str) -> str | None:
        a = self.attributes.get(key)
        return a.name if isinstance(a, SymbolRefAttr) else None

    def add_region(self, region: Region) -> Region:
        assert region.parent is None, "region already belongs to an op"
        region.parent = self
        self.regions.append(region)
        return region

    @property
    def body(self) -> Block:
        """The single block of the first region (for func.func, kernel.fused, module)."""
        return self.regions[0].blocks[0]

    # -- structure -------------------------------------------------------------------
    def parent_op(self) -> Operation | None:
        if self.parent is None or self.parent.parent is None:
            return None
        return self.parent.parent.parent

    def ancestors(self) -> Iterator[Operation]:
        op = self.parent_op()
        while op is not None:
            yield op
            op = op.parent_op()

    def parent_of_type(self, cls: type[OpT]) -> OpT | None:
        for a in self.ancestors():
            if isinstance(a, cls):
                return a
        return None

    def is_ancestor_of(self, other: Operation) -> bool:
        return any(a is self for a in other.ancestors())

    def walk(self, fn: Callable[[Operation], None] | None = None) -> Iterator[Operation]:
        """Pre-order iteration over this op and everything nested in it.

        With ``fn``, the whole walk runs now (``fn`` called on each op in order) and
        the visited ops are returned; without it, ops are produced lazily.
        """
        if fn is not None:
            visited = list(self.walk())
            for op in visited:
                fn(op)
            return iter(visited)
        return self._walk()

    def _walk(self) -> Iterator[Operation]:
        stack: list[Operation] = [self]
        while stack:
            op = stack.pop()
            yield op
            nested = [o for r in op.regions for b in r.blocks for o in b.ops]
            stack.extend(reversed(nested))

    def has_trait(self, trait: str) -> bool:
        return trait in self.traits

    def emit_error(self, message: str) -> DiagnosticError:
        """An error in MLIR's wording, ``'tensor.add' op <message>``, at this op's location."""
        return DiagnosticError(f"'{self.name}' op {message}", self.location)

    def verify_(self) -> None:
        """Op-specific checks; raise ``self.emit_error(...)``."""

    def detach(self) -> Operation:
        if self.parent is not None:
            self.parent.remove(self)
        return self

    def erase(self) -> None:
        """Remove from the parent block and drop operand uses; results must be unused."""
        for r in self.results:
            if r.uses:
                raise ValueError(f"cannot erase '{self.name}': result #{r.index} still has uses")
        for nested in list(self.walk())[1:]:
            nested.drop_operands()
        self.drop_operands()
        self.detach()

    def clone(self, mapping: dict[Value, Value] | None = None) -> Operation:
        """Deep copy; operands are remapped through ``mapping`` (updated with the new results)."""
        mapping = {} if mapping is None else mapping
        new = type(self).__new__(type(self))
        Operation.__init__(new, [mapping.get(v, v) for v in self._operands],
                           [r.type for r in self.results], dict(self.attributes), (), self.location,
                           name=self.name if type(self) is UnregisteredOp else None)
        for old_r, new_r in zip(self.results, new.results):
            new_r.name_hint = old_r.name_hint
            mapping[old_r] = new_r
        for region in self.regions:
            new.add_region(region.clone(mapping))
        return new

    def __repr__(self) -> str:
        return f"<{self.name} at {self.location}>"


class UnregisteredOp(Operation):
    """An op of an unknown dialect, kept only with ``--allow-unregistered-dialect``."""


class InferError(Exception):
    """Raised by ``infer_result_types`` when operands or attributes are invalid."""


class Block:
    """A list of operations with typed arguments (``^bb0(%x: tensor<4xf32>):``)."""

    def __init__(self, arg_types: Iterable[Type] = ()):
        self.args: list[BlockArgument] = []
        self.ops: list[Operation] = []
        self.parent: Region | None = None
        for t in arg_types:
            self.add_argument(t)

    def add_argument(self, type: Type, name_hint: str | None = None) -> BlockArgument:
        arg = BlockArgument(type, self, len(self.args), name_hint)
        self.args.append(arg)
        return arg

    def erase_argument(self, index: int) -> None:
        arg = self.args[index]
        if arg.uses:
            raise ValueError(f"cannot erase block argument #{index}: it still has uses")
        del self.args[index]
        for i, a in enumerate(self.args):
            a.index = i

    @property
    def parent_op(self) -> Operation | None:
        return self.parent.parent if self.parent else None

    @property
    def terminator(self) -> Operation | None:
        if self.ops and self.ops[-1].has_trait("Terminator"):
            return self.ops[-1]
        return None

    def append(self, op: Operation) -> Operation:
        return self.insert(len(self.ops), op)

    def insert(self, index: int, op: Operation) -> Operation:
        assert op.parent is None, f"'{op.name}' already belongs to a block"
        op.parent = self
        self.ops.insert(index, op)
        return op

    def insert_before(self, anchor: Operation, op: Operation) -> Operation:
        return self.insert(self.index_of(anchor), op)

    def insert_after(self, anchor: Operation, op: Operation) -> Operation:
        return self.insert(self.index_of(anchor) + 1, op)

    def index_of(self, op: Operation) -> int:
        # list.index compares with ==, which for operations is identity (no __eq__): C speed. Passes
        # insert and erase next to the op they just looked up, so the search starts near the last
        # position found (a 16k-op program's rewrites stay linear, not quadratic)
        ops, hint = self.ops, getattr(self, "_hint", 0)
        try:
            i = ops.index(op, max(0, hint - 64), hint + 64)
        except ValueError:
            try:
                i = ops.index(op)
            except ValueError:
                raise ValueError(f"'{op.name}' is not in this block") from None
        self._hint = i
        return i

    def remove(self, op: Operation) -> None:
        del self.ops[self.index_of(op)]
        op.parent = None

    def __iter__(self) -> Iterator[Operation]:
        return iter(list(self.ops))


class Region:
    """A list of blocks owned by an op (spmdc's ops use single-block regions)."""

    def __init__(self, blocks: Iterable[Block] = ()):
        self.blocks: list[Block] = []
        self.parent: Operation | None = None
        for b in blocks:
            self.add_block(b)

    def add_block(self, block: Block) -> Block:
        assert block.parent is None, "block already belongs to a region"
        block.parent = self
        self.blocks.append(block)
        return block

    @property
    def block(self) -> Block:
        return self.blocks[0]

    def clone(self, mapping: dict[Value, Value]) -> Region:
        new = Region()
        for b in self.blocks:
            nb = Block()
            new.add_block(nb)
            for a in b.args:
                mapping[a] = nb.add_argument(a.type, a.name_hint)
            for op in b.ops:
                nb.append(op.clone(mapping))
        return new
