"""Capture time of a 12-layer GPT-2 (d_model 768) training step, by stage.

    python bench/capture_gpt2.py [--layers 12] [--d-model 768] [--vocab 2048] [--seq 64] [--check]

Stages: ``export`` (torch.export + joint forward/backward decomposition, PyTorch's work),
``check`` + ``import`` (torch-mlir's FX importer), ``translate`` (spmdc: torch dialect ->
``tensor`` dialect) and ``verify`` (spmdc's verifier). ``--check`` also runs the captured
step in the reference interpreter and compares loss and gradients with eager autograd.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--check", action="store_true", help="interpret the step and compare with autograd")
    args = ap.parse_args()

    import torch

    from spmdc.frontend.workloads import load_workload
    from spmdc.ir.printer import print_module

    w = load_workload("gpt2-tiny", n_layer=args.layers, d_model=args.d_model, n_head=args.heads,
                      vocab_size=args.vocab, seq=args.seq, block_size=args.seq, batch=args.batch)
    n_params = sum(p.numel() for p in w.model.parameters())
    t0 = time.perf_counter()
    cap = w.capture(train=True)
    wall = time.perf_counter() - t0
    t = time.perf_counter()
    text = print_module(cap.module)
    print_s = time.perf_counter() - t
    t = cap.timings
    n_ops = sum(1 for _ in cap.module.walk()) - 3
    print(f"GPT-2 training step: {args.layers} layers, d_model {args.d_model}, {args.heads} heads, vocab {args.vocab}, "
          f"batch {args.batch} x seq {args.seq}, {n_params / 1e6:.1f}M parameters")
    print(f"torch ops translated: {cap.stats.torch_ops}; spmdc ops: {n_ops}; IR text: {len(text) / 1e6:.2f} MB")
    print()
    rows = [
        ("torch.export + joint decomposition (PyTorch)", t["export"]),
        ("torch-mlir FX import", t["import"]),
        ("spmdc: op support check", t["check"]),
        ("spmdc: translate torch -> tensor dialect", t["translate"]),
        ("spmdc: verify", t["verify"]),
        ("total capture (spmdc.capture wall time)", wall),
        ("  of which spmdc's own work", t["check"] + t["translate"] + t["verify"]),
        ("(print IR to text, not part of capture)", print_s),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'stage'.ljust(width)}  seconds")
    print(f"{'-' * width}  -------")
    for name, sec in rows:
        print(f"{name.ljust(width)}  {sec:7.3f}")
    if args.check:
        t = time.perf_counter()
        from spmdc.runtime.interpreter import interpret

        outs = interpret(cap.module, cap.arguments(*w.inputs, *w.loss_inputs))
        interp = time.perf_counter() - t
        w.model.zero_grad()
        loss = w.loss_fn(w.model(*w.inputs), *w.loss_inputs)
        loss.backward()
        grads = {n: p.grad for n, p in w.model.named_parameters()}
        worst, bad = 0.0, []
        for o, v in zip(cap.info.outputs, outs):
            if o.kind == "gradient":
                ref = grads[o.fqn]
                if not torch.allclose(v, ref, rtol=1e-4, atol=1e-6):
                    bad.append(o.fqn)
                if ref.abs().max() > 1e-6:  # skip gradients that are zero in exact arithmetic (k bias)
                    worst = max(worst, ((v - ref).abs().max() / ref.abs().max()).item())
        print(f"\ninterpreter: {interp:.2f}s; loss {outs[0].item():.6f} vs eager {loss.item():.6f}; "
              f"worst gradient error (max |diff| / max |grad|, nonzero gradients): {worst:.2e}; "
              f"gradients outside rtol 1e-4/atol 1e-6: {bad or 'none'}")
        torch.testing.assert_close(outs[0], loss.detach(), rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    main()
