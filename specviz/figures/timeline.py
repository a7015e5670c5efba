"""The timeline of forward passes, and the race of speculative against the target alone.

One lane per model on a millisecond axis (real engine time since the start): forward
passes as bars, waiting hatched, round starts dotted and labelled, each lane's idle
share by its name. Colours are Okabe-Ito (colour-blind safe). Every text is English
marked with ``N_``; the functions take a ``tr`` that translates it (the app passes its
``_``; the default keeps English).

Plotly draws a subset of HTML in hover text, titles and labels (``<br>``, ``<b>``, links),
so model text (a token such as ``<br>`` or ``<b>``, a model's name) is HTML-escaped
(``_tok``, ``esc``) before it goes in: it shows as written.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.analysis.marks import DRAFT_VERDICT, LABELS, round_spans, target_label
from specviz.analysis.metrics import fmt_ms, fmt_pct, live_summary
from specviz.figures.palette import (
    ACCEPTED,
    DRAFT,
    FONT_SIZE,
    IDLE,
    NETWORK,
    PENDING,
    TARGET,
)
from specviz.record.i18n import MILLISECONDS, N_, Translator
from specviz.record.run_trace import Event, Round, Trace, is_draft_step, is_verify_step

BAR_WIDTH = 0.62
WAIT_WIDTH = 0.34
NETWORK_PATTERN = dict(shape=".", fgcolor=TARGET, size=6, solidity=0.4)
WAIT_PATTERN = dict(shape="/", fgcolor=IDLE, bgcolor="rgba(154,154,154,0.12)", size=7, solidity=0.35)
MAX_ROUND_LABELS = 18


@dataclass(frozen=True)
class Bar:
    """One horizontal bar on a lane: a forward pass, a lookup or a wait, with its hover text."""

    lane: str
    start: float
    duration: float
    tip: str


# --- intervals -------------------------------------------------------------------------


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def busy_intervals(trace: Trace, lane: str) -> list[tuple[float, float]]:
    """Merged spans in which ``lane`` runs a forward pass."""
    return _merge([(e.start_ms, e.end_ms) for e in trace.events if e.lane == lane and e.is_forward])


def idle_intervals(trace: Trace, lane: str, min_ms: float = 0.0) -> list[tuple[float, float]]:
    """Spans of [0, wall] in which ``lane`` runs no forward pass (what the summary counts as idle)."""
    gaps, t = [], 0.0
    for s, e in busy_intervals(trace, lane):
        if s - t > min_ms:
            gaps.append((t, s))
        t = max(t, e)
    if trace.wall_ms - t > min_ms:
        gaps.append((t, trace.wall_ms))
    return gaps


def _subtract(span: tuple[float, float], others: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of ``span`` outside the merged intervals ``others``."""
    s, e = span
    out = []
    for os_, oe in others:
        if oe <= s or os_ >= e:
            continue
        if os_ > s:
            out.append((s, os_))
        s = max(s, oe)
    if e > s:
        out.append((s, e))
    return out


def _overlap(span: tuple[float, float], others: list[tuple[float, float]]) -> float:
    s, e = span
    return sum(max(0.0, min(e, oe) - max(s, os_)) for os_, oe in others)


# --- bars and their hover text ----------------------------------------------------------


def esc(text: str) -> str:
    """Model or file text for plotly: its HTML subset escaped, so ``<b>`` shows as written."""
    return html.escape(text, quote=False)


def _tok(text: str) -> str:
    """A token's text quoted (repr: whitespace visible), escaped for plotly."""
    return esc(repr(text))


def _tokens_list(pieces: list[str], limit: int = 12) -> str:
    shown = " ".join(_tok(p) for p in pieces[:limit])
    return shown + (" …" if len(pieces) > limit else "")


def _timing(e: Event, tr: Translator = N_) -> str:
    """A pass's duration and its span on the run's clock, in ``tr``'s unit words."""
    span = tr(MILLISECONDS).format(ms=f"{e.start_ms:.1f}–{e.end_ms:.1f}")
    return f"{fmt_ms(e.duration_ms, tr)} ({span})"


