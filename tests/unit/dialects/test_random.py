"""Random numbers consistent with one device (``tensor.random``, ``tensor.rng_seed``, ``philox-rng``).

Eager mode: every distribution is bitwise the call eager PyTorch makes, and so is the
generator's state afterwards. Partitioned over 1, 2, 4 and 8 ranks with every layout (uneven
pieces included), the ranks' pieces put together are bitwise the single-device tensor, and
every rank's generator ends where eager's does. Counter mode: the pieces put together are
the same bits on every mesh and layout, and Philox matches Triton's ``tl.philox`` (see
tests/unit/codegen/test_triton_random.py).
"""

from __future__ import annotations

import pytest
import torch

from spmdc.dialects.func import FuncOp
from spmdc.dialects.tensor import RandomOp
from spmdc.ir import parse_module
from spmdc.ir.printer import print_module
from spmdc.passes.manager import PassManager
from spmdc.passes.registry import parse_pipeline
from spmdc.runtime.interpreter import interpret
from spmdc.sharding.mesh import Mesh, local_offset

DRAWS = {   # IR attributes -> the eager PyTorch call it stands for
    'distribution = "bernoulli", p = 0.9': lambda s, dt: torch.empty(s, dtype=dt).bernoulli_(0.9),
    'distribution = "uniform", high = 1.0, low = 0.0': lambda s, dt: torch.rand(s, dtype=dt),
    'distribution = "uniform", high = 3.0, low = -1.0': lambda s, dt: torch.empty(s, dtype=dt).uniform_(-1, 3),
    'distribution = "normal", mean = 0.0, std = 1.0': lambda s, dt: torch.randn(s, dtype=dt),
    'distribution = "normal", mean = 2.0, std = 0.5': lambda s, dt: torch.empty(s, dtype=dt).normal_(2, 0.5),
    'distribution = "randint", high = 7, low = 2': lambda s, dt: torch.randint(2, 7, s, dtype=dt),
}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "i64": torch.int64}


def _module(attrs: str, shape: tuple[int, ...], elt: str, mesh: str = "", layout: str = "") -> str:
    ty = f"tensor<{'x'.join(map(str, shape))}x{elt}>"
    res = f"{ty} {{shard.sharding = #shard<@m, [{layout}]>}}" if layout else ty
    head = f"shard.mesh @m = <[{mesh}]>\n" if mesh else ""
    return (f"{head}func.func @main() -> ({res}, tensor<f32>) {{\n"
            f"  %r = tensor.random {{{attrs}}} : {ty}\n"
            f"  %after = tensor.random {{distribution = \"uniform\", high = 1.0, low = 0.0}} : tensor<f32>\n"
            f"  func.return %r, %after : {ty}, tensor<f32>\n}}\n")


def _elt(attrs: str) -> str:
    return "i64" if "randint" in attrs else "f32"


@pytest.mark.parametrize("attrs", list(DRAWS))
@pytest.mark.parametrize("elt", ["f32", "bf16"])
def test_each_distribution_is_the_eager_call_and_leaves_the_generator_where_eager_does(attrs, elt):
    elt = "i64" if "randint" in attrs and elt == "f32" else elt
    shape = (37, 53)
    module = parse_module(_module(attrs, shape, elt))
    torch.manual_seed(7)
    got, got_next = interpret(module, [])
    torch.manual_seed(7)
    want = DRAWS[attrs](shape, DTYPES[elt])
    want_next = torch.rand(())
    assert got.dtype == want.dtype and torch.equal(got, want)
    assert torch.equal(got_next, want_next)     # the next draw matches: same generator state


def _pieces(text: str, mesh: Mesh) -> tuple[list[tuple[torch.Tensor, tuple[int, ...]]], list[torch.Tensor]]:
    """Every rank's piece of @main's first result (with its offset) and its second result."""
    out, nexts = [], []
    for rank in range(mesh.size):
        module = parse_module(text)
        PassManager(parse_pipeline(f"sharding-propagation,partition{{rank={rank}}}")).run(module)
        op = next(o for o in module.walk() if isinstance(o, RandomOp) and o.result.tensor_type.rank)
        torch.manual_seed(11)
        piece, after = interpret(module, [])
        out.append((piece, op.offset))
        nexts.append(after)
    return out, nexts


def _assemble(shape: tuple[int, ...], pieces: list[tuple[torch.Tensor, tuple[int, ...]]], dtype) -> torch.Tensor:
    full = torch.full(shape, -1, dtype=dtype)
    seen = torch.zeros(shape, dtype=torch.int32)
    for piece, offset in pieces:
        index = tuple(slice(o, o + n) for o, n in zip(offset, piece.shape))
        full[index] = piece
        seen[index] += 1
    assert bool((seen >= 1).all()), "the pieces do not cover the tensor"
    return full


LAYOUTS = [  # mesh, layout of the 7x10 result, devices
    ('"x" = 1', "S(0)"), ('"x" = 2', "S(0)"), ('"x" = 2', "S(1)"), ('"x" = 4', "S(0)"), ('"x" = 4', "S(1)"),
    ('"x" = 8', "S(1)"), ('"x" = 8', "R"), ('"x" = 2, "y" = 4', "S(0), S(1)"), ('"x" = 2, "y" = 4', "S(1), S(0)"),
    ('"x" = 2, "y" = 2', "S(1), S(1)"), ('"x" = 2, "y" = 4', "R, S(0)"),
]


