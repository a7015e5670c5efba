"""The run history: one row per finished live run, as a table and a chart.

Each finished run adds a row (the pair, the example prompt used or "custom", γ (a token
tree's depth and shape) and the sampling settings, tok/s, acceptance, speedup against the
target alone, a tree's tok/s against the best chain run's (★ on that chain), whether the
output was identical, whether that baseline was measured or reused, and what competed
with the run: a ⚠ marks a tok/s timed under contention and a speedup whose two runs saw
different load, explained under the table). The section
shows them newest first, across the page so no column is cut, with a chart of the runs
and downloads of the history as CSV (every number as measured) and of the last run (its
full trace as JSON, its timeline as an offline HTML page and as a PNG), and a button to
clear it all.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from specviz import figures as F
from specviz.figures.history import BUSY_MARK, busy_runs
from specviz.ui.lang import _
from specviz.ui.state import LiveState
from specviz.ui.view import export_buttons

ROW_PX, HEADER_PX, MAX_TABLE_PX = 35, 38, 330


def clear_history() -> None:
    st.session_state["history"] = []
    st.session_state["baselines"] = {}


def _column_config() -> dict:
    """Readable headers and widths: at 1280 px with the sidebar open, no column is cut."""
    config = {}
    for c in F.TABLE_COLUMNS:
        if c.bar:
            config[c.key] = st.column_config.ProgressColumn(_(c.label), min_value=0, max_value=100, format="%d%%",
                                                            width=c.width, help=_(c.help))
        else:
            config[c.key] = st.column_config.TextColumn(_(c.label), width=c.width, help=_(c.help))
    return config


def _downloads(state: LiveState, df: pd.DataFrame) -> None:
    st.download_button(_("History CSV"), df.to_csv(index=False).encode("utf-8"), "specviz-history.csv", "text/csv",
                       icon=":material/download:", key="dl_history", width="stretch")
    tr = state.trace
    if tr is not None and state.sd_done:
        export_buttons(tr, "dl", f"specviz-run-{state.run_no or 'last'}", json_label=_("Last run JSON"))
    st.button(_("Clear"), icon=":material/delete:", on_click=clear_history, key="clear_history", type="tertiary")


def busy_note(rows: list[dict]) -> str | None:
    """What the table's ⚠ marks mean, naming the runs marked (None when none is)."""
    busy, unfair = busy_runs(rows)
    runs = lambda ns: ", ".join(f"#{n}" for n in ns)  # noqa: E731
    parts = []
    if busy:
        parts.append(_("{mark} beside tok/s ({runs}): timed while something else used the cores, so slower "
                       "than the pair's own.").format(mark=BUSY_MARK, runs=runs(busy)))
    if unfair:
        parts.append(_("{mark} beside a speedup ({runs}): its two runs saw different load, so it is not a fair "
                       "ratio.").format(mark=BUSY_MARK, runs=runs(unfair)))
    return " ".join(parts) or None


def history_section(state: LiveState) -> None:
    rows = st.session_state.get("history", [])
    st.subheader(_("Run history"), anchor=False)
    if not rows:
        st.caption(_("Every finished run adds a row: move the γ slider, run again, and compare."))
        return
    st.dataframe(
        pd.DataFrame(F.history_table(rows, tr=_), columns=[c.key for c in F.TABLE_COLUMNS]),
        hide_index=True,
        width="content",
        height=min(HEADER_PX + ROW_PX * len(rows), MAX_TABLE_PX),
        column_config=_column_config(),
    )
    if note := busy_note(rows):
        st.caption(note)
    chart, actions = st.columns([3, 1], vertical_alignment="top")
    with chart:
        st.plotly_chart(F.history_figure(rows, tr=_), key="history_chart", config={"displayModeBar": False})
    with actions:
        _downloads(state, pd.DataFrame(rows, columns=list(F.HISTORY_COLUMNS)))
