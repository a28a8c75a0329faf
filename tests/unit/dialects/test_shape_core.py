"""``tensor.diagonal`` / ``tensor.diagonal_scatter`` and the grouped matmuls: torch semantics,
shape checks, and sharding rules that hold when the shards are computed independently."""

from __future__ import annotations

import pytest
import torch

from spmdc.ir import parse_module, verify
from spmdc.runtime.interpreter import interpret


def _ty(t: torch.Tensor) -> str:
    elt = {torch.float32: "f32", torch.int32: "i32", torch.int64: "i64"}[t.dtype]
    return f"tensor<{'x'.join(str(s) for s in t.shape)}{'x' if t.dim() else ''}{elt}>"


def run_op(op: str, args: list[torch.Tensor], attrs: str, result: str) -> torch.Tensor:
    """One op in a @main whose arguments are ``args``; its result, through the interpreter."""
    names = [f"%a{i}" for i in range(len(args))]
    sig = ", ".join(f"{n}: {_ty(a)}" for n, a in zip(names, args))
    types = ", ".join(_ty(a) for a in args)
    text = f"""func.func @main({sig}) -> {result} {{
      %r = {op} {', '.join(names)} {attrs} : ({types}) -> {result}
      func.return %r : {result}
    }}"""
    return interpret(parse_module(text), args)[0]


def checked(text: str):
    verify(parse_module(text))


def only_op(text: str):
    return next(op for op in parse_module(text).walk() if op.name.startswith("tensor."))


def piecewise(op, inputs: list[torch.Tensor], factor: int) -> torch.Tensor:
    """``op``'s result computed in two pieces along ``factor`` of its rule: operands split where
    they have the factor, results joined there, or summed when it is a reduction."""
    rule = op.sharding_rule()
    n = rule.factor_sizes[factor]
    sizes = [1, n - 1] if n > 2 else [n // 2, n - n // 2]
    pieces = []
    for k in range(2):
        args = []
        for dims, x in zip(rule.operands, inputs):
            for d, f in enumerate(dims):
                if f == factor:
                    x = torch.split(x, sizes, dim=d)[k]
            args.append(x)
        pieces.append(op.reference(*args))
    dims = rule.results[0]
    if factor in dims:
        return torch.cat(pieces, dim=dims.index(factor))
    assert rule.reduction_kind(factor) == "sum"
    return pieces[0] + pieces[1]


def assert_rule_holds(op, inputs: list[torch.Tensor]) -> set[int]:
    """Every factor the rule leaves free, computed in pieces, gives the whole result; returns them."""
    rule = op.sharding_rule()
    want = op.reference(*inputs)
    free = {f for f in range(rule.num_factors) if f not in rule.blocked and rule.factor_sizes[f] > 1}
    for f in free:
        torch.testing.assert_close(piecewise(op, inputs, f), want, msg=f"factor {f} of {rule}")
    return free


# -- diagonal ------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,offset,d1,d2", [
    ((4, 4), 0, 0, 1), ((3, 5), 2, 0, 1), ((3, 5), -2, 0, 1), ((3, 2, 4), 1, 0, 2),
    ((2, 3, 4), -1, 2, 1), ((3, 4), 7, 0, 1),   # the last: an empty diagonal
])
def test_diagonal_and_its_scatter_are_torchs(shape, offset, d1, d2):
    x = torch.randn(shape)
    want = torch.diagonal(x, offset, d1, d2)
    attrs = f"{{dim1 = {d1}, dim2 = {d2}, offset = {offset}}}"
    got = run_op("tensor.diagonal", [x], attrs, _ty(want))
    assert torch.equal(got, want)
    src = torch.randn(want.shape)
    z = torch.randn(shape)
    got = run_op("tensor.diagonal_scatter", [z, src], attrs, _ty(z))
    assert torch.equal(got, torch.diagonal_scatter(z, src, offset, d1, d2))


def test_diagonal_shapes_are_checked():
    with pytest.raises(Exception, match="repeats a dim"):
        checked("""func.func @f(%x: tensor<3x3xf32>) -> tensor<3xf32> {
          %r = tensor.diagonal %x {dim1 = 1, dim2 = 1, offset = 0} : (tensor<3x3xf32>) -> tensor<3xf32>
          func.return %r : tensor<3xf32> }""")
    with pytest.raises(Exception, match="does not match the diagonal"):
        checked("""func.func @f(%x: tensor<3x4xf32>, %s: tensor<4xf32>) -> tensor<3x4xf32> {
          %r = tensor.diagonal_scatter %x, %s {dim1 = 0, dim2 = 1, offset = 0}
                 : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
          func.return %r : tensor<3x4xf32> }""")


