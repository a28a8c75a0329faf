"""Python identifiers and literals for text that comes from the IR.

Nothing read from an IR file (value hints, symbol names, mesh axis names, string
attributes) reaches generated source except through :func:`py_name` (reduced to
``[A-Za-z][A-Za-z0-9_]*``, never a keyword, builtin or dunder) or :func:`literal`
(:mod:`spmdc.dialects.pyexpr`: ``repr`` of a plain ``int``/``float``/``bool``/``str``), so an IR
file cannot inject code.

    >>> Namer().fresh("fc1.weight"), Namer().fresh("__import__('os')"), Namer().fresh("class")
    ('fc1_weight', 'v___import____os__', 'v_class')
"""

from __future__ import annotations

import builtins
import keyword
import re

from spmdc.dialects.pyexpr import literal, shape_literal  # noqa: F401  (the one way attribute values reach source)

_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")
_SAFE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_BUILTINS = frozenset(dir(builtins))


def py_name(text: str | None, prefix: str = "v") -> str:
    """An ASCII identifier for ``text``; ``prefix`` goes in front when the bare form is unsafe."""
    s = _NOT_IDENT.sub("_", text or "")[:64]
    if not s or not s[0].isalpha() or keyword.iskeyword(s) or keyword.issoftkeyword(s) or s in _BUILTINS:
        s = f"{prefix}_{s}" if s and not s[0].isdigit() else f"{prefix}{s}"
    assert _SAFE.fullmatch(s), s
    return s


class Namer:
    """Unique identifiers in one Python scope; ``reserved`` names are never handed out."""

    def __init__(self, reserved: frozenset[str] | set[str] = frozenset(), prefix: str = "v"):
        self.used = set(reserved)
        self.prefix = prefix
        self.anon = 0

    def fresh(self, hint: str | None) -> str:
        if hint is None or hint.isdigit():
            base = f"{self.prefix}{self.anon}"
            self.anon += 1
        else:
            base = py_name(hint, self.prefix)
        name, n = base, 0
        while name in self.used or keyword.iskeyword(name):
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        return name
