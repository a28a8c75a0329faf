import pytest


@pytest.fixture(autouse=True)
def _codegen_cache(tmp_path, monkeypatch):
    """Every test gets its own codegen cache directory (never ~/.cache/spmdc)."""
    monkeypatch.setenv("SPMDC_CACHE_DIR", str(tmp_path / "cache"))