def _mesh(spec: str) -> Mesh:
    return Mesh({k.strip().strip('"'): int(v) for k, v in (p.split("=") for p in spec.split(","))})


@pytest.mark.parametrize("mesh_spec,layout", LAYOUTS)
@pytest.mark.parametrize("attrs", [a for a in DRAWS if "3.0" not in a and "2.0" not in a])
def test_eager_mode_pieces_make_the_single_device_tensor_on_every_mesh(mesh_spec, layout, attrs):
    shape, elt = (7, 10), _elt(attrs)
    text = _module(attrs, shape, elt, mesh_spec, layout)
    pieces, nexts = _pieces(text, _mesh(mesh_spec))
    torch.manual_seed(11)
    want = DRAWS[attrs](shape, DTYPES[elt])
    want_next = torch.rand(())
    assert torch.equal(_assemble(shape, pieces, want.dtype), want)
    assert all(torch.equal(n, want_next) for n in nexts)


def _philox(text: str) -> str:
    module = parse_module(text)
    PassManager(parse_pipeline("philox-rng")).run(module)
    return print_module(module)


@pytest.mark.parametrize("attrs", [a for a in DRAWS if "3.0" not in a and "2.0" not in a])
def test_counter_mode_pieces_are_the_same_bits_on_every_mesh_and_layout(attrs):
    shape, elt = (7, 10), _elt(attrs)
    reference = None
    for mesh_spec, layout in LAYOUTS:
        pieces, nexts = _pieces(_philox(_module(attrs, shape, elt, mesh_spec, layout)), _mesh(mesh_spec))
        full = _assemble(shape, pieces, DTYPES[elt])
        reference = full if reference is None else reference
        assert torch.equal(full, reference), f"{mesh_spec} {layout}"
        assert all(torch.equal(n, nexts[0]) for n in nexts)   # ranks' generators stay together


def test_counter_mode_depends_on_seed_stream_and_index_with_the_right_statistics():
    from spmdc.dialects.torch_helpers import philox_random

    shape = (64, 512)
    a = philox_random(torch.tensor(5), 0, "bernoulli", [0.9], shape, shape, (0, 0), torch.float32)
    b = philox_random(torch.tensor(5), 1, "bernoulli", [0.9], shape, shape, (0, 0), torch.float32)
    c = philox_random(torch.tensor(6), 0, "bernoulli", [0.9], shape, shape, (0, 0), torch.float32)
    assert not torch.equal(a, b) and not torch.equal(a, c)
    assert abs(a.mean().item() - 0.9) < 0.01
    u = philox_random(torch.tensor(5), 2, "uniform", [0.0, 1.0], shape, shape, (0, 0), torch.float32)
    assert 0.0 <= u.min().item() and u.max().item() < 1.0 and abs(u.mean().item() - 0.5) < 0.01
    n = philox_random(torch.tensor(5), 3, "normal", [0.0, 1.0], shape, shape, (0, 0), torch.float32)
    assert abs(n.mean().item()) < 0.02 and abs(n.std().item() - 1.0) < 0.02
    r = philox_random(torch.tensor(5), 4, "randint", [2, 7], shape, shape, (0, 0), torch.int64)
    assert set(r.unique().tolist()) == {2, 3, 4, 5, 6}
    # a piece is the same bits as the corresponding part of the whole
    piece = philox_random(torch.tensor(5), 0, "bernoulli", [0.9], (10, 100), shape, (30, 400), torch.float32)
    assert torch.equal(piece, a[30:40, 400:500])


def test_philox_rng_pass_gives_one_seed_and_distinct_streams():
    text = _module('distribution = "bernoulli", p = 0.9', (4, 4), "f32")
    once = _philox(text)
    assert once.count("tensor.rng_seed") == 1
    assert "stream = 0" in once and "stream = 1" in once
    assert _philox(once) == once   # idempotent
    f = next(op for op in parse_module(once).body.ops if isinstance(op, FuncOp))
    assert all(op.is_counter_based for op in f.walk() if isinstance(op, RandomOp))


def test_random_ops_are_never_merged_or_removed():
    text = (
        "func.func @main() -> tensor<4xf32> {\n"
        '  %a = tensor.random {distribution = "uniform", high = 1.0, low = 0.0} : tensor<4xf32>\n'
        '  %b = tensor.random {distribution = "uniform", high = 1.0, low = 0.0} : tensor<4xf32>\n'
        '  %unused = tensor.random {distribution = "normal", mean = 0.0, std = 1.0} : tensor<8xf32>\n'
        "  %c = tensor.add %a, %b : tensor<4xf32>\n"
        "  func.return %c : tensor<4xf32>\n}\n")
    module = parse_module(text)
    PassManager(parse_pipeline("canonicalize,cse,dce")).run(module)
    assert print_module(module).count("tensor.random") == 3
    torch.manual_seed(0)
    (got,) = interpret(module, [])
    torch.manual_seed(0)
    a, b = torch.rand(4), torch.rand(4)
    assert torch.equal(got, a + b)


def test_local_offset_agrees_with_partition():
    mesh = _mesh('"x" = 2, "y" = 4')
    from spmdc.dialects.shard import Shard

    assert local_offset((7, 10), (Shard(0), Shard(1)), mesh.shape, (1, 3)) == (4, 9)
