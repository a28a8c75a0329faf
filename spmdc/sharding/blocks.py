"""Repeated blocks of a model, from parameter and op paths: the unit of FSDP's buckets and of
reshard-after-forward.

A block is the module path up to the first numbered component (``h.3``,
``model.layers.0``, ``0`` of an ``nn.Sequential``); a path without one belongs to the model's
root-level modules (embeddings, final norm, head), which have no block::

    block_of("transformer.h.3.attn.c_attn.weight")  == "transformer.h.3"
    block_of("h.0.mlp.c_fc/aten.mm")                == "h.0"      # an op's location
    block_of("wte.weight")                          == None
"""

from __future__ import annotations

__all__ = ["block_of", "module_of"]


def block_of(path: str) -> str | None:
    """The repeated block a parameter or op path belongs to, or None (root-level modules)."""
    parts = path.split("/")[0].split(".")
    for i, p in enumerate(parts):
        if p.isdigit():
            return ".".join(parts[:i + 1])
    return None


def module_of(path: str) -> str:
    """The block of ``path``, or else its first module (``wte.weight`` → ``wte``)."""
    b = block_of(path)
    return b if b is not None else path.split("/")[0].split(".")[0]
