"""Charts beside the timeline: per-position acceptance, and the run history's tok/s against γ."""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go

from specviz.analysis.metrics import METRICS, fmt_pct, position_counts, text
from specviz.figures.palette import ACCEPTED, FONT_SIZE, PENDING, SERIES
from specviz.record.i18n import N_, Translator
from specviz.record.run_trace import Trace

LEGEND = dict(orientation="h", yanchor="bottom", y=1.02, x=0, font=dict(size=13))
AR_LABEL = N_("target alone (AR)")
TREE_LABEL = N_("token tree, at its depth")
AR_HALF_WIDTH = 0.35  # a baseline is drawn across its runs' γ, this far either side


NOT_JUDGED = N_("not judged yet")
NEVER_JUDGED = N_("never judged")


def acceptance_figure(trace: Trace, height: int = 290, tr: Translator = N_) -> go.Figure:
    """Per-position acceptance as vLLM counts it (``metrics.PositionCounts.rate``): accepted at
    draft position i ÷ rounds that drafted position i, with the two counts under each bar
    ("9/12"). A position no round's accepted prefix has reached yet, which the target never
    judged, gets no bar but the words "not judged yet" ("never judged" once the run has
    ended), not a 0% bar. ``tr`` translates the text (default: English)."""
    counts = position_counts(trace.rounds)
    rates = [c.rate for c in counts]
    judged = [c.judged > 0 for c in counts]
    xs = [str(c.position) for c in counts]
    unjudged = tr(NEVER_JUDGED if trace.summary else NOT_JUDGED)
    fig = go.Figure()
    fig.add_trace(
        go.Bar(x=xs, y=[r if j else None for r, j in zip(rates, judged)], name=tr(N_("measured")),
               marker=dict(color=ACCEPTED), text=[fmt_pct(r) if j else "" for r, j in zip(rates, judged)],
               textposition="outside", cliponaxis=False,
               customdata=[[c.accepted, c.drafted, c.judged] for c in counts],
               hovertemplate=tr(N_("draft position %{x}: kept in %{customdata[0]} of the %{customdata[1]} rounds "
                                   "that drafted it (the target judged it in %{customdata[2]})"))
               + "<extra></extra>")
    )
    for i, j in enumerate(judged):
        if not j:  # x by index: on a category axis a number is the category's position
            fig.add_annotation(x=i, y=0, yanchor="bottom", text=unjudged, showarrow=False, textangle=-90,
                               font=dict(size=14, color=PENDING))
    if len(rates) > 1 and rates[0] > 0:
        geo = [rates[0] ** (i + 1) for i in range(len(rates))]
        fig.add_trace(
            go.Scatter(x=xs, y=geo, mode="lines+markers", name=tr(N_("if independent: p₁ⁱ")),
                       line=dict(color=PENDING, dash="dot", width=2), marker=dict(size=7, symbol="diamond"),
                       customdata=[fmt_pct(g) for g in geo],
                       hovertemplate=tr(N_("position %{x}: %{customdata} if each token survived independently"))
                       + "<extra></extra>")
        )
    fig.update_layout(height=height, margin=dict(l=8, r=8, t=36, b=64), font=dict(size=FONT_SIZE), bargap=0.25,
                      legend=LEGEND, showlegend=len(rates) > 1)
    fig.update_yaxes(range=[0, 1.15], tickformat=".0%", fixedrange=True)
    position, counted = tr(N_("draft position in the round")), tr(N_("kept / drafted"))
    title = f"{position} · {counted}"
    fig.update_xaxes(title=dict(text=title, font=dict(size=13)),
                     type="category", fixedrange=True, tickvals=xs,
                     ticktext=[f"{c.position}<br>{c.accepted}/{c.drafted}" for c in counts])
    return fig


TPS = METRICS["tokens_per_second"].column
AR_TPS = METRICS["ar_tokens_per_second"].column
ACCEPTANCE = METRICS["acceptance_rate"].column


def _example_name(example: str, tr: Translator = N_) -> str:
    """An example prompt's name (marked in specviz.ui.chrome) or "custom", translated and
    escaped for plotly's HTML subset."""
    return html.escape(tr(example), quote=False)


