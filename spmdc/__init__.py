"""spmdc — a sharding compiler toolchain for PyTorch.

The IR lives in :mod:`spmdc.ir`, dialects in :mod:`spmdc.dialects`, passes in
:mod:`spmdc.passes`, command-line tools in :mod:`spmdc.tools`.
"""

__version__ = "0.1.0"