def test_diagonal_rule_blocks_the_diagonal_dims_only():
    op = only_op("""func.func @f(%x: tensor<3x2x4xf32>) -> tensor<2x3xf32> {
      %r = tensor.diagonal %x {dim1 = 0, dim2 = 2, offset = 1} : (tensor<3x2x4xf32>) -> tensor<2x3xf32>
      func.return %r : tensor<2x3xf32> }""")
    rule = op.sharding_rule()
    assert str(rule) == "([i, j, k]) -> ([j, l])  i: needs replication, k: needs replication, l: needs replication"
    assert rule.partial_one == (0,)
    assert assert_rule_holds(op, [torch.randn(3, 2, 4)]) == {1}   # j, the one dim off the diagonal
    scatter = only_op("""func.func @f(%z: tensor<3x2x4xf32>, %s: tensor<2x3xf32>) -> tensor<3x2x4xf32> {
      %r = tensor.diagonal_scatter %z, %s {dim1 = 0, dim2 = 2, offset = 1}
             : (tensor<3x2x4xf32>, tensor<2x3xf32>) -> tensor<3x2x4xf32>
      func.return %r : tensor<3x2x4xf32> }""").sharding_rule()
    assert str(scatter) == ("([i, j, k], [j, l]) -> ([i, j, k])  i: needs replication, k: needs replication, "
                            "l: needs replication")
    assert scatter.partial_group == (0, 1)
    scatter_op = only_op("""func.func @f(%z: tensor<3x2x4xf32>, %s: tensor<2x3xf32>) -> tensor<3x2x4xf32> {
      %r = tensor.diagonal_scatter %z, %s {dim1 = 0, dim2 = 2, offset = 1}
             : (tensor<3x2x4xf32>, tensor<2x3xf32>) -> tensor<3x2x4xf32>
      func.return %r : tensor<3x2x4xf32> }""")
    assert assert_rule_holds(scatter_op, [torch.randn(3, 2, 4), torch.randn(2, 3)]) == {1}
    z, s = torch.randn(2, 3, 2, 4), torch.randn(2, 2, 3)   # two P(sum) addends of (z, s)
    both = torch.diagonal_scatter(z[0], s[0], 1, 0, 2) + torch.diagonal_scatter(z[1], s[1], 1, 0, 2)
    assert torch.allclose(both, torch.diagonal_scatter(z.sum(0), s.sum(0), 1, 0, 2))


# -- grouped matmul ------------------------------------------------------------------------------

def grouped_ref(x, w, offs, transpose_w=False):
    out, start = torch.zeros(x.shape[0], w.shape[1] if transpose_w else w.shape[2]), 0
    for g in range(w.shape[0]):
        end = int(offs[g])
        for r in range(start, end):
            wg = w[g].t() if transpose_w else w[g]
            out[r] = sum(x[r, k] * wg[k] for k in range(x.shape[1]))
        start = end
    return out


def wgrad_ref(x, dy, offs):
    out, start = torch.zeros(len(offs), x.shape[1], dy.shape[1]), 0
    for g in range(len(offs)):
        end = int(offs[g])
        for r in range(start, end):
            out[g] += torch.outer(x[r], dy[r])
        start = end
    return out


OFFS = [torch.tensor([3, 3, 8, 8], dtype=torch.int32),    # an empty group, rows 8-9 in none
        torch.tensor([0, 10, 10, 10], dtype=torch.int32),  # one group holds every row
        torch.tensor([2, 4, 6, 9], dtype=torch.int32)]


@pytest.mark.parametrize("offs", OFFS, ids=["empty-group", "one-group", "all-groups"])
def test_grouped_matmul_is_the_reference_loop(offs):
    torch.manual_seed(0)
    x, w, wt = torch.randn(10, 8), torch.randn(4, 8, 6), torch.randn(4, 6, 8)
    got = run_op("tensor.grouped_matmul", [x, w, offs], "", "tensor<10x6xf32>")
    want = grouped_ref(x, w, offs)
    torch.testing.assert_close(got, want)
    assert torch.equal(got[int(offs[-1]):], torch.zeros(10 - int(offs[-1]), 6))
    got_t = run_op("tensor.grouped_matmul", [x, wt, offs], "{transpose_w = true}", "tensor<10x6xf32>")
    torch.testing.assert_close(got_t, grouped_ref(x, wt, offs, transpose_w=True))
    dy = torch.randn(10, 6)
    dw = run_op("tensor.grouped_matmul_wgrad", [x, dy, offs], "", "tensor<4x8x6xf32>")
    torch.testing.assert_close(dw, wgrad_ref(x, dy, offs))
    if offs[1] == offs[0]:
        assert torch.equal(dw[1], torch.zeros(8, 6))   # the empty group


