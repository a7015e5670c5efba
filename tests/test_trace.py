"""The trace: JSON round trip, schema check, summary statistics and event timing.

Summary statistics are recomputed here from the rounds and events with their
definitions (vLLM's names): acceptance rate = accepted / drafted, mean acceptance
length = 1 + accepted / rounds, per-position acceptance, idle fractions, overhead.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path

import pytest
from helpers import make_config, run_ar, run_sd

from specviz import BadInput, Trace, speculative
from specviz.record.contention import Contention
from specviz.record.run_config import EVENT_KINDS, FORWARD_KINDS, LANES, SCHEMA_VERSION
from specviz.record.run_trace import rounds_text, summarize

pytestmark = pytest.mark.usefixtures("single_thread")

SUMMARY_KEYS = {
    "new_tokens", "rounds", "wall_ms", "tokens_per_second", "acceptance_rate",
    "mean_acceptance_length", "per_position_acceptance", "draft_forward_ms_median",
    "target_forward_ms_median", "cost_ratio_c", "draft_idle_fraction",
    "target_idle_fraction", "overhead_ms", "ttft_ms",
}

RUNS = {
    "speculative, model drafter": dict(mode="sd", prompt="Hello world", gamma=4, max_new_tokens=48),
    "speculative, model drafter, heuristic": dict(mode="sd", prompt="The quick brown fox", gamma=2, policy="heuristic", max_new_tokens=48),
    "speculative, ngram drafter": dict(mode="sd", prompt="abcabcabc", drafter="ngram", gamma=5, max_new_tokens=48),
    "speculative, sampling": dict(mode="sd", prompt="Hello world", temperature=0.8, top_k=10, gamma=3, max_new_tokens=64, stop=["@@never"]),
    "autoregressive": dict(mode="ar", prompt="Hello world", max_new_tokens=30),
}


@pytest.fixture(scope="module")
def traces(tiny_pair):
    out = {}
    for name, kw in RUNS.items():
        kw = dict(kw)
        mode = kw.pop("mode")
        if "sampling" in name:
            # iterate to a fixed number of tokens, then summarise (no gamma-0 round is hit)
            dec = speculative(tiny_pair, make_config(**kw))
            for _ in dec:
                if len(dec.trace.output_ids) >= 40:
                    break
            out[name] = dec.trace.finish()
        else:
            out[name] = (run_sd if mode == "sd" else run_ar)(tiny_pair, **kw)
    return out


# --- JSON ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(RUNS))
def test_json_round_trip(traces, name, tmp_path):
    trace = traces[name]
    text = trace.to_json()
    back = Trace.from_json(text)
    assert back == trace
    assert back.to_json() == text
    assert json.loads(text) == trace.to_dict()
    assert back.events == trace.events
    path = tmp_path / "trace.json"
    trace.save(path)
    loaded = Trace.load(path)
    assert loaded == trace
    assert loaded.summary == trace.summary and loaded.output_text == trace.output_text


def test_round_trip_keeps_unicode_and_a_run_in_progress(tiny_pair, tmp_path):
    dec = speculative(tiny_pair, make_config(prompt="héllo ✓ wörld", max_new_tokens=30))
    next(dec)
    next(dec)
    trace = dec.trace
    assert trace.summary == {}, "the summary is filled only when the run ends"
    assert len(trace.rounds) == 2
    path = tmp_path / "partial.json"
    trace.save(path)
    assert "héllo ✓ wörld" in path.read_text(encoding="utf-8")
    back = Trace.load(path)
    assert back == trace and back.config.prompt == "héllo ✓ wörld"


def test_version_1_files_are_migrated(traces):
    """v1 named the per-token probabilities q and p; they load under their new names."""
    data = traces["speculative, model drafter"].to_dict()
    old = json.loads(json.dumps(data))
    old["schema_version"] = 1
    for r in old["rounds"]:
        r["q"], r["p"] = r.pop("draft_probs"), r.pop("target_probs")
    back = Trace.from_json(json.dumps(old))
    assert back == traces["speculative, model drafter"]
    assert any(r.draft_probs for r in back.rounds)


def test_version_2_contention_labels_become_entries(traces):
    """v2 wrote a contention entry as a heavy job's label alone; it loads as that job, with no share."""
    data = traces["autoregressive"].to_dict()
    old = {**json.loads(json.dumps(data)), "schema_version": 2, "contention": ["loading the default pair (bfloat16)"]}
    back = Trace.from_json(json.dumps(old))
    assert back.contention == [Contention("loading the default pair (bfloat16)", None)]
    assert back.schema_version == SCHEMA_VERSION
    busy = {**data, "contention": [{"label": "other processes", "cpu_share": 0.9}]}
    assert Trace.from_dict(busy).contention == [Contention("other processes", 0.9)]
    assert Trace.from_dict(busy).to_dict()["contention"] == busy["contention"]


def test_schema_version_is_checked(traces):
    data = traces["autoregressive"].to_dict()
    assert data["schema_version"] == SCHEMA_VERSION == 4
    for bad in (5, 0, "3", None):
        data["schema_version"] = bad
        with pytest.raises(BadInput, match=r"schema_version is .*this specviz reads version 4"):
            Trace.from_json(json.dumps(data))
    del data["schema_version"]
    with pytest.raises(BadInput, match="schema_version"):
        Trace.from_dict(data)


