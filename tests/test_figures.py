"""specviz.figures: pure functions of a Trace -> plotly figures and token-strip HTML."""

from __future__ import annotations

import math
import re

import pytest

from specviz import RunConfig, autoregressive, speculative
from specviz import figures as F
from specviz.trace import Event, Round, Trace, rounds_text, summarize, trace_at, trace_upto

PROMPT = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def sd(tiny_pair) -> Trace:
    return speculative(tiny_pair, RunConfig(prompt=PROMPT, gamma=4, max_new_tokens=48)).run()


@pytest.fixture(scope="module")
def ar(tiny_pair) -> Trace:
    return autoregressive(tiny_pair, RunConfig(prompt=PROMPT, max_new_tokens=48)).run()


def _round(index=0, proposed="abc", accepted=1, correction="X", emitted=None, bonus=None) -> Round:
    n = len(proposed)
    bonus = accepted == n and n > 0 if bonus is None else bonus
    ids = [ord(c) for c in proposed]
    kept = emitted if emitted is not None else ids[:accepted] + [ord(correction[0])]
    text = proposed[: min(accepted, len(kept))] + (correction if len(kept) > accepted else "")
    return Round(
        index=index, gamma=n, proposed=ids, proposed_text=list(proposed), draft_probs=[0.5] * n, target_probs=[0.25] * n,
        accepted=accepted, rejected=ids[accepted:], correction=ord(correction[0]), correction_text=correction,
        bonus=bonus, emitted=kept, emitted_text=text,
        events=[Event("draft", "draft_forward", 10.0 * index + i, 10.0 * index + i + 1, []) for i in range(n)]
        + [Event("target", "verify_forward", 10.0 * index + n, 10.0 * index + n + 4, [0] * (n + 1))],
    )


def _count(html: str, cls: str) -> int:
    return len(re.findall(rf'class="sv-tok {cls}[ "]', html))


# --- text --------------------------------------------------------------------------------


def test_visible_escapes_html_and_shows_whitespace():
    out = F.visible("<b>&\n x\t")
    assert "<b>" not in out and "&lt;b&gt;" in out and "&amp;" in out
    assert "↵" in out and "·" in out and "→" in out
    assert "\n" not in out and "\t" not in out
    assert "∅" in F.visible("")
    assert "\\x07" in F.visible("\x07")


def test_round_marks_accepted_rejected_and_fix():
    html = F.round_html(_round(proposed="abcd", accepted=2, correction="Z"))
    assert _count(html, "sv-acc") == 2
    assert _count(html, "sv-rej") == 2
    assert _count(html, "sv-fix") == 1
    assert ">fix<" in html and ">bonus<" not in html
    assert "q=0.500" in html and "p=0.250" in html  # the probabilities ride in the tooltip


def test_round_all_accepted_gets_a_bonus_label():
    html = F.round_html(_round(proposed="ab", accepted=2, correction="c"))
    assert _count(html, "sv-acc") == 2 and _count(html, "sv-rej") == 0
    assert ">bonus<" in html


def test_round_without_draft_is_the_targets_own_token():
    rnd = _round(proposed="", accepted=0, correction="q")
    assert F.target_label(rnd) == "target"
    assert ">target<" in F.round_html(rnd)


def test_tokens_past_the_stop_are_not_shown_as_kept():
    rnd = _round(proposed="abc", accepted=3, correction="d", emitted=[ord("a")])
    html = F.round_html(rnd)
    assert _count(html, "sv-acc") == 1 and _count(html, "sv-cut") == 2 and "sv-fix" not in html


def test_phases_draw_pending_tokens():
    rnd = _round(proposed="abcd", accepted=1)
    draft = F.round_html(rnd, "draft", shown=2)
    assert _count(draft, "sv-pend") == 2 and "sv-caret" in draft and "sv-acc" not in draft
    verify = F.round_html(rnd, "verify")
    assert _count(verify, "sv-pend sv-verifying") == 4 and "checking" in verify
    with pytest.raises(ValueError):
        F.round_html(rnd, "later")


def test_committed_newlines_break_the_line_tidily():
    assert F.round_html(_round(proposed="a\nb", accepted=3, correction="c")).count("<br>") == 1
    many = _round(proposed="ab", accepted=2, correction="\n\n\n\n")
    many.proposed_text = ["a", "b"]
    assert F.round_html(many).count("<br>") == 2  # one blank line at most
    rejected = _round(proposed="a\n", accepted=1, correction="c")
    assert F.round_html(rejected).count("<br>") == 0  # a thrown-away newline does not break