def test_grouped_matmul_gradients_are_autograds():
    torch.manual_seed(1)
    offs = OFFS[0]
    x = torch.randn(10, 8, requires_grad=True)
    w = torch.randn(4, 8, 6, requires_grad=True)
    dy = torch.randn(10, 6)
    (grouped_ref(x, w, offs) * dy).sum().backward()
    dx = run_op("tensor.grouped_matmul", [dy, w.detach(), offs], "{transpose_w = true}", "tensor<10x8xf32>")
    dw = run_op("tensor.grouped_matmul_wgrad", [x.detach(), dy, offs], "", "tensor<4x8x6xf32>")
    torch.testing.assert_close(dx, x.grad)
    torch.testing.assert_close(dw, w.grad)


def test_grouped_matmul_refuses_decreasing_offsets():
    x, w = torch.randn(10, 8), torch.randn(4, 8, 6)
    with pytest.raises(RuntimeError):
        run_op("tensor.grouped_matmul", [x, w, torch.tensor([5, 3, 8, 8], dtype=torch.int32)], "",
               "tensor<10x6xf32>")


@pytest.mark.parametrize("types,why", [
    ("tensor<10x8xf32>, tensor<4x8x6xf32>, tensor<4xi64>", "i32"),
    ("tensor<10x8xf32>, tensor<4x8x6xf32>, tensor<3xi32>", "3 entries for 4 groups"),
    ("tensor<10x7xf32>, tensor<4x8x6xf32>, tensor<4xi32>", "contracting dims differ"),
    ("tensor<10x8xi32>, tensor<4x8x6xi32>, tensor<4xi32>", "floating-point"),
])
def test_grouped_matmul_types_are_checked(types, why):
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types.split(", ")))
    with pytest.raises(Exception, match=why):
        checked(f"""func.func @f({args}) -> tensor<10x6xf32> {{
          %r = tensor.grouped_matmul %a0, %a1, %a2 : ({types}) -> tensor<10x6xf32>
          func.return %r : tensor<10x6xf32> }}""")


def test_grouped_matmul_rules_are_exact_on_independent_shards():
    fwd_op = only_op("""func.func @f(%x: tensor<10x8xf32>, %w: tensor<4x8x6xf32>, %o: tensor<4xi32>)
        -> tensor<10x6xf32> {
      %r = tensor.grouped_matmul %x, %w, %o : (tensor<10x8xf32>, tensor<4x8x6xf32>, tensor<4xi32>) -> tensor<10x6xf32>
      func.return %r : tensor<10x6xf32> }""")
    fwd = fwd_op.sharding_rule()
    assert str(fwd) == ("([i, j], [l, j, k], [l]) -> ([i, k])  j: reduction(sum), i: needs replication, "
                        "l: needs replication")
    assert fwd.partial_one == (0, 1)
    tr_op = only_op("""func.func @f(%x: tensor<10x8xf32>, %w: tensor<4x6x8xf32>, %o: tensor<4xi32>)
        -> tensor<10x6xf32> {
      %r = tensor.grouped_matmul %x, %w, %o {transpose_w = true}
             : (tensor<10x8xf32>, tensor<4x6x8xf32>, tensor<4xi32>) -> tensor<10x6xf32>
      func.return %r : tensor<10x6xf32> }""")
    tr = tr_op.sharding_rule()
    assert str(tr) == ("([i, j], [l, k, j], [l]) -> ([i, k])  j: reduction(sum), i: needs replication, "
                       "l: needs replication")
    wg_op = only_op("""func.func @f(%x: tensor<10x8xf32>, %d: tensor<10x6xf32>, %o: tensor<4xi32>)
        -> tensor<4x8x6xf32> {
      %r = tensor.grouped_matmul_wgrad %x, %d, %o
             : (tensor<10x8xf32>, tensor<10x6xf32>, tensor<4xi32>) -> tensor<4x8x6xf32>
      func.return %r : tensor<4x8x6xf32> }""")
    wg = wg_op.sharding_rule()
    assert str(wg) == "([i, j], [i, k], [l]) -> ([l, j, k])  i: needs replication, l: needs replication"
    # what the rules claim, computed in pieces: n (columns) and k (a sum); for wgrad k and n
    torch.manual_seed(2)
    offs = OFFS[0]
    x, w, wt, dy = torch.randn(10, 8), torch.randn(4, 8, 6), torch.randn(4, 6, 8), torch.randn(10, 6)
    assert assert_rule_holds(fwd_op, [x, w, offs]) == {1, 2}
    assert assert_rule_holds(tr_op, [x, wt, offs]) == {1, 2}
    assert assert_rule_holds(wg_op, [x, dy, offs]) == {1, 2}
    # rows computed in pieces against the global offsets are wrong: s is blocked rightly
    few = torch.tensor([2, 2, 4, 5], dtype=torch.int32)
    halves = torch.cat([fwd_op.reference(p, w, few) for p in x.chunk(2, dim=0)])
    assert not torch.allclose(halves, fwd_op.reference(x, w, few))


