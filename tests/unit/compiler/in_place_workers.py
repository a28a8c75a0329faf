"""Rank program of tests/unit/compiler/test_in_place.py and test_remat.py: gpt2-tiny's fsdp training
step compiled with and without a pass (its compile option: ``in_place``, ``remat``), run on the same
arguments."""

from __future__ import annotations

import warnings


def same_step_both_ways(option: str = "in_place", mixed_precision: str | None = None, model_name: str = "gpt2") -> dict:
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from spmdc.compiler import compile_rank, compile_step
    from spmdc.examples import gpt2_tiny, llama_tiny
    from spmdc.passes.memory import function, profile
    from spmdc.runtime.collectives import Collectives, CountingComm
    from spmdc.runtime.executor import RankRunner
    from spmdc.runtime.memory import measure_peak
    from spmdc.sharding.mesh import Mesh

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = {}
    try:
        if model_name == "llama":
            model, ((x,), (y,)), loss_fn = llama_tiny.factory(batch=4, seq=32, vocab_size=256, d_model=64, n_head=4,
                                                              n_kv_head=2, hidden=128, n_layer=2)
        else:
            model, ((x,), (y,)), loss_fn = gpt2_tiny.factory(batch=4, seq=32, vocab_size=256, block_size=32,
                                                              d_model=64, n_head=4, n_layer=2)
        dmesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
        for on in (True, False):
            step = compile_step(model, (x,), mesh=Mesh({"dp": 2}), plan="fsdp", train=True, loss_fn=loss_fn,
                                loss_inputs=(y,), mixed_precision=mixed_precision, **{option: on})
            prog = compile_rank(step, rank)
            comm = Collectives(dmesh)
            args = RankRunner(prog, comm).local_arguments(step.arguments)
            before = [a.clone() for a in args]
            with torch.no_grad():
                res, peak = measure_peak(prog.fn, args, CountingComm(comm))
            out[on] = dict(results=res, estimate=prog.peak_bytes, measured=peak, writes=prog.source.count(", out="),
                           lines=prog.source.count("\n"), counts=dict(comm.stats.counts),
                           scatters_in_place=prog.source.count(".scatter_("),
                           casts=prog.source.count(".to(torch.bfloat16"),
                           sigmoids=prog.source.count("torch.sigmoid("),
                           area=sum(profile(list(function(prog.module).body.ops)).live),
                           args_kept=all(torch.equal(a, b) for a, b in zip(args, before)))
    finally:
        dist.destroy_process_group()
    return out
