"""The theory explorer's figures and the verify-cost curve. Pure: functions of α, c, γ, a
measured curve (rows of ``specviz.measure.forward_costs.measure``) and, optionally, the user's own run.

* ``tokens_per_round_figure``  E[tokens per round] = (1 − α^(γ+1)) / (1 − α) against γ
* ``speedup_figure``           the expected speedup against γ: the simple formula, and the
                               refined one with a measured verify curve
* ``loss_region_figure``       the α–c plane, the region where speculative decoding loses shaded
* ``cost_curve_figure``        ms of one forward pass against the tokens it reads, per model and batch
* ``run_point``                a run's α (inferred from its tokens per round), c and γ, to mark on them

Every text shown is marked with ``N_`` (``LABELS``); the figures take a ``tr`` that translates
it (the app passes its page translator; the default leaves it English).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.analysis import theory
from specviz.analysis.metrics import live_summary, model_gamma
from specviz.figures.palette import (
    ACCEPTED,
    DRAFT,
    FONT_SIZE,
    PENDING,
    REJECTED,
    TARGET,
)
from specviz.record.i18n import N_, Translator
from specviz.record.run_trace import Trace

LEGEND = dict(orientation="h", yanchor="bottom", y=1.02, x=0, font=dict(size=13))
MARGIN = dict(l=8, r=12, t=40, b=48)
LOSS_FILL = "rgba(213, 94, 0, 0.16)"  # REJECTED, translucent: the losing region
BATCH_DASH = {1: "solid", 4: "dash", 16: "dot"}
BATCH_SYMBOL = {1: "circle", 4: "square", 16: "diamond"}

LABELS = {
    "gamma_axis": N_("γ · draft length"),
    "tokens_axis": N_("expected tokens per round"),
    "speedup_axis": N_("expected speedup (× target alone)"),
    "alpha_axis": N_("α · per-token acceptance"),
    "c_axis": N_("c · draft pass ÷ target pass"),
    "tokens_curve": N_("E[tokens per round] at α = {alpha:.2f}"),
    "ceiling": N_("limit 1 / (1 − α) = {limit:.2f}"),
    "simple": N_("simple formula (verify = one target step)"),
    "refined": N_("with the measured verify curve"),
    "breakeven": N_("break-even (×1)"),
    "chosen": N_("γ = {gamma}"),
    "best": N_("best γ = {gamma}"),
    "run": N_("your run: γ = {gamma}, α ≈ {alpha:.2f}"),
    "run_curve": N_("at your run's α and c"),
    "run_measured": N_("your run, measured"),
    "loses": N_("speculative decoding loses (α ≤ c)"),
    "refined_boundary": N_("break-even with the measured verify curve"),
    "sliders": N_("the sliders: α = {alpha:.2f}, c = {c:.2f}"),
    "ms_axis": N_("one forward pass (ms)"),
    "k_axis": N_("new tokens per pass (k = γ + 1 in a verify pass)"),
    "draft": N_("draft"),
    "target": N_("target"),
    "batch": N_("batch {batch}"),
    "pass_hover": N_("k = %{x}: %{y:.1f} ms"),  # the curves' hover
}


def _labels(tr: Translator) -> dict[str, str]:
    return {key: tr(text) for key, text in LABELS.items()}


@dataclass(frozen=True)
class RunPoint:
    """A run on the curves: its γ, the α its tokens per round imply, its c, what it
    measured (tokens per round, and the speedup over the target alone when it was raced)."""

    gamma: int
    alpha: float
    c: float
    tokens_per_round: float
    speedup: float | None = None


def run_point(trace: Trace | None, speedup: float | None = None) -> RunPoint | None:
    """The run's point: γ (the constant one, or the mean drafted length under the heuristic
    or confidence policy), α from its mean acceptance length (``theory.alpha_from_mean_length``), c its
    measured cost ratio (0 with the n-gram drafter, which runs no draft model). None
    before the run has a round, or for a target-alone run."""
    if trace is None or not trace.rounds or trace.config.mode != "speculative":
        return None
    s = live_summary(trace)
    gamma = max(1, model_gamma(trace))
    length = float(s.get("mean_acceptance_length") or 1.0)
    c = s.get("cost_ratio_c")
    return RunPoint(gamma=gamma, alpha=theory.alpha_from_mean_length(length, gamma),
                    c=float(c) if c is not None else 0.0, tokens_per_round=length, speedup=speedup)


def _layout(fig: go.Figure, height: int) -> go.Figure:
    fig.update_layout(height=height, margin=MARGIN, font=dict(size=FONT_SIZE), legend=LEGEND,
                      hovermode="closest")
    return fig


def tokens_per_round_figure(alpha: float, gamma: int, max_gamma: int = 16, run: RunPoint | None = None,
                            tr: Translator = N_, height: int = 360) -> go.Figure:
    """E[tokens per round] against γ at the slider α, its limit 1 / (1 − α), the slider's γ
    marked; the run's measured tokens per round at its γ, with the curve of its own α."""
    L = _labels(tr)
    top = max(max_gamma, gamma, run.gamma if run else 1)
    gs = list(range(1, top + 1))
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=gs, y=[theory.expected_tokens_per_round(alpha, g) for g in gs], mode="lines+markers",
        name=L["tokens_curve"].format(alpha=alpha), line=dict(color=TARGET, width=3), marker=dict(size=6),
        hovertemplate="γ = %{x}: %{y:.2f}<extra></extra>"))
    if alpha < 1:
        limit = 1 / (1 - alpha)
        if limit <= top + 1:
            fig.add_trace(go.Scatter(x=[1, top], y=[limit, limit], mode="lines", name=L["ceiling"].format(limit=limit),
                                     line=dict(color=PENDING, dash="dot", width=2), hoverinfo="skip"))
    fig.add_trace(go.Scatter(
        x=[gamma], y=[theory.expected_tokens_per_round(alpha, gamma)], mode="markers",
        name=L["chosen"].format(gamma=gamma), marker=dict(size=16, color=TARGET, symbol="circle-open",
                                                          line=dict(width=3)),
        hovertemplate="γ = %{x}: %{y:.2f}<extra></extra>"))
    if run is not None:
        fig.add_trace(go.Scatter(
            x=gs, y=[theory.expected_tokens_per_round(run.alpha, g) for g in gs], mode="lines",
            name=L["run_curve"], line=dict(color=ACCEPTED, dash="dash", width=2), hoverinfo="skip"))
        fig.add_trace(go.Scatter(
            x=[run.gamma], y=[run.tokens_per_round], mode="markers",
            name=L["run"].format(gamma=run.gamma, alpha=run.alpha),
            marker=dict(size=15, color=ACCEPTED, symbol="star", line=dict(width=1, color="white")),
            hovertemplate="γ = %{x}: %{y:.2f} tokens per round<extra></extra>"))
    _layout(fig, height)
    fig.update_xaxes(title=dict(text=L["gamma_axis"], font=dict(size=13)), dtick=1 if top <= 16 else 2,
                     range=[0.5, top + 0.5])
    fig.update_yaxes(title=dict(text=L["tokens_axis"], font=dict(size=13)), rangemode="tozero")
    return fig


