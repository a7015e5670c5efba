"""Figures and token-strip HTML: pure functions of a Trace (or its Rounds).

No Streamlit, no model calls: the live page, the replay page, the tests and a
notebook all draw with the same functions.

Marks follow DESIGN.md (colour is never the only signal):

* accepted draft token   green, solid underline
* rejected draft token   red, struck through
* target's own token     blue, boxed, labelled "fix" (after a rejection),
                         "bonus" (every draft token accepted) or "target"
* proposed / pending     grey, dashed box

Colours are Okabe-Ito (colour-blind safe) and each has at least 3:1 contrast on
both Streamlit's light and dark backgrounds.
"""

from __future__ import annotations

import html
import math
from typing import Any, Iterable

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.trace import Event, Round, Trace, is_draft_step, is_verify_step, rounds_text, summarize

# --- palette (Okabe-Ito) --------------------------------------------------------------

ACCEPTED = "#009E73"  # bluish green
REJECTED = "#D55E00"  # vermillion
TARGET = "#0072B2"  # blue: the target's own token, and the target's forward passes
DRAFT = "#E69F00"  # orange: the draft's forward passes
PENDING = "#8C8C8C"  # grey
IDLE = "#9A9A9A"  # grey, hatched

PHASES = ("draft", "verify", "done")
FONT_SIZE = 15

SPECIAL_PREFIXES = ("<|", "<eos", "</s", "<s>", "<unk", "<pad")


# --- numbers ---------------------------------------------------------------------------


def fmt_ms(ms: float | None) -> str:
    """Milliseconds for people: 0.8 ms, 12 ms, 1.24 s, 83 s."""
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "–"
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 10_000:
        return f"{ms / 1000:.2f} s"
    return f"{ms / 1000:.0f} s"


def fmt_pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def fmt_num(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


# --- trace helpers ---------------------------------------------------------------------


def live_summary(trace: Trace) -> dict[str, Any]:
    """The trace's summary when the run has ended, else one computed from the rounds so far."""
    return trace.summary if trace.summary else summarize(trace)


# --- token strip -----------------------------------------------------------------------


def is_special(text: str) -> bool:
    t = text.strip()
    return t.startswith(SPECIAL_PREFIXES) and t.endswith(">")


def visible(text: str) -> str:
    """HTML-escaped token text with whitespace made visible but quiet.

    Space -> a dim middle dot, newline -> a dim return arrow, tab -> a dim arrow,
    other control characters -> their code; an empty piece -> an empty-set sign."""
    if text == "":
        return '<span class="sv-ws">∅</span>'
    out = []
    for ch in text:
        if ch == " ":
            out.append('<span class="sv-ws">·</span>')
        elif ch == "\n":
            out.append('<span class="sv-ws">↵</span>')
        elif ch == "\t":
            out.append('<span class="sv-ws">→</span>')
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f'<span class="sv-ws">\\x{ord(ch):02x}</span>')
        else:
            out.append(html.escape(ch))
    return "".join(out)


def _tok(cls: str, text: str, tip: str, label: str | None = None, breaks: bool = False) -> str:
    special = " sv-special" if is_special(text) else ""
    lab = f'<span class="sv-lab">{label}</span>' if label else ""
    span = (
        f'<span class="sv-tok {cls}{special}" title="{html.escape(tip, quote=True)}">'
        f"{lab}{visible(text)}</span>"
    )
    # a committed newline breaks the line; at most two breaks (one blank line) per token: tidy
    return span + ("<br>" * min(text.count("\n"), 2) if breaks else "")


def _prob_tip(rnd: Round, i: int) -> str:
    parts = []
    if i < len(rnd.draft_probs):
        parts.append(f"draft q={rnd.draft_probs[i]:.3f}")
    if i < len(rnd.target_probs):
        parts.append(f"target p={rnd.target_probs[i]:.3f}")
    return (" · " + ", ".join(parts)) if parts else ""


def target_label(rnd: Round) -> str:
    """What the target's own token is in this round: bonus, fix or (no draft) target."""
    if rnd.bonus:
        return "bonus"
    if rnd.proposed:
        return "fix"
    return "target"


