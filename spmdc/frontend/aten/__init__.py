"""Translation tables from torch-mlir's ``torch`` dialect to spmdc's ``tensor`` dialect.

One module per op family registers handlers with :func:`~.base.handles`:
:mod:`.elementwise`, :mod:`.shape`, :mod:`.reduction`, :mod:`.index`, :mod:`.creation`,
:mod:`.attention`, :mod:`.random`.
"""

from __future__ import annotations

from spmdc.frontend.aten.base import HANDLERS, Emitter, TranslationError, UnsupportedOpError, UnsupportedOpsError


def handler_table() -> dict:
    """The full name -> handler table (imports every family module once)."""
    from spmdc.frontend.aten import (  # noqa: F401
        attention,
        bag,
        conv,
        creation,
        distance,
        elementwise,
        index,
        moe,
        pool,
        random,
        reduction,
        shape,
        sort,
    )

    return HANDLERS


__all__ = ["Emitter", "TranslationError", "UnsupportedOpError", "UnsupportedOpsError", "handler_table"]
