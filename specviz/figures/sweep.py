"""The γ sweep's figures (specviz.measure.sweep): tokens per second against γ, and acceptance against γ.

Pure: functions of a ``SweepResult`` (duck-typed: its ``prompts``, ``rows``, ``baseline``,
``alpha``, ``best_gamma_*`` and ``predicted_speedup``), no Streamlit, no model. The text
goes through ``tr`` (the page passes its translator; English by default), and prompts
are named by ``labels`` (prompt -> short name) where given.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.analysis import theory
from specviz.figures.palette import FONT_SIZE, PENDING, SERIES
from specviz.record.i18n import N_, Translator

LEGEND = dict(orientation="h", yanchor="bottom", y=1.02, x=0, font=dict(size=13))
MARGIN = dict(l=8, r=8, t=40, b=48)
LABEL_CHARS = 28
AR_HALF_WIDTH = 0.4  # the target-alone level line reaches this far past the first and last γ


def prompt_label(prompt: str, labels: dict[str, str] | None = None) -> str:
    """A prompt's short name: its label when given, else its first words."""
    if labels and prompt in labels:
        return labels[prompt]
    flat = " ".join(prompt.split())
    return flat if len(flat) <= LABEL_CHARS else flat[: LABEL_CHARS - 1].rstrip() + "…"


def _shown_label(prompt: str, labels: dict[str, str] | None = None) -> str:
    """``prompt_label`` escaped for plotly (which draws a subset of HTML in legends and hover
    text): a prompt is text, shown as written."""
    return html.escape(prompt_label(prompt, labels), quote=False)


def _colors(result: Any) -> dict[str, str]:
    return {p: SERIES[i % len(SERIES)] for i, p in enumerate(result.prompts)}


def _key(fig: go.Figure, name: str, mode: str, line: dict | None = None, marker: dict | None = None) -> None:
    """A grey legend entry that explains a line or marker style, shared by every prompt."""
    fig.add_trace(go.Scatter(x=[None], y=[None], mode=mode, name=name, line=line, marker=marker,
                             hoverinfo="skip", legendgroup="__styles"))


