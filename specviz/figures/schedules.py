"""The same run under several schedules (serial, PEARL, SSD), one above the other on one
shared millisecond axis, each schedule's finish marked. The axis spans what is compared:
a lane far longer than the others is cut at its end and labelled with its own finish, so
one slow schedule does not squeeze the others into a corner. Pure: a function of the replays."""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.analysis.metrics import fmt_ms
from specviz.figures.palette import ACCEPTED, DRAFT, TARGET
from specviz.figures.timeline import add_timeline, base_layout
from specviz.record.i18n import MILLISECONDS, N_, Translator
from specviz.record.run_trace import Trace

FINISH = {"serial": TARGET, "pearl": DRAFT, "ssd": ACCEPTED}
CUT_RATIO = 2.0  # a lane this many times longer than the next one is cut (uncut, the next one spans half)...
CUT_AT = 1.25  # ...at this many times the next one's length
TOP_MARGIN = 72  # the legend (at the top of the figure) and the first lane's title below it...
LEGEND_ROW = 26  # ...and one row more for a remote target's network entry (5 entries wrap at 760 px)


def axis_span(walls: list[float]) -> float:
    """The shared axis's span (ms): the longest lane's, unless it is more than CUT_RATIO
    times the next longest; then CUT_AT times that one (the longest lane is cut, and its
    title row says where it ends)."""
    ordered = sorted(walls, reverse=True)
    if len(ordered) > 1 and ordered[0] > CUT_RATIO * ordered[1]:
        return CUT_AT * ordered[1]
    return ordered[0] if ordered else 0.0


def schedules_figure(results: dict, titles: dict[str, str], axis_title: str, height: int = 560,
                     tr: Translator = N_) -> go.Figure:
    """``results``: name -> ScheduleResult (specviz.replay.schedules); ``titles``: name -> subplot title;
    ``tr`` translates the lanes, legend and hover text (default: English)."""
    names = list(results)
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=[titles[n] for n in names])
    fig.update_annotations(font=dict(size=14), xanchor="left", x=0)  # the titles, over each lane's left end
    axis = axis_span([r.wall_ms for r in results.values()])
    for row, name in enumerate(names, start=1):
        result = results[name]
        add_timeline(fig, result.trace, row=row, legend=row == 1, tr=tr, axis_ms=axis)
        if result.wall_ms <= axis:
            fig.add_vline(x=result.wall_ms, line=dict(color=FINISH.get(name, TARGET), width=2), row=row, col=1)
        else:
            axis_id = "" if row == 1 else str(row)  # in the lane's title row, at its right end
            fig.add_annotation(xref=f"x{axis_id} domain", yref=f"y{axis_id} domain", x=1, y=1, xanchor="right",
                               yanchor="bottom", showarrow=False, font=dict(size=13, color=FINISH.get(name, TARGET)),
                               text="<b>" + tr(N_("cut: ends at {time} ▶")).format(time=fmt_ms(result.wall_ms, tr))
                               + "</b>")
    base_layout(fig, height, axis, None, tr)
    remote = any(e.kind == "network" for r in results.values() for e in r.trace.events)
    fig.update_layout(margin=dict(t=TOP_MARGIN + LEGEND_ROW * remote),
                      legend=dict(yref="container", y=1.0, yanchor="top"))
    fig.update_xaxes(title=dict(text=axis_title, font=dict(size=13)), row=len(names), col=1)
    return fig


@dataclass(frozen=True)
class _Lane:
    trace: Trace
    wall_ms: float


def measured_vs_simulated_figure(simulated: Trace, measured: Trace, titles: tuple[str, str], axis_title: str,
                                 height: int = 460, tr: Translator = N_) -> go.Figure:
    """A schedule simulated (above) and run for real (below) on one shared millisecond axis."""
    lanes = {"ssd": _Lane(simulated, simulated.wall_ms), "measured": _Lane(measured, measured.wall_ms)}
    return schedules_figure(lanes, {"ssd": titles[0], "measured": titles[1]}, axis_title, height, tr)


PAYS = 1.05  # an overlapped schedule "pays" while it is at least this much faster than serial


def round_trip_figure(added_ms: list[float], speedups: dict[str, list[float]], labels: dict[str, str],
                      start_ms: float, chosen_ms: float, axis_title: str, y_title: str, height: int = 300,
                      tr: Translator = N_) -> go.Figure:
    """Each overlapped schedule's speedup over serial against the network time added to every
    verify (x: the round trip on top of the measured one, ``start_ms``); a dotted line where each
    falls below ``PAYS`` (stops paying), a solid one at the chosen round trip."""
    fig = go.Figure()
    for name, ys in speedups.items():
        color = FINISH.get(name, TARGET)
        fig.add_trace(go.Scatter(x=added_ms, y=ys, name=labels[name], mode="lines+markers",
                                 line=dict(color=color, width=2, dash="dash" if name == "pearl" else "solid"),
                                 marker=dict(symbol="square" if name == "pearl" else "circle", size=6)))
        stop = next((x for x, y in zip(added_ms, ys) if y < PAYS), None)
        if stop is not None:
            fig.add_vline(x=stop, line=dict(color=color, width=1.5, dash="dot"))
            fig.add_annotation(x=stop, y=PAYS, text=tr(N_("{name} stops paying")).format(name=labels[name]),
                               showarrow=True, arrowhead=2, ax=40, ay=-30, font=dict(size=12, color=color))
    fig.add_hline(y=1.0, line=dict(color=TARGET, width=1))
    fig.add_vline(x=chosen_ms, line=dict(color="#555555", width=2))
    fig.update_layout(height=height, margin=dict(l=8, r=12, t=36, b=44), font=dict(size=14), showlegend=True,
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
                      hovermode="x unified")
    fig.update_xaxes(title=dict(text=axis_title.format(start=fmt_ms(start_ms, tr)), font=dict(size=13)),
                     ticksuffix=tr(MILLISECONDS).format(ms=""), rangemode="tozero")
    fig.update_yaxes(title=dict(text=y_title, font=dict(size=13)), tickprefix="×")
    return fig
