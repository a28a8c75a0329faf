"""What users call: compile (or run op by op) a model for a layout, then run it on the ranks.

This layer sits above both the compiler (:mod:`spmdc.compiler`: capture, passes, code generation)
and the runtime (:mod:`spmdc.runtime`: executing rank programs, collectives, checkpoints), which
never imports the compiler, the frontend or the passes.

    cm = spmdc.compile(model, (x,), mesh="dp=2,tp=2", plan="fsdp+tp", train=True, ...)   # entry.py
"""
