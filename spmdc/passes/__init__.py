"""Passes: a lazy registry (:mod:`.registry`), the pass manager (:mod:`.manager`), one module per pass."""