def _run_points(rows: list[dict[str, Any]], example: str, color: str, tr: Translator = N_,
                tree: bool = False) -> go.Scatter:
    """An example's runs as points: its chains as circles, or (``tree``) its token trees as
    diamonds at their depth, in the legend once under TREE_LABEL."""
    name = _example_name(example, tr)
    hover = (tr(N_("run %{customdata[0]} · tree %{customdata[3]}, γ=%{x}: %{customdata[1]} tok/s, acceptance "
                   "%{customdata[2]}")) if tree else
             tr(N_("run %{customdata[0]} · γ=%{x}: %{customdata[1]} tok/s, acceptance %{customdata[2]}")))
    return go.Scatter(
        x=[r["gamma"] for r in rows], y=[r[TPS] for r in rows], mode="markers", name=name,
        legendgroup=example, showlegend=not tree,
        marker=dict(size=15 if tree else 13, color=color, symbol="diamond" if tree else "circle",
                    line=dict(width=1, color="white")),
        customdata=[[r["run"], text("tokens_per_second", r[TPS]), text("acceptance_rate", r[ACCEPTANCE]),
                     r.get("tree", "")] for r in rows],
        # plotly's %{...} placeholders, not Python's: the template is never .format()ted
        hovertemplate=hover + f"<extra>{name}</extra>",
    )


def _baseline_segments(rows: list[dict[str, Any]], example: str, color: str,
                       tr: Translator = N_) -> go.Scatter | None:
    """The example's target-alone speeds as dashed level lines across the γ of the runs
    raced against them (γ does not change the target-alone run), drawn over the runs' points."""
    levels: dict[float, list[int]] = {}
    for r in rows:
        if r.get(AR_TPS) is not None:
            levels.setdefault(r[AR_TPS], []).append(r["gamma"])
    if not levels:
        return None
    xs, ys, tips = [], [], []
    for level, gammas in levels.items():
        xs += [min(gammas) - AR_HALF_WIDTH, max(gammas) + AR_HALF_WIDTH, None]
        ys += [level, level, None]
        tips += [text("ar_tokens_per_second", level)] * 2 + [None]
    name = _example_name(example, tr)
    return go.Scatter(
        x=xs, y=ys, mode="lines", name=f"{tr(AR_LABEL)} · {name}", legendgroup=AR_LABEL, showlegend=False,
        line=dict(color=color, width=2.5, dash="dash"), customdata=tips,
        hovertemplate=tr(N_("target alone: %{customdata} tok/s")) + f"<extra>{name}</extra>",
    )


def history_figure(rows: list[dict[str, Any]], height: int = 270, tr: Translator = N_) -> go.Figure:
    """tok/s against γ for every run in the history, one colour per example prompt (a token
    tree as a diamond at its depth), with each example's target-alone speed as a dashed level
    line in its colour, on top.
    ``tr`` translates the text (default: English)."""
    fig = go.Figure()
    examples = sorted({r["example"] for r in rows})
    colors = {ex: SERIES[i % len(SERIES)] for i, ex in enumerate(examples)}
    for ex in examples:
        chains = [r for r in rows if r["example"] == ex and not r.get("tree")]
        trees = [r for r in rows if r["example"] == ex and r.get("tree")]
        if chains:
            fig.add_trace(_run_points(chains, ex, colors[ex], tr))
        if trees:  # in the legend under the example's name only when it has no chain
            fig.add_trace(_run_points(trees, ex, colors[ex], tr, tree=True).update(showlegend=not chains))
    if any(r.get("tree") for r in rows):  # the diamonds' meaning, once
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=tr(TREE_LABEL), hoverinfo="skip",
                                 marker=dict(size=13, color=PENDING, symbol="diamond")))
    lines = [_baseline_segments([r for r in rows if r["example"] == ex], ex, colors[ex], tr) for ex in examples]
    lines = [line for line in lines if line is not None]
    if lines:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=tr(AR_LABEL), legendgroup=AR_LABEL,
                                 line=dict(color=PENDING, width=2.5, dash="dash"), hoverinfo="skip"))
        for line in lines:
            fig.add_trace(line)
    fig.update_layout(height=height, margin=dict(l=8, r=8, t=36, b=44), font=dict(size=FONT_SIZE), legend=LEGEND)
    axis = N_("γ (draft length; a tree's depth)") if any(r.get("tree") for r in rows) else N_("γ (draft length)")
    fig.update_xaxes(title=dict(text=tr(axis), font=dict(size=13)), dtick=1)
    fig.update_yaxes(title=dict(text=tr(N_("tokens / s")), font=dict(size=13)), rangemode="tozero")
    return fig
