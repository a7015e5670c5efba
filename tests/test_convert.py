"""The first start's conversion: one GGUF parse per file, draft and target converted at
the same time in child processes when the machine allows, their progress relayed to the
caller's thread, and a child's failure reported as a clear ModelError."""

from __future__ import annotations

import threading
from pathlib import Path

import gguf
import numpy as np
import pytest

from specviz.models import gguf_convert as convert
from specviz.models import pair as models
from specviz.record.errors import ModelError


def _small_gguf(path: Path) -> Path:
    """A real (if tiny) GGUF file: one metadata field and one tensor."""
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_string("general.name", "small")
    writer.add_tensor("token_embd.weight", np.arange(8, dtype=np.float32).reshape(2, 4))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_one_parse_shares_a_reader_per_file_and_restores_the_class(tmp_path):
    a, b = _small_gguf(tmp_path / "a.gguf"), _small_gguf(tmp_path / "b.gguf")
    original = gguf.GGUFReader
    with convert.one_parse():
        first = gguf.GGUFReader(str(a))
        assert gguf.GGUFReader(a) is first, "the same file, by str or Path: one reader"
        assert gguf.GGUFReader(str(tmp_path / "." / "a.gguf")) is first
        assert gguf.GGUFReader(str(b)) is not first
        assert first.fields["general.name"].contents() == "small"
    assert gguf.GGUFReader is original
    assert gguf.GGUFReader(str(a)) is not first


def test_parallel_needs_two_cores_and_the_memory():
    assert convert.parallel_ok(free_bytes=convert.PARALLEL_MIN_FREE, cpus=2)
    assert not convert.parallel_ok(free_bytes=convert.PARALLEL_MIN_FREE - 1, cpus=2)
    assert not convert.parallel_ok(free_bytes=10 * convert.PARALLEL_MIN_FREE, cpus=1)


@pytest.mark.slow
def test_a_child_that_cannot_read_the_gguf_says_so(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF but not really")
    seen = []
    with pytest.raises(ModelError, match=r"could not read the GGUF file .*broken\.gguf"):
        convert.in_subprocess(bad, tmp_path / "out", "draft", lambda m, f: seen.append(m), "bfloat16")
    assert seen == ["Converting draft GGUF (first run only): tokenizer"], "the child's progress is relayed"
    assert not (tmp_path / "out").exists(), "no half-written cache folder"


@pytest.fixture
def two_ggufs(tmp_path, specviz_cache):
    return [_small_gguf(tmp_path / f"{name}.gguf") for name in ("d", "t")]


def _fake_converter(calls, meeting=None):
    def fake(gguf_path, out, label, progress, dtype="float32"):
        calls.append((label, threading.current_thread().name))
        progress(f"converting {label}", None)
        if meeting is not None:
            meeting.wait(timeout=10)  # both conversions must be under way at once to pass
        out.mkdir(parents=True)
        (out / "specviz.json").write_text(f'{{"format": {convert.CACHE_FORMAT}}}')
    return fake


def test_the_pair_converts_at_once_and_progress_reaches_the_callers_thread(two_ggufs, monkeypatch):
    calls, heard = [], []
    meeting = threading.Barrier(2)
    monkeypatch.setattr(convert, "parallel_ok", lambda: True)
    monkeypatch.setattr(convert, "in_subprocess", _fake_converter(calls, meeting))
    d, t = models._materialize_pair(str(two_ggufs[0]), str(two_ggufs[1]),
                                    lambda m, f: heard.append((m, threading.current_thread().name)), "bfloat16")
    assert d.name.startswith("d-") and t.name.startswith("t-") and d.name.endswith(".bfloat16")
    assert not meeting.broken, "the two conversions overlapped"
    assert sorted(label for label, _ in calls) == ["d.gguf", "t.gguf"]
    assert {m for m, _ in heard} == {"converting d.gguf", "converting t.gguf"}
    assert {name for _, name in heard} == {threading.current_thread().name}


def test_without_the_memory_the_pair_converts_one_after_the_other(two_ggufs, monkeypatch):
    calls = []
    monkeypatch.setattr(convert, "parallel_ok", lambda: False)
    monkeypatch.setattr(convert, "convert_gguf", _fake_converter(calls))
    monkeypatch.setattr(convert, "in_subprocess", lambda *a, **k: pytest.fail("no child process"))
    models._materialize_pair(str(two_ggufs[0]), str(two_ggufs[1]), lambda m, f: None, "bfloat16")
    assert calls == [("d.gguf", threading.current_thread().name), ("t.gguf", threading.current_thread().name)]


def test_a_failed_conversion_of_the_pair_raises_its_error(two_ggufs, monkeypatch):
    def fails(gguf_path, out, label, progress, dtype="float32"):
        raise ModelError(f"could not read the GGUF file {gguf_path}: boom")

    monkeypatch.setattr(convert, "parallel_ok", lambda: True)
    monkeypatch.setattr(convert, "in_subprocess", fails)
    with pytest.raises(ModelError, match="d.gguf: boom"):
        models._materialize_pair(str(two_ggufs[0]), str(two_ggufs[1]), lambda m, f: None, "bfloat16")
