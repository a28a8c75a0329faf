"""Every spmdc exception survives pickling with its message and fields (errors cross ranks:
torch.distributed pickles them), and no exception class is left out of this table."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil

import pytest

import spmdc
from spmdc.ir.location import FileLineColLoc, NameLoc


def _examples() -> dict[str, object]:
    from spmdc.compiler.compile_cache import CompileCacheWarning
    from spmdc.compiler.fingerprint import Uncacheable
    from spmdc.compiler.options import OptionError
    from spmdc.frontend.aten.base import TranslationError, UnsupportedOpError, UnsupportedOpsError
    from spmdc.frontend.deferred_init import ReplayError
    from spmdc.frontend.joint import MetadataLostWarning
    from spmdc.frontend.loss import OutputLeftOutWarning
    from spmdc.frontend.mixed_precision import MixedPrecisionError
    from spmdc.frontend.program import ExportError
    from spmdc.frontend.repeated import NotRepeatable, RepeatedBlocksWarning
    from spmdc.frontend.stages import StageError
    from spmdc.frontend.torch_compat import UnsupportedTorchError
    from spmdc.frontend.workloads import WorkloadError
    from spmdc.ir.core import InferError
    from spmdc.ir.diagnostics import DiagnosticError
    from spmdc.passes.expert_dispatch import NotADispatch
    from spmdc.passes.registry import PipelineError
    from spmdc.runtime.checkpointing import CheckpointError, CheckpointWarning
    from spmdc.runtime.collectives import CollectiveTimeout
    from spmdc.runtime.launcher import LaunchError, Terminated
    from spmdc.sharding.plan import PlanError
    from spmdc.sharding.strategy import ShardingFallbackWarning
    from spmdc.tools.errors import UserError

    return {
        "DiagnosticError": DiagnosticError("'tensor.add' op bad", FileLineColLoc("x.mlir", 3, 7)),
        "UnsupportedOpError": UnsupportedOpError("aten.sort", "blocks.0.attn", fx_node="sort", module_type="Attn",
                                                 source="File \"m.py\", line 3", reason="has no translation"),
        "UnsupportedOpsError": UnsupportedOpsError([
            UnsupportedOpError("aten.sort", "blocks.0.attn", fx_node="sort", module_type="Attn", source="m.py:3"),
            UnsupportedOpError("aten.nonzero", "", fx_node="nonzero", reason="has no translation"),
        ]),
        "TranslationError": TranslationError("handler gave 2 results", NameLoc("aten.mm")),
        "InferError": InferError("shapes [2] and [3] are not broadcast-compatible"),
        "PipelineError": PipelineError("unknown pass 'x'"),
        "PlanError": PlanError("parameter 'w': Partial is not a layout a parameter can have"),
        "WorkloadError": WorkloadError("unknown workload 'x'"),
        "ExportError": ExportError("torch.export.export failed: RuntimeError: boom"),
        "StageError": StageError("stage 0: the model has no module 'h.O' (did you mean 'h.0'?)"),
        "OptionError": OptionError("option grad_accum=0: expected an integer >= 1"),
        "MixedPrecisionError": MixedPrecisionError("unknown mixed precision 'bf17' (choices: bf16, fp16, none)"),
        "ReplayError": ReplayError("'fc.extra' is never initialized by the recorded construction"),
        "CheckpointError": CheckpointError("checkpoint ckpt/__0_0.distcp is damaged (truncated: 0 of at least 6,380 "
                                           "bytes)"),
        "CheckpointWarning": CheckpointWarning("checkpoint 'ckpt': optimizer AdamW keeps its own settings, which "
                                               "differ from the saved ones: weight_decay 0.0 there, 0.1 now"),
        "LaunchError": LaunchError("rank 1 failed: RuntimeError: boom\n  at m.py:3 in f"),
        "Terminated": Terminated(),
        "CollectiveTimeout": CollectiveTimeout("collective all_reduce on axis 'dp' (ranks [0, 1, 2]) timed out after "
                                               "3.0s on rank 0: ranks [2] never arrived"),
        "ShardingFallbackWarning": ShardingFallbackWarning("'tensor.relu' op at loc(\"x.mlir\":3:7): no sharding "
                                                           "strategy produces the required result layout"),
        "UnsupportedTorchError": UnsupportedTorchError("spmdc needs torch 2.13.x, found 2.12.0"),
        "UserError": UserError("cannot read 'x.mlir': No such file or directory"),
        "MetadataLostWarning": MetadataLostWarning("module paths of backward ops are lost"),
        "OutputLeftOutWarning": OutputLeftOutWarning("output 'past_key_values' (DynamicCache) is not a tensor"),
        "CompileCacheWarning": CompileCacheWarning("compile cache entry steps/ab12.pkl is unreadable (truncated): "
                                                   "compiling again"),
        "Uncacheable": Uncacheable("loss_fn closes over a tensor"),
        "NotRepeatable": NotRepeatable("'view_100' of block 1 is read outside the blocks"),
        "RepeatedBlocksWarning": RepeatedBlocksWarning("spmdc: the 32 blocks of 'model.layers' are exported one "
                                                       "by one: the program built for 4 blocks has 1200 nodes"),
        "NotADispatch": NotADispatch("the sorted ids are used by 'tensor.add' (only their histogram is handled)"),
    }


def _comparable(value: object) -> object:
    """Exceptions have identity equality: compare them (and containers of them) by type and message."""
    if isinstance(value, BaseException):
        return (type(value).__name__, str(value))
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_comparable(v) for v in value]
    return value


def _all_exception_classes() -> set[str]:
    names = set()
    for info in pkgutil.walk_packages(spmdc.__path__, "spmdc."):
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                names.add(obj.__name__)
    return names


def test_every_exception_class_is_in_the_table():
    assert _all_exception_classes() == set(_examples())


@pytest.mark.parametrize("name", sorted(_examples()))
def test_round_trip_keeps_type_message_and_fields(name):
    err = _examples()[name]
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err) and back.args == err.args
    assert _comparable(vars(back)) == _comparable(vars(err))
    if hasattr(err, "diagnostic"):
        assert back.diagnostic.location == err.diagnostic.location
    if name == "UnsupportedOpsError":
        assert [e.op for e in back.found] == ["aten.sort", "aten.nonzero"] and "aten.nonzero" in str(back)
    if name == "UnsupportedOpError":
        assert back.op == "aten.sort" and back.module_path == "blocks.0.attn" and "aten.sort" in str(back)
