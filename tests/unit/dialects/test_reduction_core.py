"""The reduction / ordering / indexing ops added for Core ATen (``tensor.min``, ``prod``,
``argmax``/``argmin``, ``histc``, ``topk``, ``sort``, ``cumprod``, ``index_select``,
``scatter_reduce``, ``randperm``) and the factor rule of ``tensor.index``: their rules are exact.

Each rule is checked by simulation: for every factor it lets be sharded, the operands are cut
into uneven pieces along that factor's dims, the op runs on each piece, and the pieces' results
are put back together (concatenated where the factor maps to a result dim, combined by the
factor's reduction otherwise); that must equal the op on whole tensors. A deliberately wrong
rule shows the simulation catches a dim wrongly marked parallel.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from spmdc.dialects.shard.rules import OpShardingRule
from spmdc.ir import parse_module
from spmdc.ir.verifier import verify

_COMBINE = {"sum": torch.add, "max": torch.maximum, "min": torch.minimum}


def _op(body: str, args: str):
    """The first op of ``func.func @f(<args>) { <body> }`` (results returned unused)."""
    text = f"func.func @f({args}) {{\n  {body}\n  func.return\n}}"
    module = parse_module(text)
    verify(module)
    func = module.body.ops[0]
    return next(op for op in func.body.ops if op.name.startswith("tensor."))


def _cuts(n: int) -> list[int]:
    return [1, n - 1] if n > 2 else [n]


def simulate(op, rule: OpShardingRule, inputs: list[torch.Tensor], factor: int) -> list[torch.Tensor]:
    """The op's results computed piecewise along ``factor`` (see the module doc)."""
    sizes = _cuts(rule.factor_sizes[factor])
    pieces = []
    for k in range(len(sizes)):
        args = []
        for dims, x in zip(rule.operands, inputs):
            for d, f in enumerate(dims):
                if f == factor:
                    x = torch.split(x, sizes, dim=d)[k]
            args.append(x)
        out = op.reference(*args)
        pieces.append(list(out) if isinstance(out, (list, tuple)) else [out])
    kind = rule.reduction_kind(factor)
    results = []
    for j, dims in enumerate(rule.results):
        parts = [p[j] for p in pieces]
        d = [i for i, f in enumerate(dims) if f == factor]
        if d:
            results.append(torch.cat(parts, dim=d[0]))
        else:
            assert kind is not None, f"factor {factor} is neither in result {j} nor a reduction"
            acc = parts[0]
            for p in parts[1:]:
                acc = _COMBINE[kind](acc, p)
            results.append(acc)
    return results


def assert_rule_exact(op, inputs: list[torch.Tensor], exact: bool = True) -> set[int]:
    """Every shardable factor of ``op``'s rule gives the whole result; returns those factors."""
    rule = op.sharding_rule()
    want = op.reference(*inputs)
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    free = {f for f in range(rule.num_factors) if f not in rule.blocked and rule.factor_sizes[f] > 1}
    for f in free:
        got = simulate(op, rule, inputs, f)
        for g, w in zip(got, want):
            if exact:
                assert torch.equal(g, w), f"factor {f} of {rule}"
            else:
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6, msg=f"factor {f} of {rule}")
    return free


def _distinct(*shape: int) -> torch.Tensor:
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n, generator=torch.Generator().manual_seed(n)).float() * 0.5 - 3.0).reshape(shape)


def test_min_shards_into_partial_min_and_argmax_keeps_its_dim_whole():
    op = _op("%0 = tensor.min %x {dims = [1], keepdim = false} : (tensor<4x6xf32>) -> tensor<4xf32>",
             "%x: tensor<4x6xf32>")
    x = _distinct(4, 6)
    free = assert_rule_exact(op, [x])
    rule = op.sharding_rule()
    assert rule.reductions == ((1, "min"),) and free == {0, 1} and rule.partial_kinds == frozenset({"min"})
    arg = _op("%0 = tensor.argmax %x {dim = 1, keepdim = true} : (tensor<4x6xf32>) -> tensor<4x1xi64>",
              "%x: tensor<4x6xf32>")
    assert assert_rule_exact(arg, [x]) == {0}
    assert arg.sharding_rule().reductions == () and arg.sharding_rule().partial_kinds == frozenset()
    flat = _op("%0 = tensor.argmin %x {keepdim = false} : (tensor<4x6xf32>) -> tensor<i64>", "%x: tensor<4x6xf32>")
    assert assert_rule_exact(flat, [x]) == set()


