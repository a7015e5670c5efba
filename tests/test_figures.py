"""specviz.figures: pure functions of a Trace -> plotly figures, token-strip HTML and history rows."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
from helpers import make_round

from specviz import RunConfig, autoregressive, speculative
from specviz import figures as F
from specviz.analysis.metrics import position_counts
from specviz.record.contention import Contention
from specviz.record.run_trace import Trace, rounds_text, summarize, trace_at, trace_upto

PROMPT = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def sd(tiny_pair) -> Trace:
    return speculative(tiny_pair, RunConfig(prompt=PROMPT, gamma=4, max_new_tokens=48)).run()


@pytest.fixture(scope="module")
def ar(tiny_pair) -> Trace:
    return autoregressive(tiny_pair, RunConfig(prompt=PROMPT, max_new_tokens=48)).run()


def _count(html: str, cls: str) -> int:
    return len(re.findall(rf'class="sv-tok {cls}[ "]', html))


def _labels(html: str) -> list[str]:
    """The rendered label elements (fix, bonus, target), in order."""
    return re.findall(r'<span class="sv-lab">([^<]*)</span>', html)


# --- text --------------------------------------------------------------------------------


def test_visible_escapes_html_and_shows_whitespace():
    out = F.visible("<b>&\n x\t")
    assert "<b>" not in out and "&lt;b&gt;" in out and "&amp;" in out
    assert "↵" in out and "·" in out and "→" in out
    assert "\n" not in out and "\t" not in out
    assert "∅" in F.visible("")
    assert "\\x07" in F.visible("\x07")


def test_round_marks_accepted_rejected_and_fix():
    html = F.round_html(make_round(proposed="abcd", accepted=2, correction="Z"))
    assert _count(html, "sv-acc") == 2
    assert _count(html, "sv-rej") == 2
    assert _count(html, "sv-fix") == 1
    assert _labels(html) == ["fix"]
    assert "q=0.500" in html and "p=0.250" in html  # the probabilities ride in the tooltip


def test_round_all_accepted_gets_a_bonus_label():
    html = F.round_html(make_round(proposed="ab", accepted=2, correction="c"))
    assert _count(html, "sv-acc") == 2 and _count(html, "sv-rej") == 0
    assert _labels(html) == ["bonus"]


def test_round_without_draft_is_the_targets_own_token():
    rnd = make_round(proposed="", accepted=0, correction="q")
    assert F.target_label(rnd) == "target"
    html = F.round_html(rnd)
    assert _labels(html) == ["target"] and _count(html, "sv-fix") == 1


def test_tokens_past_the_stop_are_not_shown_as_kept():
    rnd = make_round(proposed="abc", accepted=3, correction="d", emitted=[ord("a")])
    html = F.round_html(rnd)
    assert _count(html, "sv-acc") == 1 and _count(html, "sv-cut") == 2 and "sv-fix" not in html
    assert _labels(html) == []
    caption = F.round_caption(rnd)
    assert "3 of 3 accepted" in caption and "output ends here → 1 token" in caption and "bonus" not in caption


def test_phases_draw_pending_tokens():
    rnd = make_round(proposed="abcd", accepted=1)
    draft = F.round_html(rnd, "draft", shown=2)
    assert _count(draft, "sv-pend") == 2 and "sv-caret" in draft and "sv-acc" not in draft
    verify = F.round_html(rnd, "verify")
    assert _count(verify, "sv-pend sv-verifying") == 4 and "checking" in verify
    with pytest.raises(ValueError):
        F.round_html(rnd, "later")


def test_committed_newlines_break_the_line_tidily():
    assert F.round_html(make_round(proposed="a\nb", accepted=3, correction="c")).count("<br>") == 1
    many = make_round(proposed="ab", accepted=2, correction="\n\n\n\n")
    many.proposed_text = ["a", "b"]
    assert F.round_html(many).count("<br>") == 2  # one blank line at most
    rejected = make_round(proposed="a\n", accepted=1, correction="c")
    assert F.round_html(rejected).count("<br>") == 0  # a thrown-away newline does not break


def test_strip_escapes_and_shows_a_hint_when_empty():
    empty = F.token_strip_html([])
    assert "Press Run" in empty and 'class="sv-hint"' in empty and "sv-tok" not in empty
    rounds = [make_round("ab", 1, "<", index=0), make_round("cd", 2, "&", index=1)]
    html = F.token_strip_html(rounds)
    assert html.count('class="sv-round"') == 2 and "<pre" not in html  # the plain text is shown apart
    assert _labels(html) == ["fix", "bonus"]
    assert "&lt;" in html and "&amp;" in html and ">&<" not in html
    assert rounds_text(rounds) == "a<cd&"
    live = F.token_strip_html(rounds[:1], rounds[1], "draft", shown=1)
    assert live.count('class="sv-round') == 2 and _count(live, "sv-pend") == 1 and "sv-caret" in live


def test_strip_escapes_script_tags():
    rnd = make_round(proposed="ab", accepted=1, correction="X")
    rnd.proposed_text = ["<script>", "</script>"]
    rnd.correction_text = "<img src=x onerror=alert(1)>"
    html = F.round_html(rnd)
    assert "<script" not in html and "</script" not in html and "<img" not in html
    assert "&lt;script&gt;" in html and "&lt;/script&gt;" in html
    assert "&lt;img" in html and "onerror=alert(1)&gt;" in html


def test_output_box_height_is_bounded():
    short, long = "one line", "\n".join(f"line {i}" for i in range(200))
    assert F.output_height(short) < F.output_height("a\nb\nc") < F.output_height(long)
    assert F.output_height(long) == F.output_height(long * 3) <= 400  # bounded: the box scrolls
    assert F.output_height("x" * 500) > F.output_height("x" * 50)  # long lines wrap


def test_strip_of_a_real_run_reads_as_its_output(sd):
    assert rounds_text(sd.rounds) == sd.output_text
    html = F.token_strip_html(sd.rounds)
    accepted = sum(min(r.accepted, len(r.emitted)) for r in sd.rounds)
    assert _count(html, "sv-acc") == accepted
    assert _count(html, "sv-rej") == sum(len(r.rejected) for r in sd.rounds)
    assert _count(html, "sv-fix") == sum(len(r.emitted) > r.accepted for r in sd.rounds)
    assert _labels(html) == [F.target_label(r) for r in sd.rounds if len(r.emitted) > r.accepted]


def test_legend_shows_every_mark():
    html = F.legend_html()
    for cls in ("sv-pend", "sv-acc", "sv-rej", "sv-cut"):
        assert _count(html, cls) == 1, cls
    assert _count(html, "sv-fix") == 3
    assert _labels(html) == ["fix", "bonus", "target"]  # the target's own token has its key too
    assert html.count('class="sv-ws"') == 2


def test_round_caption_says_what_happened():
    assert "2 of 4 accepted" in F.round_caption(make_round(proposed="abcd", accepted=2))
    assert "bonus" in F.round_caption(make_round(proposed="ab", accepted=2))
    assert "ONE forward pass" in F.round_caption(make_round(), "verify")


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


def test_timeline_hover_follows_the_marks_of_a_cut_round():
    cut = make_round(index=1, proposed="abc", accepted=3, correction="d", emitted=[ord("a")])
    trace = Trace(RunConfig(), rounds=[make_round(), cut], wall_ms=30.0)
    fig = F.timeline_figure(trace)
    drafts = _bars(fig, "Draft pass")[0].hovertext[-3:]
    assert ["→ accepted" in drafts[0], "past the stop" in drafts[1], "past the stop" in drafts[2]] == [True] * 3
    verify = _bars(fig, "Target pass")[0].hovertext[-1]
    assert "3 accepted, the output ends after 1" in verify and "'d' is not emitted" in verify
    assert "bonus" not in verify


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
    assert fig.layout.xaxis.matches == "x2"  # the top run follows the bottom one's axis
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith(f"Speculative, γ={sd.config.gamma}: {sd.summary['new_tokens']} tokens")
    assert titles[1].startswith(f"Autoregressive, target alone: {ar.summary['new_tokens']} tokens")
    x_max = max(sd.wall_ms, ar.wall_ms) * 1.02
    assert fig.layout.xaxis.range[1] == pytest.approx(x_max) and fig.layout.xaxis2.range[1] == pytest.approx(x_max)
    # without the baseline yet, the figure still draws
    assert F.race_figure(sd, None).data


def test_acceptance_bars_match_the_summary(sd):
    fig = F.acceptance_figure(sd)
    bars = [t for t in fig.data if t.type == "bar"][0]
    judged = [c.judged > 0 for c in position_counts(sd.rounds)]
    assert all(judged)  # 48 tokens: every position was judged at least once
    assert list(bars.y) == pytest.approx(sd.summary["per_position_acceptance"])
    assert list(bars.x) == [str(i + 1) for i in range(len(bars.y))]


def test_acceptance_bars_carry_their_counts_under_them(sd):
    fig = F.acceptance_figure(sd)
    counts = position_counts(sd.rounds)
    assert list(fig.layout.xaxis.ticktext) == [f"{c.position}<br>{c.accepted}/{c.drafted}" for c in counts]
    assert "kept / drafted" in fig.layout.xaxis.title.text


def test_positions_never_judged_are_not_drawn_as_zero():
    """After Step's first round (1 of 4 kept) position 2 was judged and rejected: 0%; 3 and 4
    were never judged: no bar, the words instead (issue 16: they read 0%)."""
    rnd = make_round(proposed="abcd", accepted=1)
    running = Trace(RunConfig(gamma=4), rounds=[rnd], wall_ms=20.0)
    fig = F.acceptance_figure(running)
    bars = [t for t in fig.data if t.type == "bar"][0]
    assert list(bars.y) == [1.0, 0.0, None, None]
    assert list(bars.text) == ["100%", "0%", "", ""]
    notes = [(a.x, a.text) for a in fig.layout.annotations]
    assert notes == [(2, "not judged yet"), (3, "not judged yet")]  # x: the category's index
    done = Trace(RunConfig(gamma=4), rounds=[rnd], wall_ms=20.0).finish()
    assert {a.text for a in F.acceptance_figure(done).layout.annotations} == {"never judged"}


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
    row = F.history_row(sd, 7, "Code", ar, 0.98499, True, "reused from run 3")
    assert tuple(row) == F.HISTORY_COLUMNS
    assert row["run"] == 7 and row["gamma"] == 4 and row["example"] == "Code"
    assert row["baseline"] == "reused from run 3" and row["identical"] is True
    assert row["tok/s"] == sd.summary["tokens_per_second"]  # stored as measured: no rounding
    assert row["AR tok/s"] == ar.summary["tokens_per_second"]
    assert row["speedup"] == 0.98499
    plain = F.history_row(sd, 1)
    assert plain["example"] == "custom" and plain["baseline"] is None and plain["AR tok/s"] is None


def test_history_table_shows_each_number_through_its_metric(sd, ar):
    from specviz.analysis import metrics

    sd = dataclasses.replace(sd, contention=[])  # as on a quiet machine (this one is shared)
    rows = [F.history_row(sd, 1, "Code"), F.history_row(sd, 2, "Prose", ar, 0.98499, False, "measured", True)]
    table = F.history_table(rows)
    assert [t["run"] for t in table] == ["2", "1"]  # newest first
    newest, oldest = table
    assert set(newest) == {c.key for c in F.TABLE_COLUMNS}
    assert newest["speedup"] == metrics.text("speedup", 0.98499) == "×0.98"  # as the race panel says it
    assert newest["tok/s"] == metrics.text("tokens_per_second", sd.summary["tokens_per_second"])
    assert newest["acceptance"] == metrics.percent(sd.summary["acceptance_rate"])  # drawn as a bar
    assert newest["identical"] == "no" and newest["baseline"] == "measured" and newest["example"] == "Prose"
    assert oldest["speedup"] == "–" and oldest["identical"] == "–" and oldest["baseline"] == "–"
    assert all(c.width >= 40 for c in F.TABLE_COLUMNS)
    # timed beside other programs, raced against a quiet target-alone run: both numbers marked
    busy = dataclasses.replace(sd, contention=[Contention("other processes", 1.2)])
    (marked,) = F.history_table([F.history_row(busy, 3, "Code", ar, 0.5, True, "measured", False)])
    assert marked["tok/s"] == newest["tok/s"] + " ⚠" and marked["speedup"] == "×0.50 ⚠"


def test_history_figure_keeps_target_alone_visible(sd, ar):
    code = F.history_row(sd, 7, "Code", ar, 1.5, True, "measured")
    rows = [code, {**code, "run": 8, "gamma": 6}, {**code, "run": 9, "example": "Prose", "AR tok/s": None}]
    fig = F.history_figure(rows)
    assert {t.name for t in fig.data} >= {"Code", "Prose", "target alone (AR)"}
    runs = [t for t in fig.data if t.name == "Code"][0]
    (level,) = [t for t in fig.data if t.name == "target alone (AR) · Code"]
    assert fig.data.index(level) > fig.data.index(runs)  # drawn on top of the runs' points
    assert level.mode == "lines" and level.line.dash == "dash"
    assert list(level.y[:2]) == [code["AR tok/s"]] * 2  # a level line across the runs' γ, not a point under them
    assert level.x[0] < 4 and level.x[1] > 6
    assert not [t for t in fig.data if t.name == "target alone (AR) · Prose"]


def test_formatting():
    assert F.fmt_ms(0.24) == "0.2 ms" and F.fmt_ms(0.26) == "0.3 ms"
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


# --- model text is text: escaped for plotly's HTML subset ---------------------------------------

HOSTILE = ["<b>", "<script>window.__xss=1</script>", '<img src=x onerror="window.__xss=1">']


def _only_our_markup(text: str, bold: int = 1) -> None:
    """Plotly draws <b>, <br>, <i>, <a href>, <span style>...: the only tags left in a hover
    text are the template's own (one bold head, line breaks); a token's show escaped."""
    assert re.findall(r"<(?!/?b>|br>)[^>]*>?", text) == [], text
    assert text.count("<b>") == bold, text


def test_timeline_hover_escapes_token_text():
    rnd = make_round(index=0, proposed="abc", accepted=1, correction="X")
    rnd.proposed_text = list(HOSTILE)
    rnd.correction_text = "<br>&lt;"
    trace = Trace(RunConfig(), rounds=[rnd], wall_ms=10.0)
    fig = F.timeline_figure(trace)
    tips = [t for bar in fig.data if bar.type == "bar" for t in bar.hovertext]
    for tip in tips:
        _only_our_markup(tip)
    hover = " ".join(tips)
    assert "'&lt;b&gt;'" in hover and "&lt;script&gt;window.__xss=1&lt;/script&gt;" in hover
    assert "&lt;img src=x onerror=\"window.__xss=1\"&gt;" in hover
    assert "'&lt;br&gt;&amp;lt;'" in hover  # an entity in a token shows as written too
    verify = _bars(fig, "Target pass")[0].hovertext[0]
    assert verify.count("<br>") == 3  # the template's own breaks, not the token's


def test_exported_timeline_title_escapes_the_pair():
    trace = Trace(RunConfig(draft="<i>d</i>", target="t&co"), rounds=[make_round()], wall_ms=10.0, output_ids=[1, 2])
    assert F.export_title(trace).endswith("· <i>d</i> → t&co")  # plain text, for a file's name or title
    title = F.timeline_export_figure(trace).layout.title.text
    assert "&lt;i&gt;d&lt;/i&gt; → t&amp;co" in title and "<i>" not in title
    assert title.startswith("Speculative, γ=")


def test_inspector_bars_escape_token_text():
    from specviz.analysis.round_story import Candidate, Position
    from specviz.figures import round_story as FI

    cands = [Candidate(1, "<b>", 0.5, 0.4), Candidate(2, "<br>", 0.2, 0.5), Candidate(3, "a&b", 0.1, 0.05)]
    pos = Position(index=0, greedy=True, verdict="rejected", token=1, text="<b>", q=0.5, p=0.4,
                   target_token=2, target_token_text="<br>", candidates=cands)
    fig = FI.pq_figure(pos)
    names = list(fig.data[0].x)
    assert names == ["&lt;b&gt;", "&lt;br&gt;", "a&amp;b"]
    assert {a.x for a in fig.layout.annotations} <= set(names)  # the ▼ marks still find their bars


def test_sweep_legend_escapes_prompts():
    from specviz.figures.sweep import acceptance_vs_gamma_figure, sweep_figure
    from specviz.measure import sweep as S

    prompt = "<b>x</b> [click](http://example.com)"

    def cell(gamma, tps, length=None, draft=None):
        return S.Cell(prompt=prompt, gamma=gamma, repeat=0, tokens_per_second=tps, new_tokens=8, rounds=4,
                      wall_ms=1000 * 8 / tps, seconds=0.1, mean_acceptance_length=length,
                      acceptance_rate=None if length is None else (length - 1) / gamma,
                      cost_ratio_c=None if draft is None else draft / 10.0, draft_ms=draft, target_ms=10.0)

    r = S.aggregate(S.SweepResult(prompts=[prompt], gammas=[2], repeats=1, max_new_tokens=8,
                                  cells=[cell(0, 10.0), cell(2, 15.0, 2.5, draft=3.0)]))
    for fig in (sweep_figure(r), acceptance_vs_gamma_figure(r)):
        for t in fig.data:
            assert "<b>x" not in (t.name or "") and "<b>x" not in (t.hovertemplate or "")
        assert any((t.name or "").startswith("&lt;b&gt;x&lt;/b&gt; [click]") for t in fig.data)