def test_not_a_trace_is_refused(traces):
    with pytest.raises(BadInput, match="not valid JSON"):
        Trace.from_json("{not json")
    with pytest.raises(BadInput, match="expected a JSON object"):
        Trace.from_json("[1, 2, 3]")
    data = traces["autoregressive"].to_dict()
    del data["config"]
    with pytest.raises(BadInput, match="config is missing"):
        Trace.from_json(json.dumps(data))
    data = traces["autoregressive"].to_dict()
    del data["rounds"][0]["index"]
    with pytest.raises(BadInput, match=r"rounds\[0\]\.index is missing"):
        Trace.from_json(json.dumps(data))


def test_unknown_fields_are_refused(traces):
    """A field the schema does not know is an error, not dropped (tests/test_trace_schema.py has the rest)."""
    for where in ("top", "config", "round", "event"):
        data = traces["speculative, model drafter"].to_dict()
        {"top": data, "config": data["config"], "round": data["rounds"][0],
         "event": data["rounds"][0]["events"][0]}[where]["new_field"] = 1
        with pytest.raises(BadInput, match="new_field is not a field of a specviz trace"):
            Trace.from_json(json.dumps(data))


# --- summary ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(RUNS))
def test_summary_keys_and_consistency(traces, name):
    t = traces[name]
    s = t.summary
    assert set(s) == SUMMARY_KEYS
    rounds = t.rounds
    drafted = sum(len(r.proposed) for r in rounds)
    accepted = sum(r.accepted for r in rounds)
    assert s["new_tokens"] == len(t.output_ids) == sum(len(r.emitted) for r in rounds)
    assert s["rounds"] == len(rounds)
    assert s["wall_ms"] == t.wall_ms > 0
    assert math.isclose(s["tokens_per_second"], len(t.output_ids) / t.wall_ms * 1000)
    if drafted:
        assert s["acceptance_rate"] == pytest.approx(accepted / drafted)
        assert 0 <= s["acceptance_rate"] <= 1
    else:
        assert s["acceptance_rate"] is None
    assert s["mean_acceptance_length"] == pytest.approx(1 + accepted / len(rounds))
    # per-position acceptance: share of rounds that drafted position i and accepted it
    longest = max((len(r.proposed) for r in rounds), default=0)
    expected = []
    for i in range(longest):
        n = sum(1 for r in rounds if len(r.proposed) > i)
        expected.append(sum(1 for r in rounds if len(r.proposed) > i and r.accepted > i) / n)
    assert s["per_position_acceptance"] == pytest.approx(expected)

    events = t.events
    draft_fw = [e.duration_ms for e in events if e.kind == "draft_forward"]
    target_fw = [e.duration_ms for e in events if e.kind in ("verify_forward", "target_forward")]
    assert s["target_forward_ms_median"] == pytest.approx(statistics.median(target_fw))
    if draft_fw:
        assert s["draft_forward_ms_median"] == pytest.approx(statistics.median(draft_fw))
        assert s["cost_ratio_c"] == pytest.approx(statistics.median(draft_fw) / statistics.median(target_fw))
    else:
        assert s["draft_forward_ms_median"] is None and s["cost_ratio_c"] is None
    for lane in LANES:
        busy = sum(e.duration_ms for e in events if e.lane == lane and e.kind in FORWARD_KINDS)
        frac = s[f"{lane}_idle_fraction"]
        assert 0.0 <= frac <= 1.0
        assert frac == pytest.approx(1 - busy / t.wall_ms)
    forward = sum(e.duration_ms for e in events if e.kind in FORWARD_KINDS)
    assert s["overhead_ms"] >= 0
    assert s["overhead_ms"] == pytest.approx(t.wall_ms - forward)
    first = next(r for r in rounds if r.emitted)
    assert s["ttft_ms"] == pytest.approx(first.end_ms)
    assert 0 < s["ttft_ms"] <= t.wall_ms


def test_summary_of_an_autoregressive_run(traces):
    s = traces["autoregressive"].summary
    assert s["acceptance_rate"] is None and s["per_position_acceptance"] == []
    assert s["mean_acceptance_length"] == 1.0
    assert s["draft_idle_fraction"] == 1.0
    assert s["rounds"] == s["new_tokens"] == 30


def test_acceptance_rate_is_strictly_between_0_and_1_on_the_tiny_pair(traces):
    s = traces["speculative, model drafter"].summary
    assert 0 < s["acceptance_rate"] < 1
    assert 1 < s["mean_acceptance_length"] < 1 + 4
    assert s["per_position_acceptance"][0] >= s["per_position_acceptance"][-1]