def test_strip_has_plain_text_and_hint():
    empty = F.token_strip_html([])
    assert "Press Run" in empty and "nothing yet" in empty
    rounds = [_round(0, "ab", 1, "<"), _round(1, "cd", 2, "&")]
    html = F.token_strip_html(rounds)
    plain = re.search(r'<pre class="sv-plain"[^>]*>(.*?)</pre>', html, re.S).group(1)
    assert plain == "a&lt;cd&amp;"
    assert rounds_text(rounds) == "a<cd&"


def test_strip_of_a_real_run_reads_as_its_output(sd):
    assert rounds_text(sd.rounds) == sd.output_text
    html = F.token_strip_html(sd.rounds, plain=sd.output_text)
    accepted = sum(min(r.accepted, len(r.emitted)) for r in sd.rounds)
    assert _count(html, "sv-acc") == accepted
    assert _count(html, "sv-rej") == sum(len(r.rejected) for r in sd.rounds)
    assert _count(html, "sv-fix") == sum(len(r.emitted) > r.accepted for r in sd.rounds)


def test_legend_shows_every_mark():
    html = F.legend_html()
    for cls in ("sv-pend", "sv-acc", "sv-rej", "sv-fix"):
        assert cls in html
    assert "bonus" in html and "fix" in html


def test_round_caption_says_what_happened():
    assert "2 of 4 accepted" in F.round_caption(_round(proposed="abcd", accepted=2))
    assert "bonus" in F.round_caption(_round(proposed="ab", accepted=2))
    assert "ONE forward pass" in F.round_caption(_round(), "verify")


# --- timeline ----------------------------------------------------------------------------


def _bars(fig, name):
    return [t for t in fig.data if t.type == "bar" and t.name == name]


def test_timeline_bars_are_numeric_ms(sd):
    fig = F.timeline_figure(sd)
    assert fig.layout.xaxis.type in (None, "linear")
    draft, target = _bars(fig, "Draft pass")[0], _bars(fig, "Target pass")[0]
    assert draft.orientation == "h" and target.orientation == "h"
    draft_events = [e for e in sd.events if e.kind == "draft_forward"]
    verify_events = [e for e in sd.events if e.kind == "verify_forward"]
    assert len(draft.x) == len(draft_events)
    assert list(draft.base) == pytest.approx([e.start_ms for e in draft_events])
    assert list(draft.x) == pytest.approx([e.duration_ms for e in draft_events])
    assert len(target.x) == len(verify_events)
    (prefill,) = _bars(fig, "Prefill")  # each model's first pass reads the prompt
    assert list(prefill.base) == pytest.approx([e.start_ms for e in sd.events if e.kind == "prefill"])
    assert len(prefill.x) == 2 and all("reads the prompt" in t for t in prefill.hovertext)
    assert all("ms" in t for t in target.hovertext) and any("accepted" in t for t in target.hovertext)
    assert fig.layout.xaxis.range[1] >= sd.wall_ms


def test_timeline_draws_waiting_and_round_starts(sd):
    fig = F.timeline_figure(sd)
    waiting = _bars(fig, "Waiting")[0]
    assert waiting.marker.pattern.shape == "/"
    assert len(waiting.x) > 0
    starts = [t for t in fig.data if t.name == "Round start"][0]
    assert sum(x is not None for x in starts.x) == 2 * len([r for r in sd.rounds if r.events])
    ticks = " ".join(fig.layout.yaxis.ticktext)
    s = sd.summary
    assert f"idle {F.fmt_pct(s['draft_idle_fraction'])}" in ticks
    assert f"idle {F.fmt_pct(s['target_idle_fraction'])}" in ticks


@pytest.mark.parametrize("lane", ["draft", "target"])
def test_idle_plus_busy_is_the_wall(sd, lane):
    busy = sum(e - s for s, e in F.busy_intervals(sd, lane))
    idle = sum(e - s for s, e in F.idle_intervals(sd, lane))
    assert busy + idle == pytest.approx(sd.wall_ms, rel=1e-6, abs=1e-6)
    assert idle / sd.wall_ms == pytest.approx(sd.summary[f"{lane}_idle_fraction"], abs=1e-6)