def speedup_figure(alpha: float, c: float, gamma: int, max_gamma: int = 16,
                   verify: Callable[[int], float] | None = None, run: RunPoint | None = None,
                   tr: Translator = N_, height: int = 360) -> go.Figure:
    """The expected speedup against γ at the slider α and c: the simple formula, and, with
    ``verify`` (k -> one target pass over k tokens in units of T(1), the measured curve's
    shape), the refined one with t_draft = c; break-even at ×1; the slider's γ and each
    curve's best γ marked; the run's predicted curve and its measured speedup."""
    L = _labels(tr)
    top = max(max_gamma, gamma, run.gamma if run else 1)
    gs = list(range(1, top + 1))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[1, top], y=[1, 1], mode="lines", name=L["breakeven"],
                             line=dict(color=REJECTED, dash="dot", width=2), hoverinfo="skip"))
    curves = [("simple", [theory.expected_speedup(alpha, g, c) for g in gs], TARGET, "solid")]
    if verify is not None:
        curves.append(("refined", [theory.refined_speedup(alpha, g, c, verify) for g in gs], DRAFT, "dash"))
    for key, ys, color, dash in curves:
        fig.add_trace(go.Scatter(x=gs, y=ys, mode="lines+markers", name=L[key], line=dict(color=color, width=3,
                                 dash=dash), marker=dict(size=6), hovertemplate="γ = %{x}: ×%{y:.2f}<extra></extra>"))
        best = max(gs, key=lambda g: ys[g - 1])
        fig.add_trace(go.Scatter(x=[best], y=[ys[best - 1]], mode="markers+text", showlegend=False,
                                 text=[L["best"].format(gamma=best)], textposition="top center",
                                 marker=dict(size=14, color=color, symbol="triangle-up"),
                                 hovertemplate="γ = %{x}: ×%{y:.2f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[gamma], y=[theory.expected_speedup(alpha, gamma, c)], mode="markers",
                             name=L["chosen"].format(gamma=gamma),
                             marker=dict(size=16, color=TARGET, symbol="circle-open", line=dict(width=3)),
                             hovertemplate="γ = %{x}: ×%{y:.2f}<extra></extra>"))
    if run is not None:
        fig.add_trace(go.Scatter(x=gs, y=[theory.expected_speedup(run.alpha, g, run.c) for g in gs], mode="lines",
                                 name=L["run_curve"], line=dict(color=ACCEPTED, dash="dash", width=2),
                                 hovertemplate="γ = %{x}: ×%{y:.2f}<extra></extra>"))
        predicted = theory.expected_speedup(run.alpha, run.gamma, run.c)
        fig.add_trace(go.Scatter(x=[run.gamma], y=[predicted], mode="markers",
                                 name=L["run"].format(gamma=run.gamma, alpha=run.alpha),
                                 marker=dict(size=15, color=ACCEPTED, symbol="star", line=dict(width=1, color="white")),
                                 hovertemplate="γ = %{x}: predicted ×%{y:.2f}<extra></extra>"))
        if run.speedup is not None:
            fig.add_trace(go.Scatter(x=[run.gamma], y=[run.speedup], mode="markers", name=L["run_measured"],
                                     marker=dict(size=13, color=ACCEPTED, symbol="x", line=dict(width=1)),
                                     hovertemplate="γ = %{x}: measured ×%{y:.2f}<extra></extra>"))
    _layout(fig, height)
    highest = max(max(y for y in trace.y if y is not None) for trace in fig.data if trace.y is not None)
    fig.update_xaxes(title=dict(text=L["gamma_axis"], font=dict(size=13)), dtick=1 if top <= 16 else 2,
                     range=[0.5, top + 0.5])
    fig.update_yaxes(title=dict(text=L["speedup_axis"], font=dict(size=13)), range=[0, max(highest, 1.0) * 1.18])
    return fig


