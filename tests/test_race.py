"""The race (speculative first, then the target alone) and when a baseline may be reused;
the comparison's verdict and its wording."""

from __future__ import annotations

import dataclasses
import time

import pytest
from helpers import make_config, run_ar, run_sd

from specviz.analysis import round_story as inspect
from specviz.analysis.compare import compare
from specviz.measure.race import (
    REUSE_MAX_AGE_S,
    REUSE_TOLERANCE,
    Baseline,
    Race,
    baseline_key,
)

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
    monkeypatch.setattr("specviz.measure.race.why_not_reuse", lambda b, sd, now: None)
    second = Race(tiny_pair, make_config(gamma=5, max_new_tokens=12), baselines=store, reuse=True, run=2).run()
    assert second.reused and second.ar is None
    assert second.baseline is first.baseline and second.baseline.run == 1
    assert second.comparison.identical


def _baseline(tiny_pair, age_s: float, draft_ms: float) -> Baseline:
    return Baseline(run_ar(tiny_pair, max_new_tokens=8), 1, time.time() - age_s, draft_ms)


def test_reuse_needs_a_recent_baseline_and_the_same_machine_speed(tiny_pair):
    from specviz.measure.race import why_not_reuse

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


def _flipped(tiny_pair, dtype: str, top: tuple[float, float] | None = None, margin: float | None = None):
    """A greedy race whose outputs part at token 4: the target alone's top two there given
    the probabilities ``top`` (in its recorded rows), or only a recorded ``margin``."""
    ar = run_ar(tiny_pair, max_new_tokens=10)
    sd = run_sd(tiny_pair, max_new_tokens=10)
    sd.output_ids = list(sd.output_ids)
    sd.output_ids[4] = (sd.output_ids[4] + 1) % 90 + 3
    for t in (ar, sd):
        t.config = dataclasses.replace(t.config, dtype=dtype)
    rnd = ar.rounds[4]
    if top is not None:
        rnd.candidate_p[0] = [top[0], top[1], *[min(top[1], 0.001)] * (len(rnd.candidates[0]) - 2)]
    else:
        rnd.candidates, rnd.candidate_p, rnd.candidate_q, rnd.candidate_text = [], [], [], []
        rnd.margin = [margin]
    return compare(ar, sd, tiny_pair.tokenizer)


def test_two_tokens_near_0_3_are_a_bf16_near_tie_though_0_037_apart(tiny_pair):
    """The issue's case: the old rule (a probability gap under 0.02) called it 'more than a near-tie'."""
    result = _flipped(tiny_pair, "bfloat16", top=(0.318, 0.281))
    assert not result.identical and result.first_difference == 4
    assert "ln(0.318 / 0.281) = 0.12 apart" in result.explanation
    assert "A near-tie: bfloat16 holds logits of 16 to 32 to steps of 0.125" in result.explanation
    assert "up to 0.25" in result.explanation and "More than a near-tie" not in result.explanation


def test_a_small_probability_gap_far_apart_in_logits_is_no_near_tie(tiny_pair):
    """0.015 against 0.001 is 0.014 apart (the old rule: a near-tie) but a factor of 15: ln 15 = 2.71."""
    result = _flipped(tiny_pair, "bfloat16", top=(0.015, 0.001))
    assert "= 2.71 apart" in result.explanation
    assert "More than a near-tie" in result.explanation and "A near-tie" not in result.explanation


def test_a_trace_with_only_the_margin_gives_the_least_logit_gap(tiny_pair):
    maybe = _flipped(tiny_pair, "bfloat16", margin=0.0373)
    assert "0.0373 apart in probability, so their logits are at least 0.07 apart" in maybe.explanation
    assert "That may be a near-tie" in maybe.explanation
    far = _flipped(tiny_pair, "bfloat16", margin=0.3)  # at least ln(1.3 / 0.7) = 0.62 apart
    assert "at least 0.62 apart" in far.explanation and "More than a near-tie" in far.explanation


def test_a_float32_flip_above_the_threshold_asks_for_a_report(tiny_pair):
    result = _flipped(tiny_pair, "float32", top=(0.318, 0.281))
    assert "not expected in float32" in result.explanation


def test_the_verify_pass_choice_is_named_where_the_inspect_page_draws_it(tiny_pair):
    ar = run_ar(tiny_pair, max_new_tokens=10)
    sd = run_sd(tiny_pair, max_new_tokens=10, gamma=3)
    for t in (ar, sd):
        t.config = dataclasses.replace(t.config, dtype="bfloat16")
    a_tok = ar.output_ids[4]
    s_tok = (a_tok + 1) % 90 + 3
    sd.output_ids = [*sd.output_ids[:4], s_tok, *sd.output_ids[5:]]
    ar.rounds[4].candidates[0] = [a_tok, s_tok]
    ar.rounds[4].candidate_p[0], ar.rounds[4].candidate_text[0] = [0.318, 0.281], ["A", "S"]
    r, i = inspect.locate(sd, 4)
    rnd = sd.rounds[r]
    rnd.candidates[i], rnd.candidate_p[i], rnd.candidate_text[i] = [s_tok, a_tok], [0.302, 0.297], ["S", "A"]
    text = compare(ar, sd, tiny_pair.tokenizer).explanation
    assert "gave 'A' p = 0.318 and 'S' p = 0.281" in text
    assert (f"The verify pass ranked 'S' first (0.302 against 0.297): the Inspect page draws these p bars at "
            f"round {r + 1}, position {i + 1} of the speculative run.") in text
