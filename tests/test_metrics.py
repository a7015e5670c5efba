"""specviz.analysis.metrics: one table of metrics, one formatter each, used by the CLI, the Live stats and the history."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from specviz import figures as F
from specviz.analysis import metrics, theory
from specviz.cli import commands as cli
from specviz.record.i18n import gettext_for
from specviz.record.run_config import SUMMARY_KEYS, RunConfig
from specviz.record.run_trace import Event, Round, Trace

ROOT = Path(__file__).resolve().parent.parent


def test_every_summary_number_is_in_the_table_once():
    shown = set(SUMMARY_KEYS) - {"per_position_acceptance"}  # a list: drawn as a chart
    assert shown <= set(metrics.METRICS)
    assert set(cli.SUMMARY_ROWS) == shown
    for group in (metrics.CLI_SUMMARY, metrics.LIVE_STATS, metrics.HISTORY_METRICS):
        assert len(set(group)) == len(group) and set(group) <= set(metrics.METRICS)
    labels = [m.label for m in metrics.METRICS.values()]
    columns = [m.column for m in metrics.METRICS.values()]
    assert len(set(labels)) == len(labels) and len(set(columns)) == len(columns)
    assert all(m.help.endswith(".") for m in metrics.METRICS.values())


@pytest.mark.parametrize("key, value, text", [
    ("new_tokens", 24, "24"),
    ("rounds", 7, "7"),
    ("wall_ms", 1234.5, "1.23 s"),
    ("ttft_ms", 8.24, "8.2 ms"),
    ("tokens_per_second", 19.44, "19.4"),
    ("acceptance_rate", 0.456, "46%"),
    ("mean_acceptance_length", 2.345, "2.35"),
    ("cost_ratio_c", 0.1234, "0.12"),
    ("draft_idle_fraction", 0.8, "80%"),
    ("overhead_ms", 12.4, "12 ms"),
    ("speedup", 0.98499, "×0.98"),
    ("speedup", 1.5, "×1.50"),
    ("ar_tokens_per_second", 50.0, "50.0"),
])
def test_each_metric_formats_once(key, value, text):
    assert metrics.text(key, value) == text == metrics.metric(key).text(value)


@pytest.mark.parametrize("ms, en, zh", [
    (0.84, "0.8 ms", "0.8 毫秒"), (12.4, "12 ms", "12 毫秒"), (1234.5, "1.23 s", "1.23 秒"), (83_000, "83 s", "83 秒"),
])
def test_durations_take_the_pages_unit_words(ms, en, zh):
    """A Chinese page reads 毫秒 / 秒 (docs/glossary.md), the CLI and an English page ms / s."""
    tr = gettext_for("zh_CN")
    assert metrics.fmt_ms(ms) == en == metrics.fmt_ms(ms, gettext_for("en"))
    assert metrics.fmt_ms(ms, tr) == zh
    assert metrics.text("overhead_ms", ms, tr) == zh == metrics.metric("wall_ms").text(ms, tr)
    assert metrics.text("tokens_per_second", 19.44, tr) == "19.4" and metrics.text("acceptance_rate", 0.5, tr) == "50%"
    assert metrics.fmt_ms(None, tr) == "–"


@pytest.mark.parametrize("key", list(metrics.METRICS))
def test_missing_values_read_as_a_dash(key):
    assert metrics.text(key, None) == "–"
    assert metrics.text(key, math.nan) == "–"


def test_the_race_and_the_history_cannot_disagree():
    """The speedup the race panel shows and the one the history row shows come from the
    same stored value through the same formatter (a double rounding once made 0.98499
    read ×0.98 in one place and ×0.99 in the other)."""
    sd = Trace(RunConfig(), wall_ms=1000.0).finish()
    for speedup in (0.98499, 0.985, 0.995, 1.005, 1.23456, 2.0):
        (row,) = F.history_table([F.history_row(sd, 1, "Code", None, speedup, True, "measured")])
        assert row["speedup"] == metrics.text("speedup", speedup)


def test_deltas_are_differences_of_the_shown_values():
    acc = metrics.metric("acceptance_rate")
    now, before = 0.4649, 0.4151  # shown 46% and 42%
    assert acc.delta(now, before) == "+4 pts"
    assert int(acc.text(now)[:-1]) - int(acc.text(before)[:-1]) == 4
    tps = metrics.metric("tokens_per_second")
    assert tps.delta(10.04, 10.16) == "-0.2"  # 10.0 against 10.2
    assert tps.delta(None, 3.0) is None and metrics.metric("rounds").delta(3, 2) is None


def test_cost_ratio_wording_agrees_with_how_it_works():
    help_text = metrics.metric("cost_ratio_c").help
    assert "α > c" in help_text and "per-token acceptance probability (not the acceptance rate)" in help_text
    assert "beats" not in help_text
    about = (ROOT / "specviz" / "ui" / "about_page.py").read_text(encoding="utf-8")  # How it works' text
    assert "α > c" in about


def test_percentages_round_once():
    assert metrics.percent(0.456) == 46 and metrics.percent(None) is None
    assert metrics.fmt_pct(0.125) == f"{metrics.percent(0.125)}%"


def test_live_summary_of_a_finished_and_a_running_trace():
    done = Trace(RunConfig(), wall_ms=10.0).finish()
    assert metrics.live_summary(done) is done.summary
    running = Trace(RunConfig(), wall_ms=10.0)
    assert metrics.live_summary(running)["rounds"] == 0 and running.summary == {}


# --- the counts behind the rates -------------------------------------------------------------


def _run(drafts: list[int], accepted: list[int], gamma: int = 4) -> Trace:
    """A hand-made speculative run: round i drafted drafts[i] tokens and kept accepted[i]."""
    rounds = [Round(index=i, gamma=gamma, proposed=list(range(d)), accepted=k, emitted=list(range(k + 1)))
              for i, (d, k) in enumerate(zip(drafts, accepted, strict=True))]
    trace = Trace(RunConfig(gamma=gamma), rounds=rounds, wall_ms=100.0)
    trace.output_ids = [t for r in rounds for t in r.emitted]
    return trace


def test_the_counts_tell_apart_two_runs_with_the_same_tokens_per_round():
    """80% and 76% acceptance can both come with 4.00 tokens per round: the last round of one
    run drafted fewer. The drafted count says so (issue 16)."""
    full, short = _run([4, 4, 4, 4, 4], [3, 3, 3, 3, 3]), _run([4, 4, 4, 4, 3], [3, 3, 3, 3, 3])
    for trace in (full, short):
        assert metrics.live_summary(trace)["mean_acceptance_length"] == pytest.approx(4.0)
    assert metrics.token_counts(full) == {"drafted_tokens": 20, "accepted_tokens": 15, "new_tokens": 20}
    assert metrics.token_counts(short) == {"drafted_tokens": 19, "accepted_tokens": 15, "new_tokens": 20}
    assert metrics.text("acceptance_rate", metrics.live_summary(full)["acceptance_rate"]) == "75%"
    assert metrics.text("acceptance_rate", metrics.live_summary(short)["acceptance_rate"]) == "79%"
    assert metrics.short_drafts(full) == 0 and metrics.short_drafts(short) == 1
    for key in metrics.LIVE_COUNTS:
        assert key in metrics.METRICS


def test_position_counts_are_vllms_and_say_what_was_judged():
    # round 1 kept 1 of 4 (position 2 judged and rejected; 3 and 4 never judged); round 2 kept 3 of 4
    trace = _run([4, 4], [1, 3])
    counts = metrics.position_counts(trace.rounds)
    assert [(c.drafted, c.judged, c.accepted) for c in counts] == [(2, 2, 2), (2, 2, 1), (2, 1, 1), (2, 1, 0)]
    assert [c.rate for c in counts] == pytest.approx(metrics.live_summary(trace)["per_position_acceptance"])
    first = metrics.position_counts(trace.rounds[:1])
    assert [c.judged for c in first] == [1, 1, 0, 0]  # after Step's first round: 3 and 4 not judged yet


def test_per_position_acceptance_rises_only_after_short_drafts():
    full = metrics.position_counts(_run([4, 4, 4], [4, 1, 2]).rounds)
    assert all(a.rate >= b.rate for a, b in zip(full, full[1:]))
    # the round that drafted 2 and lost its second token counts at positions 1-2 only
    short = metrics.position_counts(_run([4, 4, 4, 2], [4, 4, 1, 1]).rounds)
    assert (short[1].accepted, short[1].drafted, short[2].accepted, short[2].drafted) == (2, 4, 2, 3)
    assert short[1].rate < short[2].rate


def test_alpha_is_the_formulas_not_the_acceptance_rate():
    trace = _run([4, 4, 4, 4, 4], [3, 3, 3, 3, 3])
    alpha = metrics.alpha_estimate(trace)
    assert theory.expected_tokens_per_round(alpha, 4) == pytest.approx(4.0, abs=1e-9)
    assert alpha == pytest.approx(0.888, abs=1e-3) and metrics.live_summary(trace)["acceptance_rate"] == 0.75
    assert metrics.alpha_estimate(Trace(RunConfig(gamma=4))) is None  # no rounds
    assert metrics.alpha_estimate(Trace(RunConfig(mode="autoregressive"), rounds=trace.rounds)) is None


def test_prefill_reads_and_the_estimate_from_them():
    events = [Event("draft", "prefill", 0.0, 40.0, list(range(20))), Event("draft", "draft_forward", 40, 42, [1]),
              Event("target", "prefill", 42.0, 142.0, list(range(25)))]
    assert metrics.prefill_reads(events) == {"draft": (20, 40.0), "target": (25, 100.0)}
    assert metrics.prefill_estimate_ms(5000, (20, 40.0)) == pytest.approx(10_000.0)
    with pytest.raises(ValueError, match="measured read of some tokens"):
        metrics.prefill_estimate_ms(100, (0, 0.0))


def test_a_varying_gamma_is_priced_at_the_mean_drafted_length():
    """Under the confidence policy the cap γ is not what a round drafts: the closed form takes the
    mean drafted length (rounded), and its α is fitted at that γ; a constant γ stays itself."""
    constant = _run([4, 4, 2], [3, 3, 1], gamma=10)
    assert metrics.model_gamma(constant) == 10
    varying = dataclasses.replace(constant, config=RunConfig(gamma=10, policy="confidence"))
    assert metrics.model_gamma(varying) == 3  # (4 + 4 + 2) / 3
    alpha = metrics.alpha_estimate(varying)
    length = metrics.live_summary(varying)["mean_acceptance_length"]
    assert theory.expected_tokens_per_round(alpha, 3) == pytest.approx(length, abs=1e-9)
    assert metrics.varying_gamma_note("constant") == ""
    assert "only a guide" in metrics.varying_gamma_note("confidence")
    assert "heuristic" in metrics.varying_gamma_note("heuristic")