def _draft_bar(rnd: Round, i: int, e: Event, verified: bool, tr: Translator = N_) -> tuple[str, Bar]:
    """The i-th drafting pass of a round, as (row, bar); a prefill reads the prompt too."""
    tok = rnd.proposed_text[i] if i < len(rnd.proposed_text) else ""
    spans = round_spans(rnd) if verified else []
    kind = spans[i].kind if i < len(spans) else None
    verdict = tr(DRAFT_VERDICT[kind]) if kind in DRAFT_VERDICT else tr(N_("not yet checked"))
    head = tr(N_("round {n} · draft pass {i}")).format(n=rnd.index + 1, i=i + 1)
    row = "draft"
    if e.kind == "prefill":
        head = tr(N_("round {n} · draft prefill: reads the prompt ({tokens} tokens)")).format(
            n=rnd.index + 1, tokens=len(e.tokens))
        row = "prefill"
    what = tr(N_("proposes {token} → {verdict}")).format(token=_tok(tok), verdict=verdict)
    if rnd.draft_stop and i == len(rnd.proposed) - 1:
        what += "<br>" + early_stop_text(rnd, tr)
    return row, Bar("draft", e.start_ms, e.duration_ms, f"<b>{head}</b><br>{_timing(e, tr)}<br>{what}")


def early_stop_text(rnd: Round, tr: Translator = N_) -> str:
    """Why a round drafted fewer than γ tokens, when its policy stopped it."""
    q = rnd.draft_probs[-1] if rnd.draft_probs else None
    return tr(N_("the draft stops here, {n} of γ = {gamma}: it gave this token q = {q}, below its "
                 "confidence threshold")).format(n=len(rnd.proposed), gamma=rnd.gamma,
                                                  q="?" if q is None else f"{q:.2f}")


def early_stops(trace: Trace) -> list[tuple[Round, float]]:
    """The rounds whose draft stopped early (``Round.draft_stop``), each with the end of its last draft pass."""
    out = []
    for rnd in trace.rounds:
        ends = [e.end_ms for e in rnd.events if e.is_forward and is_draft_step(e)]
        if rnd.draft_stop and ends:
            out.append((rnd, max(ends)))
    return out


def _lookup_bar(rnd: Round, e: Event, tr: Translator = N_) -> Bar:
    head = tr(N_("round {n} · n-gram lookup")).format(n=rnd.index + 1)
    what = tr(N_("proposes {tokens}")).format(tokens=_tokens_list(rnd.proposed_text))
    return Bar("draft", e.start_ms, e.duration_ms, f"<b>{head}</b><br>{fmt_ms(e.duration_ms, tr)}<br>{what}")


def _target_bar(rnd: Round, e: Event, autoregressive: bool, tr: Translator = N_) -> tuple[str, Bar]:
    """A round's target pass, as (row, bar); the first one reads the prompt too."""
    n = len(rnd.proposed)
    if n:
        title = tr(N_("round {n} · verify pass ({positions} positions)")).format(n=rnd.index + 1, positions=n + 1)
        if len(rnd.emitted) > rnd.accepted:
            own = f"{tr(LABELS[target_label(rnd)])} {_tok(rnd.correction_text)}"
        else:
            own = tr(N_("the output ends after {count}: the target's {token} is not emitted")).format(
                count=len(rnd.emitted), token=_tok(rnd.correction_text))
        checks = (N_("checks 1 draft token {tokens}") if n == 1 else N_("checks {n} draft tokens {tokens}"))
        what = (tr(checks).format(n=n, tokens=_tokens_list(rnd.proposed_text)) + "<br>"
                + tr(N_("{accepted} accepted, {own}")).format(accepted=rnd.accepted, own=own))
    else:
        if autoregressive:
            title = tr(N_("token {n} · target pass")).format(n=rnd.index + 1)
        else:
            title = tr(N_("round {n} · target pass (no draft)")).format(n=rnd.index + 1)
        what = tr(N_("emits {token}")).format(token=_tok(rnd.correction_text))
    row = "target"
    if e.kind == "prefill":
        title += tr(N_(", which also reads the prompt ({tokens} tokens)")).format(tokens=len(e.tokens) - n)
        row = "prefill"
    return row, Bar("target", e.start_ms, e.duration_ms, f"<b>{title}</b><br>{_timing(e, tr)}<br>{what}")


def _network_bar(rnd: Round, e: Event, tr: Translator = N_) -> Bar:
    head = tr(N_("round {n} · remote target: network, HTTP and queue")).format(n=rnd.index + 1)
    what = tr(N_("the request's time outside the server's compute (from the server's own metrics)"))
    return Bar("target", e.start_ms, e.duration_ms, f"<b>{head}</b><br>{_timing(e, tr)}<br>{what}")


