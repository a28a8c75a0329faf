"""``--check``'s reference: eager replay of the run's settings, and the float64 second opinion."""

import torch

from spmdc.tools.reference import TrainSettings, compare, eager_reference, judge_by_float64


def _run(value: float, w: list[float]) -> dict:
    return {"losses": [value], "state": {"w": torch.tensor(w)}}


def test_float64_second_opinion_tells_noise_from_a_bug():
    exact = _run(1.0, [1.0, 2.0])
    eager = _run(1.0, [1.0 + 3e-4, 2.0])   # float32 eager is itself 3e-4 off the float64 run
    noisy = _run(1.0, [1.0 - 5e-4, 2.0])   # spmdc: over rtol against eager, but as far from exact
    ok, rows = compare(eager, noisy, rtol=1e-4, atol=1e-5)
    assert not ok and [r.name for r in rows if not r.ok] == ["w"]
    assert judge_by_float64(rows, eager, exact, noisy, atol=1e-5)
    assert rows[1].ok and rows[1].noise == "5.0e-04 vs 3.0e-04"

    wrong = _run(1.0, [1.0 - 5e-3, 2.0])   # 17x eager's own error: a bug, not rounding
    ok, rows = compare(eager, wrong, rtol=1e-4, atol=1e-5)
    assert not judge_by_float64(rows, eager, exact, wrong, atol=1e-5) and not rows[1].ok


def test_reference_with_micro_batches_and_clipping_is_one_big_batch():
    one = eager_reference("mlp", 3, True, 0, TrainSettings("adamw", 0.01, clip_grad_norm=0.1))
    four = eager_reference("mlp", 3, True, 0, TrainSettings("adamw", 0.01, clip_grad_norm=0.1, grad_accum=4))
    torch.testing.assert_close(torch.tensor(four["losses"]), torch.tensor(one["losses"]), rtol=1e-5, atol=1e-6)
    for k, v in one["state"].items():
        torch.testing.assert_close(four["state"][k], v, rtol=1e-4, atol=1e-5)


def test_resumed_reference_replays_the_saved_steps_first():
    whole = eager_reference("mlp", 4, True, 0, TrainSettings("sgd", 0.05))
    tail = eager_reference("mlp", 2, True, 0, TrainSettings("sgd", 0.05), before=(2, TrainSettings("sgd", 0.05)))
    assert tail["losses"] == whole["losses"][2:]
    changed = eager_reference("mlp", 2, True, 0, TrainSettings("sgd", 0.5), before=(2, TrainSettings("sgd", 0.05)))
    assert changed["losses"][0] == whole["losses"][2] and changed["losses"][1] != whole["losses"][3]