def test_grouped_matmul_with_bounds_shards_the_experts():
    """The (starts, ends) form the frontend emits: sharding the experts leaves a sum for the
    product (each rank its groups' rows, zeros elsewhere) and whole experts for the weight gradient."""
    fwd_op = only_op("""func.func @f(%x: tensor<10x8xf32>, %w: tensor<4x8x6xf32>, %s: tensor<4xi32>,
                                    %e: tensor<4xi32>) -> tensor<10x6xf32> {
      %r = tensor.grouped_matmul %x, %w, %s, %e
             : (tensor<10x8xf32>, tensor<4x8x6xf32>, tensor<4xi32>, tensor<4xi32>) -> tensor<10x6xf32>
      func.return %r : tensor<10x6xf32> }""")
    assert str(fwd_op.sharding_rule()) == ("([i, j], [l, j, k], [l], [l]) -> ([i, k])  j: reduction(sum), "
                                           "l: reduction(sum), i: needs replication")
    wg_op = only_op("""func.func @f(%x: tensor<10x8xf32>, %d: tensor<10x6xf32>, %s: tensor<4xi32>,
                                   %e: tensor<4xi32>) -> tensor<4x8x6xf32> {
      %r = tensor.grouped_matmul_wgrad %x, %d, %s, %e
             : (tensor<10x8xf32>, tensor<10x6xf32>, tensor<4xi32>, tensor<4xi32>) -> tensor<4x8x6xf32>
      func.return %r : tensor<4x8x6xf32> }""")
    assert str(wg_op.sharding_rule()) == "([i, j], [i, k], [l], [l]) -> ([l, j, k])  i: needs replication"
    torch.manual_seed(3)
    ends = torch.tensor([3, 3, 7, 9], dtype=torch.int32)                 # expert 1 empty, row 9 in no group
    starts = torch.cat([torch.zeros(1, dtype=torch.int32), ends[:-1]])
    x, w, dy = torch.randn(10, 8), torch.randn(4, 8, 6), torch.randn(10, 6)
    whole = fwd_op.reference(x, w, starts, ends)
    want = torch.zeros(10, 6)
    for g in range(4):
        want[starts[g]:ends[g]] = x[starts[g]:ends[g]] @ w[g]
    torch.testing.assert_close(whole, want)
    assert assert_rule_holds(fwd_op, [x, w, starts, ends]) >= {1, 2, 3}   # k, n and the experts
    assert assert_rule_holds(wg_op, [x, dy, starts, ends]) >= {1, 2, 3}
    # two ranks of two experts each: their products sum to the whole
    pieces = [fwd_op.reference(x, w[r * 2:(r + 1) * 2], starts[r * 2:(r + 1) * 2], ends[r * 2:(r + 1) * 2])
              for r in range(2)]
    torch.testing.assert_close(pieces[0] + pieces[1], whole)


@pytest.mark.parametrize("start,step,n,elt", [(0, 1, 7, "i64"), (5, -2, 4, "i32"), (3, 4, 0, "i64")])
def test_iota_is_torchs_arange_and_stays_replicated(start, step, n, elt):
    """``tensor.iota``: ``torch.arange(start, start + n·step, step)`` through the interpreter, its
    reference and its generated torch code; its one dim is blocked (values are positions)."""
    text = f"""func.func @main() -> tensor<{n}x{elt}> {{
      %r = tensor.iota {{start = {start}, step = {step}}} : tensor<{n}x{elt}>
      func.return %r : tensor<{n}x{elt}>
    }}"""
    dtype = {"i64": torch.int64, "i32": torch.int32}[elt]
    want = torch.arange(start, start + n * step, step, dtype=dtype)
    got = interpret(parse_module(text), [])[0]
    op = only_op(text)
    assert torch.equal(got, want) and torch.equal(op.reference(), want)
    assert torch.equal(eval(op.torch_expr([]), {"torch": torch}), want)
    assert op.sharding_rule().blocked == frozenset({0})


@pytest.mark.parametrize("ty,why", [("tensor<4xf32>", "integer"), ("tensor<2x2xi64>", "rank-1"),
                                    ("tensor<4xi1>", "integer")])
def test_iota_types_are_checked(ty, why):
    with pytest.raises(Exception, match=why):
        checked(f"""func.func @main() -> {ty} {{
          %r = tensor.iota {{start = 0, step = 1}} : {ty}
          func.return %r : {ty}
        }}""")
