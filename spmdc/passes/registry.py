"""Lazy registry of passes (kebab-case name → module) and the pipeline text parser.

Pipelines are written like mlir-opt's: ``'canonicalize,cse,partition{rank=0}'``;
options inside braces are separated by spaces or commas; names may use ``-`` or ``_``.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import typing
from functools import lru_cache

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedInput

from spmdc.passes.pass_base import ModulePass

PASS_MODULES: dict[str, str] = {
    "canonicalize": "spmdc.passes.canonicalize",
    "cse": "spmdc.passes.cse",
    "dce": "spmdc.passes.dce",
    "sharding-propagation": "spmdc.passes.sharding_propagation",
    "insert-redistribution": "spmdc.passes.insert_redistribution",
    "lower-redistribution": "spmdc.passes.lower_redistribution",
    "partition": "spmdc.passes.partition",
    "fuse-collectives": "spmdc.passes.fuse_collectives",
    "bucket-collectives": "spmdc.passes.bucket_collectives",
    "fuse-kernels": "spmdc.passes.fuse_kernels",
}

# Named pipelines expand to a pipeline string.
PIPELINES: dict[str, str] = {
    "spmd-pipeline": "sharding-propagation,insert-redistribution,lower-redistribution,"
                     "partition,fuse-collectives,cse,dce,canonicalize",
}


class PipelineError(ValueError):
    """A pipeline string that cannot be parsed or names unknown passes/options."""


def get_pass_class(name: str) -> type[ModulePass]:
    module = PASS_MODULES.get(name)
    if module is None:
        near = difflib.get_close_matches(name, list(PASS_MODULES) + list(PIPELINES), n=3)
        hint = f"; did you mean {', '.join(repr(n) for n in near)}?" if near else ""
        raise PipelineError(f"unknown pass '{name}'{hint}")
    return importlib.import_module(module).PASS


def available_passes() -> list[type[ModulePass]]:
    return [get_pass_class(n) for n in sorted(PASS_MODULES)]


_PIPELINE_GRAMMAR = r"""
    start: entry ("," entry)*
    entry: NAME options?
    options: "{" (option (","? option)*)? "}"
    option: NAME ("=" value)?
    ?value: WORD | STRING | "[" (WORD ("," WORD)*)? "]" -> list_value
    NAME: /[A-Za-z_][\w-]*/
    WORD: /[^\s,{}=\[\]"]+/
    STRING: /"[^"]*"/
    %import common.WS
    %ignore WS
"""


@lru_cache(maxsize=1)
def _pipeline_parser() -> Lark:
    return Lark(_PIPELINE_GRAMMAR, parser="lalr")


def parse_pipeline(text: str) -> list[ModulePass]:
    """``'a,b{x=1}'`` → pass instances with typed options."""
    text = text.strip()
    if not text:
        return []
    try:
        tree = _pipeline_parser().parse(text)
    except UnexpectedInput as e:
        col = getattr(e, "column", "?")
        raise PipelineError(f"invalid pass pipeline '{text}' at column {col}") from None
    passes: list[ModulePass] = []
    for entry in tree.children:
        name = str(entry.children[0])
        if name in PIPELINES and len(entry.children) == 1:
            passes.extend(parse_pipeline(PIPELINES[name]))
            continue
        cls = get_pass_class(name)
        kwargs = {}
        if len(entry.children) > 1:
            kwargs = _options(cls, entry.children[1])
        passes.append(cls(**kwargs))
    return passes


def _options(cls: type[ModulePass], tree: Tree) -> dict[str, object]:
    fields = {f.name: f for f in cls.option_fields()}
    hints = cls.option_types()
    out: dict[str, object] = {}
    for opt in tree.children:
        key = str(opt.children[0]).replace("-", "_")
        if key not in fields:
            known = ", ".join(f.replace("_", "-") for f in fields) or "none"
            raise PipelineError(f"pass '{cls.name}' has no option '{opt.children[0]}' (options: {known})")
        raw = opt.children[1] if len(opt.children) > 1 else None
        out[key] = _convert(cls.name, key, hints.get(key, str), raw)
    return out


def _convert(pass_name: str, key: str, ty: object, raw: Token | Tree | None) -> object:
    origin = typing.get_origin(ty)
    try:
        if ty is bool:
            if raw is None:
                return True
            text = str(raw).lower()
            if text not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text in ("true", "1")
        if raw is None:
            raise ValueError("missing value")
        if origin in (list, tuple):
            (elt,) = typing.get_args(ty)[:1] or (str,)
            items = [str(t) for t in raw.children] if isinstance(raw, Tree) else str(raw).split(",")
            return [elt(i) for i in items if i]  # type: ignore[operator]
        text = str(raw)
        if text.startswith('"'):
            text = text[1:-1]
        if ty is int:
            return int(text)
        if ty is float:
            return float(text)
        return text
    except ValueError:
        tname = getattr(ty, "__name__", str(ty))
        raise PipelineError(f"option '{key.replace('_', '-')}' of pass '{pass_name}' expects {tname}, "
                            f"got '{raw}'") from None