def sweep_figure(result: Any, labels: dict[str, str] | None = None, tr: Translator = N_,
                 height: int = 460) -> go.Figure:
    """Measured tokens / s against γ for each prompt (the median, with error bars from the
    slowest to the fastest run), the target alone as a dashed level line, the formula's
    curve (baseline × expected speedup from the prompt's measured α and c) dotted, the
    measured best γ as a star and the predicted best γ as an open diamond."""
    fig = go.Figure()
    colors = _colors(result)
    all_gammas = [r["gamma"] for r in result.rows] or list(result.gammas)
    lo, hi = min(all_gammas), max(all_gammas)
    tps = tr(N_("tok/s"))
    for prompt in result.prompts:
        rows = sorted((r for r in result.rows if r["prompt"] == prompt), key=lambda r: r["gamma"])
        name, color = _shown_label(prompt, labels), colors[prompt]
        base = result.baseline.get(prompt)
        if rows:
            med = [r["tokens_per_second"] for r in rows]
            fig.add_trace(go.Scatter(
                x=[r["gamma"] for r in rows], y=med, mode="lines+markers", name=name, legendgroup=prompt,
                line=dict(color=color, width=2.5), marker=dict(size=9, color=color),
                error_y=dict(type="data", symmetric=False, color=color, thickness=1.5, width=5,
                             array=[r["tokens_per_second_max"] - m for r, m in zip(rows, med)],
                             arrayminus=[m - r["tokens_per_second_min"] for r, m in zip(rows, med)]),
                customdata=[[r["n"], r["tokens_per_second_min"], r["tokens_per_second_max"]] for r in rows],
                hovertemplate=tr(N_("γ = %{x}: %{y:.1f} tok/s, the median of %{customdata[0]} runs "
                                    "(%{customdata[1]:.1f} to %{customdata[2]:.1f})")) + f"<extra>{name}</extra>",
            ))
        if base:
            fig.add_trace(go.Scatter(
                x=[lo - AR_HALF_WIDTH, hi + AR_HALF_WIDTH], y=[base, base], mode="lines", legendgroup=prompt,
                showlegend=False, line=dict(color=color, width=2, dash="dash"),
                hovertemplate=tr(N_("target alone: %{y:.1f} tok/s")) + f"<extra>{name}</extra>",
            ))
        if base and result.alpha.get(prompt) is not None and result.cost_ratio_c.get(prompt) is not None:
            xs = list(range(lo, hi + 1))
            fig.add_trace(go.Scatter(
                x=xs, y=[base * result.predicted_speedup(prompt, g) for g in xs], mode="lines",
                legendgroup=prompt, showlegend=False, line=dict(color=color, width=2, dash="dot"),
                hovertemplate=tr(N_("formula at γ = %{x}: %{y:.1f} tok/s")) + f"<extra>{name}</extra>",
            ))
            refined = [(r["gamma"], result.refined_speedup(prompt, r["gamma"])) for r in rows]
            refined = [(g, sp) for g, sp in refined if sp is not None]
            if refined:
                fig.add_trace(go.Scatter(
                    x=[g for g, _sp in refined], y=[base * sp for _g, sp in refined], mode="lines+markers",
                    legendgroup=prompt, showlegend=False, line=dict(color=color, width=1.5, dash="dashdot"),
                    marker=dict(size=6, symbol="x", color=color),
                    hovertemplate=tr(N_("refined formula at γ = %{x}: %{y:.1f} tok/s")) + f"<extra>{name}</extra>",
                ))
            if (g := result.best_gamma_predicted.get(prompt)) is not None:
                fig.add_trace(go.Scatter(
                    x=[g], y=[base * result.predicted_speedup(prompt, g)], mode="markers", legendgroup=prompt,
                    showlegend=False, marker=dict(symbol="diamond-open", size=17, color=color, line=dict(width=3)),
                    hovertemplate=tr(N_("best γ predicted: %{x}")) + f"<extra>{name}</extra>",
                ))
        if (g := result.best_gamma_measured.get(prompt)) is not None:
            best = next(r for r in rows if r["gamma"] == g)
            fig.add_trace(go.Scatter(
                x=[g], y=[best["tokens_per_second"]], mode="markers", legendgroup=prompt, showlegend=False,
                marker=dict(symbol="star", size=20, color=color, line=dict(width=1.5, color="white")),
                hovertemplate=tr(N_("best γ measured: %{x}, %{y:.1f} tok/s")) + f"<extra>{name}</extra>",
            ))
    grey = dict(color=PENDING, width=2)
    _key(fig, tr(N_("measured (median, bars: slowest to fastest)")), "lines+markers", grey, dict(size=8, color=PENDING))
    _key(fig, tr(N_("target alone")), "lines", {**grey, "dash": "dash"})
    _key(fig, tr(N_("formula from the measured α and c")), "lines", {**grey, "dash": "dot"})
    _key(fig, tr(N_("refined formula: the measured verify pass T(γ + 1)")), "lines+markers",
         {**grey, "dash": "dashdot"}, dict(size=6, symbol="x", color=PENDING))
    _key(fig, tr(N_("best γ measured")), "markers", None, dict(symbol="star", size=14, color=PENDING))
    _key(fig, tr(N_("best γ predicted")), "markers", None,
         dict(symbol="diamond-open", size=13, color=PENDING, line=dict(width=2.5)))
    fig.update_layout(height=height, margin=MARGIN, font=dict(size=FONT_SIZE), legend=LEGEND,
                      hoverlabel=dict(font_size=14))
    fig.update_xaxes(title=dict(text=tr(N_("γ (draft length)")), font=dict(size=13)), dtick=1,
                     range=[lo - AR_HALF_WIDTH - 0.2, hi + AR_HALF_WIDTH + 0.2])
    fig.update_yaxes(title=dict(text=tps, font=dict(size=13)), rangemode="tozero")
    return fig


