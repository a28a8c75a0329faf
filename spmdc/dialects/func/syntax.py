"""Custom syntax of ``func.func`` (MLIR's function form).

    func.func @main(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>})
        -> (tensor<8x16xf32> {spmdc.loss}) attributes {spmdc.train_step} {
      ...
    }

Arguments name the entry block's arguments and carry their attribute dictionaries;
results list types with optional dictionaries; ``attributes {...}`` holds the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spmdc.dialects.func.ops import FuncOp
from spmdc.ir.core import Block
from spmdc.ir.registry import DialectSyntax

if TYPE_CHECKING:
    from lark import Token, Tree

    from spmdc.ir.attributes import Attribute
    from spmdc.ir.location import Location
    from spmdc.ir.parser import Parser
    from spmdc.ir.types import Type

GRAMMAR = r"""
%extend op_body: func_op
func_op: FUNC_KW SYMBOL "(" func_args? ")" func_results? attrs_clause? region
func_args: func_arg ("," func_arg)*
func_arg: VALUE_DEF ":" type attr_dict?
func_results: "->" type -> func_result_bare
            | "->" "(" (type_with_attrs ("," type_with_attrs)*)? ")"
type_with_attrs: type attr_dict?

FUNC_KW.3: /func\.func(?![\w$.])/
"""


def build_func(parser: Parser, t: Tree, location: Location) -> FuncOp:
    sym = t.children[1]
    args: list[tuple[Token, Type, dict[str, Attribute]]] = []
    results: list[tuple[Type, dict[str, Attribute]]] = []
    fattrs: dict[str, Attribute] = {}
    region_tree = None
    for c in t.children[2:]:
        if c.data == "func_args":
            for a in c.children:
                ty = parser.type(a.children[1])
                args.append((a.children[0], ty, parser.attr_dict(a.children[2]) if len(a.children) > 2 else {}))
        elif c.data == "func_result_bare":
            results.append((parser.type(c.children[0]), {}))
        elif c.data == "func_results":
            for r in c.children:
                results.append((parser.type(r.children[0]),
                                parser.attr_dict(r.children[1]) if len(r.children) > 1 else {}))
        elif c.data == "attrs_clause":
            fattrs = parser.attr_dict(c.children[1])
        else:
            region_tree = c
    entry = Block()
    with parser.isolated_scope():
        for tok, ty, _ in args:
            parser.define(tok, entry.add_argument(ty))
        region = parser.region(region_tree, FuncOp, entry=entry, new_scope=False)
    op = FuncOp.build(parser.symbol_name(sym), [a[1] for a in args], [r[0] for r in results],
                      arg_attrs=[a[2] for a in args], res_attrs=[r[1] for r in results],
                      region=region, location=location)
    op.attributes.update(fattrs)
    return op


SYNTAX = DialectSyntax(GRAMMAR, ops={"func_op": build_func})
