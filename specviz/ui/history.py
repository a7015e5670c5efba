"""The run history: one row per finished live run, as a table and a chart.

Each finished run adds a row (the pair, the prompt's kind, γ and the sampling settings,
tok/s, acceptance, speedup against the target alone, whether the output was identical);
the section shows them newest first beside a chart of the runs, with downloads for the
history as CSV and the last run's full trace as JSON, and a button to clear it all.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from specviz import figures as F
from specviz.ui.state import LiveState


def clear_history() -> None:
    st.session_state["history"] = []
    st.session_state["baselines"] = {}


def history_section(state: LiveState) -> None:
    rows = st.session_state.get("history", [])
    st.subheader("Run history", anchor=False)
    if not rows:
        st.caption("Every finished run adds a row: move the γ slider, run again, and compare.")
        return
    df = pd.DataFrame(rows, columns=list(F.HISTORY_COLUMNS))
    shown = df.iloc[::-1].assign(acceptance=df["acceptance"].iloc[::-1] * 100)
    table, chart = st.columns([2.1, 1])
    with table:
        st.dataframe(
            shown,
            hide_index=True,
            height=min(38 + 35 * len(df), 330),
            column_order=["run", "prompt kind", "gamma", "temperature", "tok/s", "acceptance",
                          "mean acceptance length", "speedup", "identical"],
            column_config={
                "run": st.column_config.NumberColumn("#", width=40),
                "prompt kind": st.column_config.TextColumn("prompt", width=80),
                "gamma": st.column_config.NumberColumn("γ", width=40),
                "temperature": st.column_config.NumberColumn("temp", format="%.2f", width=60),
                "tok/s": st.column_config.NumberColumn("tok/s", format="%.1f", width=65),
                "acceptance": st.column_config.ProgressColumn("acceptance", min_value=0.0, max_value=100.0,
                                                              format="%.0f%%", width=100),
                "mean acceptance length": st.column_config.NumberColumn(
                    "tok/round", format="%.2f", width=75, help="mean acceptance length"),
                "speedup": st.column_config.NumberColumn("speedup", format="×%.2f", width=75,
                                                         help="vs the target alone"),
                "identical": st.column_config.CheckboxColumn("same", width=55,
                                                             help="identical to the target-alone output"),
            },
        )
        c = st.columns([1, 1, 1])
        c[0].download_button("History CSV", df.to_csv(index=False).encode("utf-8"), "specviz-history.csv",
                             "text/csv", icon=":material/download:", key="dl_history")
        tr = state.trace
        if tr is not None and state.sd_done:
            c[1].download_button("Last run JSON", tr.to_json(indent=1).encode("utf-8"),
                                 f"specviz-run-{state.run_no or 'last'}.json", "application/json",
                                 icon=":material/data_object:", key="dl_trace",
                                 help="The full trace: replay it on the Replay page, with no model loaded.")
        c[2].button("Clear", icon=":material/delete:", on_click=clear_history, key="clear_history",
                    type="tertiary")
    with chart:
        st.plotly_chart(F.history_figure(rows), key="history_chart", config={"displayModeBar": False})
