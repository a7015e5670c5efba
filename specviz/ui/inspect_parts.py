"""What the steps of Inspect a round share (specviz.ui.inspect_steps for a chain round,
specviz.ui.inspect_tree for a tree round): numbers and durations as the page writes them, a
paragraph of sentences, the near-tie note, and the round's timeline."""

from __future__ import annotations

import streamlit as st

from specviz import figures as F
from specviz.analysis import round_story as insp
from specviz.analysis.metrics import fmt_ms
from specviz.record.i18n import MILLISECONDS
from specviz.record.run_trace import trace_upto
from specviz.ui.inspect_page import Walk
from specviz.ui.lang import _
from specviz.ui.markdown import token_span


def num(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def dur(ms: float | None) -> str:
    """A duration, with two decimals below a millisecond (rollbacks are that quick)."""
    return _(MILLISECONDS).format(ms=f"{ms:.2f}") if ms is not None and 0 <= ms < 1 else fmt_ms(ms, _)


def stamp(ms: float) -> str:
    """A moment on the run's clock."""
    return _(MILLISECONDS).format(ms=f"{ms:,.1f}")


def near_tie_note(rnd, i: int, cfg) -> str | None:
    """A greedy position whose top two the run's dtype can swap by rounding (``insp.near_tie``), in
    the chart's numbers; None otherwise."""
    two = insp.top_two_at(rnd, i)
    if two is None or not insp.near_tie(two.gap, cfg.dtype):
        return None
    return _("A near-tie: the target's top two here, {first} (p = {p1}) and {second} (p = {p2}), are "
             "ln({p1} / {p2}) = {gap:.2f} apart in logit, within the {tie:g} that {dtype} rounding can move. A pass "
             "over another number of tokens could rank them the other way.").format(
        first=token_span(two.first.text), second=token_span(two.second.text), p1=num(two.first.p), p2=num(two.second.p),
        gap=two.gap, tie=insp.near_tie_logit(cfg.dtype), dtype=cfg.dtype)


def say(*sentences: str) -> None:
    st.markdown(" ".join(s for s in sentences if s))


def round_timeline(walk: Walk) -> None:
    """The round's passes on the millisecond axis, and the next round's first draft pass."""
    S, rnd, index, trace, step = walk.story, walk.rnd, walk.index, walk.trace, walk.step
    upto = trace_upto(trace, min(len(trace.rounds), index + 2))
    start = rnd.start_ms
    end = rnd.end_ms
    if S.next_start_ms is not None:
        nxt = trace.rounds[index + 1]
        first = next((e for e in nxt.events if e.lane == "draft"), None)
        end = max(end, first.end_ms if first is not None else S.next_start_ms)
    pad = max(0.5, (end - start) * 0.04)
    fig = F.timeline_figure(upto, height=200, tr=_)
    fig.update_xaxes(range=[start - pad, end + pad])
    st.plotly_chart(fig, key=f"inspect_timeline_{step}", config={"displayModeBar": False})


def in_short(points: tuple[str, ...]) -> None:
    """The four ideas, in short: a divider, a heading, one bullet each (a chain's or a tree's)."""
    st.divider()
    st.markdown("#### " + _("In short"))
    st.markdown("\n".join("- " + s for s in points))
