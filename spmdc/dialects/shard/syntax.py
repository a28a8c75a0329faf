"""Custom syntax of the ``shard`` dialect: the mesh op and the ``#shard<...>`` attribute.

    shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
    #shard<@mesh, [S(0), R, P(sum)]>
    #shard<@mesh, [SS(1, 3), R]>
    #shard<@mesh, [RS(0, [2, 0, 1, 1])]>
    shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
    #shard.union<split(0, [2, 1]), [#shard<@g0, [S(1)]>, #shard<@g1, [R]>]>

The grammar fragment extends the core grammar (:mod:`spmdc.ir.parser`); the builders turn
its trees into a :class:`MeshOp` and a :class:`ShardingAttr`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spmdc.dialects.shard.ops import MeshOp
from spmdc.dialects.shard.placements import (
    Partial,
    Placement,
    RaggedShard,
    Replicate,
    Shard,
    ShardingAttr,
    StridedShard,
)
from spmdc.dialects.shard.union import CrossPartial, Dup, Relation, Split, UnionShardingAttr, union
from spmdc.ir.registry import DialectSyntax

if TYPE_CHECKING:
    from lark import Tree

    from spmdc.ir.location import Location
    from spmdc.ir.parser import Parser

GRAMMAR = r"""
%extend op_body: mesh_op
mesh_op: MESH_KW SYMBOL "=" "<" "[" (mesh_axis ("," mesh_axis)*)? "]" ">" mesh_devices?
mesh_axis: STRING "=" INT
mesh_devices: DEVICES_KW "=" "[" (INT ("," INT)*)? "]"

%extend attr: union_attr
union_attr: UNION_KW "<" relation "," "[" sharding_attr ("," sharding_attr)* "]" ">"
relation: SPLIT_KW "(" INT "," "[" INT ("," INT)* "]" ")"   -> rel_split
        | DUP_KW                                         -> rel_dup
        | PARTIAL_KW "(" OP_NAME ")"                     -> rel_partial

%extend attr: sharding_attr
sharding_attr: SHARD_KW "<" SYMBOL "," "[" (placement ("," placement)*)? "]" ">"
placement: PLACEMENT_R                 -> p_replicate
         | PLACEMENT_S "(" INT ")"     -> p_shard
         | PLACEMENT_SS "(" INT "," INT ")" -> p_strided
         | PLACEMENT_RS "(" INT "," "[" INT ("," INT)* "]" ")" -> p_ragged
         | PLACEMENT_P "(" OP_NAME ")" -> p_partial

MESH_KW.3: /shard\.mesh(?![\w$.])/
SHARD_KW.3: /#shard(?!\.)/
UNION_KW.4: "#shard.union"
DEVICES_KW.3: /devices(?![\w$.])/
SPLIT_KW.3: /split(?=\()/
DUP_KW.3: /dup(?![\w$.])/
PARTIAL_KW.3: /partial(?=\()/
PLACEMENT_R.3: /R(?![\w$.])/
PLACEMENT_S.3: /S(?=\()/
PLACEMENT_SS.3: /SS(?=\()/
PLACEMENT_RS.3: /RS(?=\()/
PLACEMENT_P.3: /P(?=\()/
"""


def build_mesh(parser: Parser, t: Tree, location: Location) -> MeshOp:
    sym = t.children[1]
    rest = t.children[2:]
    devices = None
    if rest and getattr(rest[-1], "data", None) == "mesh_devices":
        devices = [int(c) for c in rest[-1].children[1:]]
        rest = rest[:-1]
    axes = [(parser.unquote(a.children[0]), int(a.children[1])) for a in rest]
    return MeshOp.build(parser.symbol_name(sym), [n for n, _ in axes], [s for _, s in axes], location=location,
                        devices=devices)


def build_union(parser: Parser, t: Tree) -> ShardingAttr | UnionShardingAttr:
    """``#shard.union<split(0, [2, 1]), [#shard<@g0, ...>, #shard<@g1, ...>]>`` (one group: plain)."""
    rel_tree, members = t.children[1], [build_sharding(parser, m) for m in t.children[2:]]
    kids = rel_tree.children
    try:
        if rel_tree.data == "rel_split":
            relation: Relation = Split(int(kids[1]), tuple(int(k) for k in kids[2:]))
        elif rel_tree.data == "rel_dup":
            relation = Dup()
        else:
            relation = CrossPartial(str(kids[1]))
    except ValueError as e:
        raise parser.error(kids[-1] if kids else t.children[0], str(e)) from None
    return union(relation, members)


def build_sharding(parser: Parser, t: Tree) -> ShardingAttr:
    return ShardingAttr(parser.symbol_name(t.children[1]), tuple(_placement(parser, p) for p in t.children[2:]))


def _placement(parser: Parser, t: Tree) -> Placement:
    if t.data == "p_replicate":
        return Replicate()
    if t.data == "p_shard":
        return Shard(int(t.children[1]))
    if t.data == "p_ragged":
        return RaggedShard(int(t.children[1]), tuple(int(c) for c in t.children[2:]))
    if t.data == "p_strided":
        try:
            return StridedShard(int(t.children[1]), int(t.children[2]))
        except ValueError as e:
            raise parser.error(t.children[2], str(e)) from None
    op_tok = t.children[1]
    try:
        return Partial(str(op_tok))
    except ValueError as e:
        raise parser.error(op_tok, str(e)) from None


SYNTAX = DialectSyntax(GRAMMAR, ops={"mesh_op": build_mesh},
                       attributes={"sharding_attr": build_sharding, "union_attr": build_union})