def bar_rows(trace: Trace, tr: Translator = N_) -> dict[str, list[Bar]]:
    """Bars by row: draft passes (and lookups), target passes, prefills (each model's first
    pass), and a remote target's network spans."""
    rows: dict[str, list[Bar]] = {"draft": [], "target": [], "prefill": [], "network": []}
    autoregressive = trace.config.mode == "autoregressive"
    for rnd in trace.rounds:
        verified = any(is_verify_step(e) for e in rnd.events)
        drafts = [e for e in rnd.events if e.is_forward and is_draft_step(e)]
        for i, e in enumerate(drafts):
            row, bar = _draft_bar(rnd, i, e, verified, tr)
            rows[row].append(bar)
        for e in rnd.events:
            if e.kind == "lookup":
                rows["draft"].append(_lookup_bar(rnd, e, tr))
            elif e.kind == "network":
                rows["network"].append(_network_bar(rnd, e, tr))
            elif is_verify_step(e):
                row, bar = _target_bar(rnd, e, autoregressive, tr)
                rows[row].append(bar)
    return rows


IDLE_TITLE = {"draft": N_("draft idle"), "target": N_("target idle")}
WAITING_FOR = {"draft": N_("waiting while the draft runs ({ms})"), "target": N_("waiting while the target runs ({ms})")}
LANE_NAME = {"draft": N_("Draft"), "target": N_("Target"), "remote": N_("Target (remote)")}


def wait_bars(trace: Trace, lanes: list[str], tr: Translator = N_) -> list[Bar]:
    """Each lane's idle spans, saying whether it waited for the other model or for bookkeeping."""
    bars = []
    for lane in lanes:
        other = "target" if lane == "draft" else "draft"
        busy = busy_intervals(trace, other)
        network = _merge([(e.start_ms, e.end_ms) for e in trace.events if e.lane == lane and e.kind == "network"])
        spans = [part for gap in idle_intervals(trace, lane) for part in _subtract(gap, network)]
        for s, e in spans:
            d, o = e - s, _overlap((s, e), busy)
            why = (tr(WAITING_FOR[other]).format(ms=fmt_ms(o, tr)) if o > 0.05 * d
                   else tr(N_("sampling, rollback and bookkeeping")))
            title = tr(IDLE_TITLE[lane])
            bars.append(Bar(lane, s, d, f"<b>{title}</b><br>{fmt_ms(d, tr)} ({tr(MILLISECONDS).format(ms=f'{s:.1f}–{e:.1f}')})<br>{why}"))
    return bars


# --- drawing -----------------------------------------------------------------------------


def lanes_of(trace: Trace) -> list[str]:
    """The lanes drawn, top first: draft and target, or the target alone."""
    return ["draft", "target"] if trace.config.mode == "speculative" else ["target"]


def _add_bars(fig: go.Figure, name: str, bars: list[Bar], ys: dict[str, int], where: dict, *, color: str,
              width: float, legend: bool, opacity: float = 1.0, pattern: dict | None = None) -> None:
    bars = [b for b in bars if b.lane in ys]
    if not bars and not legend:
        return
    fig.add_trace(
        go.Bar(
            orientation="h", name=name, legendgroup=name, showlegend=legend,
            y=[ys[b.lane] for b in bars], x=[max(b.duration, 0.0) for b in bars], base=[b.start for b in bars],
            width=width, marker=dict(color=color, opacity=opacity, line=dict(width=0), pattern=pattern or {}),
            hovertext=[b.tip for b in bars], hoverinfo="text", hoverlabel=dict(align="left"),
        ),
        **where,
    )


def _labelled_rounds(rounds: list[Round], axis_ms: float) -> list[Round]:
    """The rounds whose start gets an R-label: at most ~MAX_ROUND_LABELS over an axis of
    ``axis_ms`` (the longest timeline of a shared axis), never overlapping, none past its
    end. A label in the last slot sits left of its line (``_label_side``): the one before
    it must then be two slots away, or it gives way."""
    gap = max(axis_ms, 1.0) / MAX_ROUND_LABELS
    labelled, last = [], -math.inf
    for r in rounds:
        if r.start_ms - last >= gap and r.start_ms <= axis_ms:
            labelled.append(r)
            last = r.start_ms
    if len(labelled) > 1 and _label_side(last, axis_ms) == "top left" and last - labelled[-2].start_ms < 2 * gap:
        del labelled[-2]
    return labelled


def _label_side(x: float, axis_ms: float) -> str:
    """Where an R-label sits from its round's start: to the right, except in the axis's last
    label slot, where it would run past the end and be cut off."""
    return "top left" if x > max(axis_ms, 1.0) * (1 - 1 / MAX_ROUND_LABELS) else "top right"


