"""The model cache: a GGUF is converted once, in the dtype asked for only; its size is
reported and it can be cleared, keeping the folders a loaded pair came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.models import gguf_convert as convert
from specviz.models import pair as models


@pytest.fixture
def conversions(monkeypatch):
    """Record every GGUF conversion and cast instead of doing it; each writes a valid cache folder."""
    done = []

    def fake_convert(gguf, out, label, progress, dtype="float32"):
        done.append(("convert", out.name, dtype))
        _write(out, 1000 if dtype == "float32" else 500)

    def fake_cast(folder, dtype, progress):
        out = models.dtype_folder(folder, dtype)
        done.append(("cast", out.name, dtype))
        _write(out, 500)
        return out

    monkeypatch.setattr(convert, "convert_gguf", fake_convert)
    monkeypatch.setattr(models, "cast_cache", fake_cast)
    return done


def _write(out: Path, size: int) -> None:
    out.mkdir(parents=True)
    (out / "model.safetensors").write_bytes(b"\0" * size)
    (out / "specviz.json").write_text(json.dumps({"format": convert.CACHE_FORMAT}))


def _gguf(tmp_path: Path) -> Path:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    return path


def test_a_bf16_start_converts_to_bf16_only(specviz_cache, conversions):
    base = specviz_cache / "models" / "m-key"
    out = models._converted(base, "bfloat16", print, lambda: _gguf(specviz_cache), "m")
    assert out == base.with_name("m-key.bfloat16")
    assert conversions == [("convert", "m-key.bfloat16", "bfloat16")]
    assert not base.exists(), "no fp32 copy is written for a bf16 start"
    assert models._converted(base, "bfloat16", print, lambda: _gguf(specviz_cache), "m") == out
    assert len(conversions) == 1, "converted once, then read from the cache"


def test_fp32_is_converted_when_asked_for(specviz_cache, conversions):
    base = specviz_cache / "models" / "m-key"
    models._converted(base, "bfloat16", print, lambda: _gguf(specviz_cache), "m")
    assert models._converted(base, "float32", print, lambda: _gguf(specviz_cache), "m") == base
    assert conversions[-1] == ("convert", "m-key", "float32")  # from the GGUF, exact: not from bf16


def test_an_older_fp32_cache_is_cast_not_converted_again(specviz_cache, conversions):
    base = specviz_cache / "models" / "m-key"
    _write(base, 1000)
    models._converted(base, "bfloat16", print, lambda: pytest.fail("the GGUF is not needed"), "m")
    assert conversions == [("cast", "m-key.bfloat16", "bfloat16")]


def test_a_temporary_gguf_is_deleted_after_the_conversion(specviz_cache, conversions):
    gguf = _gguf(specviz_cache)
    models._converted(specviz_cache / "models" / "m-key", "bfloat16", print, lambda: gguf, "m", temporary=True)
    assert not gguf.exists()


def test_usage_and_clearing_keep_what_is_loaded(specviz_cache):
    models_dir = specviz_cache / "models"
    _write(models_dir / "a", 1000)
    _write(models_dir / "a.bfloat16", 500)
    _write(models_dir / "b.bfloat16", 300)
    usage = models.cache_usage()
    assert set(usage) == {"a", "a.bfloat16", "b.bfloat16"}
    assert usage["a"] >= 1000 and usage["a.bfloat16"] >= 500
    freed = models.clear_model_cache(keep=[models_dir / "a.bfloat16", models_dir / "b.bfloat16"])
    assert freed == usage["a"]
    assert set(models.cache_usage()) == {"a.bfloat16", "b.bfloat16"}
    assert models.clear_model_cache() == usage["a.bfloat16"] + usage["b.bfloat16"]
    assert models.cache_usage() == {}


def test_an_empty_cache_is_no_error(specviz_cache):
    assert models.cache_usage() == {}
    assert models.clear_model_cache() == 0
