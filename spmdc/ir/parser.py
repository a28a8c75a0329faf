"""Parser of the textual IR: lark (LALR) builds a tree, a scoped walk builds the IR.

The core grammar (``grammar.lark``) knows generic ops, the default custom form and
``module``; every registered dialect with custom syntax adds its rules to it
(``%extend op_body: ...`` / ``%extend attr: ...``) and a builder per rule, which gets this
:class:`Parser` (its ``type``, ``attr_dict``, ``region``, ``define``, ``symbol_name``,
``unquote``, ``error`` and ``isolated_scope`` are the API for builders).

Every error, syntactic or semantic, is a :class:`DiagnosticError` at
``file:line:col``::

    bad.mlir:3:24: error: unknown element type 'f3' in 'tensor<8x16xf3>'
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from importlib import resources
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from spmdc.ir import attributes as A
from spmdc.ir.core import Block, Operation, Region, UnregisteredOp, Value
from spmdc.ir.diagnostics import DiagnosticError
from spmdc.ir.location import UNKNOWN, FileLineColLoc, Location, NameLoc
from spmdc.ir.module import ModuleOp
from spmdc.ir.registry import all_dialects, lookup_op, registered_dialects
from spmdc.ir.types import ELEMENT_TYPES, INT_TYPES, FunctionType, HandleType, TensorType, Type

_TENSOR_TYPES: dict[str, TensorType] = {}


def _grammar() -> tuple[Lark, dict[str, Callable[..., Any]], dict[str, Callable[..., Any]]]:
    """The parser for the dialects registered now, and the builders of their custom rules."""
    return _grammar_for(tuple(registered_dialects()))


@lru_cache(maxsize=4)
def _grammar_for(
    dialects: tuple[str, ...]
) -> tuple[Lark, dict[str, Callable[..., Any]], dict[str, Callable[..., Any]]]:
    text = [resources.files("spmdc.ir").joinpath("grammar.lark").read_text()]
    op_rules: dict[str, Callable[..., Any]] = {}
    attr_rules: dict[str, Callable[..., Any]] = {}
    for d in all_dialects():
        if d.syntax is not None:
            text.append(f"// ---- dialect '{d.name}'\n{d.syntax.grammar}")
            op_rules.update(d.syntax.ops)
            attr_rules.update(d.syntax.attributes)
    lark = Lark("\n".join(text), parser="lalr", lexer="contextual", maybe_placeholders=False, cache=True)
    return lark, op_rules, attr_rules


_TOKEN_NAMES = {
    "VALUE_DEF": "SSA value", "OP_NAME": "identifier", "STRING": "string", "INT": "integer",
    "FLOAT": "float", "HEX_INT": "hexadecimal integer", "SCALAR_TYPE": "scalar type",
    "SYMBOL": "symbol", "TENSOR_TYPE": "type", "HANDLE_TYPE": "type", "LBRACE": "'{'",
    "RBRACE": "'}'", "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'",
    "COLON": "':'", "COMMA": "','", "EQUAL": "'='", "LESSTHAN": "'<'", "MORETHAN": "'>'",
    "__ANON_0": "'->'", "$END": "end of input", "BLOCK_ID": "block label",
}


_ISOLATED = "#isolated"  # scope marker; never a value name (names cannot start with '#')
MAX_NESTING = 100  # deeper input is refused with a located error (the IR walk recurses per level)
_BRACKETS = re.compile(r'"(?:\\.|[^"\\\n])*"|//[^\n]*|[()\[\]{}]')


class Parser:
    """Parse one buffer. ``first_line`` offsets line numbers (for ``--split-input-file``)."""

    def __init__(self, text: str, filename: str = "<stdin>", first_line: int = 1,
                 allow_unregistered: bool = False):
        self.text = text
        self.filename = filename
        self.line_offset = first_line - 1
        self.allow_unregistered = allow_unregistered
        self.scopes: list[dict[str, Value]] = []
        self._lark, self._op_rules, self._attr_rules = _grammar()

    # -- entry point -------------------------------------------------------------------
    def parse_module(self) -> Operation:
        tree = self._parse_tree()
        self.scopes = [{}]
        ops = [self.operation(t) for t in tree.children]
        if len(ops) == 1 and isinstance(ops[0], ModuleOp):
            return ops[0]
        module = ModuleOp.build_empty(location=self.loc_at(1, 1))
        for op in ops:
            module.body.append(op)
        return module

    def _parse_tree(self) -> Tree:
        self._check_nesting()
        try:
            return self._lark.parse(self.text)
        except UnexpectedInput as e:
            raise self._syntax_error(e) from None

    def _check_nesting(self) -> None:
        """Brackets (regions, arrays, dictionaries, parentheses) nested deeper than
        :data:`MAX_NESTING` are refused where the limit is crossed, before anything recurses."""
        depth = 0
        for m in _BRACKETS.finditer(self.text):
            c = m.group(0)
            if c in "([{":
                depth += 1
                if depth > MAX_NESTING:
                    line = self.text.count("\n", 0, m.start()) + 1
                    col = m.start() - (self.text.rfind("\n", 0, m.start()) + 1) + 1
                    raise DiagnosticError(f"nesting too deep (limit {MAX_NESTING} levels of regions, arrays, "
                                          "dictionaries or parentheses)", self.loc_at(line, col))
            elif c in ")]}":
                depth = max(depth - 1, 0)

    def _syntax_error(self, e: UnexpectedInput) -> DiagnosticError:
        line, col = getattr(e, "line", 1) or 1, getattr(e, "column", 1) or 1
        if isinstance(e, UnexpectedToken):
            tok = e.token
            if tok.type == "$END":
                msg = "unexpected end of input"
                line, col = self._end_position()
            else:
                msg = f"unexpected {_describe_token(tok)}"
            expected = sorted({_TOKEN_NAMES.get(t, t.lower()) for t in e.expected if not t.startswith("__")})
            if expected and len(expected) <= 6:
                msg += ", expected " + " or ".join(expected)
        elif isinstance(e, UnexpectedCharacters):
            msg = f"unexpected character '{self.text[e.pos_in_stream]}'"
            if self.text[e.pos_in_stream] == '"':
                msg = "unterminated string"
        elif isinstance(e, UnexpectedEOF):
            msg = "unexpected end of input"
            line, col = self._end_position()
        else:  # pragma: no cover
            msg = str(e)
        return DiagnosticError(msg, self.loc_at(line, col))

    def _end_position(self) -> tuple[int, int]:
        lines = self.text.rstrip().split("\n")
        return len(lines), len(lines[-1]) + 1

    # -- locations -----------------------------------------------------------------------
    def loc_at(self, line: int, col: int) -> FileLineColLoc:
        return FileLineColLoc(self.filename, line + self.line_offset, col)

    def loc(self, tok: Token) -> FileLineColLoc:
        return self.loc_at(tok.line or 1, tok.column or 1)

    def error(self, tok: Token, message: str) -> DiagnosticError:
        return DiagnosticError(message, self.loc(tok))

    def symbol_name(self, tok: Token) -> str:
        """``@name`` or ``@"quoted name"`` without the ``@``."""
        s = str(tok)[1:]
        return self.unquote(Token(tok.type, s, line=tok.line, column=tok.column)) if s.startswith('"') else s

    def unquote(self, tok: Token) -> str:
        """The text of a string literal token (MLIR's escapes), or an error at the token."""
        try:
            return A.unescape(str(tok)[1:-1])
        except UnicodeDecodeError as e:
            raise self.error(tok, f"invalid string literal {tok}: its \\XX bytes are not UTF-8 "
                                  f"({e.reason})") from None
        except ValueError as e:
            raise self.error(tok, f"invalid string literal {tok}: {e}") from None

    # -- values ----------------------------------------------------------------------------
    def define(self, tok: Token, value: Value) -> None:
        name = tok[1:]
        scope = self.scopes[-1]
        if name in scope or name + "#" in scope:
            raise self.error(tok, f"redefinition of SSA value '%{name}'")
        scope[name] = value
        if not name[0].isdigit():
            value.name_hint = name

    def define_group(self, tok: Token, values: list[Value]) -> None:
        name = tok[1:]
        scope = self.scopes[-1]
        if name in scope or name + "#" in scope:
            raise self.error(tok, f"redefinition of SSA value '%{name}'")
        scope[name + "#"] = values  # type: ignore[assignment]
        scope[name] = values[0]  # '%r' is '%r#0'
        if not name[0].isdigit():
            values[0].name_hint = name

    @contextmanager
    def isolated_scope(self) -> Iterator[None]:
        """Names defined inside do not see (or leak to) the enclosing scopes (``func.func``)."""
        self.scopes.append({_ISOLATED: True})  # type: ignore[dict-item]
        try:
            yield
        finally:
            self.scopes.pop()

    def lookup(self, tok: Token) -> Value:
        name = str(tok)[1:]
        base, _, idx = name.partition("#")
        for scope in reversed(self.scopes):
            if idx:
                group = scope.get(base + "#")
                if group is None and base in scope:
                    group = [scope[base]]  # '%v#0' of a single-result op
                if group is not None:
                    i = int(idx)
                    if i >= len(group):  # type: ignore[arg-type]
                        raise self.error(tok, f"result number {i} out of range for '%{base}' "
                                              f"({len(group)} results)")  # type: ignore[arg-type]
                    return group[i]  # type: ignore[index]
            elif name in scope:
                return scope[name]
            if scope.get(_ISOLATED):
                break
        raise self.error(tok, f"use of undeclared SSA value '%{name}'")

    # -- operations ------------------------------------------------------------------------
    def operation(self, tree: Tree) -> Operation:
        children = list(tree.children)
        groups: list[tuple[Token, int]] = []
        if children and isinstance(children[0], Tree) and children[0].data == "op_results":
            for g in children.pop(0).children:
                tok = g.children[0]
                count = int(g.children[1]) if len(g.children) > 1 else 1
                if "#" in tok:
                    raise self.error(tok, "expected a result name without '#'")
                if count < 1:
                    raise self.error(g.children[1], f"expected a positive result count, got {count}")
                groups.append((tok, count))
        body = children[0]
        explicit_loc = children[1] if len(children) > 1 else None
        first_tok = groups[0][0] if groups else _first_token(body)
        location: Location = self.loc(first_tok)
        if explicit_loc is not None:
            location = self.location_attr(explicit_loc.children[-1], location)
        num_results = sum(c for _, c in groups)
        kind = body.data
        if kind == "generic_op":
            op = self.generic_op(body, num_results, location)
        elif kind == "custom_op":
            op = self.custom_op(body, num_results, location)
        elif kind == "module_op":
            op = self.module_op(body, location)
        else:  # a dialect's custom form
            op = self._op_rules[kind](self, body, location)
        if len(op.results) != num_results:
            raise self.error(first_tok, f"operation '{op.name}' defines {len(op.results)} results "
                                        f"but {num_results} names were given")
        i = 0
        for tok, count in groups:
            if count == 1:
                self.define(tok, op.results[i])
            else:
                self.define_group(tok, op.results[i:i + count])
            i += count
        return op

    def location_attr(self, t: Tree, parsed_at: Location) -> Location:
        if t.data == "loc_name":
            return NameLoc(self.unquote(t.children[0]), child=parsed_at)
        if t.data == "loc_file":
            f, line, col = t.children
            return FileLineColLoc(self.unquote(f), int(line), int(col))
        return UNKNOWN

    def _op_class(self, name_tok: Token, name: str) -> type[Operation]:
        cls = lookup_op(name)
        if cls is None:
            if self.allow_unregistered and "." in name:
                return UnregisteredOp
            raise self.error(name_tok, f"unregistered operation '{name}'"
                             + ("" if "." in name else " (expected 'dialect.op')"))
        return cls

    def _make(self, cls: type[Operation], name: str, operands, result_types, attrs, regions,
              location: Location) -> Operation:
        if cls is UnregisteredOp:
            return UnregisteredOp(operands, result_types, attrs, regions, location, name=name)
        return cls(operands, result_types, attrs, regions, location)

    def generic_op(self, t: Tree, num_results: int, location: Location) -> Operation:
        name_tok = t.children[0]
        name = self.unquote(name_tok)
        cls = self._op_class(name_tok, name)
        uses: list[Token] = []
        regions_tree = attr_tree = fn_tree = None
        for c in t.children[1:]:
            if c.data == "value_uses":
                uses = list(c.children)
            elif c.data == "generic_regions":
                regions_tree = c
            elif c.data == "attr_dict":
                attr_tree = c
            else:
                fn_tree = c
        operands = [self.lookup(u) for u in uses]
        fn = self.function_type(fn_tree)
        if len(fn.inputs) != len(operands):
            raise self.error(name_tok, f"'{name}' has {len(operands)} operands but its type lists "
                                       f"{len(fn.inputs)}")
        self._check_operand_types(uses, operands, list(fn.inputs))
        if len(fn.results) != num_results:
            raise self.error(name_tok, f"'{name}' type has {len(fn.results)} results but "
                                       f"{num_results} names were given")
        attrs = self.attr_dict(attr_tree) if attr_tree is not None else {}
        regions = [self.region(r, cls) for r in regions_tree.children] if regions_tree else []
        return self._make(cls, name, operands, list(fn.results), attrs, regions, location)

    def custom_op(self, t: Tree, num_results: int, location: Location) -> Operation:
        name_tok = t.children[0]
        name = str(name_tok)
        cls = self._op_class(name_tok, name)
        if cls is not UnregisteredOp and cls.num_results is not None and cls.num_results != num_results:
            raise self.error(name_tok, f"'{name}' defines {cls.num_results} result(s) but "
                                       f"{num_results} names were given")
        uses: list[Token] = []
        attrs: dict[str, A.Attribute] = {}
        types_tree = None
        region_trees = []
        for c in t.children[1:]:
            if c.data == "value_uses":
                uses = list(c.children)
            elif c.data == "attr_dict":
                attrs = self.attr_dict(c)
            elif c.data in ("ct_function", "ct_list"):
                types_tree = c
            else:
                region_trees.append(c)
        operands = [self.lookup(u) for u in uses]
        operand_types, result_types = self.custom_types(name_tok, name, types_tree, len(operands), num_results)
        self._check_operand_types(uses, operands, operand_types)
        regions = [self.region(r, cls) for r in region_trees]
        return self._make(cls, name, operands, result_types, attrs, regions, location)

    def custom_types(self, tok: Token, name: str, t: Tree | None, n_operands: int,
                     n_results: int) -> tuple[list[Type], list[Type]]:
        if t is None:
            if n_operands or n_results:
                raise self.error(tok, f"custom form of '{name}' needs ': type' after its operands")
            return [], []
        if t.data == "ct_function":
            fn = self.function_type(t.children[0])
            if len(fn.inputs) != n_operands:
                raise self.error(tok, f"'{name}' has {n_operands} operands but its type lists {len(fn.inputs)}")
            if len(fn.results) != n_results:
                raise self.error(tok, f"'{name}' type has {len(fn.results)} results but {n_results} names were given")
            return list(fn.inputs), list(fn.results)
        types = [self.type(c) for c in t.children]
        if n_results == 0:
            if len(types) != n_operands:
                raise self.error(tok, f"'{name}' has {n_operands} operands but {len(types)} types")
            return types, []
        if len(types) != 1:
            raise self.error(tok, f"'{name}' with results needs one type or a function type '(..) -> ..'")
        return [types[0]] * n_operands, [types[0]] * n_results

    def _check_operand_types(self, uses: list[Token], operands: list[Value], types: list[Type]) -> None:
        for tok, v, ty in zip(uses, operands, types):
            if v.type != ty:
                raise self.error(tok, f"use of value '{tok}' expects different type than prior uses: "
                                      f"'{ty}' vs '{v.type}'")

    def module_op(self, t: Tree, location: Location) -> Operation:
        attrs: dict[str, A.Attribute] = {}
        region_tree = None
        for c in t.children[1:]:
            if isinstance(c, Token):
                attrs["sym_name"] = A.StringAttr(self.symbol_name(c))
            elif c.data == "attrs_clause":
                attrs.update(self.attr_dict(c.children[1]))
            else:
                region_tree = c
        region = self.region(region_tree, ModuleOp)
        return ModuleOp([], [], attrs, [region], location)

    def region(self, t: Tree, owner: type[Operation], entry: Block | None = None,
               new_scope: bool = True) -> Region:
        if new_scope:
            self.scopes.append({_ISOLATED: True} if "IsolatedFromAbove" in owner.traits else {})  # type: ignore[dict-item]
        region = Region()
        unlabeled, *labeled = t.children
        if entry is not None or unlabeled.children or not labeled:
            block = region.add_block(entry or Block())
            for o in unlabeled.children:
                block.append(self.operation(o))
        for lb in labeled:
            nb = region.add_block(Block())
            rest = lb.children[1:]
            if rest and isinstance(rest[0], Tree) and rest[0].data == "block_args":
                for ba in rest.pop(0).children:
                    self.define(ba.children[0], nb.add_argument(self.type(ba.children[1])))
            for o in rest:
                nb.append(self.operation(o))
        if new_scope:
            self.scopes.pop()
        return region

    # -- types -------------------------------------------------------------------------------
    def type(self, t: Tree | Token) -> Type:
        tok = t.children[0] if isinstance(t, Tree) else t
        if tok.type == "HANDLE_TYPE":
            return self.handle_type(tok)
        return self.tensor_type(tok)

    def handle_type(self, tok: Token) -> HandleType:
        """``!comm.handle<tensor<8xf32>, tensor<4x2xf32>>``: the tensors an async collective makes."""
        text = str(tok)
        inner = text[len("!comm.handle<"):-1]
        col = (tok.column or 1) + len("!comm.handle<")
        parts = []
        for m in re.finditer(r"\s*([^,]+)\s*(,|$)", inner):
            piece = m.group(1).strip()
            if not re.fullmatch(r"tensor<[^>]*>", piece):
                raise DiagnosticError(f"expected a tensor type in '{text}', got '{piece}'",
                                      self.loc_at(tok.line or 1, col + m.start(1)))
            sub = Token("TENSOR_TYPE", piece, line=tok.line, column=col + m.start(1))
            parts.append(self.tensor_type(sub))
        if not parts:
            raise DiagnosticError(f"'{text}' holds no tensor type", self.loc_at(tok.line or 1, col))
        return HandleType(tuple(parts))

    def tensor_type(self, tok: Token) -> TensorType:
        cached = _TENSOR_TYPES.get(tok)
        if cached is not None:
            return cached
        ty = self._tensor_type(tok)
        if len(_TENSOR_TYPES) < 65536:
            _TENSOR_TYPES[str(tok)] = ty
        return ty

    def _tensor_type(self, tok: Token) -> TensorType:
        text = str(tok)
        inner = text[len("tensor<"):-1]
        parts = inner.split("x")
        elt = parts[-1]
        dims = parts[:-1]
        col = (tok.column or 1) + len("tensor<")
        for d in dims:
            if not (d.isascii() and d.isdigit()):
                raise DiagnosticError(f"invalid dimension '{d}' in '{text}' (dims are static integers)",
                                      self.loc_at(tok.line or 1, col))
            col += len(d) + 1
        if elt not in ELEMENT_TYPES:
            raise DiagnosticError(f"unknown element type '{elt}' in '{text}' (expected one of "
                                  f"{', '.join(ELEMENT_TYPES)})", self.loc_at(tok.line or 1, col))
        return TensorType(tuple(int(d) for d in dims), elt)

    def function_type(self, t: Tree) -> FunctionType:
        *ins, res = t.children
        return FunctionType(tuple(self.type(c) for c in ins), tuple(self.type(c) for c in res.children))

    # -- attributes ------------------------------------------------------------------------
    def attr_dict(self, t: Tree) -> dict[str, A.Attribute]:
        out: dict[str, A.Attribute] = {}
        for e in t.children:
            key_tok = e.children[0]
            key = self.unquote(key_tok) if key_tok.type == "STRING" else str(key_tok)
            if key in out:
                raise self.error(key_tok, f"duplicate key '{key}' in dictionary attribute")
            out[key] = self.attr(e.children[1]) if len(e.children) > 1 else A.UnitAttr()
        return out

    def attr(self, t: Tree) -> A.Attribute:
        k = t.data
        c = t.children
        if k == "int_attr":
            return A.IntegerAttr(int(c[0]))
        if k == "float_attr":
            return A.FloatAttr(float(c[0]))
        if k == "true_attr":
            return A.BoolAttr(True)
        if k == "false_attr":
            return A.BoolAttr(False)
        if k == "unit_attr":
            return A.UnitAttr()
        if k == "string_attr":
            return A.StringAttr(self.unquote(c[0]))
        if k == "symbol_attr":
            return A.SymbolRefAttr(self.symbol_name(c[0]))
        if k == "array_attr":
            return A.ArrayAttr(tuple(self.attr(x) for x in c))
        if k == "attr_dict":
            return A.DictAttr.of(self.attr_dict(t))
        if k == "type_attr":
            return A.TypeAttr(self.tensor_type(c[0]))
        if k == "fn_type_attr":
            return A.TypeAttr(self.function_type(c[0]))
        if k == "dense_attr":
            return self.dense(c[0], c[1], c[2])
        if k == "empty_dense_attr":
            ty = self.tensor_type(c[1])
            if ty.num_elements:
                raise self.error(c[0], f"'dense<>' has no elements but {ty} has {ty.num_elements}")
            return A.DenseAttr(ty, ())
        if k == "typed_scalar_attr":
            return self.typed_scalar(c[0], c[1])
        return self._attr_rules[k](self, t)  # a dialect's attribute

    def typed_scalar(self, lit: Token, type_tok: Token) -> A.IntegerAttr | A.FloatAttr:
        """``5 : i65``, ``1.5 : f32``, ``0x7FF0000000000000 : f64`` (the type is checked, then dropped:
        spmdc's integer and float attributes carry none)."""
        ty = str(type_tok)
        is_float = ty in _FLOAT_SCALARS
        if not is_float and (ty[0] != "i" or int(ty[1:]) < 1):
            raise self.error(type_tok, f"unknown scalar type '{ty}' (expected iN or one of "
                                       f"{', '.join(sorted(_FLOAT_SCALARS))})")
        if lit.type == "HEX_INT":
            bits = int(lit, 16)
            if not is_float:
                return self._checked_int(lit, bits, int(ty[1:]))
            try:
                return A.FloatAttr(A.float_of_bits(bits, ty))
            except ValueError as e:
                raise self.error(lit, str(e)) from None
        if lit.type == "FLOAT":
            if not is_float:
                raise self.error(lit, f"float literal {lit} for integer type {ty}")
            return A.FloatAttr(float(lit))
        if is_float:
            raise self.error(lit, f"integer literal {lit} for float type {ty} (write {lit}.0)")
        return self._checked_int(lit, int(lit), int(ty[1:]))

    def _checked_int(self, tok: Token, value: int, bits: int) -> A.IntegerAttr:
        if not -(1 << (bits - 1)) <= value < 1 << bits:
            raise self.error(tok, f"integer {tok} does not fit i{bits}")
        return A.IntegerAttr(value)

    def dense(self, kw: Token, body, type_tok: Token) -> A.DenseAttr:
        ty = self.tensor_type(type_tok)
        is_int = ty.element_type in INT_TYPES
        flat: list = []
        shape: list[int] = []
        leaf_depths: set[int] = set()

        def walk(node, depth: int) -> None:
            if isinstance(node, Tree) and node.data == "dense_list":
                if depth in leaf_depths:
                    raise self.error(kw, "dense literal is not rectangular")
                if len(shape) <= depth:
                    shape.append(len(node.children))
                elif shape[depth] != len(node.children):
                    raise self.error(kw, "dense literal is not rectangular")
                for ch in node.children:
                    walk(ch, depth + 1)
            else:
                tok = node.children[0]
                leaf_depths.add(depth)
                if len(leaf_depths) > 1 or depth < len(shape):
                    raise self.error(kw, "dense literal is not rectangular")
                if tok.type == "TRUE_KW":
                    flat.append(True)
                elif tok.type == "FALSE_KW":
                    flat.append(False)
                elif tok.type == "INT":
                    flat.append(int(tok))
                elif tok.type == "HEX_INT":
                    flat.append(int(tok, 16) if is_int else self._float_bits(tok, ty))
                elif is_int:
                    raise self.error(tok, f"float literal {tok} in a dense attribute of integer type {ty}")
                else:
                    flat.append(float(tok))

        walk(body, 0)
        is_list = isinstance(body, Tree) and body.data == "dense_list"
        # an empty literal (``[]`` or ``[[], []]``) stands for any zero-element shape it prefixes
        empty_ok = not flat and ty.num_elements == 0 and tuple(shape) == ty.shape[:len(shape)]
        if is_list and tuple(shape) != ty.shape and not empty_ok:
            raise self.error(kw, f"dense literal of shape {tuple(shape)} does not match {ty}")
        try:
            return A.DenseAttr(ty, tuple(flat))
        except ValueError as e:
            raise self.error(kw, str(e)) from None

    def _float_bits(self, tok: Token, ty: TensorType) -> float:
        try:
            return A.float_of_bits(int(tok, 16), ty.element_type)
        except ValueError as e:
            raise self.error(tok, f"{e} in a dense attribute of type {ty}") from None


_FLOAT_SCALARS = frozenset({"f16", "bf16", "f32", "f64"})


def _first_token(t: Tree) -> Token:
    for c in t.children:
        if isinstance(c, Token):
            return c
        if isinstance(c, Tree):
            return _first_token(c)
    return Token("X", "", line=1, column=1)


def _describe_token(tok: Token) -> str:
    kind = _TOKEN_NAMES.get(tok.type, tok.type.lower().replace("_kw", ""))
    return f"{kind} '{tok}'" if kind != f"'{tok}'" else kind


def parse_module(text: str, filename: str = "<stdin>", first_line: int = 1,
                 allow_unregistered: bool = False) -> Operation:
    """Parse ``text`` into a ``builtin.module`` (top-level ops are wrapped in one).

    The cyclic garbage collector is paused while parsing: the parse creates many
    small objects and no cycles worth collecting, and collection passes would
    otherwise dominate the time of large files.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return Parser(text, filename, first_line, allow_unregistered).parse_module()
    finally:
        if was_enabled:
            gc.enable()
