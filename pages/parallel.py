"""Parallel: the user's own greedy run, replayed under the serial, PEARL and SSD schedules.

The page's state and decisions live in specviz.ui.parallel_page, the replay's costs and
settings in specviz.ui.parallel_replay, its parts in specviz.ui.parallel_parts."""

import streamlit as st

from specviz import ui
from specviz.ui import parallel_page, parallel_parts, parallel_real, parallel_replay
from specviz.ui.lang import language_switch

ui.page_chrome()
language_switch()
state = parallel_page.parallel_state()
trace = parallel_page.render_choice()
if trace is None:
    st.stop()
replay = parallel_replay.prepare(state, trace)  # the costs, the settings (sidebar), the replays
parallel_replay.render_measuring(replay)
parallel_parts.render_schedules(replay)
parallel_parts.render_check(replay)
parallel_parts.render_pearl_real(state, replay)
parallel_real.render_ssd_real(state, replay)
parallel_real.render_round_trip(replay)
parallel_parts.render_changes(replay)
