"""Checks and tables of spmdc's Core ATen coverage (:mod:`spmdc.frontend.opset`): run the samples
through capture, the interpreter and the generated code (:mod:`.check`), render the coverage and
rule tables (:mod:`.table`); ``python -m spmdc.tools.core_aten [--check]`` writes (or compares)
``docs/core_aten.md`` and ``tests/lit/rules/core_aten_rules.txt``."""
