"""Lazy registry of passes (kebab-case name → module) and the pipeline text parser.

Pipelines are written like mlir-opt's: ``'canonicalize,cse,partition{rank=0}'``;
options inside braces are separated by spaces or commas; pass and option names may
use ``-`` or ``_``. Named pipelines with options (``spmd-pipeline{rank=1 target=triton}``)
are defined by the layers that own them (:mod:`spmdc.compiler`) and handed to
:func:`parse_pipeline` as :class:`NamedPipeline` entries.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedInput

from spmdc.passes.pass_base import ModulePass

PASS_MODULES: dict[str, str] = {
    "canonicalize": "spmdc.passes.canonicalize",
    "cse": "spmdc.passes.cse",
    "dce": "spmdc.passes.dce",
    "philox-rng": "spmdc.passes.philox_rng",
    "expert-dispatch": "spmdc.passes.expert_dispatch",
    "sharding-propagation": "spmdc.passes.sharding_propagation",
    "insert-redistribution": "spmdc.passes.insert_redistribution",
    "lower-redistribution": "spmdc.passes.lower_redistribution",
    "partition": "spmdc.passes.partition",
    "fuse-collectives": "spmdc.passes.fuse_collectives",
    "bucket-collectives": "spmdc.passes.bucket_collectives",
    "schedule-collectives": "spmdc.passes.schedule_collectives",
    "suspend-for-backward": "spmdc.passes.suspend_for_backward",
    "fuse-kernels": "spmdc.passes.fuse_kernels",
    "fuse-bias-add": "spmdc.passes.fuse_bias_add",
    "cross-group": "spmdc.passes.cross_group",
    "pipeline-schedule": "spmdc.passes.pipeline_schedule",
    "in-place": "spmdc.passes.in_place",
    "remat": "spmdc.passes.remat",
}


class PipelineError(ValueError):
    """A pipeline string that cannot be parsed or names unknown passes/options."""


@dataclass(frozen=True)
class NamedPipeline:
    """A pipeline known by name: ``options`` is a dataclass of its options (written
    ``name{opt=value}``), ``expand(options)`` the pipeline text it stands for."""

    name: str
    summary: str
    options: type
    expand: Callable[[Any], str]


def get_pass_class(name: str, pipelines: Mapping[str, NamedPipeline] | None = None) -> type[ModulePass]:
    module = PASS_MODULES.get(name.replace("_", "-"))
    if module is None:
        near = difflib.get_close_matches(name, list(PASS_MODULES) + list(pipelines or {}), n=3)
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


def parse_pipeline(text: str, pipelines: Mapping[str, NamedPipeline] | None = None) -> list[ModulePass]:
    """``'a,b{x=1}'`` → pass instances with typed options; ``pipelines``: named pipelines."""
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
        opts = entry.children[1] if len(entry.children) > 1 else None
        named = (pipelines or {}).get(name)
        if named is not None:
            values = named.options(**_options(named.options, opts, f"pipeline '{name}'")) if opts else named.options()
            passes.extend(parse_pipeline(named.expand(values), pipelines))
            continue
        cls = get_pass_class(name, pipelines)
        kwargs = _options(cls, opts, f"pass '{cls.name}'") if opts is not None else {}
        try:
            passes.append(cls(**kwargs))
        except ValueError as e:  # an option value the pass rejects (a range check)
            raise PipelineError(f"pass '{cls.name}': {e}") from None
    return passes


def option_fields(cls: type) -> list[dataclasses.Field]:
    return list(dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else []


def _options(cls: type, tree: Tree, what: str) -> dict[str, object]:
    fields = {f.name: f for f in option_fields(cls)}
    hints = typing.get_type_hints(cls)
    out: dict[str, object] = {}
    for opt in tree.children:
        key = str(opt.children[0]).replace("-", "_")
        if key not in fields:
            known = ", ".join(f.replace("_", "-") for f in fields) or "none"
            raise PipelineError(f"{what} has no option '{opt.children[0]}' (options: {known})")
        if key in out:
            raise PipelineError(f"option '{opt.children[0]}' of {what} is given twice")
        raw = opt.children[1] if len(opt.children) > 1 else None
        out[key] = _convert(what, key, hints.get(key, str), raw)
    return out


def _convert(what: str, key: str, ty: object, raw: Token | Tree | None) -> object:
    origin = typing.get_origin(ty)
    tname = getattr(ty, "__name__", str(ty))
    option = f"option '{key.replace('_', '-')}' of {what}"
    if raw is None and ty is not bool:
        raise PipelineError(f"{option} needs a value ({key.replace('_', '-')}=<{tname}>)")
    if isinstance(raw, Tree) and origin not in (list, tuple):
        items = ", ".join(str(t) for t in raw.children)
        raise PipelineError(f"{option} expects one {tname}, got a list [{items}]")
    try:
        if ty is bool:
            if raw is None:
                return True
            text = str(raw).lower()
            if text not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text in ("true", "1")
        if origin in (list, tuple):
            (elt,) = typing.get_args(ty)[:1] or (str,)
            items = [str(t) for t in raw.children] if isinstance(raw, Tree) else str(raw).split(",")  # type: ignore[union-attr]
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
        raise PipelineError(f"{option} expects {tname}, got '{raw}'") from None
