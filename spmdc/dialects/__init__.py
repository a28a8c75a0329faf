"""The dialects of spmdc, one module each: builtin, func, tensor, shard, comm, kernel.

They are loaded lazily by :mod:`spmdc.ir.registry`.
"""