def acceptance_vs_gamma_figure(result: Any, labels: dict[str, str] | None = None,
                               tr: Translator = N_, height: int = 340) -> go.Figure:
    """Two panels against γ, per prompt: the acceptance rate (accepted ÷ drafted), which
    falls as γ grows even at a constant α, and the tokens per round, which rise and level
    off; each beside the formula's curve from the prompt's pooled α (dotted)."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=[tr(N_("Acceptance rate")), tr(N_("Tokens per round"))])
    colors = _colors(result)
    all_gammas = [r["gamma"] for r in result.rows] or list(result.gammas)
    lo, hi = min(all_gammas), max(all_gammas)
    xs = list(range(lo, hi + 1))
    for prompt in result.prompts:
        rows = sorted((r for r in result.rows if r["prompt"] == prompt and r["acceptance_rate"] is not None),
                      key=lambda r: r["gamma"])
        name, color = _shown_label(prompt, labels), colors[prompt]
        if not rows:
            continue
        gs = [r["gamma"] for r in rows]
        fig.add_trace(go.Scatter(
            x=gs, y=[r["acceptance_rate"] for r in rows], mode="lines+markers", name=name, legendgroup=prompt,
            line=dict(color=color, width=2.5), marker=dict(size=9, color=color),
            hovertemplate=tr(N_("γ = %{x}: %{y:.0%} of the drafted tokens accepted")) + f"<extra>{name}</extra>",
        ), row=1, col=1)
        fig.add_trace(go.Scatter(
            x=gs, y=[r["mean_acceptance_length"] for r in rows], mode="lines+markers", name=name,
            legendgroup=prompt, showlegend=False, line=dict(color=color, width=2.5), marker=dict(size=9, color=color),
            hovertemplate=tr(N_("γ = %{x}: %{y:.2f} tokens per round")) + f"<extra>{name}</extra>",
        ), row=1, col=2)
        alpha = result.alpha.get(prompt)
        if alpha is not None:
            per_round = [theory.expected_tokens_per_round(alpha, g) for g in xs]
            fig.add_trace(go.Scatter(
                x=xs, y=[(e - 1) / g for e, g in zip(per_round, xs)], mode="lines", legendgroup=prompt,
                showlegend=False, line=dict(color=color, width=2, dash="dot"),
                hovertemplate=tr(N_("formula at γ = %{x}: %{y:.0%}")) + f"<extra>{name}</extra>",
            ), row=1, col=1)
            fig.add_trace(go.Scatter(
                x=xs, y=per_round, mode="lines", legendgroup=prompt, showlegend=False,
                line=dict(color=color, width=2, dash="dot"),
                hovertemplate=tr(N_("formula at γ = %{x}: %{y:.2f} tokens per round")) + f"<extra>{name}</extra>",
            ), row=1, col=2)
    _key(fig, tr(N_("formula from the pooled α")), "lines", dict(color=PENDING, width=2, dash="dot"))
    fig.update_layout(height=height, margin=dict(MARGIN, t=64), font=dict(size=FONT_SIZE),
                      legend=dict(LEGEND, y=1.12), hoverlabel=dict(font_size=14))
    fig.update_annotations(font=dict(size=14))
    judged = any(r["acceptance_rate"] is not None for r in result.rows)
    if not judged:  # empty axes at the sweep's own γ, and say why they are empty
        for col, y in ((1, 0.5), (2, (hi + 1) / 2)):
            fig.add_annotation(text=tr(N_("no drafted tokens judged yet")), showarrow=False, font=dict(color=PENDING),
                               x=(lo + hi) / 2, y=y, row=1, col=col)
    fig.update_xaxes(title=dict(text=tr(N_("γ (draft length)")), font=dict(size=13)), dtick=1,
                     range=[lo - AR_HALF_WIDTH, hi + AR_HALF_WIDTH])
    fig.update_yaxes(range=[0, 1.05], tickformat=".0%", row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=1, col=2, range=None if judged else [0, hi + 1])
    return fig