def _add_round_starts(fig: go.Figure, trace: Trace, top: float, where: dict, axis_ms: float,
                      tr: Translator = N_) -> None:
    """One dotted line per round start, labelled R1, R2, ... (thinned out)."""
    rounds = [r for r in trace.rounds if r.events]
    if not rounds or trace.config.mode != "speculative":
        return
    xs = [x for r in rounds for x in (r.start_ms, r.start_ms, None)]
    ys = [y for _ in rounds for y in (-0.5, top, None)]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=tr(N_("Round start")), hoverinfo="skip", showlegend=False,
                             line=dict(color=PENDING, width=1, dash="dot")), **where)
    labelled = _labelled_rounds(rounds, axis_ms)
    fig.add_trace(go.Scatter(
        x=[r.start_ms for r in labelled], y=[top] * len(labelled), mode="text",
        text=[f"R{r.index + 1}" for r in labelled], textposition=[_label_side(r.start_ms, axis_ms) for r in labelled],
        textfont=dict(size=11, color=PENDING), hoverinfo="skip", showlegend=False,
    ), **where)


def _add_early_stops(fig: go.Figure, trace: Trace, ys: dict[str, int], where: dict, legend: bool,
                     tr: Translator = N_) -> None:
    """A bar-high tick where a round's draft stopped before γ because it was unsure."""
    stops = early_stops(trace)
    if not stops or "draft" not in ys:
        return
    fig.add_trace(go.Scatter(
        x=[end for _r, end in stops], y=[ys["draft"]] * len(stops), mode="markers",
        name=tr(N_("Draft stops early (unsure)")), showlegend=legend,
        marker=dict(symbol="line-ns", size=22, color=PENDING, line=dict(width=3, color=PENDING)),
        hovertext=[f"<b>{tr(N_('round {n}')).format(n=r.index + 1)}</b><br>{early_stop_text(r, tr)}" for r, _e in stops],
        hoverinfo="text", hoverlabel=dict(align="left"),
    ), **where)


def _lane_ticks(trace: Trace, lanes: list[str], prefix: str, tr: Translator = N_) -> list[str]:
    summary = live_summary(trace)
    ticks = []
    for lane in reversed(lanes):
        frac = summary.get(f"{lane}_idle_fraction")
        label = "remote" if lane == "target" and trace.config.target_url else lane
        name = f"<b>{prefix}{tr(LANE_NAME[label])}</b>"
        ticks.append(f"{name}<br>" + tr(N_("idle {percent}")).format(percent=fmt_pct(frac)) if frac is not None
                     else name)
    return ticks


def add_timeline(fig: go.Figure, trace: Trace, row: int | None = None, legend: bool = True,
                 label_prefix: str = "", tr: Translator = N_, axis_ms: float | None = None) -> None:
    """Draw ``trace``'s lanes into ``fig`` (at subplot ``row`` if given); ``tr`` translates the text;
    ``axis_ms``: the shared time axis's span, when the subplots share one (default: this run's)."""
    where = dict(row=row, col=1) if row else {}
    lanes = lanes_of(trace)
    ys = {lane: i for i, lane in enumerate(reversed(lanes))}  # first lane on top
    rows = bar_rows(trace, tr)
    _add_bars(fig, tr(N_("Draft pass")), rows["draft"], ys, where, color=DRAFT, width=BAR_WIDTH, legend=legend)
    _add_bars(fig, tr(N_("Target pass")), rows["target"], ys, where, color=TARGET, width=BAR_WIDTH, legend=legend)
    _add_bars(fig, tr(N_("Prefill")), rows["prefill"], ys, where, color=PENDING, width=BAR_WIDTH, legend=legend,
              opacity=0.55)
    _add_bars(fig, tr(N_("Network and queue (remote target)")), rows["network"], ys, where, color=NETWORK,
              width=BAR_WIDTH, legend=legend and bool(rows["network"]), pattern=NETWORK_PATTERN)
    _add_bars(fig, tr(N_("Waiting")), wait_bars(trace, lanes, tr), ys, where, color="rgba(0,0,0,0)",
              width=WAIT_WIDTH, legend=legend, pattern=WAIT_PATTERN)
    _add_round_starts(fig, trace, len(lanes) - 0.5, where, axis_ms or trace.wall_ms, tr)
    _add_early_stops(fig, trace, ys, where, legend, tr)
    fig.update_yaxes(tickvals=list(range(len(lanes))), ticktext=_lane_ticks(trace, lanes, label_prefix, tr),
                     range=[-0.6, len(lanes) - 0.25], showgrid=False, zeroline=False, fixedrange=True, **where)