def round_html(rnd: Round, phase: str = "done", shown: int | None = None) -> str:
    """One round's tokens. ``phase``: "draft" (the first ``shown`` proposals appear,
    pending), "verify" (all proposals pending, the target checking) or "done"."""
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}; got {phase!r}")
    n = len(rnd.proposed_text)
    where = f"round {rnd.index + 1}"
    parts = []
    if phase in ("draft", "verify"):
        count = n if phase == "verify" or shown is None else max(0, min(shown, n))
        cls = "sv-pend sv-verifying" if phase == "verify" else "sv-pend"
        for i in range(count):
            parts.append(_tok(cls, rnd.proposed_text[i], f"{where} · draft token {i + 1} · proposed, not yet checked"))
        if phase == "draft":
            parts.append('<span class="sv-caret" title="the draft is proposing">▍</span>')
        else:
            parts.append('<span class="sv-checking">target checking…</span>')
        return f'<span class="sv-round sv-live" title="{where}">{"".join(parts)}</span>'

    k = rnd.accepted
    for i in range(n):
        text = rnd.proposed_text[i]
        tip = _prob_tip(rnd, i)
        if i < k and i < len(rnd.emitted):
            parts.append(_tok("sv-acc", text, f"{where} · draft token {i + 1} · accepted{tip}", breaks=True))
        elif i < k:
            parts.append(_tok("sv-cut", text, f"{where} · draft token {i + 1} · accepted, but past the stop{tip}"))
        else:
            parts.append(_tok("sv-rej", text, f"{where} · draft token {i + 1} · rejected{tip}"))
    if len(rnd.emitted) > k:
        label = target_label(rnd)
        why = {
            "bonus": "every draft token was accepted, so the verify pass yields one more token for free",
            "fix": "the target's own token where the draft was wrong",
            "target": "the target's own token (no draft this round)",
        }[label]
        parts.append(_tok("sv-fix", rnd.correction_text, f"{where} · {label}: {why}", label=label, breaks=True))
    return f'<span class="sv-round" title="{where}: {k} of {n} accepted">{"".join(parts)}</span>'


def token_strip_html(
    rounds: list[Round],
    live: Round | None = None,
    phase: str = "done",
    shown: int | None = None,
    plain: str | None = None,
    empty_hint: str = "Press Run or Step: the output appears here, token by token.",
) -> str:
    """The output so far, round by round, with the marks; plus the same text as plain text.

    ``rounds`` are finished (drawn with their verdicts); ``live`` is the round being
    animated in ``phase``. ``plain`` overrides the plain text (else it is joined from
    the rounds' pieces)."""
    body = "".join(round_html(r) for r in rounds)
    if live is not None:
        body += round_html(live, phase, shown)
    if not body:
        body = f'<span class="sv-hint">{html.escape(empty_hint)}</span>'
    text = plain if plain is not None else rounds_text(rounds)
    plain_html = html.escape(text) if text else '<span class="sv-hint">(nothing yet)</span>'
    return (
        '<div class="sv-strip-wrap">'
        f'<div class="sv-strip" role="log" aria-label="output tokens"><div class="sv-strip-in">{body}</div></div>'
        f'<pre class="sv-plain" aria-label="output as plain text">{plain_html}</pre>'
        "</div>"
    )


def legend_html() -> str:
    """The key to the token marks, with the marks themselves."""
    items = [
        ('<span class="sv-tok sv-pend">ab</span>', "drafted, pending"),
        ('<span class="sv-tok sv-acc">ab</span>', "accepted"),
        ('<span class="sv-tok sv-rej">ab</span>', "rejected"),
        ('<span class="sv-tok sv-fix"><span class="sv-lab">fix</span>ab</span>', "target's fix"),
        ('<span class="sv-tok sv-fix"><span class="sv-lab">bonus</span>ab</span>', "all accepted"),
        ('<span class="sv-ws">·</span>', "space"),
        ('<span class="sv-ws">↵</span>', "newline"),
    ]
    cells = "".join(f'<span class="sv-key">{mark}<span class="sv-key-t">{text}</span></span>' for mark, text in items)
    return f'<div class="sv-legend" aria-label="legend">{cells}</div>'