def test_race_shares_one_time_axis(sd, ar):
    fig = F.race_figure(sd, ar)
    ar_bars = [t for t in fig.data if t.type == "bar" and t.name == "Target pass" and t.xaxis == "x2"]
    assert len(ar_bars) == 1 and len(ar_bars[0].x) == len(ar.rounds) - 1  # the first pass is drawn as prefill
    assert fig.layout.xaxis2.matches == "x" or fig.layout.xaxis.matches == "x2"
    titles = [a.text for a in fig.layout.annotations]
    assert any("Speculative" in t for t in titles) and any("Autoregressive" in t for t in titles)
    assert fig.layout.xaxis2.range[1] >= max(sd.wall_ms, ar.wall_ms) or fig.layout.xaxis.range[1] >= ar.wall_ms
    # without the baseline yet, the figure still draws
    assert F.race_figure(sd, None).data


def test_acceptance_bars_match_the_summary(sd):
    fig = F.acceptance_figure(sd)
    bars = [t for t in fig.data if t.type == "bar"][0]
    assert list(bars.y) == pytest.approx(sd.summary["per_position_acceptance"])
    assert list(bars.x) == [str(i + 1) for i in range(len(bars.y))]


# --- helpers -----------------------------------------------------------------------------


def test_trace_upto_is_the_run_as_it_stood(sd):
    part = trace_upto(sd, 3)
    assert len(part.rounds) == 3 and part.wall_ms == sd.rounds[2].end_ms
    assert part.output_ids == [t for r in sd.rounds[:3] for t in r.emitted]
    assert part.summary == {} and F.live_summary(part)["rounds"] == 3
    assert trace_upto(sd, len(sd.rounds)) is sd
    assert trace_upto(sd, 0).rounds == []
    assert len(sd.rounds) > 3  # the slice above was a real cut


def test_history_row(sd, ar):
    row = F.history_row(sd, 7, "Code", ar, speedup=1.5, identical=True)
    assert tuple(row) == F.HISTORY_COLUMNS
    assert row["run"] == 7 and row["gamma"] == 4 and row["prompt kind"] == "Code"
    assert row["tok/s"] == pytest.approx(sd.summary["tokens_per_second"], abs=0.01)
    assert row["AR tok/s"] == pytest.approx(ar.summary["tokens_per_second"], abs=0.01)
    fig = F.history_figure([row, {**row, "run": 8, "gamma": 6, "prompt kind": "Prose"}])
    assert {t.name for t in fig.data} >= {"Code", "Prose", "target alone (AR)"}


def test_formatting():
    assert F.fmt_ms(0.25) == "0.2 ms" or F.fmt_ms(0.25) == "0.3 ms"
    assert F.fmt_ms(12.4) == "12 ms" and F.fmt_ms(1240) == "1.24 s" and F.fmt_ms(None) == "–"
    assert F.fmt_ms(math.nan) == "–"
    assert F.fmt_pct(0.456) == "46%" and F.fmt_pct(None) == "–"
    assert F.fmt_num(None) == "–" and F.fmt_num(2.345, 1) == "2.3"


def test_live_summary_of_a_partial_trace(sd):
    part = trace_upto(sd, 2)
    assert F.live_summary(part) == summarize(part)
    assert F.live_summary(sd) is sd.summary


def test_trace_at_shows_a_round_in_the_middle(sd):
    i = 2
    rnd = sd.rounds[i]
    drafting = trace_at(sd, i, "draft")
    assert len(drafting.rounds) == i + 1
    assert {e.kind for e in drafting.rounds[-1].events} <= {"draft_forward", "lookup"}
    assert drafting.wall_ms == max(e.end_ms for e in rnd.events if e.kind == "draft_forward")
    hover = " ".join(_bars(F.timeline_figure(drafting), "Draft pass")[0].hovertext[-len(rnd.proposed):])
    assert "not yet checked" in hover and "accepted" not in hover  # no verdict before the verify pass
    verifying = trace_at(sd, i, "verify")
    assert any(e.kind == "verify_forward" for e in verifying.rounds[-1].events)
    assert drafting.wall_ms < verifying.wall_ms <= sd.rounds[i].end_ms
    assert sd.rounds[i].events is rnd.events  # the trace itself is untouched
    with pytest.raises(ValueError):
        trace_at(sd, i, "done")