def test_the_simulation_catches_a_dim_wrongly_marked_parallel():
    arg = _op("%0 = tensor.argmax %x {dim = 1, keepdim = false} : (tensor<4x6xf32>) -> tensor<4xi64>",
              "%x: tensor<4x6xf32>")
    rule = arg.sharding_rule()
    wrong = replace(rule, blocked=frozenset(), reductions=((1, "max"),))
    x = _distinct(4, 6)
    got = simulate(arg, wrong, [x], 1)
    assert not torch.equal(got[0], arg.reference(x))
    top = _op("%v, %i = tensor.topk %x {dim = 1, k = 2, largest = true, sorted = true}"
              " : (tensor<4x6xf32>) -> (tensor<4x2xf32>, tensor<4x2xi64>)", "%x: tensor<4x6xf32>")
    r = top.sharding_rule()
    blocked_dim = r.operands[0][1]
    # the same factor on x's dim and the result's (sizes differ: a wrong rule would still be caught)
    assert blocked_dim in r.blocked and r.results[0][1] in r.blocked


def test_prod_reduced_dims_need_replication():
    op = _op("%0 = tensor.prod %x {dims = [1], keepdim = false} : (tensor<4x6xf32>) -> tensor<4xf32>",
             "%x: tensor<4x6xf32>")
    assert assert_rule_exact(op, [torch.randn(4, 6)], exact=False) == {0}
    assert op.sharding_rule().reductions == ()
    whole = _op("%0 = tensor.prod %n {dims = [0, 1], keepdim = true} : (tensor<3x4xi64>) -> tensor<1x1xi64>",
                "%n: tensor<3x4xi64>")
    n = torch.randint(1, 4, (3, 4))
    assert torch.equal(whole.reference(n), torch.prod(n).reshape(1, 1))
    assert assert_rule_exact(whole, [n]) == set()
    with pytest.raises(Exception, match="reduces one dim or every dim"):
        _op("%0 = tensor.prod %x {dims = [0, 1], keepdim = false} : (tensor<2x3x4xf32>) -> tensor<4xf32>",
            "%x: tensor<2x3x4xf32>")


def test_histc_with_a_range_sums_pieces_and_with_the_data_range_runs_whole():
    op = _op("%0 = tensor.histc %x {bins = 5, max = 1.0, min = -1.0} : (tensor<6x8xf32>) -> tensor<5xf32>",
             "%x: tensor<6x8xf32>")
    x = torch.randn(6, 8)
    x[0, 0], x[1, 1], x[2, 2] = 1.0, -1.0, 0.2   # the edges and an inner bin boundary
    assert assert_rule_exact(op, [x]) == {0, 1}
    assert {k for _, k in op.sharding_rule().reductions} == {"sum"}
    auto = _op("%0 = tensor.histc %x {bins = 5, max = 0.0, min = 0.0} : (tensor<6x8xf32>) -> tensor<5xf32>",
               "%x: tensor<6x8xf32>")
    assert assert_rule_exact(auto, [x]) == set()
    # counts beyond what bf16 holds exactly: the pieces' counts would not add up to the whole's
    big = _op("%0 = tensor.histc %x {bins = 2, max = 1.0, min = 0.0} : (tensor<512xbf16>) -> tensor<2xbf16>",
              "%x: tensor<512xbf16>")
    assert big.sharding_rule().reductions == ()


def test_topk_sort_and_cumprod_keep_their_dim_whole_and_the_rest_parallel():
    x = _distinct(5, 6)
    top = _op("%v, %i = tensor.topk %x {dim = 1, k = 2, largest = false, sorted = true}"
              " : (tensor<5x6xf32>) -> (tensor<5x2xf32>, tensor<5x2xi64>)", "%x: tensor<5x6xf32>")
    assert assert_rule_exact(top, [x]) == {0}
    values, idx = top.reference(x)
    want = torch.topk(x, 2, dim=1, largest=False)
    assert torch.equal(values, want.values) and torch.equal(idx, want.indices)
    srt = _op("%s, %p = tensor.sort %x {descending = true, dim = 0, stable = true}"
              " : (tensor<5x6xf32>) -> (tensor<5x6xf32>, tensor<5x6xi64>)", "%x: tensor<5x6xf32>")
    assert assert_rule_exact(srt, [x]) == {1}
    ties = torch.tensor([[1.0, 0.0], [2.0, 0.0], [1.0, 0.0], [2.0, 1.0], [1.0, 0.0]]).repeat(1, 3)
    _, perm = srt.reference(ties)
    assert perm[:, 0].tolist() == [1, 3, 0, 2, 4], "a stable sort keeps equal elements in order"
    cum = _op("%c = tensor.cumprod %x {dim = 1} : tensor<5x6xf32>", "%x: tensor<5x6xf32>")
    assert assert_rule_exact(cum, [torch.randn(5, 6)]) == {0}
    icum = _op("%c = tensor.cumprod %n {dim = 0} : tensor<4xi32>", "%n: tensor<4xi32>")
    assert icum.reference(torch.tensor([2, 3, 4, 5], dtype=torch.int32)).dtype == torch.int32


