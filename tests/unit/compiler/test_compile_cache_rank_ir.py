"""A rank's program in the compile cache (spmdc.compiler.compile_cache.cached_rank_stages): a hit
loads its flat form (spmdc.ir.serialize) without parsing, the same program and generated code as
compiling it; a flat form that does not load warns and the text is parsed; a text that does not
parse either warns, is compiled again and rewritten; the generated code's compiled form is kept
(spmdc.codegen.cache.compiled_code). Numbers on 4 ranks: tests/unit/runtime/test_compile_cache_ranks.py."""

from __future__ import annotations

import pickle
import warnings

import pytest

from spmdc.compiler import compile_cache as cc
from spmdc.compiler.options import CompileOptions
from spmdc.examples import mlp
from spmdc.ir.printer import print_module
from spmdc.sharding.mesh import Mesh


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SPMDC_CACHE_DIR", str(tmp_path / "cache"))
    cc.stats.reset()
    cc._warned.clear()
    return tmp_path / "cache" / "steps"


@pytest.fixture(scope="module")
def step():
    from spmdc.compiler import compile_global

    model, ((x,), (y,)), loss = mlp.factory()
    s = compile_global(model, (x,), mesh=Mesh({"dp": 2, "tp": 2}), plan="fsdp+tp", train=True, loss_fn=loss,
                       loss_inputs=(y,), options=CompileOptions(target="torch"))
    s.arguments = []
    return s


def _same(a, b):
    assert print_module(a.module, debuginfo=True) == print_module(b.module, debuginfo=True)
    assert (a.source, a.arg_layouts, a.res_layouts) == (b.source, b.arg_layouts, b.res_layouts)


def _entry_path(cache_dir, step, rank=0):
    return cache_dir / f"{cc.rank_key(step, rank, 'torch')}.pkl"


def _rewrite(path, change):
    entry = pickle.loads(path.read_bytes())
    change(entry["value"])
    path.write_bytes(pickle.dumps(entry))


def test_a_hit_loads_the_flat_form_without_parsing(cache_dir, step, monkeypatch):
    import spmdc.ir.parser as parser
    from spmdc.compiler import compile_rank

    first = compile_rank(step, 0, "torch")
    entry = pickle.loads(_entry_path(cache_dir, step).read_bytes())["value"]
    assert entry["flat"]["module"] is not None and entry["module"] == print_module(first.module, debuginfo=True)

    def refuse(*a, **k):
        raise AssertionError("parsed")
    monkeypatch.setattr(parser, "parse_module", refuse)
    again = compile_rank(step, 0, "torch")
    assert (cc.stats.rank_hits, cc.stats.rank_parsed, cc.stats.corrupt) == (1, 0, 0)
    _same(first, again)
    ns_a, ns_b = first.fn.__globals__, again.fn.__globals__
    assert ns_a is not ns_b and first.fn.__code__.co_code == again.fn.__code__.co_code


def test_a_flat_form_that_does_not_load_warns_and_the_text_is_parsed(cache_dir, step):
    from spmdc.compiler import compile_rank

    first = compile_rank(step, 1, "torch")
    path = _entry_path(cache_dir, step, 1)
    _rewrite(path, lambda v: v["flat"].update(module=b"\x80\x05 garbage"))
    with pytest.warns(cc.CompileCacheWarning, match="flat form of rank 1's program that does not load.*parsing"):
        again = compile_rank(step, 1, "torch")
    assert (cc.stats.rank_hits, cc.stats.rank_parsed, cc.stats.corrupt, cc.stats.rank_misses) == (1, 1, 1, 1)
    _same(first, again)


def test_an_entry_whose_text_does_not_parse_is_compiled_again_and_rewritten(cache_dir, step):
    from spmdc.compiler import compile_rank

    first = compile_rank(step, 2, "torch")
    path = _entry_path(cache_dir, step, 2)
    _rewrite(path, lambda v: v.update(module="not ( an IR text", flat={"module": None, "unfused": None}))
    with pytest.warns(cc.CompileCacheWarning, match="does not read back.*compiling it again"):
        again = compile_rank(step, 2, "torch")
    assert (cc.stats.rank_hits, cc.stats.rank_misses, cc.stats.rank_stores) == (0, 2, 2)
    _same(first, again)
    cc.stats.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", cc.CompileCacheWarning)
        third = compile_rank(step, 2, "torch")   # rewritten: a clean hit on its flat form
    assert (cc.stats.rank_hits, cc.stats.rank_parsed, cc.stats.corrupt) == (1, 0, 0)
    _same(first, third)


def test_the_generated_codes_compiled_form_is_kept_and_checked_against_its_source(tmp_path):
    from spmdc.codegen.cache import compiled_code

    path = tmp_path / "spmdc_x.py"
    source = "def f():\n    return 41 + 1\n"
    path.write_text(source)
    code = compiled_code(path, source)
    kept = list(tmp_path.glob("spmdc_x.*.code"))
    assert len(kept) == 1 and code.co_filename == str(path)
    assert compiled_code(path, source).co_consts == code.co_consts    # loaded from the kept form
    ns: dict = {}
    exec(compiled_code(path, "def f():\n    return 7\n"), ns)         # another source: compiled again
    assert ns["f"]() == 7
    kept[0].write_bytes(b"garbage")
    ns = {}
    exec(compiled_code(path, source), ns)                              # unreadable: compiled again
    assert ns["f"]() == 42
