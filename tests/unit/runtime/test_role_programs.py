"""One program per role at run time (issue 29, item 4), one 4-rank gloo launch.

Every layout kind trains 2 SGD steps twice: with its rank programs shared per role (the default:
each role's lowest rank partitions the program and sends it to the others,
:func:`spmdc.api.compile_shared.compile_rank_shared`) and with every rank compiling its own
(``share_programs=False``). Shared programs give the same numbers bitwise (losses and every
parameter after the steps), and run the same code as the rank's own compile would; the job
partitions only as many programs as there are roles, counted on the ranks:

* one mesh, even shapes (gpt2-tiny fsdp+tp on dp=2,tp=2): one role, one program partitioned;
* a Partial bias add under fsdp+tp (``comm.keep_at_origin`` reads the coordinates at run time): one role;
* uneven fsdp (widths 10 and 6 over 4 ranks): two roles, {0, 1, 2} and {3};
* HF GPT-2 with dropout under fsdp on dp=4: each rank draws its own piece of the masks, whose offset is
  written into its program, so four roles of one rank (nothing sent);
* device groups (megatron on tp=2, fsdp on dp=2): one role per group;
* a pipeline (pp=2,dp=2 fsdp): one role per stage, for each of its programs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import role_programs_workers as W  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402

# name -> roles of each program on the ranks' mesh
ROLES = {"one mesh fsdp+tp": 1, "one mesh bias add": 1, "uneven fsdp": 2, "dropout fsdp": 4, "device groups": 1,
         "pipeline": 1}
# the meshes whose ranks share programs: a device group's, a pipeline stage's
MESHES = {"device groups": [[0, 1], [2, 3]], "pipeline": [[0, 1], [2, 3]]}


@pytest.fixture(scope="module")
def results():
    return launch(W.run_cases, 4, (W.CASES,), timeout_s=900)


@pytest.mark.parametrize("name", list(W.CASES))
def test_shared_role_programs_give_the_per_rank_numbers(results, name):
    for r in range(4):
        shared, own = results[r][name]["shared"], results[r][name]["own"]
        for a, b in zip(shared["losses"], own["losses"], strict=True):
            assert torch.equal(a, b), (r, a, b)
        assert set(shared["state"]) == set(own["state"])
        for k, v in own["state"].items():
            assert torch.equal(shared["state"][k], v), (r, k)
        assert shared["sources"] == own["sources"], r   # the code this rank's own compile generates


@pytest.mark.parametrize("name", list(W.CASES))
def test_a_job_partitions_one_program_per_role(results, name):
    shared = [results[r][name]["shared"] for r in range(4)]
    own = [results[r][name]["own"] for r in range(4)]
    assert all(o["received"] == 0 for o in own)
    assert all(s["roles"] == ROLES[name] for s in shared), [s["roles"] for s in shared]
    # each mesh partitions each of its programs once per role; the other ranks receive it
    want = sum(own[m[0]]["compiled"] * ROLES[name] for m in MESHES.get(name, [[0, 1, 2, 3]]))
    assert sum(s["compiled"] for s in shared) == want
    assert sum(s["received"] for s in shared) == sum(o["compiled"] for o in own) - want
