"""The torch boundary: version checks, degraded metadata, no private names elsewhere."""

from __future__ import annotations

import ast
import contextlib
import os
import pathlib
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))

from capture_helpers import check_train  # noqa: E402

from spmdc.frontend import torch_compat  # noqa: E402
from spmdc.frontend.capture import capture_program  # noqa: E402
from spmdc.frontend.joint import MetadataLostWarning  # noqa: E402
from spmdc.frontend.torch_compat import UnsupportedTorchError  # noqa: E402

FRONTEND = pathlib.Path(torch_compat.__file__).parent
# Private names in files this refactor could not touch yet (file, dotted name).
KNOWN_ELSEWHERE: set[tuple[str, str]] = set()


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))


def _capture_train(model: nn.Module):
    x, y = torch.randn(4, 8), torch.randn(4, 4)
    return capture_program(model, (x,), train=True, loss_fn=F.mse_loss, loss_inputs=(y,)), x, y


# ---- version checks -----------------------------------------------------------------


def test_torch_version_check_accepts_2_13_patch_releases():
    for v in ("2.13.0", "2.13.0+cpu", "2.13.2+cu128"):
        torch_compat.check_torch_version(v)


@pytest.mark.parametrize("found", ["2.12.1", "2.14.0", "3.0.0"])
def test_torch_version_check_is_one_sentence_naming_both_versions(found):
    with pytest.raises(UnsupportedTorchError) as exc:
        torch_compat.check_torch_version(found)
    msg = str(exc.value)
    assert found in msg and "2.13" in msg
    assert msg.count(". ") == 0 and msg.endswith(".") and "\n" not in msg
    assert isinstance(exc.value, ImportError)


def test_importing_the_frontend_with_another_torch_fails_clearly():
    code = ("import torch; torch.__version__ = '2.12.0'\n"
            "try:\n    import spmdc.frontend.export\n"
            "except ImportError as e:\n    print(type(e).__name__, '|', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("UnsupportedTorchError | "), out.stdout + out.stderr
    assert "found torch 2.12.0" in out.stdout


def test_torch_mlir_version_check():
    torch_compat.check_torch_mlir_version(torch_compat.TESTED_TORCH_MLIR)
    with pytest.raises(UnsupportedTorchError, match="found torch-mlir 20250101"):
        torch_compat.check_torch_mlir_version("20250101")


def test_no_private_name_is_resolved_at_import():
    """Importing the frontend survives a torch whose private helpers moved."""
    code = ("import torch, torch._functorch.aot_autograd as a, torch.export.exported_program as e\n"
            "import torch.utils._pytree as p\n"
            "del a._aot_export_function, e._decompose_exported_program, p.tree_leaves\n"
            "import spmdc.frontend.export, spmdc.frontend.capture, spmdc.frontend.torch_mlir_bridge\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_op_checks_are_resolved_lazily():
    assert torch_compat.no_op_check_targets() == (torch.ops.aten._assert_tensor_metadata.default,)


# ---- degraded metadata ----------------------------------------------------------------


def test_joint_capture_survives_a_missing_private_function(monkeypatch):
    @contextlib.contextmanager
    def moved(wrap):
        raise AttributeError("module 'aot_autograd' has no attribute '_aot_export_function'")
        yield  # pragma: no cover

    monkeypatch.setattr(torch_compat, "wrapped_aot_export_function", moved)
    model = _mlp()
    with pytest.warns(MetadataLostWarning, match="metadata_complete=False"):
        cap, x, y = _capture_train(model)
    assert cap.info.metadata_complete is False
    check_train(cap, model, (x,), F.mse_loss, (y,))


def test_joint_capture_survives_a_raising_patch_and_restores_the_original(monkeypatch):
    real = torch_compat.wrapped_aot_export_function

    def raising(original):
        def export_fn(*args, **kwargs):
            raise RuntimeError("patched path broke")
        return export_fn

    monkeypatch.setattr(torch_compat, "wrapped_aot_export_function", lambda wrap: real(raising))
    model = _mlp()
    with pytest.warns(MetadataLostWarning, match="patched path broke"):
        cap, x, y = _capture_train(model)
    assert cap.info.metadata_complete is False
    check_train(cap, model, (x,), F.mse_loss, (y,))

    monkeypatch.undo()  # the original function is back: metadata is preserved again
    with warnings.catch_warnings():
        warnings.simplefilter("error", MetadataLostWarning)
        cap, _, _ = _capture_train(model)
    assert cap.info.metadata_complete is True
    bwd = [n for n in cap.info.nodes.values() if n.is_backward]
    assert bwd and {"0", "2"} <= {n.module_path for n in bwd}


# ---- the boundary ---------------------------------------------------------------------


def _private_names(path: pathlib.Path) -> set[tuple[str, str]]:
    """Private torch/torch-mlir names a module mentions: private attributes (except on
    self/cls), imports from private modules or of private names, and docstring-free text
    mentions such as ``aten._foo``."""
    found: set[tuple[str, str]] = set()
    rel = path.relative_to(FRONTEND).as_posix()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[0] in ("torch", "torch_mlir") and (
                any(p.startswith("_") for p in parts)
                or any(a.name.startswith("_") for a in node.names)
            ):
                found.add((rel, node.module))
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            found.add((rel, f"{ast.unparse(base)}.{node.attr}"))
    return found


def test_private_torch_names_only_in_torch_compat():
    found: set[tuple[str, str]] = set()
    for path in sorted(FRONTEND.rglob("*.py")):
        if path.name != "torch_compat.py":
            found |= _private_names(path)
    assert found <= KNOWN_ELSEWHERE, sorted(found - KNOWN_ELSEWHERE)


def test_frontend_imports_only_ir_dialects_and_itself():
    allowed = ("spmdc.ir", "spmdc.dialects", "spmdc.frontend")
    bad = []
    for path in sorted(FRONTEND.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                if name.startswith("spmdc") and not name.startswith(allowed):
                    bad.append(f"{path.name}: {name}")
    assert not bad, bad
