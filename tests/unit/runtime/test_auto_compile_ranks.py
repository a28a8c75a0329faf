"""``spmdc.compile(..., plan="auto")`` on 4 gloo ranks (one launch): the layout search inside a job.

Rank 0 searches, every rank compiles its choice (:mod:`spmdc.api.auto_choice`). A user's own loop
(FSDP2's: their AdamW over ``cm.parameters()``, their loss, ``loss.backward()``) on the chosen
layout matches eager PyTorch (losses rtol 1e-5, parameters atol 1e-5 after 3 steps), on every mesh
and on one given (``mesh="tp=4"``: a tp=4 layout); a mesh with a ``pp`` axis gets a pipeline whose
losses match eager's; a mesh of another size, a cap nothing fits, an option the search chooses
itself and eager execution are refused on every rank with the reason.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import auto_compile_workers as W  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    import os

    os.environ["SPMDC_DEVICE_DIR"] = str(tmp_path_factory.mktemp("devices"))   # (the table's cpu profile)
    return launch(W.run, 4, (), timeout_s=900)


def test_a_users_own_loop_on_the_chosen_layout_matches_eager(four):
    for case in ("any", "tp"):
        labels = {four[r][case]["label"] for r in range(4)}
        assert len(labels) == 1, labels   # one choice on every rank
        got = four[0][case]
        assert got["losses"] == pytest.approx(got["ref_losses"], rel=1e-5), got
        assert max(four[r][case]["max_param_diff"] for r in range(4)) < 1e-5, [four[r][case] for r in range(4)]
        assert "mesh:" in got["plan_file"] and "preset" in got["plan_file"], got["plan_file"]
    assert four[0]["tp"]["label"].endswith("on tp=4"), four[0]["tp"]["label"]


def test_local_pieces_get_a_layout_with_a_replica_per_rank(four):
    """inputs="local": the pieces were cut one per rank before the choice, so the layout holds one
    replica per rank (its sampler_args are the job's) and training equals eager PyTorch on the whole
    batch; on a mesh where ranks share pieces (dp=2,tp=2) it is refused with why."""
    for r in range(4):
        got = four[r]["local"]
        assert got["sampler"] == (4, r), got
        assert got["losses"] == pytest.approx(got["ref_losses"], rel=1e-5), got
        assert got["max_param_diff"] < 1e-5, got
        text = four[r]["local_tp"]
        assert "no candidate layout for 4 ranks on mesh dp=2,tp=2" in text and "inputs='local'" in text, text


def test_a_mesh_with_pp_gets_a_pipeline_matching_eager(four):
    import torch

    from spmdc.frontend.workloads import load_workload

    got = four[0]["pipeline"]
    assert got["kind"] == "pipeline" and "pp=2,dp=2" in got["label"], got
    w = load_workload("gpt2-tiny", batch=8)
    torch.manual_seed(0)
    opt = torch.optim.SGD(w.model.parameters(), lr=0.05)
    ref = []
    for _ in range(2):
        loss = w.loss_fn(w.model(*w.inputs), *w.loss_inputs)
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref.append(float(loss.detach()))
    assert got["losses"] == pytest.approx(ref, rel=1e-4), (got, ref)


def test_what_cannot_be_searched_is_refused_on_every_rank(four):
    for case, message in (("bad_mesh", "mesh dp=8 has 8 devices but the job has 4 ranks"),
                          ("cap", "no layout for 4 ranks fits 1 bytes per rank (the smallest predicted peak:"),
                          ("fixed", "microbatches=2: the search chooses it; give a plan to set it"),
                          ("eager", "eager execution (op by op, spmdc.eager) is not what the search prices"),
                          ("axis", "no candidate layout for 4 ranks on mesh dq=4: mesh axis 'dq' is not one the "
                                   "search lays out (pp, rep, dp, tp, ep); give a plan to run on this mesh")):
        for r in range(4):
            text = four[r][case]
            assert text.startswith('spmdc.compile(plan="auto"): ') and message in text, (case, r, text)
