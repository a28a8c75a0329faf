"""``shard`` dialect ops: device meshes and layout annotations on global values.

    shard.mesh @mesh = <["dp" = 2, "tp" = 4]>          // ranks 0..7, row-major
    %1 = shard.annotate %0 {sharding = #shard<@mesh, [S(0), R]>} : tensor<8x16xf32>
    %2 = shard.redistribute %1 {from = #shard<@mesh, [S(0), R]>,
                                to = #shard<@mesh, [R, R]>} : tensor<8x16xf32>
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from spmdc.dialects.attrs import RANK_ATTR
from spmdc.dialects.pyexpr import TorchImpl
from spmdc.dialects.shard.placements import ShardingAttr
from spmdc.ir.attributes import ArrayAttr, IntegerAttr, StringAttr, format_symbol, quote
from spmdc.ir.core import Operation
from spmdc.ir.location import UNKNOWN, Location
from spmdc.ir.symbols import lookup_symbol
from spmdc.ir.types import TensorType

if TYPE_CHECKING:
    from spmdc.ir.attributes import Attribute
    from spmdc.ir.printer import Printer
    from spmdc.ir.types import Type

SHARDING_ATTR = "shard.sharding"   # the layout of a value: on op results, function arguments and results
MAX_MESH_DEVICES = 1 << 20          # larger meshes are refused: every rank's program is compiled


class MeshOp(Operation):
    """A named device mesh: axis names and sizes, ranks laid out row-major.

    Custom form ``shard.mesh @mesh = <["dp" = 2, "tp" = 4]>``; generic form
    ``"shard.mesh"() {axes = ["dp", "tp"], shape = [2, 4], sym_name = "mesh"} : () -> ()``.
    A device group (HSPMD) names the job's ranks it spans, in row-major mesh order:
    ``shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]`` (default: ranks ``0 .. n-1``).
    """

    name = "shard.mesh"
    num_operands = 0
    num_results = 0
    required_attrs = {"sym_name": StringAttr, "axes": ArrayAttr, "shape": ArrayAttr}
    optional_attrs = {"devices": ArrayAttr}
    traits = frozenset({"Symbol"})

    @classmethod
    def build(cls, sym_name: str, axes: Sequence[str], shape: Sequence[int],
              location: Location = UNKNOWN, devices: Sequence[int] | None = None) -> MeshOp:
        attrs: dict[str, Any] = {"sym_name": sym_name, "axes": list(axes), "shape": list(shape)}
        if devices is not None:
            attrs["devices"] = [int(d) for d in devices]
        return cls.create(attributes=attrs, result_types=[], location=location)

    @property
    def devices(self) -> tuple[int, ...]:
        """The job's ranks this mesh spans, in row-major order (default ``0 .. n-1``)."""
        d = self.attributes.get("devices")
        if d is None:
            return tuple(range(self.num_devices))
        return tuple(a.value for a in d)  # type: ignore[attr-defined]

    @property
    def sym_name(self) -> str:
        return self.attributes["sym_name"].value  # type: ignore[attr-defined]

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.value for a in self.attributes["axes"])  # type: ignore[attr-defined]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.value for a in self.attributes["shape"])  # type: ignore[attr-defined]

    def axis_size(self, axis: str) -> int:
        return self.shape[self.axis_names.index(axis)]

    @property
    def num_devices(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def print_custom(self, p: Printer) -> None:
        axes = ", ".join(f"{quote(a)} = {s}" for a, s in zip(self.axis_names, self.shape))
        p.write(f"shard.mesh @{format_symbol(self.sym_name)} = <[{axes}]>")
        if "devices" in self.attributes:
            p.write(f" devices = [{', '.join(map(str, self.devices))}]")

    def verify_(self) -> None:
        axes, shape = self.attributes["axes"], self.attributes["shape"]
        if not all(isinstance(a, StringAttr) for a in axes):  # type: ignore[attr-defined]
            raise self.emit_error("'axes' must be an array of strings")
        if not all(isinstance(s, IntegerAttr) for s in shape):  # type: ignore[attr-defined]
            raise self.emit_error("'shape' must be an array of integers")
        names, sizes = self.axis_names, self.shape
        if len(names) != len(sizes):
            raise self.emit_error(f"has {len(names)} axis names but {len(sizes)} sizes")
        for n, s in zip(names, sizes):
            if s <= 0:
                raise self.emit_error(f"mesh axis '{n}' has size {s}; sizes must be positive")
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise self.emit_error(f"duplicate mesh axis name '{sorted(dup)[0]}'")
        if "devices" in self.attributes:
            devs = self.attributes["devices"]
            if not all(isinstance(d, IntegerAttr) and d.value >= 0 for d in devs):  # type: ignore[attr-defined]
                raise self.emit_error("'devices' must be an array of non-negative integers (ranks)")
            if len(devs) != self.num_devices:  # type: ignore[arg-type]
                raise self.emit_error(f"lists {len(devs)} devices for a mesh of {self.num_devices}")  # type: ignore[arg-type]
            if len(set(self.devices)) != len(self.devices):
                dup = next(d for d in self.devices if self.devices.count(d) > 1)
                raise self.emit_error(f"lists device {dup} twice")
        if self.num_devices > MAX_MESH_DEVICES:
            raise self.emit_error(f"has {self.num_devices} devices; spmdc supports meshes of at most "
                                  f"{MAX_MESH_DEVICES} devices")


def lookup_mesh(op: Operation, name: str) -> MeshOp | None:
    m = lookup_symbol(op, name)
    return m if isinstance(m, MeshOp) else None


def check_sharding(op: Operation, sharding: object, ty: object, what: str) -> None:
    """Raise an error on ``op`` when ``sharding`` cannot lay out a value of type ``ty``."""
    from spmdc.dialects.shard.union import UnionShardingAttr

    if isinstance(sharding, UnionShardingAttr) and isinstance(ty, TensorType):
        reason = sharding.verify_for(ty, {g: lookup_mesh(op, g) for g in sharding.groups})
        if reason:
            raise op.emit_error(f"{what}: {reason}")
        return
    if not isinstance(sharding, ShardingAttr):
        raise op.emit_error(f"{what} must be a #shard<...> attribute")
    if not isinstance(ty, TensorType):
        raise op.emit_error(f"{what} applies to a non-tensor value")
    mesh = lookup_mesh(op, sharding.mesh)
    # after partition (``spmdc.rank``) the types are local: only the global-shape checks are moot
    local = any(RANK_ATTR in a.attributes for a in (op, *op.ancestors()))
    reason = sharding.verify_for(ty, mesh.axis_names if mesh else None,
                                 mesh.shape if mesh else None, local=local)
    if reason:
        raise op.emit_error(f"{what}: {reason}")


class AnnotateOp(TorchImpl, Operation):
    """Pins the layout of a global value; propagation never overrides it.

    ``%1 = shard.annotate %0 {sharding = #shard<@mesh, [S(0), R]>} : tensor<8x16xf32>``
    """

    name = "shard.annotate"
    num_operands = 1
    num_results = 1
    torch = "{0}"   # on one device a layout is no computation
    required_attrs = {"sharding": ShardingAttr}
    traits = frozenset({"Pure", "SameOperandsAndResultType"})

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        return [operand_types[0]] if operand_types else None

    @property
    def sharding(self) -> ShardingAttr:
        return self.attributes["sharding"]  # type: ignore[return-value]

    def verify_(self) -> None:
        check_sharding(self, self.sharding, self.result.type, "sharding")


class RedistributeOp(TorchImpl, Operation):
    """Changes a global value's layout from one sharding to another (same mesh).

    ``%2 = shard.redistribute %1 {from = #shard<@m, [S(0)]>, to = #shard<@m, [R]>} : tensor<8x16xf32>``
    """

    name = "shard.redistribute"
    num_operands = 1
    num_results = 1
    torch = "{0}"
    required_attrs = {"from": ShardingAttr, "to": ShardingAttr}
    traits = frozenset({"Pure", "SameOperandsAndResultType"})

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        return [operand_types[0]] if operand_types else None

    @property
    def source(self) -> ShardingAttr:
        return self.attributes["from"]  # type: ignore[return-value]

    @property
    def target(self) -> ShardingAttr:
        return self.attributes["to"]  # type: ignore[return-value]

    def verify_(self) -> None:
        check_sharding(self, self.source, self.result.type, "'from' sharding")
        check_sharding(self, self.target, self.result.type, "'to' sharding")
        if self.source.mesh != self.target.mesh:
            raise self.emit_error(f"'from' is on mesh '@{self.source.mesh}' but 'to' is on "
                                  f"'@{self.target.mesh}'; both must use the same mesh")
        have = recorded_sharding(self.operand(0))
        if have is not None and have != self.source:
            raise self.emit_error(f"'from' {self.source} differs from the layout its operand has, {have}")


def recorded_sharding(v: Any) -> ShardingAttr | None:
    """The ``shard.sharding`` recorded for ``v``: its producer's entry, or its function argument's."""
    op = v.defining_op()
    if op is not None:
        arr = op.attributes.get(SHARDING_ATTR)
        if isinstance(arr, ArrayAttr) and v.index < len(arr) and isinstance(arr[v.index], ShardingAttr):
            return arr[v.index]
        return None
    owner = v.block.parent_op if hasattr(v, "block") else None
    arg_attrs = getattr(owner, "arg_attrs", None)
    if callable(arg_attrs) and owner.body is v.block:
        s = arg_attrs(v.index).get(SHARDING_ATTR)
        return s if isinstance(s, ShardingAttr) else None
    return None


# -- the dialect's hooks for ``shard.*`` attributes on other ops ----------------------------

def verify_op_attribute(op: Operation, name: str, attr: Attribute) -> None:
    """``shard.sharding = [#shard<..>, ...]`` on any op: one valid sharding per result."""
    if name != SHARDING_ATTR:
        raise op.emit_error(f"unknown attribute '{name}' of the 'shard' dialect (known: '{SHARDING_ATTR}')")
    if not isinstance(attr, ArrayAttr) or not all(isinstance(s, ShardingAttr) for s in attr):
        raise op.emit_error(f"'{SHARDING_ATTR}' must be an array of #shard<...> attributes")
    if len(attr) != len(op.results):
        raise op.emit_error(f"'{SHARDING_ATTR}' has {len(attr)} entries for {len(op.results)} results")
    for i, (s, r) in enumerate(zip(attr, op.results)):
        check_sharding(op, s, r.type, f"'{SHARDING_ATTR}' of result #{i}")


def _value_attribute_verifier(what: str):
    def verify(op: Operation, index: int, name: str, attr: Attribute, ty: Type) -> None:
        if name != SHARDING_ATTR:
            raise op.emit_error(f"unknown {what} attribute '{name}' of the 'shard' dialect "
                                f"(known: '{SHARDING_ATTR}')")
        check_sharding(op, attr, ty, f"'{SHARDING_ATTR}' of {what} #{index}")
    return verify


verify_arg_attribute = _value_attribute_verifier("argument")
verify_result_attribute = _value_attribute_verifier("result")
