"""The same run under three schedules: serial, PEARL and SSD, one above the other on one
shared millisecond axis, each schedule's finish marked. Pure: a function of the replays."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.figures.palette import ACCEPTED, DRAFT, TARGET
from specviz.figures.timeline import base_layout, add_timeline
from specviz.i18n import N_, Translator

FINISH = {"serial": TARGET, "pearl": DRAFT, "ssd": ACCEPTED}


def schedules_figure(results: dict, titles: dict[str, str], axis_title: str, height: int = 560,
                     tr: Translator = N_) -> go.Figure:
    """``results``: name -> ScheduleResult (specviz.schedules); ``titles``: name -> subplot title;
    ``tr`` translates the lanes, legend and hover text (default: English)."""
    names = list(results)
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=[titles[n] for n in names])
    axis = max(r.wall_ms for r in results.values())
    for row, name in enumerate(names, start=1):
        add_timeline(fig, results[name].trace, row=row, legend=row == 1, tr=tr, axis_ms=axis)
        fig.add_vline(x=results[name].wall_ms, line=dict(color=FINISH.get(name, TARGET), width=2), row=row, col=1)
    base_layout(fig, height, axis, None)
    fig.update_layout(margin=dict(t=60))
    fig.update_annotations(font=dict(size=14), xanchor="left", x=0)
    fig.update_xaxes(title=dict(text=axis_title, font=dict(size=13)), row=len(names), col=1)
    return fig