def round_caption(rnd: Round, phase: str = "done", total: int | None = None) -> str:
    """One line saying what happens in this round's phase, for the status bar."""
    n = len(rnd.proposed)
    r = f"Round {rnd.index + 1}" + (f" of {total}" if total else "")
    if phase == "draft":
        return f"{r} · the draft proposes {n} token{'s' if n != 1 else ''}, one forward pass each"
    if phase == "verify":
        return f"{r} · the target verifies all {n} in ONE forward pass ({n + 1} positions); the draft waits"
    if not n:
        return f"{r} · no draft this round: the target produced its own token"
    k = rnd.accepted
    if rnd.bonus:
        return f"{r} · all {n} accepted, plus a bonus token from the same verify pass → {k + 1} tokens"
    return f"{r} · {k} of {n} accepted; the target corrects position {k + 1} → {k + 1} token{'s' if k else ''}"


# --- timeline --------------------------------------------------------------------------

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


def _overlap(span: tuple[float, float], others: list[tuple[float, float]]) -> float:
    s, e = span
    return sum(max(0.0, min(e, oe) - max(s, os_)) for os_, oe in others)


def _tokens_list(pieces: list[str], limit: int = 12) -> str:
    shown = " ".join(repr(p) for p in pieces[:limit])
    return shown + (" …" if len(pieces) > limit else "")


def _bar_rows(trace: Trace) -> dict[str, list[dict]]:
    """Bars by kind: draft forward, target forward, prefill; each with hover text.

    A model's first pass reads the whole prompt and does its first job in the same
    forward: it is drawn as prefill, its hover says both."""
    rows: dict[str, list[dict]] = {"draft": [], "target": [], "prefill": []}
    for rnd in trace.rounds:
        drafts = [e for e in rnd.events if e.is_forward and is_draft_step(e)]
        verified = any(is_verify_step(e) for e in rnd.events)
        for i, e in enumerate(drafts):
            tok = rnd.proposed_text[i] if i < len(rnd.proposed_text) else ""
            verdict = ("accepted" if i < rnd.accepted else "rejected") if verified else "not yet checked"
            head, row = f"round {rnd.index + 1} · draft pass {i + 1}", "draft"
            if e.kind == "prefill":
                head, row = f"round {rnd.index + 1} · draft prefill: reads the prompt ({len(e.tokens)} tokens)", "prefill"
            rows[row].append(
                dict(lane="draft", s=e.start_ms, d=e.duration_ms,
                     tip=f"<b>{head}</b><br>{fmt_ms(e.duration_ms)} "
                         f"({e.start_ms:.1f}–{e.end_ms:.1f} ms)<br>proposes {tok!r} → {verdict}")
            )
        for e in rnd.events:
            if e.kind == "lookup":
                rows["draft"].append(
                    dict(lane="draft", s=e.start_ms, d=e.duration_ms,
                         tip=f"<b>round {rnd.index + 1} · n-gram lookup</b><br>{fmt_ms(e.duration_ms)}<br>"
                             f"proposes {_tokens_list(rnd.proposed_text)}")
                )
            elif is_verify_step(e):
                if rnd.proposed:
                    what = (f"checks {len(rnd.proposed)} draft token{'s' if len(rnd.proposed) != 1 else ''} "
                            f"{_tokens_list(rnd.proposed_text)}<br>{rnd.accepted} accepted, "
                            f"{target_label(rnd)} {rnd.correction_text!r}")
                    title = f"round {rnd.index + 1} · verify pass ({len(rnd.proposed) + 1} positions)"
                else:
                    what = f"emits {rnd.correction_text!r}"
                    title = f"token {rnd.index + 1} · target pass" if trace.config.mode == "autoregressive" else \
                        f"round {rnd.index + 1} · target pass (no draft)"
                row = "target"
                if e.kind == "prefill":
                    title += f", which also reads the prompt ({len(e.tokens) - len(rnd.proposed)} tokens)"
                    row = "prefill"
                rows[row].append(
                    dict(lane="target", s=e.start_ms, d=e.duration_ms,
                         tip=f"<b>{title}</b><br>{fmt_ms(e.duration_ms)} "
                             f"({e.start_ms:.1f}–{e.end_ms:.1f} ms)<br>{what}")
                )
    return rows


