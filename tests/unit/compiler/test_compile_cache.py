"""The compile cache's key and store, without ranks (spmdc.compiler.compile_cache, .fingerprint).

The key changes with what changes the program (a parameter's shape, the model's code or a helper
it calls, an attribute that shapes no parameter, a submodule's mode, ties, hooks, an option, the
plan, the mesh, an input's shape / dtype / requires_grad, the loss function) and stays the same
for an identical rebuilt model, other input values and another process (hash seed); what cannot
be hashed reliably has no key. The store: a miss compiles and stores, a hit loads without
compiling (and gives the compile's warnings again), a corrupt entry warns once and is compiled
again and overwritten, the option and IR dumps turn it off. The 4-rank behaviour (a second
spmdc.compile is a hit and trains to the same numbers): tests/unit/runtime/test_compile_cache_ranks.py.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from spmdc.compiler import compile_cache as cc
from spmdc.compiler.dump import Dump
from spmdc.compiler.options import CompileOptions
from spmdc.examples import gpt2_tiny, mlp
from spmdc.sharding.mesh import Mesh
from spmdc.sharding.plan import Plan

MESH = Mesh({"dp": 4})
REPO = Path(__file__).resolve().parents[3]


def job(x=None, y=None, **kw):
    x = torch.randn(8, 16) if x is None else x
    y = torch.randn(8, 8) if y is None else y
    return {"inputs": [x], "train": True, "loss_fn": F.mse_loss, "loss_inputs": [y], "kwargs": {}, "dump": None,
            "options": CompileOptions(), "partial_grads": False, **kw}


def key(model=None, j=None, mesh=MESH, plan="fsdp"):
    k = cc.job_key(mlp.MLP() if model is None else model, j or job(), mesh=mesh, plan=plan)
    assert k.digest is not None, k.reason
    return k.digest


def no_key(model, j=None, mesh=MESH, plan="fsdp"):
    k = cc.job_key(model, j or job(), mesh=mesh, plan=plan)
    assert k.digest is None
    return k.reason


# -- the key -------------------------------------------------------------------------------------

def test_identical_rebuilt_models_and_other_input_values_have_one_key():
    assert key(mlp.MLP()) == key(mlp.MLP())
    assert key(j=job(torch.zeros(8, 16), torch.ones(8, 8))) == key(j=job(torch.randn(8, 16), torch.randn(8, 8)))
    g = gpt2_tiny.factory()
    assert key(g[0], job(*[t for p in g[1] for t in p], loss_fn=g[2])) == key(
        gpt2_tiny.factory(seed=5)[0], job(*[t for p in g[1] for t in p], loss_fn=g[2]))


def test_parameter_shape_dtype_and_requires_grad_change_the_key():
    base = key(mlp.MLP())
    assert key(mlp.MLP(d_hidden=24)) != base
    assert key(mlp.MLP().double()) != base
    frozen = mlp.MLP()
    frozen.fc1.weight.requires_grad_(False)
    assert key(frozen) != base


def test_module_modes_ties_and_shapeless_attributes_change_the_key():
    base = key(mlp.MLP())
    m = mlp.MLP()
    m.fc2.eval()
    assert key(m) != base
    # gpt2-tiny: heads and ties change the program, not the parameter shapes
    g = gpt2_tiny.factory()
    j = job(*[t for p in g[1] for t in p], loss_fn=g[2])
    assert key(gpt2_tiny.GPT2(n_head=2), j) != key(gpt2_tiny.GPT2(n_head=4), j)
    untied = gpt2_tiny.GPT2()
    untied.lm_head.weight = nn.Parameter(untied.wte.weight.detach().clone())
    assert key(untied, j) != key(gpt2_tiny.GPT2(), j)


def test_hooks_change_the_key_but_not_their_handle_ids():
    def hook(mod, args, out):
        return out * 2

    a, b = mlp.MLP(), mlp.MLP()
    a.fc1.register_forward_hook(hook)
    for _ in range(3):   # other handles taken meanwhile: b's hook gets another global id
        mlp.MLP().register_forward_hook(hook)
    b.fc1.register_forward_hook(hook)
    assert key(a) == key(b) != key(mlp.MLP())


class Tanh(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x):
        return torch.tanh(self.fc(x))


def test_fx_graph_modules_are_keyed_by_their_graph():
    """(a pipeline stage is one: its class is torch.fx's, so its graph must make the key)"""
    first = key(torch.fx.symbolic_trace(Tanh()))
    assert key(torch.fx.symbolic_trace(Tanh())) == first
    gm = torch.fx.symbolic_trace(Tanh())
    for node in gm.graph.nodes:
        if node.target is torch.tanh:
            node.target = torch.relu
    gm.recompile()
    assert key(gm) != first


def test_meta_models_are_keyed_by_structure_not_their_recorded_construction():
    import spmdc
    from spmdc.frontend.deferred_init import fake_parameters

    tokens = torch.zeros(8, 8, dtype=torch.long)
    j = job(tokens, tokens, loss_fn=gpt2_tiny.lm_loss)
    keys = []
    for kw in ({}, {}, {"n_head": 2}):
        m = spmdc.deferred_init(gpt2_tiny.GPT2, **kw)
        with fake_parameters(m):   # (as the compile sees it)
            keys.append(key(m, j))
    assert keys[0] == keys[1] != keys[2]


SOURCE = '''
import torch
import torch.nn as nn
SCALE = {scale}

def helper(x):
    return torch.{act}(x) * SCALE

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x):
        return helper(self.fc(x))
'''


def load_model(tmp_path: Path, tag: str, act: str = "tanh", scale: float = 1.0) -> nn.Module:
    """``Net`` of a module named ``user_net`` written from SOURCE: the same name each time, as when
    a user edits their model file between two runs."""
    path = tmp_path / tag / "user_net.py"
    path.parent.mkdir()
    path.write_text(SOURCE.format(act=act, scale=scale))
    spec = importlib.util.spec_from_file_location("user_net", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["user_net"] = mod
    try:
        spec.loader.exec_module(mod)
        return mod.Net()
    finally:
        del sys.modules["user_net"]


def test_the_models_code_its_helpers_and_their_constants_are_in_the_key(tmp_path):
    j = job(y=torch.randn(8, 8))
    same = key(load_model(tmp_path, "a"), j)
    assert key(load_model(tmp_path, "b"), j) == same
    assert key(load_model(tmp_path, "c", act="relu"), j) != same      # the helper's code
    assert key(load_model(tmp_path, "d", scale=2.0), j) != same       # a module constant it reads


def test_options_every_field_counts():
    base = key()
    for kw in (dict(bucket=False), dict(overlap=False), dict(rng="philox"), dict(mixed_precision="bf16"),
               dict(clip_grad_norm=1.0), dict(memory_cap=1 << 20), dict(fuse_collectives=False), dict(target="triton"),
               dict(checkpoint="blocks")):
        assert key(j=job(options=CompileOptions(**kw))) != base, kw
    assert key(j=job(train=False)) != base
    assert key(j=job(partial_grads=True)) != base


def test_plan_and_mesh_change_the_key():
    base = key()
    assert key(plan="megatron") != base
    assert key(plan=Plan(preset="fsdp")) != key(plan=Plan(preset="fsdp", fsdp_shard="whole"))
    assert key(plan=Plan(preset="fsdp")) == key(plan=Plan(preset="fsdp"))
    assert key(mesh=Mesh({"dp": 2, "tp": 2})) != base
    assert key(mesh=Mesh({"dp": 2})) != base


def test_input_shape_dtype_requires_grad_and_names_change_the_key():
    base = key()
    assert key(j=job(torch.randn(16, 16), torch.randn(16, 8))) != base
    assert key(j=job(torch.randn(8, 16).double())) != base
    assert key(j=job(torch.randn(8, 16).requires_grad_())) != base
    assert key(j=job(kwargs={"mask": torch.ones(8)})) != key(j=job(kwargs={"bias": torch.ones(8)}))


def test_the_loss_function_is_in_the_key():
    from spmdc.api.autograd_call import VjpLoss

    base = key()
    assert key(j=job(loss_fn=F.l1_loss)) != base
    assert key(j=job(loss_fn=lambda o, y: ((o - y) ** 2).mean())) != key(
        j=job(loss_fn=lambda o, y: (o - y).abs().mean()))
    assert key(j=job(loss_fn=functools.partial(F.smooth_l1_loss, beta=0.5))) != key(
        j=job(loss_fn=functools.partial(F.smooth_l1_loss, beta=1.0)))
    assert key(j=job(loss_fn=VjpLoss())) == key(j=job(loss_fn=VjpLoss())) != base
    assert key(j=job(loss_fn=nn.MSELoss(reduction="sum"))) != key(j=job(loss_fn=nn.MSELoss()))


def test_what_cannot_be_hashed_reliably_has_no_key():
    w = torch.randn(8)
    assert "tensor" in no_key(mlp.MLP(), job(loss_fn=lambda o, y: F.mse_loss(o * w, y)))
    m = mlp.MLP()
    m.lock = threading.Lock()
    assert "lock" in no_key(m).lower()
    meta = mlp.MLP()
    meta.table = torch.empty(4, device="meta")   # a constant of the program with no values
    assert "meta" in no_key(meta)


def test_the_key_is_the_same_in_another_process_with_another_hash_seed():
    code = ("import torch, torch.nn.functional as F\nfrom spmdc.compiler.compile_cache import job_key\n"
            "from spmdc.compiler.options import CompileOptions\nfrom spmdc.examples import mlp\n"
            "from spmdc.sharding.mesh import Mesh\n"
            "j = {'inputs': [torch.randn(8, 16)], 'train': True, 'loss_fn': F.mse_loss, 'loss_inputs': "
            "[torch.randn(8, 8)], 'kwargs': {}, 'dump': None, 'options': CompileOptions(), 'partial_grads': False}\n"
            "print(job_key(mlp.MLP(), j, mesh=Mesh({'dp': 4}), plan='fsdp').digest)\n")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == key()


# -- the store -----------------------------------------------------------------------------------

@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SPMDC_CACHE_DIR", str(tmp_path / "cache"))
    cc.stats.reset()
    cc._warned.clear()
    return tmp_path / "cache" / "steps"


class Compiler:
    """A stand-in for compile_global: counts its calls, returns a picklable value."""

    def __init__(self, value="program", warn=None):
        self.calls, self.value, self.warn = 0, value, warn

    def __call__(self):
        self.calls += 1
        if self.warn:
            warnings.warn(self.warn, UserWarning, stacklevel=2)
        return {"ir": self.value, "timings": {}}


def test_a_miss_stores_and_a_hit_loads_without_compiling(cache_dir):
    c = Compiler()
    first = cc.cached_compile(c, mlp.MLP(), job(), mesh=MESH, plan="fsdp")
    assert (c.calls, cc.stats.misses, cc.stats.stores, cc.stats.hits) == (1, 1, 1, 0)
    entries = list(cache_dir.iterdir())
    assert [p.name for p in entries] == [f"{cc.stats.last_key}.pkl"]   # no temporary file left behind
    again = cc.cached_compile(c, mlp.MLP(), job(), mesh=MESH, plan="fsdp")
    assert (c.calls, cc.stats.hits) == (1, 1) and again == first
    cc.cached_compile(c, mlp.MLP(d_hidden=24), job(), mesh=MESH, plan="fsdp")
    assert (c.calls, cc.stats.misses) == (2, 2)


def test_a_hit_gives_the_compiles_warnings_again(cache_dir):
    c = Compiler(warn="spmdc: something to know about this model")
    for expect_calls in (1, 1):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            cc.cached_compile(c, mlp.MLP(), job(), mesh=MESH, plan="fsdp")
        assert c.calls == expect_calls
        assert [str(w.message) for w in got] == ["spmdc: something to know about this model"]


def test_a_corrupt_entry_warns_once_and_is_compiled_again_and_overwritten(cache_dir):
    c = Compiler()
    cc.cached_compile(c, mlp.MLP(), job(), mesh=MESH, plan="fsdp")
    path = cache_dir / f"{cc.stats.last_key}.pkl"
    for garbage in (b"not a pickle", b""):
        path.write_bytes(garbage)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            assert cc.cached_compile(c, mlp.MLP(), job(), mesh=MESH, plan="fsdp")["ir"] == "program"
        msgs = [str(w.message) for w in got if issubclass(w.category, cc.CompileCacheWarning)]
        assert len(msgs) == (1 if garbage else 0)   # once per entry and process
        if msgs:
            assert str(path) in msgs[0] and "unreadable" in msgs[0] and "compiling again" in msgs[0]
    assert (c.calls, cc.stats.corrupt) == (3, 2)
    cc.cached_compile(c, mlp.MLP(), job(), mesh=MESH, plan="fsdp")   # overwritten: a hit again
    assert (c.calls, cc.stats.hits) == (3, 1)


def test_an_entry_of_another_key_is_not_taken(cache_dir):
    c = Compiler()
    cc.cached_compile(c, mlp.MLP(), job(), mesh=MESH, plan="fsdp")
    a = cc.stats.last_key
    cc.cached_compile(Compiler("other"), mlp.MLP(), job(), mesh=MESH, plan="megatron")
    b = cc.stats.last_key
    (cache_dir / f"{a}.pkl").write_bytes((cache_dir / f"{b}.pkl").read_bytes())   # a file under the wrong name
    with pytest.warns(cc.CompileCacheWarning, match="unreadable"):
        assert cc.cached_compile(c, mlp.MLP(), job(), mesh=MESH, plan="fsdp")["ir"] == "program"


def test_the_option_ir_dumps_and_the_propagation_trace_turn_it_off(cache_dir, tmp_path, monkeypatch):
    c = Compiler()
    for j in (job(options=CompileOptions(compile_cache=False)), job(dump=Dump(ir_dir=str(tmp_path / "ir")))):
        cc.cached_compile(c, mlp.MLP(), j, mesh=MESH, plan="fsdp")
        cc.cached_compile(c, mlp.MLP(), j, mesh=MESH, plan="fsdp")
    monkeypatch.setenv("SPMDC_TRACE_PROPAGATION", "1")
    cc.cached_compile(c, mlp.MLP(), job(), mesh=MESH, plan="fsdp")
    assert (c.calls, cc.stats.bypassed, cc.stats.hits) == (5, 5, 0)
    assert not cache_dir.exists()
    monkeypatch.delenv("SPMDC_TRACE_PROPAGATION")
    cc.cached_compile(c, mlp.MLP(), job(dump=Dump(code_dir=str(tmp_path / "gen"))), mesh=MESH, plan="fsdp")
    assert cc.stats.stores == 1   # generated code is dumped per rank, after the cache: not a reason to skip it


def test_uncacheable_jobs_compile_every_time(cache_dir):
    c, w = Compiler(), torch.randn(8)
    for _ in range(2):
        cc.cached_compile(c, mlp.MLP(), job(loss_fn=lambda o, y: F.mse_loss(o * w, y)), mesh=MESH, plan="fsdp")
    assert (c.calls, cc.stats.uncacheable, cc.stats.hits) == (2, 2, 0)
    assert "tensor" in cc.stats.last_reason


def test_a_cache_dir_that_is_a_file_is_named(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("x")
    monkeypatch.setenv("SPMDC_CACHE_DIR", str(tmp_path / "f"))
    with pytest.raises(NotADirectoryError, match="SPMDC_CACHE_DIR"):
        cc.cached_compile(Compiler(), mlp.MLP(), job(), mesh=MESH, plan="fsdp")


# -- a rank's program ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mlp_step():
    from spmdc.compiler import compile_global

    model, ((x,), (y,)), loss = mlp.factory()
    step = compile_global(model, (x,), mesh=Mesh({"dp": 2, "tp": 2}), plan="fsdp+tp", train=True, loss_fn=loss,
                          loss_inputs=(y,), options=CompileOptions(target="torch"))
    step.arguments = []
    return step


def test_a_ranks_program_is_loaded_the_second_time_and_generates_the_same_code(cache_dir, mlp_step):
    from spmdc.compiler import compile_rank
    from spmdc.ir.printer import print_module

    first = [compile_rank(mlp_step, r, "torch") for r in range(4)]
    assert (cc.stats.rank_misses, cc.stats.rank_stores, cc.stats.rank_hits) == (4, 4, 0)
    again = [compile_rank(mlp_step, r, "torch") for r in range(4)]
    assert cc.stats.rank_hits == 4
    for a, b in zip(first, again):
        assert print_module(a.module, debuginfo=True) == print_module(b.module, debuginfo=True)
        assert (a.source, a.arg_layouts, a.res_layouts) == (b.source, b.arg_layouts, b.res_layouts)
    assert len({print_module(p.module) for p in again}) == 4   # every rank its own program


def test_a_ranks_program_is_not_taken_from_the_cache_when_its_ir_is_dumped_or_the_cache_is_off(
        cache_dir, mlp_step, tmp_path):
    import dataclasses

    from spmdc.compiler import compile_rank

    compile_rank(mlp_step, 0, "torch")
    compile_rank(mlp_step, 0, "torch", dump=Dump(ir_dir=str(tmp_path / "ir")))
    assert any((tmp_path / "ir").rglob("*partition*"))
    off = dataclasses.replace(mlp_step, options=mlp_step.options.replace(compile_cache=False))
    compile_rank(off, 0, "torch")
    assert (cc.stats.rank_misses, cc.stats.rank_hits) == (1, 0)


def test_a_ranks_program_that_would_not_read_back_as_printed_is_not_stored(cache_dir, mlp_step, monkeypatch):
    import itertools

    import spmdc.ir.printer as printer
    from spmdc.compiler import compile_rank

    real, n = printer.print_module, itertools.count()
    monkeypatch.setattr(printer, "print_module", lambda *a, **k: real(*a, **k) + f"// {next(n)}\n")
    compile_rank(mlp_step, 0, "torch")
    compile_rank(mlp_step, 0, "torch")
    assert (cc.stats.rank_misses, cc.stats.rank_stores, cc.stats.rank_hits) == (2, 0, 0)