def refined_boundary(verify: Callable[[int], float], cs: Iterable[float] | None = None,
                     max_gamma: int = 32) -> list[tuple[float, float]]:
    """(c, the largest losing α) along c with the measured curve's shape (T(1) = 1)."""
    cs = list(cs) if cs is not None else [i / 50 for i in range(51)]
    return [(c, theory.breakeven_alpha_refined(c, verify, max_gamma)) for c in cs]


def loss_region_figure(alpha: float, c: float, run: RunPoint | None = None,
                       boundary: list[tuple[float, float]] | None = None,
                       tr: Translator = N_, height: int = 420) -> go.Figure:
    """The α–c plane (c across, α up): the triangle α ≤ c where no γ gains shaded; with a
    measured verify curve, its (higher) break-even line; the sliders' point and the run's."""
    L = _labels(tr)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1, 1, 0], y=[0, 1, 0, 0], mode="lines", fill="toself", fillcolor=LOSS_FILL,
                             line=dict(color=REJECTED, width=2), name=L["loses"], hoverinfo="skip"))
    if boundary:
        fig.add_trace(go.Scatter(x=[p[0] for p in boundary], y=[p[1] for p in boundary], mode="lines",
                                 name=L["refined_boundary"], line=dict(color=DRAFT, width=3, dash="dash"),
                                 hovertemplate="c = %{x:.2f}: loses for α ≤ %{y:.2f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[c], y=[alpha], mode="markers", name=L["sliders"].format(alpha=alpha, c=c),
                             marker=dict(size=16, color=TARGET, symbol="circle-open", line=dict(width=3)),
                             hovertemplate="c = %{x:.2f}, α = %{y:.2f}<extra></extra>"))
    if run is not None:
        fig.add_trace(go.Scatter(x=[min(run.c, 1.0)], y=[run.alpha], mode="markers",
                                 name=L["run"].format(gamma=run.gamma, alpha=run.alpha),
                                 marker=dict(size=15, color=ACCEPTED, symbol="star", line=dict(width=1, color="white")),
                                 hovertemplate="c = %{x:.2f}, α = %{y:.2f}<extra></extra>"))
    _layout(fig, height)
    fig.update_xaxes(title=dict(text=L["c_axis"], font=dict(size=13)), range=[0, 1], constrain="domain")
    fig.update_yaxes(title=dict(text=L["alpha_axis"], font=dict(size=13)), range=[0, 1.02])
    return fig