def _lanes_for(trace: Trace) -> list[str]:
    return ["draft", "target"] if trace.config.mode == "speculative" else ["target"]


def add_timeline(fig: go.Figure, trace: Trace, row: int | None = None, legend: bool = True,
                 label_prefix: str = "") -> None:
    """Draw ``trace``'s lanes into ``fig`` (at subplot ``row`` if given)."""
    where = dict(row=row, col=1) if row else {}
    lanes = _lanes_for(trace)
    ys = {lane: i for i, lane in enumerate(reversed(lanes))}  # first lane on top
    summary = live_summary(trace)
    rows = _bar_rows(trace)

    def bar(name, items, color, width, opacity=1.0, pattern=None, show=True, group=None):
        items = [it for it in items if it["lane"] in ys]
        if not items and not legend:
            return
        fig.add_trace(
            go.Bar(
                orientation="h",
                name=name,
                legendgroup=group or name,
                showlegend=legend and show,
                y=[ys[it["lane"]] for it in items],
                x=[max(it["d"], 0.0) for it in items],
                base=[it["s"] for it in items],
                width=width,
                marker=dict(color=color, opacity=opacity, line=dict(width=0),
                            pattern=pattern or {}),
                hovertext=[it["tip"] for it in items],
                hoverinfo="text",
                hoverlabel=dict(align="left"),
            ),
            **where,
        )

    bar("Draft pass", rows["draft"], DRAFT, 0.62)
    bar("Target pass", rows["target"], TARGET, 0.62)
    bar("Prefill", rows["prefill"], PENDING, 0.62, opacity=0.55)

    # waiting, drawn: a thinner hatched rail wherever a lane runs no forward pass
    idle = []
    for lane in lanes:
        other = busy_intervals(trace, "target" if lane == "draft" else "draft")
        for s, e in idle_intervals(trace, lane):
            d = e - s
            o = _overlap((s, e), other)
            why = f"waiting while the {'target' if lane == 'draft' else 'draft'} runs ({fmt_ms(o)})" if o > 0.05 * d \
                else "sampling, rollback and bookkeeping"
            idle.append(dict(lane=lane, s=s, d=d,
                             tip=f"<b>{lane} idle</b><br>{fmt_ms(d)} ({s:.1f}–{e:.1f} ms)<br>{why}"))
    bar("Waiting", idle, "rgba(0,0,0,0)", 0.34,
        pattern=dict(shape="/", fgcolor=IDLE, bgcolor="rgba(154,154,154,0.12)", size=7, solidity=0.35))

    # round boundaries: one dotted line per round start, labelled R1, R2, ... (thinned out)
    rounds = [r for r in trace.rounds if r.events]
    if rounds and trace.config.mode == "speculative":
        xs, ys_line = [], []
        top = len(lanes) - 0.5
        for r in rounds:
            xs += [r.start_ms, r.start_ms, None]
            ys_line += [-0.5, top, None]
        fig.add_trace(
            go.Scatter(x=xs, y=ys_line, mode="lines", name="Round start",
                       line=dict(color=PENDING, width=1, dash="dot"), hoverinfo="skip",
                       showlegend=False),  # labelled R1, R2, ... instead
            **where,
        )
        gap = max(trace.wall_ms, 1.0) / 18  # at most ~18 labels, never overlapping
        labelled, last = [], -math.inf
        for r in rounds:
            if r.start_ms - last >= gap:
                labelled.append(r)
                last = r.start_ms
        fig.add_trace(
            go.Scatter(
                x=[r.start_ms for r in labelled], y=[top] * len(labelled), mode="text",
                text=[f"R{r.index + 1}" for r in labelled], textposition="top right",
                textfont=dict(size=11, color=PENDING), hoverinfo="skip", showlegend=False,
            ),
            **where,
        )

    tick = []
    for lane in reversed(lanes):
        frac = summary.get(f"{lane}_idle_fraction")
        name = f"{label_prefix}{lane.capitalize()}"
        tick.append(f"<b>{name}</b><br>idle {fmt_pct(frac)}" if frac is not None else f"<b>{name}</b>")
    fig.update_yaxes(tickvals=list(range(len(lanes))), ticktext=tick, range=[-0.6, len(lanes) - 0.25],
                     showgrid=False, zeroline=False, fixedrange=True, **where)


