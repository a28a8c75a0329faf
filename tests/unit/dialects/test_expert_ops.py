"""The expert dispatch ops against torch's own sort-and-index form of a router's permutation
(what HuggingFace's grouped_mm experts write): rows land at the positions a stable sort by expert
gives, slot by slot; the slot form of grouped_matmul equals a per-expert loop; combine undoes
dispatch; with a capacity below the worst case, what does not fit is dropped (zeros)."""

from __future__ import annotations

import torch

from spmdc.dialects.expert_helpers import (
    blocks,
    expert_combine,
    expert_counts,
    expert_dispatch,
    expert_route,
    grouped_matmul_slots,
    grouped_matmul_wgrad_slots,
)

E, SLOTS, K, T, D = 4, 2, 2, 12, 5


def _routing(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, E, (T * K,), generator=g)
    ids[ids == 3] = 2   # expert 3 gets no assignment (an empty group)
    return ids, torch.randn(T, D, generator=g)


def test_dispatch_puts_rows_where_a_stable_sort_does():
    ids, x = _routing()
    counts = expert_counts(ids, E, SLOTS)
    assert counts.sum().item() == T * K and counts[:, 3].sum().item() == 0
    cap = T * K
    dest, starts, ends = expert_route(ids, counts, SLOTS, cap, T * K // SLOTS, 0)
    buf = expert_dispatch(x, dest, SLOTS * cap, K)
    perm = torch.sort(ids, stable=True).indices
    sorted_rows = x[perm // K]
    per_slot = E // SLOTS
    for q in range(SLOTS):   # slot q: its experts' sorted rows, then zeros
        lo = int((ids < q * per_slot).sum())
        hi = int((ids < (q + 1) * per_slot).sum())
        torch.testing.assert_close(buf[q * cap:q * cap + hi - lo], sorted_rows[lo:hi], rtol=0, atol=0)
        assert not buf[q * cap + hi - lo:(q + 1) * cap].any()
    for e in range(E):
        n = int((ids == e).sum())
        assert int(ends[e] - starts[e]) == n
        torch.testing.assert_close(buf[int(starts[e]):int(ends[e])], x[torch.nonzero(ids == e).reshape(-1) // K],
                                   rtol=0, atol=0)


def test_combine_inverts_dispatch_and_sums_a_tokens_assignments():
    ids, x = _routing(1)
    counts = expert_counts(ids, E, SLOTS)
    dest, _, _ = expert_route(ids, counts, SLOTS, T * K, T * K // SLOTS, 0)
    buf = expert_dispatch(x, dest, SLOTS * T * K, K)
    torch.testing.assert_close(expert_combine(buf, dest, 1), x.repeat_interleave(K, dim=0), rtol=0, atol=0)
    torch.testing.assert_close(expert_combine(buf, dest, K), x * K, rtol=0, atol=0)


def test_route_of_one_source_chunk_is_that_chunk_of_the_whole_route():
    """What a rank computes from its own ids and everyone's counts (partition's first_source)."""
    ids, _ = _routing(2)
    counts = expert_counts(ids, E, SLOTS)
    whole, starts, ends = expert_route(ids, counts, SLOTS, T * K, T * K // SLOTS, 0)
    half = T * K // SLOTS
    for s in range(SLOTS):
        mine = ids[s * half:(s + 1) * half]
        torch.testing.assert_close(expert_counts(mine, E, 1), counts[s:s + 1])
        d, s2, e2 = expert_route(mine, counts, SLOTS, T * K, half, s)
        torch.testing.assert_close(d, whole[s * half:(s + 1) * half])
        torch.testing.assert_close((s2, e2), (starts, ends))


def test_grouped_matmul_slots_equal_a_per_expert_loop():
    ids, x = _routing(3)
    counts = expert_counts(ids, E, SLOTS)
    dest, starts, ends = expert_route(ids, counts, SLOTS, T * K, T * K // SLOTS, 0)
    buf = expert_dispatch(x, dest, SLOTS * T * K, K)
    w = torch.randn(E, D, 3)
    y = grouped_matmul_slots(buf, w, starts, ends, T * K, False)
    want = torch.zeros(buf.shape[0], 3)
    for e in range(E):
        a, b = int(starts[e]), int(ends[e])
        want[a:b] = buf[a:b] @ w[e]
    torch.testing.assert_close(y, want)
    dw = grouped_matmul_wgrad_slots(buf, y, starts, ends, T * K)
    torch.testing.assert_close(dw[3], torch.zeros(D, 3))   # the empty expert
    a, b = int(starts[1]), int(ends[1])
    torch.testing.assert_close(dw[1], buf[a:b].T @ y[a:b])
    # one rank's slot alone (its experts' bounds, still rows of the whole buffer) gives its rows
    q = 1
    local = grouped_matmul_slots(buf[q * T * K:(q + 1) * T * K], w[2:], starts[2:], ends[2:], T * K, False)
    torch.testing.assert_close(local, y[q * T * K:(q + 1) * T * K])


def test_a_capacity_below_the_worst_case_drops_what_does_not_fit():
    ids = torch.tensor([0, 0, 0, 1, 0, 2, 0, 3])   # 5 assignments to expert 0, capacity 3 per slot
    counts = expert_counts(ids, 4, 2)
    start, kept = blocks(counts, 2, 3)
    assert kept[:, 0].tolist() == [3, 0] and kept[:, 1].tolist() == [0, 0]
    dest, starts, ends = expert_route(ids, counts, 2, 3, 4, 0)
    assert (dest >= 0).sum().item() == 3 + 2   # expert 0's first three, experts 2 and 3
    x = torch.arange(8.0).reshape(8, 1)
    back = expert_combine(expert_dispatch(x, dest, 6, 1), dest, 1)
    torch.testing.assert_close(back[dest >= 0], x[dest >= 0])
    assert not back[dest < 0].any()


def test_a_capacity_factor_with_nothing_to_dispatch_says_it_has_no_effect():
    import pytest

    from spmdc.ir.parser import parse_module
    from spmdc.passes.expert_dispatch import ExpertDispatch

    module = parse_module('shard.mesh @mesh = <["dp" = 2]>\n'
                          'func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n'
                          '  %y = tensor.relu %x : tensor<4xf32>\n  func.return %y : tensor<4xf32>\n}\n')
    with pytest.warns(UserWarning, match="capacity-factor 1.25 has no effect"):
        ExpertDispatch(capacity_factor=1.25).run(module)
