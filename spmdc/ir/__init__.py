"""spmdc's SSA IR: core classes, types, attributes, text, verification, rewriting."""

from spmdc.ir.attributes import (
    ArrayAttr, Attribute, BoolAttr, DenseAttr, DictAttr, FloatAttr, IntegerAttr, StringAttr,
    SymbolRefAttr, TypeAttr, UnitAttr,
)
from spmdc.ir.core import Block, BlockArgument, InferError, Operation, OpResult, Region, Use, Value
from spmdc.ir.diagnostics import Diagnostic, DiagnosticError, SourceManager
from spmdc.ir.location import FileLineColLoc, Location, NameLoc, UnknownLoc
from spmdc.ir.parser import parse_module
from spmdc.ir.printer import print_module
from spmdc.ir.sharding import Partial, Placement, Replicate, Shard, ShardingAttr
from spmdc.ir.types import FunctionType, TensorType, Type
from spmdc.ir.verifier import verify

__all__ = [
    "ArrayAttr", "Attribute", "BoolAttr", "DenseAttr", "DictAttr", "FloatAttr", "IntegerAttr",
    "StringAttr", "SymbolRefAttr", "TypeAttr", "UnitAttr", "Block", "BlockArgument", "InferError",
    "Operation", "OpResult", "Region", "Use", "Value", "Diagnostic", "DiagnosticError",
    "SourceManager", "FileLineColLoc", "Location", "NameLoc", "UnknownLoc", "parse_module",
    "print_module", "Partial", "Placement", "Replicate", "Shard", "ShardingAttr", "FunctionType",
    "TensorType", "Type", "verify",
]