def _base_layout(fig: go.Figure, height: int, x_max: float, title: str | None) -> None:
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
    fig.update_xaxes(range=[0, max(x_max, 1.0) * 1.02], ticksuffix=" ms", separatethousands=True,
                     showgrid=True, zeroline=False)


def timeline_figure(trace: Trace, x_max: float | None = None, height: int = 240,
                    title: str | None = None) -> go.Figure:
    """Draft and target lanes on one millisecond axis (real engine time since the start):
    forward passes as bars, waiting hatched, round starts dotted and labelled, the idle
    fraction of each lane by its name."""
    fig = go.Figure()
    add_timeline(fig, trace)
    _base_layout(fig, height, x_max if x_max is not None else trace.wall_ms, title)
    fig.update_layout(margin=dict(b=28))
    return fig


def race_figure(sd: Trace, ar: Trace | None, height: int = 380) -> go.Figure:
    """Speculative (draft + target) above autoregressive (target alone), one shared
    time axis, each run's finish marked."""
    sd_s = live_summary(sd)
    titles = [f"Speculative, γ={sd.config.gamma}: {sd_s['new_tokens']} tokens in {fmt_ms(sd.wall_ms)}"]
    if ar is not None:
        ar_s = live_summary(ar)
        titles.append(f"Autoregressive, target alone: {ar_s['new_tokens']} tokens in {fmt_ms(ar.wall_ms)}")
    else:
        titles.append("Autoregressive, target alone: not run yet")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.2,
                        row_heights=[2, 1.15], subplot_titles=titles)
    add_timeline(fig, sd, row=1, legend=False)  # the timeline above carries the legend
    if ar is not None:
        add_timeline(fig, ar, row=2, legend=False)
    x_max = max(sd.wall_ms, ar.wall_ms if ar is not None else 0.0)
    _base_layout(fig, height, x_max, None)
    fig.update_layout(margin=dict(t=34), showlegend=False)
    fig.update_annotations(font=dict(size=14), xanchor="left", x=0)
    for row, tr in ((1, sd), (2, ar)):
        if tr is None or not tr.rounds:
            continue
        fig.add_vline(x=tr.wall_ms, line=dict(color=ACCEPTED if tr is sd else TARGET, width=2), row=row, col=1)
    fig.update_xaxes(title=dict(text="real engine time since start (ms), same scale for both", font=dict(size=13)),
                     row=2, col=1)
    return fig


# --- acceptance and history ------------------------------------------------------------


def acceptance_figure(trace: Trace, height: int = 270) -> go.Figure:
    """Per-position acceptance: of the rounds that drafted position i, the share that kept it."""
    rates = live_summary(trace).get("per_position_acceptance") or []
    xs = [str(i + 1) for i in range(len(rates))]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(x=xs, y=rates, name="measured", marker=dict(color=ACCEPTED),
               text=[fmt_pct(r) for r in rates], textposition="outside", cliponaxis=False,
               hovertemplate="draft position %{x}: %{y:.0%} of the rounds that drafted it kept it<extra></extra>")
    )
    if len(rates) > 1 and rates[0] > 0:
        geo = [rates[0] ** (i + 1) for i in range(len(rates))]
        fig.add_trace(
            go.Scatter(x=xs, y=geo, mode="lines+markers", name="if independent: p₁ⁱ",
                       line=dict(color=PENDING, dash="dot", width=2), marker=dict(size=7, symbol="diamond"),
                       hovertemplate="position %{x}: %{y:.0%} if each token survived independently<extra></extra>")
        )
    fig.update_layout(
        height=height, margin=dict(l=8, r=8, t=36, b=44), font=dict(size=FONT_SIZE), bargap=0.25,
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, font=dict(size=13)),
        showlegend=len(rates) > 1,
    )
    fig.update_yaxes(range=[0, 1.15], tickformat=".0%", fixedrange=True)
    fig.update_xaxes(title=dict(text="draft position in the round", font=dict(size=13)), type="category",
                     fixedrange=True)
    return fig


