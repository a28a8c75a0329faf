"""BatchNorm in training inside pipeline stages and on one mesh, and ``inputs="local"`` for
pipeline stages and device groups, on 4 gloo ranks (one launch), against one device (rtol 1e-4,
atol 1e-5).

A tiny CNN (conv, BatchNorm2d in stage 0; linear, BatchNorm1d (momentum 0.3) and a head in stage
1, under fsdp or ddp on dp=2), 2 micro-batches x ``grad_accum=2``, two SGD steps: the losses, the
parameters and the running statistics (``running_mean``, ``running_var``, ``num_batches_tracked``)
equal one device running each step's 4 micro-batches one after another: each stage updates its
buffers once per micro-batch (the backward's recomputed forward does not), with the statistics of
the whole micro-batch under a dp=2 stage mesh; a checkpoint saved after training gives a fresh
module the updated statistics. One mesh (fsdp, dp=4) updates them with the whole batch's. With
``inputs="local"`` each rank passes its ``DistributedSampler`` piece (``spmdc.sampler_args``): the
step equals one device on the assembled batch, with one ``all_gather`` per input per step (and
one of the pieces' shapes).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import pipeline_buffers_workers as W  # noqa: E402
from rank_checks import close  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    return launch(W.four, 4, (str(tmp_path_factory.mktemp("ckpt") / "bn"),), timeout_s=1200)


@pytest.fixture(scope="module")
def ref():
    return W.one_device()


@pytest.mark.matrix("pipeline", "BatchNorm")
@pytest.mark.parametrize("case", ["bn_dp2", "bn_ddp"])
def test_batchnorm_statistics_match_one_device(four, ref, case):
    nbt = ref["state"]["bn.num_batches_tracked"]
    assert int(nbt) == W.STEPS * W.MICRO * W.ACCUM   # once per micro-batch on one device
    assert not torch.allclose(ref["state"]["bn.running_mean"], torch.zeros(4))
    for rank, r in four.items():
        res = r[case]
        close(res["losses"], ref["losses"], RTOL, ATOL, f"rank {rank} losses: ")
        close(res["state"], ref["state"], RTOL, ATOL, f"rank {rank} ")


@pytest.mark.matrix("pipeline", "save/resume")
@pytest.mark.matrix("pipeline", "BatchNorm")
def test_checkpoint_after_training_holds_the_statistics(four, ref):
    for rank, r in four.items():
        res = r["bn_dp2"]
        assert int(res["fresh"]["bn1.num_batches_tracked"]) == 0   # what the load replaces
        close(res["loaded"], ref["state"], RTOL, ATOL, f"rank {rank} loaded ")


@pytest.mark.matrix("pipeline", "local inputs")
def test_local_inputs_pipeline_matches_one_device(four):
    """Each rank passes its DistributedSampler piece (num_replicas, rank from spmdc.sampler_args):
    the ranks at one dp coordinate of both stages are one replica; the assembled global batch
    (replica 0's rows, then replica 1's) trains as one device on that batch."""
    ref = W.one_device(rows=W.assembled(2))
    for rank, r in four.items():
        res = r["local_dp2"]
        assert res["sampler"] == (2, rank % 2)
        close(res["losses"], ref["losses"], RTOL, ATOL, f"rank {rank} losses: ")
        close(res["state"], ref["state"], RTOL, ATOL, f"rank {rank} ")
        assert res["gathers"] == 3 * (1 + W.STEPS)   # shapes + one per input: the example batch, then each step


def test_local_inputs_refuses_stages_with_other_dp_sizes(four):
    for r in four.values():
        assert "the stages' dp sizes are [1, 3]" in r["refused_uneven"]


@pytest.mark.matrix("device groups", "local inputs")
def test_local_inputs_device_groups_match_one_device(four):
    """Device groups stack their replicas: group 0 (dp=2) replicas 0, 1; group 1 (tp=2) replica 2."""
    ref = W.hetero_one_device(W.assembled(3, W.HBATCH))
    for rank, r in four.items():
        res = r["hetero_local"]
        assert res["sampler"] == (3, {0: 0, 1: 1, 2: 2, 3: 2}[rank])
        close(res["losses"], ref["losses"], RTOL, ATOL, f"rank {rank} losses: ")
        close(res["state"], ref["state"], RTOL, ATOL, f"rank {rank} ")
        assert res["gathers"] == 3 * (1 + W.STEPS)
        assert "differs between ranks 2 (group 1) and 3 (group 1), which are data-parallel replica 2 of 3" \
            in res["mismatch"]


@pytest.mark.matrix("one mesh", "BatchNorm")
def test_batchnorm_one_mesh_fsdp_updates_with_global_batch_statistics(four):
    """Under fsdp (dp=4) the training program normalizes by, and updates the running statistics
    with, the whole batch's statistics (not each rank's 4 rows): one device on the whole batch."""
    ref = W.one_device(micro=1, accum=1)
    assert int(ref["state"]["bn.num_batches_tracked"]) == W.STEPS
    for rank, r in four.items():
        close(r["bn_fsdp"]["losses"], ref["losses"], RTOL, ATOL, f"rank {rank} losses: ")
        close(r["bn_fsdp"]["state"], ref["state"], RTOL, ATOL, f"rank {rank} ")
