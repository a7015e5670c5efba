"""The race (speculative first, then the target alone) and when a baseline may be reused;
the comparison's verdict and its wording."""

from __future__ import annotations

import dataclasses
import time

import pytest

from conftest import make_config, run_ar, run_sd
from specviz.compare import NEAR_TIE, compare
from specviz.race import REUSE_MAX_AGE_S, REUSE_TOLERANCE, Baseline, Race, baseline_key

pytestmark = pytest.mark.usefixtures("single_thread")


def test_speculative_first_then_the_target_alone(tiny_pair):
    race = Race(tiny_pair, make_config(gamma=3, max_new_tokens=16))
    order = [which for which, _ in race]
    assert order[0] == "speculative" and order[-1] == "autoregressive"
    assert order == sorted(order, key=["speculative", "autoregressive"].index), "never interleaved"
    assert race.done and not race.reused
    assert race.comparison.identical and race.comparison.speedup > 0
    assert race.baseline.trace.output_ids == race.sd.trace.output_ids
    assert race.baseline.trace.config.mode == "autoregressive"
    assert race.baseline.draft_ms == race.sd.trace.summary["draft_forward_ms_median"]


def test_without_the_target_there_is_no_comparison(tiny_pair):
    race = Race(tiny_pair, make_config(max_new_tokens=8), against_target=False).run()
    assert race.done and race.comparison is None and race.baseline is None


def test_a_baseline_is_remeasured_by_default(tiny_pair):
    store = {}
    first = Race(tiny_pair, make_config(gamma=2, max_new_tokens=12), baselines=store, run=1).run()
    second = Race(tiny_pair, make_config(gamma=5, max_new_tokens=12), baselines=store, run=2).run()
    assert not second.reused and second.ar is not None
    assert second.baseline is not first.baseline and second.baseline.run == 2
    assert store[baseline_key(second.sd.trace.config)] is second.baseline


def test_a_fresh_baseline_is_reused_when_allowed(tiny_pair, monkeypatch):
    store = {}
    first = Race(tiny_pair, make_config(gamma=2, max_new_tokens=12), baselines=store, run=1).run()
    # the machine runs at the same speed: the new run's draft passes take what they took then
    monkeypatch.setattr("specviz.race.why_not_reuse", lambda b, sd, now: None)
    second = Race(tiny_pair, make_config(gamma=5, max_new_tokens=12), baselines=store, reuse=True, run=2).run()
    assert second.reused and second.ar is None
    assert second.baseline is first.baseline and second.baseline.run == 1
    assert second.comparison.identical


def _baseline(tiny_pair, age_s: float, draft_ms: float) -> Baseline:
    return Baseline(run_ar(tiny_pair, max_new_tokens=8), 1, time.time() - age_s, draft_ms)


def test_reuse_needs_a_recent_baseline_and_the_same_machine_speed(tiny_pair):
    from specviz.race import why_not_reuse

    sd = run_sd(tiny_pair, max_new_tokens=8)
    d = sd.summary["draft_forward_ms_median"]
    now = time.time()
    assert why_not_reuse(_baseline(tiny_pair, 30, d), sd, now) is None
    assert "min old" in why_not_reuse(_baseline(tiny_pair, REUSE_MAX_AGE_S + 60, d), sd, now)
    slow = d / (1 + 2 * REUSE_TOLERANCE)
    assert "draft passes now take" in why_not_reuse(_baseline(tiny_pair, 30, slow), sd, now)
    ngram = run_sd(tiny_pair, max_new_tokens=8, drafter="ngram")
    assert "no draft passes" in why_not_reuse(_baseline(tiny_pair, 30, d), ngram, now)


def test_a_refused_reuse_says_why_and_measures_again(tiny_pair):
    store = {}
    Race(tiny_pair, make_config(max_new_tokens=12), baselines=store, run=1).run()
    key = next(iter(store))
    store[key] = dataclasses.replace(store[key], measured_at=time.time() - 2 * REUSE_MAX_AGE_S)
    again = Race(tiny_pair, make_config(gamma=3, max_new_tokens=12), baselines=store, reuse=True, run=2).run()
    assert not again.reused and again.ar is not None
    assert "min old" in again.not_reused_because


def test_the_baseline_key_ignores_what_the_target_alone_does_not_depend_on(tiny_pair):
    a = run_sd(tiny_pair, max_new_tokens=8, gamma=2).config
    b = dataclasses.replace(a, gamma=7, drafter="ngram", policy="heuristic", draft_vocab=12)
    c = dataclasses.replace(a, seed=5)
    assert baseline_key(a) == baseline_key(b) != baseline_key(c)


# --- the verdict's wording ---------------------------------------------------------


def _flipped(tiny_pair, margin: float, dtype: str):
    ar = run_ar(tiny_pair, max_new_tokens=10)
    sd = run_sd(tiny_pair, max_new_tokens=10)
    sd.output_ids = list(sd.output_ids)
    sd.output_ids[4] = (sd.output_ids[4] + 1) % 90 + 3
    for t in (ar, sd):
        t.config = dataclasses.replace(t.config, dtype=dtype)
    ar.rounds[4].margin = [margin]
    return compare(ar, sd, tiny_pair.tokenizer)


def test_a_bf16_flip_at_a_near_tie_is_called_one(tiny_pair):
    result = _flipped(tiny_pair, NEAR_TIE / 4, "bfloat16")
    assert not result.identical and result.first_difference == 4
    assert "near-tie (below" in result.explanation and "more than a near-tie" not in result.explanation


def test_a_bf16_flip_above_the_threshold_is_not_called_rounding(tiny_pair):
    result = _flipped(tiny_pair, 0.037, "bfloat16")
    assert "0.0370 apart" in result.explanation
    assert "more than a near-tie" in result.explanation
    assert "rounding, not a bug" not in result.explanation


def test_a_float32_flip_above_the_threshold_asks_for_a_report(tiny_pair):
    result = _flipped(tiny_pair, 0.3, "float32")
    assert "not expected in float32" in result.explanation
