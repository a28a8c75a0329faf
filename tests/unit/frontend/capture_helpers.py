"""Shared checks for frontend capture tests: round-trip, interpreter vs eager, IR conventions."""

from __future__ import annotations

import torch

from spmdc.dialects.func import FuncOp
from spmdc.ir.location import NameLoc
from spmdc.ir.parser import parse_module
from spmdc.ir.printer import print_module
from spmdc.ir.verifier import verify
from spmdc.runtime.interpreter import interpret

OUT_RTOL, OUT_ATOL = 1e-5, 1e-6
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-6


def main_func(module) -> FuncOp:
    return next(op for op in module.body.ops if isinstance(op, FuncOp))


def check_ir(module) -> None:
    """Verifies, round-trips byte-identically, and every op points back to its aten source."""
    verify(module)
    text = print_module(module)
    again = parse_module(text, "captured.mlir")
    verify(again)
    assert print_module(again) == text
    func = main_func(module)
    for op in func.body.ops[:-1]:
        assert isinstance(op.location, NameLoc), op
        if op.name == "tensor.constant" and "lifted_tensor" in op.location.name:
            continue   # a tensor constant of the model (torch.export lifts it), named after it
        assert any(ns in op.location.name for ns in ("aten.", "prims.", "prim.", "transformers.")), \
            op.location   # an aten/prims op, or a library's custom op (HuggingFace's grouped matmul)
        if op.name != "tensor.constant":
            assert all(r.name_hint for r in op.results), f"{op.name} at {op.location} has no name"
    assert all(op.name.startswith("tensor.") for op in func.body.ops[:-1])


def eager_train(model, args, loss_fn, loss_inputs=(), kwargs=None):
    model.zero_grad()
    out = model(*args, **(kwargs or {}))
    loss = loss_fn(out, *loss_inputs) if loss_fn is not None else out.loss
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return loss.detach(), grads


def check_forward(cap, model, args, kwargs=None) -> None:
    func = main_func(cap.module)
    assert "spmdc.train_step" not in func.attributes
    user = list(args) + list((kwargs or {}).values())
    outs = interpret(cap.module, cap.arguments(*user))
    with torch.no_grad():
        ref = model(*args, **(kwargs or {}))
    ref = getattr(ref, "logits", ref)
    assert len(outs) == 1 and not func.res_attrs(0)
    torch.testing.assert_close(outs[0], ref, rtol=OUT_RTOL, atol=OUT_ATOL)


def check_train(cap, model, args, loss_fn, loss_inputs=(), kwargs=None) -> None:
    func = main_func(cap.module)
    assert "spmdc.train_step" in func.attributes
    user = list(args) + list(loss_inputs) + list((kwargs or {}).values())
    outs = interpret(cap.module, cap.arguments(*user))
    loss, grads = eager_train(model, args, loss_fn, loss_inputs, kwargs)
    n_res = len(func.function_type.results)
    roles = [func.res_attrs(i) for i in range(n_res)]
    loss_idx = [i for i, a in enumerate(roles) if "spmdc.loss" in a]
    assert loss_idx == [0]
    torch.testing.assert_close(outs[0], loss, rtol=OUT_RTOL, atol=OUT_ATOL)
    got = {a["spmdc.grad_of"].value: outs[i] for i, a in enumerate(roles) if "spmdc.grad_of" in a}
    assert set(got) == set(grads)
    for fqn, g in grads.items():
        torch.testing.assert_close(got[fqn], g, rtol=GRAD_RTOL, atol=GRAD_ATOL, msg=lambda m: f"{fqn}: {m}")


def check_params_are_args(cap, model) -> None:
    """Every parameter (tied ones once) is an argument with spmdc.param; nothing baked in."""
    func = main_func(cap.module)
    params = {func.arg_attrs(i)["spmdc.param"].value for i in range(len(func.args))
              if "spmdc.param" in func.arg_attrs(i)}
    assert set(dict(model.named_parameters())) <= params
    for op in func.body.ops:
        if op.name == "tensor.constant":
            assert op.result.tensor_type.num_elements <= 4096 or op.attributes["value"].is_splat
