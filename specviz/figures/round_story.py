"""The p/q inspector's charts: one verified position's top tokens under the draft's q and the
target's p side by side, the residual norm(max(0, p - q)) the correction was drawn from,
and the draw u against min(1, p/q). Pure: functions of a ``specviz.analysis.round_story.Position``.

Every text is English marked with ``N_``; the functions take a ``tr`` that translates it
(the app passes its ``_``; the default keeps English). The drafted token is marked by more
than colour: a thick outline, a bold ▼ above it and its name.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from specviz.analysis.marks import printable
from specviz.analysis.round_story import Candidate, Position
from specviz.figures.palette import ACCEPTED, DRAFT, FONT_SIZE, REJECTED, TARGET
from specviz.record.i18n import N_, Translator

MAX_BARS = 14
LEGEND = dict(orientation="h", yanchor="bottom", y=1.02, x=0, font=dict(size=13))
OUTLINE = "#000000"

LABELS = {
    "q": N_("q · draft"),
    "p": N_("p · target"),
    "drafted": N_("drafted"),
    "axis": N_("probability"),
    "tokens": N_("top tokens at this position (by p)"),
    "residual": N_("norm(max(0, p − q))"),
    "drawn": N_("drawn"),
    "target": N_("target's token"),
    "accept": N_("accept: u < min(1, p/q)"),
    "reject": N_("reject"),
    "u_axis": N_("the uniform draw u in [0, 1)"),
}


def _names(cands: list[Candidate]) -> list[str]:
    """Printable, distinct category names: a text shared by two ids gets the id. HTML-escaped:
    plotly draws a subset of HTML in tick labels and hover text, and a token is text."""
    texts = [html.escape(printable(c.text), quote=False) for c in cands]
    return [f"{t} #{c.id}" if texts.count(t) > 1 else t for t, c in zip(texts, cands)]


def shown(cands: list[Candidate], keep: tuple[int | None, ...] = (), limit: int = MAX_BARS) -> list[Candidate]:
    """The candidates to draw, by p: the ``limit`` largest under p or q, and the ``keep`` ids always."""
    ranked = sorted(cands, key=lambda c: -max(c.p or 0.0, c.q or 0.0, c.residual or 0.0))
    picked = {c.id for c in ranked[:limit]} | {k for k in keep if k is not None}
    return [c for c in cands if c.id in picked]


def _layout(fig: go.Figure, height: int, x_title: str, y_title: str, top: float) -> None:
    fig.update_layout(height=height, margin=dict(l=8, r=8, t=40, b=8), font=dict(size=FONT_SIZE),
                      barmode="group", bargap=0.22, bargroupgap=0.06, legend=LEGEND, hovermode="x unified")
    fig.update_yaxes(title=dict(text=y_title, font=dict(size=13)), range=[0, min(1.0, top * 1.18) or 1.0],
                     tickformat=".0%", fixedrange=True)
    fig.update_xaxes(title=dict(text=x_title, font=dict(size=13)), type="category", fixedrange=True,
                     tickangle=0 if len(fig.data[0].x or ()) <= 10 else -35)


def _mark(fig: go.Figure, x: str, y: float, text: str) -> None:
    fig.add_annotation(x=x, y=y, text=f"<b>▼ {text}</b>", showarrow=False, yanchor="bottom", yshift=4,
                       font=dict(size=13))


def _labels(tr: Translator) -> dict[str, str]:
    return {k: tr(v) for k, v in LABELS.items()}


def pq_figure(pos: Position, tr: Translator = N_, height: int = 330, drafted_ids: tuple[int, ...] = ()) -> go.Figure:
    """The top tokens at ``pos`` under q (orange) and p (blue), side by side, the drafted token
    outlined and marked ▼ (the target's own token, where it lands here, marked too).
    ``drafted_ids``: every token drafted here (a tree node's children), each marked so."""
    lab = _labels(tr)
    mine = {pos.token, *drafted_ids} - {None}
    cands = shown(pos.candidates, keep=(pos.token, pos.target_token, *drafted_ids))
    names = _names(cands)
    drafted = [c.id in mine for c in cands]
    width = [3 if d else 0 for d in drafted]
    fig = go.Figure()
    if any(c.q is not None for c in cands):
        fig.add_trace(go.Bar(
            x=names, y=[c.q or 0.0 for c in cands], name=lab["q"], marker=dict(color=DRAFT, line=dict(
                color=OUTLINE, width=width)), hovertemplate="%{x}: q = %{y:.4f}<extra></extra>"))
    fig.add_trace(go.Bar(
        x=names, y=[c.p or 0.0 for c in cands], name=lab["p"], marker=dict(color=TARGET, line=dict(
            color=OUTLINE, width=width)), hovertemplate="%{x}: p = %{y:.4f}<extra></extra>"))
    top = max([c.q or 0.0 for c in cands] + [c.p or 0.0 for c in cands] + [0.05])
    for name, c in zip(names, cands):
        if c.id in mine:
            _mark(fig, name, max(c.q or 0.0, c.p or 0.0), lab["drafted"])
        elif c.id == pos.target_token:
            _mark(fig, name, max(c.q or 0.0, c.p or 0.0), lab["target"])
    _layout(fig, height, lab["tokens"], lab["axis"], top)
    return fig


def residual_figure(pos: Position, tr: Translator = N_, height: int = 300) -> go.Figure:
    """The residual norm(max(0, p − q)) at a sampling rejection, the token drawn from it marked ▼."""
    lab = _labels(tr)
    cands = [c for c in pos.candidates if c.residual]
    cands = shown(cands, keep=(pos.target_token,))
    names = _names(cands)
    chosen = [c.id == pos.target_token for c in cands]
    fig = go.Figure(go.Bar(
        x=names, y=[c.residual or 0.0 for c in cands], name=lab["residual"],
        marker=dict(color=TARGET, pattern=dict(shape="/", fgcolor="rgba(255,255,255,0.6)", fillmode="overlay",
                                               solidity=0.2),
                    line=dict(color=OUTLINE, width=[3 if c else 0 for c in chosen])),
        hovertemplate="%{x}: %{y:.4f}<extra></extra>", showlegend=True))
    for name, c in zip(names, cands):
        if c.id == pos.target_token:
            _mark(fig, name, c.residual or 0.0, lab["drawn"])
    _layout(fig, height, lab["tokens"], lab["axis"], max([c.residual or 0.0 for c in cands] + [0.05]))
    return fig


def draw_figure(ratio: float, u: float, tr: Translator = N_, height: int = 170) -> go.Figure:
    """[0, 1) split at min(1, p/q): accept left (green), reject right (red, hatched), each named
    inside its bar; the draw u marked with its value."""
    lab = _labels(tr)
    kept = u < ratio
    fig = go.Figure()
    fig.add_trace(go.Bar(y=[0], x=[ratio], base=[0], orientation="h", name=lab["accept"], width=0.7,
                         marker=dict(color=ACCEPTED), text=[lab["accept"]], textposition="inside",
                         insidetextanchor="middle", textfont=dict(color="white", size=13),
                         hovertemplate=f"0 – {ratio:.4f}<extra></extra>"))
    if ratio < 1:
        fig.add_trace(go.Bar(y=[0], x=[1 - ratio], base=[ratio], orientation="h", name=lab["reject"], width=0.7,
                             marker=dict(color=REJECTED, pattern=dict(shape="x", fgcolor="rgba(255,255,255,0.5)",
                                                                      fillmode="overlay", solidity=0.15)),
                             text=[lab["reject"]], textposition="inside", insidetextanchor="middle",
                             textfont=dict(color="white", size=13), hovertemplate=f"{ratio:.4f} – 1<extra></extra>"))
    fig.add_trace(go.Scatter(x=[u], y=[0.62], mode="markers+text", name="u", text=[f"<b>u = {u:.3f}</b>"],
                             textposition="top center", cliponaxis=False,
                             marker=dict(symbol="triangle-down", size=18, color="white",
                                         line=dict(color=ACCEPTED if kept else REJECTED, width=3)),
                             hovertemplate=f"u = {u:.4f}<extra></extra>"))
    fig.update_layout(height=height, margin=dict(l=8, r=8, t=8, b=8), font=dict(size=FONT_SIZE),
                      barmode="overlay", showlegend=False, uniformtext=dict(minsize=10, mode="hide"))
    fig.update_xaxes(range=[0, 1], title=dict(text=lab["u_axis"], font=dict(size=13)), fixedrange=True)
    fig.update_yaxes(showticklabels=False, fixedrange=True, range=[-0.45, 1.25], showgrid=False, zeroline=False)
    return fig