HISTORY_COLUMNS = (
    "run", "pair", "prompt kind", "gamma", "temperature", "top_p", "max new tokens", "seed", "new tokens",
    "rounds", "tok/s", "acceptance", "mean acceptance length", "cost ratio c", "draft idle", "target idle",
    "AR tok/s", "speedup", "identical",
)


def history_row(trace: Trace, run: int, kind: str = "custom", ar: Trace | None = None,
                speedup: float | None = None, identical: bool | None = None) -> dict[str, Any]:
    """One row of the run-history table for a finished (or stopped) run."""
    s = live_summary(trace)
    cfg = trace.config
    ar_tps = live_summary(ar)["tokens_per_second"] if ar is not None else None
    return {
        "run": run,
        "pair": f"{cfg.draft} → {cfg.target}",
        "prompt kind": kind,
        "gamma": cfg.gamma,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "max new tokens": cfg.max_new_tokens,
        "seed": cfg.seed,
        "new tokens": s["new_tokens"],
        "rounds": s["rounds"],
        "tok/s": round(s["tokens_per_second"], 2),
        "acceptance": None if s["acceptance_rate"] is None else round(s["acceptance_rate"], 4),
        "mean acceptance length": round(s["mean_acceptance_length"], 3),
        "cost ratio c": None if s["cost_ratio_c"] is None else round(s["cost_ratio_c"], 4),
        "draft idle": round(s["draft_idle_fraction"], 4),
        "target idle": round(s["target_idle_fraction"], 4),
        "AR tok/s": None if ar_tps is None else round(ar_tps, 2),
        "speedup": None if speedup is None else round(speedup, 3),
        "identical": identical,
    }


def history_figure(rows: list[dict[str, Any]], height: int = 270) -> go.Figure:
    """tok/s against gamma for every run in the history, one colour per prompt kind,
    with the autoregressive baselines as hollow marks."""
    fig = go.Figure()
    kinds = sorted({r["prompt kind"] for r in rows})
    colors = [ACCEPTED, TARGET, DRAFT, REJECTED, "#CC79A7", "#56B4E9", "#F0E442", PENDING]
    for i, kind in enumerate(kinds):
        rs = [r for r in rows if r["prompt kind"] == kind]
        fig.add_trace(go.Scatter(
            x=[r["gamma"] for r in rs], y=[r["tok/s"] for r in rs], mode="markers", name=kind,
            marker=dict(size=13, color=colors[i % len(colors)], line=dict(width=1, color="white")),
            customdata=[[r["run"], fmt_pct(r["acceptance"])] for r in rs],
            hovertemplate="run %{customdata[0]} · γ=%{x}: %{y:.1f} tok/s, acceptance %{customdata[1]}<extra>"
                          + kind + "</extra>",
        ))
    ar = [r for r in rows if r.get("AR tok/s") is not None]
    if ar:
        fig.add_trace(go.Scatter(
            x=[r["gamma"] for r in ar], y=[r["AR tok/s"] for r in ar], mode="markers",
            name="target alone (AR)",
            marker=dict(size=12, symbol="circle-open", color=PENDING, line=dict(width=2)),
            hovertemplate="autoregressive baseline: %{y:.1f} tok/s<extra></extra>",
        ))
    fig.update_layout(height=height, margin=dict(l=8, r=8, t=36, b=44), font=dict(size=FONT_SIZE),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, font=dict(size=13)))
    fig.update_xaxes(title=dict(text="γ (draft length)", font=dict(size=13)), dtick=1)
    fig.update_yaxes(title=dict(text="tokens / s", font=dict(size=13)), rangemode="tozero")
    return fig
