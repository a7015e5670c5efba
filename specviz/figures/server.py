"""A server's own speculative decoding, from successive scrapes of its metrics: acceptance
rate and mean acceptance length per interval over time, and per-position acceptance over
the whole window, beside a local run's when there is one (same definitions:
``specviz.models.prometheus``)."""

from __future__ import annotations

from datetime import datetime

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.figures.palette import ACCEPTED, DRAFT, FONT_SIZE, TARGET
from specviz.models.prometheus import Scrape, SpecDecodeRates, spec_decode_rates
from specviz.record.i18n import N_, Translator


def intervals(scrapes: list[Scrape]) -> list[tuple[float, SpecDecodeRates]]:
    """(end time, rates) of each interval between successive scrapes in which the server
    drafted anything; idle intervals are left out (no rate to show)."""
    out = []
    for before, after in zip(scrapes, scrapes[1:]):
        rates = spec_decode_rates(before, after)
        if rates.drafts > 0:
            out.append((after.at_s, rates))
    return out


def rates_figure(scrapes: list[Scrape], height: int = 360, tr: Translator = N_) -> go.Figure:
    """Acceptance rate (left axis) and mean acceptance length (right axis) per interval."""
    points = intervals(scrapes)
    xs = [datetime.fromtimestamp(t) for t, _ in points]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=xs, y=[r.acceptance_rate for _, r in points], mode="lines+markers",
                             name=tr(N_("Acceptance rate")), line=dict(color=ACCEPTED, width=3)), secondary_y=False)
    fig.add_trace(go.Scatter(x=xs, y=[r.mean_acceptance_length for _, r in points], mode="lines+markers",
                             name=tr(N_("Mean acceptance length (tokens per target pass)")),
                             line=dict(color=TARGET, width=3, dash="dot")), secondary_y=True)
    fig.update_yaxes(title_text=tr(N_("acceptance rate")), range=[0, 1.02], tickformat=".0%", secondary_y=False)
    fig.update_yaxes(title_text=tr(N_("tokens per target pass")), rangemode="tozero", dtick=1, showgrid=False,
                     secondary_y=True)
    fig.update_layout(height=height, margin=dict(l=8, r=8, t=40, b=30), font=dict(size=FONT_SIZE),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, font=dict(size=13)),
                      hovermode="x unified")
    return fig


def per_position_figure(server: list[float], local: list[float] | None = None, height: int = 320,
                        tr: Translator = N_) -> go.Figure:
    """Share of rounds that accepted draft position i: the server's, and a local run's."""
    fig = go.Figure()
    fig.add_trace(go.Bar(x=[i + 1 for i in range(len(server))], y=server, name=tr(N_("Server")),
                         marker_color=TARGET, text=[f"{v:.0%}" for v in server], textposition="outside"))
    if local:
        fig.add_trace(go.Bar(x=[i + 1 for i in range(len(local))], y=local, name=tr(N_("Your last Live run")),
                             marker_color=DRAFT, text=[f"{v:.0%}" for v in local], textposition="outside"))
    fig.update_layout(height=height, barmode="group", margin=dict(l=8, r=8, t=40, b=40), font=dict(size=FONT_SIZE),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, font=dict(size=13)))
    fig.update_xaxes(title_text=tr(N_("draft position")), dtick=1)
    fig.update_yaxes(title_text=tr(N_("accepted")), range=[0, 1.1], tickformat=".0%")
    return fig