def cost_curve_figure(rows: Iterable[dict[str, Any]], tr: Translator = N_,
                      height: int = 420) -> go.Figure:
    """One forward pass's ms against the new tokens it reads: the draft on the left, the
    target on the right, one line per batch size (dash and marker tell them apart), k on a
    log-2 axis so 1, 2, 4, ..., 32 lie evenly."""
    L = _labels(tr)
    series: dict[tuple[str, int], dict[int, float]] = {}
    for r in sorted(rows, key=lambda r: (r["model"], int(r["batch"]), int(r["tokens"]))):
        series.setdefault((str(r["model"]), int(r["batch"])), {})[int(r["tokens"])] = float(r["ms"])
    models = [m for m in ("draft", "target") if any(key[0] == m for key in series)]
    fig = make_subplots(rows=1, cols=max(1, len(models)), subplot_titles=[L[m] for m in models],
                        horizontal_spacing=0.08)
    ks = sorted({k for curve in series.values() for k in curve}) or [1]
    for col, model in enumerate(models, start=1):
        color = TARGET if model == "target" else DRAFT
        for (m, batch), curve in series.items():
            if m != model:
                continue
            name = L["batch"].format(batch=batch)
            fig.add_trace(go.Scatter(
                x=list(curve), y=list(curve.values()), mode="lines+markers", name=name, legendgroup=name,
                showlegend=False, line=dict(color=color, width=3, dash=BATCH_DASH.get(batch, "dashdot")),
                marker=dict(size=8, symbol=BATCH_SYMBOL.get(batch, "triangle-up")),
                hovertemplate=f"{L[model]} · {name} · " + L["pass_hover"] + "<extra></extra>"), row=1, col=col)
        fig.update_xaxes(type="log", tickvals=ks, ticktext=[str(k) for k in ks],
                         range=[math.log10(min(ks)) - 0.08, math.log10(max(ks)) + 0.08], row=1, col=col,
                         title=dict(text=L["k_axis"], font=dict(size=13)))
        fig.update_yaxes(rangemode="tozero", row=1, col=col,
                         title=dict(text=L["ms_axis"], font=dict(size=13)) if col == 1 else None)
    for batch in sorted({key[1] for key in series}):  # one legend entry per batch, in a neutral grey
        name = L["batch"].format(batch=batch)
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines+markers", name=name, legendgroup=name,
                                 line=dict(color=PENDING, width=3, dash=BATCH_DASH.get(batch, "dashdot")),
                                 marker=dict(size=8, symbol=BATCH_SYMBOL.get(batch, "triangle-up"))), row=1, col=1)
    _layout(fig, height)
    fig.update_layout(margin=dict(l=8, r=12, t=84, b=48), legend=dict(LEGEND, y=1.12))
    fig.update_annotations(font=dict(size=14))
    return fig
