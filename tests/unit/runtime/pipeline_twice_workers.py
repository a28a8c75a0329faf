"""Workers for test_pipeline_twice.py: two pipelines built one after the other in one job."""

from __future__ import annotations


def two_pipelines() -> list[float]:
    """gpt2-tiny in 4 one-rank stages, then llama-tiny in 2 stages of 2 ranks (fsdp): each trains 2
    steps; returns the second's losses."""
    import torch.distributed as dist

    from spmdc.api.entry import CompiledModule, Optimizer
    from spmdc.frontend.workloads import load_workload
    from spmdc.sharding.pipeline_plan import PipelinePlan

    dist.init_process_group("gloo")
    try:
        losses = []
        for name, mesh, plan, kw in (("gpt2-tiny", "pp=4", "dp", {"batch": 8, "n_layer": 4}),
                                     ("llama-tiny", "pp=2,dp=2", "fsdp", {"batch": 8})):
            w = load_workload(name, **kw)
            cm = CompiledModule(w.model, tuple(w.inputs), mesh=None, plan=PipelinePlan.from_mesh(mesh, plan),
                                train=True, loss_fn=w.loss_fn, loss_inputs=tuple(w.loss_inputs),
                                example_kwargs=w.kwargs, optimizer=Optimizer("sgd", lr=0.05))
            losses = [float(cm.step(*w.inputs, *w.loss_inputs, **w.kwargs)) for _ in range(2)]
        return losses
    finally:
        dist.destroy_process_group()
