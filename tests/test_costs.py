"""specviz.measure.forward_costs: measuring forward passes, the latency model built from them, and the
cache of measurements. On the tiny pair only (fp32, CPU, one thread): a few seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import specviz.measure.forward_costs as costs
from specviz import BadInput, RunConfig, load_pair, speculative
from specviz.measure.forward_costs import (
    CURVE_GRID,
    LATENCY_GRID,
    batch_cache,
    cache_file_name,
    context_ids,
    fill_cache,
    grid_name,
    load_or_measure,
    measure,
    safe_name,
    timed_pass,
)
from specviz.record.contention import OTHER_PROCESSES, Contention
from specviz.replay.latency import LatencyModel, from_trace, latency_model

pytestmark = pytest.mark.usefixtures("single_thread")

CTX = 32
SMALL = [("target", 1, 1), ("target", 1, 4), ("draft", 1, 1), ("draft", 4, 1), ("draft", 2, 3)]
KEYS = {"model", "batch", "tokens", "ms", "min_ms", "max_ms"}


@pytest.fixture(scope="module")
def pair():
    """A tiny pair of this module's own: the tests hook its models' forward passes."""
    return load_pair("tiny", device="cpu", dtype="float32")


@pytest.fixture
def counted(monkeypatch):
    """Count calls of costs.measure (load_or_measure calls it through the module), on a machine
    that reads as quiet: a grid other work overlapped is not kept (tested below with a busy one),
    and a shared test machine is rarely quiet (the meter itself is tested in test_busy.py)."""
    monkeypatch.setattr(costs.busy, "entries", lambda jobs, meter: [])
    calls = []
    real = costs.measure

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(costs, "measure", spy)
    return calls


def point(row):
    return (row["model"], row["batch"], row["tokens"])


# --- the grids ---------------------------------------------------------------------


def test_ready_made_grids():
    assert LATENCY_GRID == [("target", 1, k) for k in range(1, 34)] + [
        ("draft", 1, k) for k in (1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 33)
    ] + [("draft", b, 1) for b in (2, 4, 8, 16, 32)]
    assert len(CURVE_GRID) == 2 * 3 * 32 == len(set(CURVE_GRID))
    assert {(m, b) for m, b, _ in CURVE_GRID} == {(m, b) for m in ("draft", "target") for b in (1, 4, 16)}
    assert {k for _, _, k in CURVE_GRID} == set(range(1, 33))
    assert costs.default_grid() == LATENCY_GRID
    assert grid_name(LATENCY_GRID) == "latency" and grid_name(CURVE_GRID) == "curve"
    assert grid_name(SMALL) == grid_name([list(p) for p in SMALL]) != grid_name(SMALL[:-1])
    assert grid_name(SMALL).startswith("grid-")


def test_bad_grid_points_are_refused(pair):
    for bad in ([("drafter", 1, 1)], [("draft", 0, 1)], [("target", 1, 0)]):
        with pytest.raises(ValueError):
            measure(pair, context_length=CTX, grid=bad, repeats=1)


def test_a_context_past_the_pair_is_refused(pair):
    with pytest.raises(BadInput) as err:
        measure(pair, context_length=pair.context_length - 3, grid=[("target", 1, 4)], repeats=1)
    assert err.value.field == "context_length"


def test_context_ids_repeat_a_fixed_text(pair):
    ids = context_ids(pair.tokenizer, 1000)
    assert len(ids) == 1000 and ids == context_ids(pair.tokenizer, 1000)
    assert ids[:10] == context_ids(pair.tokenizer, 10)


# --- measuring -----------------------------------------------------------------------


def test_measure_gives_one_row_per_grid_point(pair):
    told = []
    rows = measure(pair, context_length=CTX, grid=SMALL + SMALL[:1], repeats=3,
                   progress=lambda fraction, message: told.append((fraction, message)))
    assert sorted(map(point, rows)) == sorted(SMALL)  # the duplicate is measured once
    for row in rows:
        assert set(row) == KEYS
        assert 0 < row["min_ms"] <= row["ms"] <= row["max_ms"]
    fractions = [f for f, _ in told]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and 0 <= fractions[0]
    assert all(isinstance(m, str) and m for _, m in told)


def test_measure_defaults_to_the_latency_grid(pair):
    rows = measure(pair, context_length=CTX, repeats=1)
    assert [point(r) for r in rows] == LATENCY_GRID
    narrow = measure(pair, context_length=CTX, repeats=1, tokens=[1, 2], batches=[1, 8], models=["draft"],
                     reads=[1, 3])
    assert [point(r) for r in narrow] == [("draft", 1, 1), ("draft", 1, 3), ("draft", 8, 1)]


def test_every_timed_pass_reads_exactly_the_context(pair):
    """Hook both models: every pass after a cache is filled sees CTX cached tokens, B rows, k new."""
    seen = []

    def hook(module, args, kwargs):
        ids = kwargs["input_ids"]
        seen.append((module, kwargs["cache"].get_seq_length(), tuple(ids.shape), kwargs["logits_to_keep"]))

    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in (pair.draft, pair.target)]
    try:
        rows = measure(pair, context_length=CTX, grid=SMALL, repeats=2)
    finally:
        for h in handles:
            h.remove()
    prefills = [s for s in seen if s[1] == 0]
    assert sorted(id(s[0]) for s in prefills) == sorted([id(pair.draft), id(pair.target)])  # once per model
    assert all(s[2] == (1, CTX) for s in prefills)
    timed = [s for s in seen if s[1] != 0]
    assert len(timed) == len(SMALL) * 3  # one warm-up + 2 repeats per point
    assert all(length == CTX for _, length, _, _ in timed)
    want = {(getattr(pair, m), (b, k), k) for m, b, k in SMALL}
    assert {(mod, shape, keep) for mod, _, shape, keep in timed} == want
    assert len(rows) == len(SMALL)


def test_a_timed_pass_leaves_the_cache_as_it_found_it(pair):
    ids = context_ids(pair.tokenizer, CTX + 5)
    cache = fill_cache(pair.target, ids[:CTX], pair.device)
    copy4 = batch_cache(cache, 4)
    times = [timed_pass(pair.target, cache, torch.tensor([ids[CTX:]]), pair.device) for _ in range(3)]
    assert len(times) == 3 and all(t > 0 for t in times)
    assert cache.get_seq_length() == CTX
    for _ in range(2):
        timed_pass(pair.target, copy4, torch.tensor([ids[CTX:]] * 4), pair.device)
    assert copy4.get_seq_length() == CTX
    # Not only the length: the same content, so the next pass computes what a fresh cache gives.
    fresh = fill_cache(pair.target, ids[:CTX], pair.device)
    new = torch.tensor([ids[CTX:]])
    with torch.inference_mode():
        a = pair.target(input_ids=new, cache=cache, use_cache=True).logits
        b = pair.target(input_ids=new, cache=fresh, use_cache=True).logits
        c = pair.target(input_ids=new.repeat(4, 1), cache=copy4, use_cache=True).logits
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(c, b.expand(4, -1, -1))


def test_stop_keeps_what_was_measured(pair):
    """Asked before each cache fill (2) and each pass: the warm-up sweep, then timed passes.
    Stopped after two timed passes, the two points timed so far come back."""
    asked = []

    def stop():
        asked.append(1)
        return len(asked) > 2 + len(SMALL) + 2

    rows = measure(pair, context_length=CTX, grid=SMALL, repeats=1, stop=stop)
    assert [point(r) for r in rows] == SMALL[:2]
    assert all(set(r) == KEYS and r["ms"] > 0 for r in rows)
    assert measure(pair, context_length=CTX, grid=SMALL, repeats=1, stop=lambda: True) == []


def test_measuring_is_marked_as_heavy_work(pair, monkeypatch):
    labels = []
    real = costs.timed_pass

    def spy(*args, **kwargs):
        from specviz.models import busy

        with busy._lock:
            labels.extend(j.label for j in busy._jobs.values() if j.end_ns is None)
        return real(*args, **kwargs)

    monkeypatch.setattr(costs, "timed_pass", spy)
    measure(pair, context_length=CTX, grid=SMALL[:1], repeats=1)
    assert "measuring forward-pass costs" in labels


# --- the latency model -----------------------------------------------------------------


def test_latency_model_from_rows_interpolates():
    rows = [
        {"model": "target", "batch": 1, "tokens": 1, "ms": 100.0},
        {"model": "target", "batch": 1, "tokens": 5, "ms": 140.0},
        {"model": "target", "batch": 4, "tokens": 5, "ms": 999.0},  # a curve row: ignored
        {"model": "draft", "batch": 1, "tokens": 1, "ms": 30.0},
        {"model": "draft", "batch": 4, "tokens": 1, "ms": 60.0},
        {"model": "draft", "batch": 1, "tokens": 3, "ms": 50.0},  # a read of 3 tokens
    ]
    lm = latency_model(rows, 200.0, 900.0, 2.5, {"context_length": 300, "device": "cpu"})
    assert isinstance(lm, LatencyModel) and lm.source == "measured"
    assert lm.draft_ms == {1: 30.0, 4: 60.0} and lm.verify_ms == {1: 100.0, 5: 140.0}
    assert lm.verify(3) == pytest.approx(120.0)
    assert lm.draft(2) == pytest.approx(40.0)
    assert lm.draft(8) == pytest.approx(100.0)  # extrapolated along the last slope
    assert lm.draft_read_ms == {3: 50.0}
    assert lm.draft_read(1) == 30.0 and lm.draft_read(2) == pytest.approx(40.0)  # between 1 (30) and 3 (50)
    assert lm.draft_read(5) == pytest.approx(70.0)  # extrapolated: 10 ms a token
    assert lm.c == pytest.approx(0.3)
    assert (lm.draft_prefill_ms, lm.target_prefill_ms, lm.overhead_ms) == (200.0, 900.0, 2.5)
    assert lm.context_length == 300 and lm.meta["device"] == "cpu"
    assert LatencyModel.from_dict(json.loads(json.dumps(lm.to_dict()))) == lm
    with pytest.raises(ValueError):
        latency_model([r for r in rows if r["model"] == "target"])
    with pytest.raises(ValueError):
        latency_model([r for r in rows if r["model"] == "draft"])


def test_latency_model_from_a_real_measurement(pair, specviz_cache):
    rows, meta = load_or_measure(pair, CTX, LATENCY_GRID, repeats=1)
    lm = latency_model(rows, meta=meta)
    assert sorted(lm.verify_ms) == list(range(1, 34)) and sorted(lm.draft_ms) == [1, 2, 4, 8, 16, 32]
    assert sorted(lm.draft_read_ms) == [2, 3, 4, 5, 6, 7, 8, 9, 17, 33] and lm.draft_read(2) > 0
    assert lm.context_length == CTX and lm.verify(2.5) > 0 and lm.draft(3) > 0
    assert meta["grid"] == "latency"


def test_from_trace_still_works_on_a_run(tiny_pair):
    trace = speculative(tiny_pair, RunConfig(prompt="Hello", gamma=3, max_new_tokens=12)).run()
    lm = from_trace(trace)
    assert lm.source == "from a trace" and lm.draft(1) > 0 and lm.verify(4) > 0
    assert lm.context_length == len(trace.prompt_ids) + len(trace.output_ids)
    reads = {}  # the draft's passes by tokens read: one token, or two after a bonus
    for e in trace.events:
        if e.kind == "draft_forward":
            reads.setdefault(len(e.tokens), []).append(e.duration_ms)
    assert lm.draft(1) == pytest.approx(sum(reads[1]) / len(reads[1]))
    assert lm.draft_read_ms == {k: pytest.approx(sum(v) / len(v)) for k, v in reads.items() if k > 1}


def test_a_read_without_measured_reads_costs_a_batch():
    lm = LatencyModel(draft_ms={1: 10.0, 4: 16.0}, verify_ms={1: 50.0})
    assert lm.draft_read(1) == 10.0 and lm.draft_read(4) == 16.0
    assert LatencyModel.from_dict({"draft_ms": {"1": 10.0}, "verify_ms": {"1": 50.0}}).draft_read_ms == {}


# --- the cache ------------------------------------------------------------------------


def test_file_names_are_safe_and_pure():
    assert safe_name("Qwen2.5-Coder-0.5B-Instruct") == "Qwen2.5-Coder-0.5B-Instruct"
    assert safe_name("/home/me/my models/x.gguf") == "home_me_my_models_x.gguf"
    assert safe_name("..") == "_" and safe_name("cuda:0") == "cuda_0"
    long_a, long_b = "a" * 200 + "1", "a" * 200 + "2"
    assert len(safe_name(long_a)) == 80 and safe_name(long_a) != safe_name(long_b)
    assert cache_file_name("tiny-draft", "tiny-target", "cpu", "float32", 300, "latency") == (
        "tiny-draft-tiny-target-cpu-float32-ctx300-latency.json"
    )
    assert "/" not in cache_file_name("org/d", "org/t", "cuda:1", "bfloat16", 8, "grid-ab")


def test_cache_is_written_once_and_reused(pair, specviz_cache, counted):
    rows, meta = load_or_measure(pair, CTX, SMALL, repeats=1)
    assert len(counted) == 1 and meta["cached"] is False and meta["complete"] is True
    path = specviz_cache / "costs" / cache_file_name("tiny-draft", "tiny-target", "cpu", "float32", CTX,
                                                   grid_name(SMALL))
    assert meta["path"] == str(path) and path.is_file()
    assert list(path.parent.iterdir()) == [path]  # no temporary file left behind
    assert path.stat().st_mode & 0o044  # readable as any cache file is (the umask's mode, not 0600)
    data = json.loads(path.read_text())
    for key in ("device", "dtype", "context_length", "measured_at", "torch", "threads", "rows"):
        assert key in data
    assert (data["device"], data["dtype"], data["context_length"]) == ("cpu", "float32", CTX)
    assert data["threads"] == torch.get_num_threads() == 1 and data["torch"] == torch.__version__
    assert data["measured_at"].endswith("+00:00")
    assert data["rows"] == rows and sorted(map(point, rows)) == sorted(SMALL)

    again, meta2 = load_or_measure(pair, CTX, SMALL, repeats=1)
    assert len(counted) == 1 and meta2["cached"] is True
    assert again == rows and meta2["measured_at"] == meta["measured_at"]

    fresh, meta3 = load_or_measure(pair, CTX, SMALL, repeats=1, refresh=True)
    assert len(counted) == 2 and meta3["cached"] is False and sorted(map(point, fresh)) == sorted(SMALL)
    assert json.loads(path.read_text())["rows"] == fresh

    # Another context length or grid is another measurement, in another file.
    load_or_measure(pair, CTX + 8, SMALL, repeats=1)
    load_or_measure(pair, CTX, SMALL[:2], repeats=1)
    assert len(counted) == 4 and len(list(path.parent.glob("*.json"))) == 3


def test_a_damaged_or_foreign_cache_file_is_measured_again(pair, specviz_cache, counted):
    _, meta = load_or_measure(pair, CTX, SMALL, repeats=1)
    path = Path(meta["path"])
    assert path.parent == specviz_cache / "costs"
    path.write_text("{not json")
    _, meta = load_or_measure(pair, CTX, SMALL, repeats=1)
    assert len(counted) == 2 and meta["cached"] is False
    data = json.loads(path.read_text())
    data["dtype"] = "bfloat16"
    path.write_text(json.dumps(data))
    load_or_measure(pair, CTX, SMALL, repeats=1)
    data = json.loads(path.read_text())
    data["rows"] = data["rows"][:-1]
    path.write_text(json.dumps(data))
    load_or_measure(pair, CTX, SMALL, repeats=1)
    assert len(counted) == 4
    assert load_or_measure(pair, CTX, SMALL, repeats=1)[1]["cached"] is True


def test_a_grid_timed_beside_other_work_is_shown_but_never_kept(pair, specviz_cache, counted, monkeypatch):
    """Its passes hold the other work's time, not the pair's: returned with its contention, not
    saved; and a kept file that says it was contended (an older specviz kept them) is measured again."""
    busy = [Contention(OTHER_PROCESSES, 1.4)]
    monkeypatch.setattr(costs.busy, "entries", lambda jobs, meter: list(busy))
    rows, meta = load_or_measure(pair, CTX, SMALL, repeats=1)
    assert meta["complete"] is True and meta["contention"] == [{"label": OTHER_PROCESSES, "cpu_share": 1.4}]
    assert sorted(map(point, rows)) == sorted(SMALL) and not Path(meta["path"]).exists()
    busy.clear()  # quiet again: measured again, and kept
    _, meta = load_or_measure(pair, CTX, SMALL, repeats=1)
    assert len(counted) == 2 and meta["cached"] is False and Path(meta["path"]).is_file()
    data = json.loads(Path(meta["path"]).read_text())
    data["contention"] = [{"label": OTHER_PROCESSES, "cpu_share": 1.1}]
    Path(meta["path"]).write_text(json.dumps(data))
    assert load_or_measure(pair, CTX, SMALL, repeats=1)[1]["cached"] is False and len(counted) == 3


def test_a_stopped_measurement_is_returned_but_not_saved(pair, specviz_cache, counted):
    go_on = [False] * (2 + len(SMALL) + 1)  # two fills, the warm-up sweep, one timed pass
    rows, meta = load_or_measure(pair, CTX, SMALL, repeats=1, stop=iter([*go_on, True]).__next__)
    assert 0 < len(rows) < len(SMALL) and meta["complete"] is False and meta["cached"] is False
    assert not (specviz_cache / "costs").exists() or not list((specviz_cache / "costs").iterdir())
    load_or_measure(pair, CTX, SMALL, repeats=1)
    assert len(counted) == 2