# --- events ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(RUNS))
def test_events_are_serial_and_well_formed(traces, name):
    t = traces[name]
    events = t.events
    for e in events:
        assert e.lane in LANES and e.kind in EVENT_KINDS
        assert 0 <= e.start_ms <= e.end_ms <= t.wall_ms
        assert e.duration_ms == e.end_ms - e.start_ms
    # decoding is serial: in list order, each event ends before the next starts, on any lane
    for a, b in zip(events, events[1:]):
        assert a.end_ms <= b.start_ms, f"{a.lane}/{a.kind} overlaps {b.lane}/{b.kind}"
    for a, b in zip(t.rounds, t.rounds[1:]):
        assert a.end_ms <= b.start_ms and a.index + 1 == b.index
    assert t.rounds[-1].end_ms <= t.wall_ms
    cfg = t.config
    speculative_run = cfg.mode == "speculative"
    # no separate prefill: each model's first pass reads the whole prompt, in round 1
    first = t.rounds[0]
    prefills = [e for r in t.rounds for e in r.events if e.kind == "prefill"]
    assert all(e in first.events for e in prefills)
    model_draft = speculative_run and cfg.drafter == "model"
    assert [e.lane for e in prefills] == (["draft", "target"] if model_draft else ["target"])
    target_prefill = prefills[-1]
    assert target_prefill.tokens == t.prompt_ids + first.proposed
    if model_draft:
        assert prefills[0].tokens == t.prompt_ids
    for rnd in t.rounds:
        kinds = [e.kind for e in rnd.events]
        verify = "verify_forward" if speculative_run else "target_forward"
        assert kinds.count(verify) == (0 if rnd.index == 0 else 1)
        assert kinds.count("sample") == 1
        if model_draft:
            passes = [e for e in rnd.events if e.lane == "draft" and e.is_forward]
            assert len(passes) == len(rnd.proposed), "one draft pass per proposed token"
            assert all(e.kind == "draft_forward" for e in passes[rnd.index == 0:])
        if speculative_run and cfg.drafter == "ngram" and rnd.gamma:
            (lookup,) = [e for e in rnd.events if e.kind == "lookup"]
            assert lookup.tokens == rnd.proposed
        if not speculative_run:
            assert "draft_forward" not in kinds and "lookup" not in kinds


# --- the clock -----------------------------------------------------------------------------


@pytest.mark.serial  # gaps between rounds under 250 ms: timed against the clock
def test_clock_stops_while_the_caller_holds_a_round(tiny_pair):
    dec = speculative(tiny_pair, make_config(prompt="Hello world", gamma=2, max_new_tokens=40))
    pause, held = 0.3, 0
    start = time.perf_counter()
    walls = []
    for i, rnd in enumerate(dec):
        assert len(dec.trace.rounds) == i + 1 and dec.trace.rounds[-1] is rnd, "the trace grows live"
        walls.append(dec.trace.wall_ms)
        if i < 4 and not dec.done:
            time.sleep(pause)
            held += 1
    elapsed_ms = (time.perf_counter() - start) * 1000
    trace = dec.trace
    assert held == 4
    assert walls == sorted(walls) and walls[-1] == trace.wall_ms
    # the engine's clock saw no more than the real time minus the time the rounds were held
    assert trace.wall_ms <= elapsed_ms - held * pause * 1000 + 5
    assert trace.wall_ms < held * pause * 1000, "the held time leaked into the clock"
    for a, b in zip(trace.rounds, trace.rounds[1:]):
        assert b.start_ms - a.end_ms < 250, f"a {b.start_ms - a.end_ms:.0f} ms gap between rounds {a.index} and {b.index}"
    assert trace.summary["wall_ms"] == trace.wall_ms


@pytest.mark.parametrize("name", list(RUNS))
def test_rounds_text_adds_up_to_the_output(traces, name):
    trace = traces[name]
    assert "".join(r.emitted_text for r in trace.rounds) == trace.output_text
    assert [t for r in trace.rounds for t in r.emitted] == trace.output_ids


def test_runs_do_not_change_the_callers_config(tiny_pair):
    config = make_config(gamma=3)
    before = repr(config)
    speculative(tiny_pair, config).run()
    assert repr(config) == before


def test_bad_input_names_its_field(tiny_pair):
    for overrides, field in [({"prompt": " "}, "prompt"), ({"gamma": 0}, "gamma"),
                             ({"max_new_tokens": 0}, "max_new_tokens"), ({"top_p": 2.0}, "top_p"),
                             ({"temperature": -1.0}, "temperature"), ({"seed": -1}, "seed")]:
        with pytest.raises(BadInput) as info:
            speculative(tiny_pair, make_config(**overrides))
        assert info.value.field == field


SHIPPED = sorted((Path(__file__).resolve().parent.parent / "assets" / "traces").glob("*.json"))


def test_traces_are_shipped():
    assert len(SHIPPED) >= 4


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_trace_loads_and_adds_up(path):
    trace = Trace.load(path)
    assert trace.schema_version == SCHEMA_VERSION
    assert trace.rounds and trace.config.draft and trace.config.target
    assert [t for r in trace.rounds for t in r.emitted] == trace.output_ids
    assert rounds_text(trace.rounds) == trace.output_text
    again = summarize(trace)
    for key in ("new_tokens", "rounds", "acceptance_rate", "mean_acceptance_length", "cost_ratio_c"):
        assert again[key] == trace.summary[key], key