def base_layout(fig: go.Figure, height: int, x_max: float, title: str | None, tr: Translator = N_) -> None:
    fig.update_layout(
        height=height,
        barmode="overlay",
        bargap=0,
        margin=dict(l=8, r=12, t=56 if title else 36, b=44),
        font=dict(size=FONT_SIZE),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0, font=dict(size=13)),
        hovermode="closest",
        title=dict(text=title, font=dict(size=16), y=0.98) if title else None,
    )
    fig.update_xaxes(range=[0, max(x_max, 1.0) * 1.02], ticksuffix=tr(MILLISECONDS).format(ms=""), separatethousands=True,
                     showgrid=True, zeroline=False)


def timeline_figure(trace: Trace, x_max: float | None = None, height: int = 240,
                    title: str | None = None, tr: Translator = N_) -> go.Figure:
    """Draft and target lanes on one millisecond axis (real engine time since the start):
    forward passes as bars, waiting hatched, round starts dotted and labelled, the idle
    fraction of each lane by its name. ``tr`` translates the text (default: English)."""
    fig = go.Figure()
    add_timeline(fig, trace, tr=tr)
    base_layout(fig, height, x_max if x_max is not None else trace.wall_ms, title, tr)
    fig.update_layout(margin=dict(b=28))
    return fig


def export_title(trace: Trace, tr: Translator = N_) -> str:
    """A run in one line, for a file (plain text, not escaped): how it ran, γ, its tokens
    and wall time, and the pair."""
    s = live_summary(trace)
    cfg = trace.config
    if cfg.mode == "speculative":
        run = tr(N_("Speculative, γ={gamma}: {tokens} tokens in {time}")).format(
            gamma=cfg.gamma, tokens=s.get("new_tokens", 0), time=fmt_ms(trace.wall_ms, tr))
        pair = " → ".join(name for name in (cfg.draft, cfg.target) if name)
    else:
        run = tr(N_("Autoregressive, target alone: {tokens} tokens in {time}")).format(
            tokens=s.get("new_tokens", 0), time=fmt_ms(trace.wall_ms, tr))
        pair = cfg.target
    return f"{run} · {pair}" if pair else run


EXPORT_TEMPLATE = "plotly_white"  # a file carries its own look: no app theme around it


def timeline_export_figure(trace: Trace, height: int = 300, tr: Translator = N_) -> go.Figure:
    """The timeline as a file shows it: ``timeline_figure`` titled with ``export_title``
    (escaped: a model's name is text, not markup), on a template of its own. In the app the
    default template is Streamlit's bare one (its page applies the theme), under which the
    lane names would not get the margin they need."""
    fig = timeline_figure(trace, height=height, title=esc(export_title(trace, tr)), tr=tr)
    fig.update_layout(template=EXPORT_TEMPLATE)
    fig.update_yaxes(automargin=True)
    return fig


def _race_titles(sd: Trace, ar: Trace | None, tr: Translator = N_) -> list[str]:
    sd_s = live_summary(sd)
    titles = [tr(N_("Speculative, γ={gamma}: {tokens} tokens in {time}")).format(
        gamma=sd.config.gamma, tokens=sd_s["new_tokens"], time=fmt_ms(sd.wall_ms, tr))]
    if ar is None:
        return titles + [tr(N_("Autoregressive, target alone: not run yet"))]
    ar_s = live_summary(ar)
    return titles + [tr(N_("Autoregressive, target alone: {tokens} tokens in {time}")).format(
        tokens=ar_s["new_tokens"], time=fmt_ms(ar.wall_ms, tr))]


def race_figure(sd: Trace, ar: Trace | None, height: int = 380, tr: Translator = N_) -> go.Figure:
    """Speculative (draft + target) above autoregressive (target alone), one shared
    time axis, each run's finish marked. ``tr`` translates the text (default: English)."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.2,
                        row_heights=[2, 1.15], subplot_titles=_race_titles(sd, ar, tr))
    axis = max(sd.wall_ms, ar.wall_ms if ar is not None else 0.0)
    add_timeline(fig, sd, row=1, legend=False, tr=tr, axis_ms=axis)  # the timeline above carries the legend
    if ar is not None:
        add_timeline(fig, ar, row=2, legend=False, tr=tr, axis_ms=axis)
    base_layout(fig, height, axis, None, tr)
    fig.update_layout(margin=dict(t=34), showlegend=False)
    fig.update_annotations(font=dict(size=14), xanchor="left", x=0)
    for row, run, color in ((1, sd, ACCEPTED), (2, ar, TARGET)):
        if run is not None and run.rounds:
            fig.add_vline(x=run.wall_ms, line=dict(color=color, width=2), row=row, col=1)
    fig.update_xaxes(title=dict(text=tr(N_("real engine time since start (ms), same scale for both")),
                                font=dict(size=13)), row=2, col=1)
    return fig
