"""Registry of dialects: dialect name → the :class:`Dialect` that defines its ops and hooks.

The core IR knows no dialect except ``builtin`` (the module op). Dialects are made known
by name and module path, and imported the first time one of their ops, attributes or
hooks is needed; ``spmdc/__init__.py`` registers spmdc's own set, as ``mlir-opt``'s main
registers all dialects::

    register_dialect("tensor", "spmdc.dialects.tensor")     # lazily imported
    lookup_op("tensor.add")                                  # imports it, returns AddOp

A dialect module exposes ``DIALECT = Dialect("tensor", [AddOp, ...])`` with optional
hooks (MLIR's ``Dialect::verifyOperationAttribute`` and friends):

* ``syntax``: custom textual forms, as a lark grammar fragment plus builders
  (see :class:`DialectSyntax` and :mod:`spmdc.ir.parser`);
* ``verify_op_attribute(op, name, attr)``: checks a discardable attribute named
  ``<dialect>.<x>`` on any op (``shard.sharding``);
* ``verify_arg_attribute`` / ``verify_result_attribute(op, index, name, attr, type)``:
  the same for function argument and result attributes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spmdc.ir.core import Operation

if TYPE_CHECKING:
    from spmdc.ir.attributes import Attribute
    from spmdc.ir.types import Type

OpAttrVerifier = Callable[[Operation, str, "Attribute"], None]
ValueAttrVerifier = Callable[[Operation, int, str, "Attribute", "Type"], None]


@dataclass(frozen=True)
class DialectSyntax:
    """A dialect's custom textual forms.

    ``grammar`` holds lark rules and terminals; it may ``%extend op_body: <rule>`` (an op
    form) and ``%extend attr: <rule>`` (an attribute form). ``ops`` / ``attributes`` map each
    such rule name to a builder: ``ops[rule](parser, tree, location) -> Operation`` and
    ``attributes[rule](parser, tree) -> Attribute`` (see :class:`spmdc.ir.parser.Parser`).
    """

    grammar: str
    ops: dict[str, Callable[..., Operation]] = field(default_factory=dict)
    attributes: dict[str, Callable[..., Any]] = field(default_factory=dict)


@dataclass
class Dialect:
    name: str
    ops: list[type[Operation]] = field(default_factory=list)
    syntax: DialectSyntax | None = None
    verify_op_attribute: OpAttrVerifier | None = None
    verify_arg_attribute: ValueAttrVerifier | None = None
    verify_result_attribute: ValueAttrVerifier | None = None

    def op_map(self) -> dict[str, type[Operation]]:
        return {op.name: op for op in self.ops}


_modules: dict[str, str] = {"builtin": "spmdc.ir.module"}
_loaded: dict[str, Dialect] = {}
_op_maps: dict[str, dict[str, type[Operation]]] = {}


def register_dialect(name: str, module: str) -> None:
    """Make dialect ``name`` known; ``module`` (imported on first use) defines ``DIALECT``."""
    if _modules.get(name, module) != module:
        raise ValueError(f"dialect '{name}' is already registered from '{_modules[name]}'")
    _modules[name] = module


def registered_dialects() -> list[str]:
    return list(_modules)


def get_dialect(name: str) -> Dialect | None:
    if name not in _loaded:
        module = _modules.get(name)
        if module is None:
            return None
        _loaded[name] = importlib.import_module(module).DIALECT
    return _loaded[name]


def lookup_op(full_name: str) -> type[Operation] | None:
    """The class of op ``full_name`` (e.g. ``"tensor.add"``), or None if unknown."""
    dialect, _, _ = full_name.partition(".")
    ops = _op_maps.get(dialect)
    if ops is None:
        d = get_dialect(dialect)
        if d is None:
            return None
        ops = _op_maps[dialect] = d.op_map()
    return ops.get(full_name)


def dialect_of_attribute(name: str) -> Dialect | None:
    """The dialect owning a discardable attribute ``<dialect>.<x>`` (None for plain names)."""
    prefix, dot, _ = name.partition(".")
    return get_dialect(prefix) if dot else None


def all_dialects() -> list[Dialect]:
    return [d for d in (get_dialect(n) for n in _modules) if d is not None]


def all_ops() -> list[type[Operation]]:
    return [op for d in all_dialects() for op in d.ops]