def test_index_select_shards_the_index_and_x_outside_the_indexed_dim():
    op = _op("%0 = tensor.index_select %x, %i {dim = 1} : (tensor<4x6x3xf32>, tensor<5xi64>) -> tensor<4x5x3xf32>",
             "%x: tensor<4x6x3xf32>, %i: tensor<5xi64>")
    x, i = torch.randn(4, 6, 3), torch.tensor([5, 0, 2, 2, 1])
    free = assert_rule_exact(op, [x, i])
    rule = op.sharding_rule()
    assert rule.operands[0][1] in rule.blocked and rule.results[0][1] == rule.operands[1][0]
    assert len(free) == 3 and rule.partial_one == (0,)
    x2 = torch.randn(4, 6, 3)
    torch.testing.assert_close(op.reference(x + x2, i), op.reference(x, i) + op.reference(x2, i))


def test_index_rule_shards_the_broadcast_index_dims_and_the_trailing_dims():
    op = _op("%0 = tensor.index %x, %i, %j : (tensor<5x4x3xf32>, tensor<6x1xi64>, tensor<1x2xi64>)"
             " -> tensor<6x2x3xf32>", "%x: tensor<5x4x3xf32>, %i: tensor<6x1xi64>, %j: tensor<1x2xi64>")
    x, i, j = torch.randn(5, 4, 3), torch.tensor([[4], [0], [2], [2], [1], [3]]), torch.tensor([[3, 0]])
    free = assert_rule_exact(op, [x, i, j])
    rule = op.sharding_rule()
    assert {rule.operands[0][0], rule.operands[0][1]} <= rule.blocked
    assert len(free) == 3   # the two broadcast index dims and x's trailing dim
    one = _op("%0 = tensor.index %x, %i : (tensor<5x3xi64>, tensor<2x4xi64>) -> tensor<2x4x3xi64>",
              "%x: tensor<5x3xi64>, %i: tensor<2x4xi64>")
    assert len(assert_rule_exact(one, [torch.randint(0, 9, (5, 3)), torch.randint(0, 5, (2, 4))])) == 3


@pytest.mark.parametrize("reduce,include_self", [("sum", True), ("prod", False), ("mean", True), ("mean", False),
                                                 ("amax", True), ("amin", False)])
def test_scatter_reduce_is_parallel_where_the_index_covers_x(reduce, include_self):
    text = (f'%0 = tensor.scatter_reduce %x, %i, %s {{dim = 1, include_self = {str(include_self).lower()}, '
            f'reduce = "{reduce}"}} : (tensor<4x6xf32>, tensor<4x3xi64>, tensor<4x3xf32>) -> tensor<4x6xf32>')
    op = _op(text, "%x: tensor<4x6xf32>, %i: tensor<4x3xi64>, %s: tensor<4x3xf32>")
    x, i, s = torch.randn(4, 6), torch.randint(0, 6, (4, 3)), torch.randn(4, 3)
    assert assert_rule_exact(op, [x, i, s]) == {0}
    want = x.scatter_reduce(1, i, s, reduce, include_self=include_self)
    assert torch.equal(op.reference(x, i, s), want)


def test_randperm_runs_replicated_and_draws_what_torch_draws():
    op = _op("%0 = tensor.randperm : tensor<9xi64>", "")
    rule = op.sharding_rule()
    assert rule.blocked == frozenset({0}) and "Random" in op.traits and "Pure" not in op.traits
    torch.manual_seed(3)
    got, after = op.reference(), torch.rand(2)
    torch.manual_seed(3)
    assert torch.equal(got, torch.randperm(9)) and torch.equal(after, torch.rand(2))


def test_philox_rng_leaves_randperm_in_eager_mode():
    from spmdc.passes.philox_rng import convert_function

    module = parse_module("""
      func.func @f() -> (tensor<9xi64>, tensor<4xf32>) {
        %p = tensor.randperm : tensor<9xi64>
        %r = tensor.random {distribution = "uniform", high = 1.0, low = 0.0} : tensor<4xf32>
        func.return %p, %r : tensor<9xi64>, tensor<4xf32>
      }""")
    func = module.body.ops[0]
    assert convert_function(func) == 1
    names = [op.name for op in func.body.ops]
    assert names == ["tensor.rng_seed", "tensor.randperm", "tensor.random", "func.return"]
