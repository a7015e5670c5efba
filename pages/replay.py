"""Replay: a recorded run, round by round, with no model loaded.
The logic is in specviz.ui.replay_page."""

import streamlit as st

from specviz import ui
from specviz.ui import replay_page as page
from specviz.ui import tree_whatif
from specviz.ui.lang import language_switch

ui.page_chrome()
language_switch()
ui.keep_choices("replay_source", "replay_speed")  # shown translated: keep the run picked when the language changes
state = page.pick_trace()
page.render_install_note()
if state.trace is None:
    page.render_pick_hint()
    st.stop()

page.replay_controls(state)
ui.sidebar_pair()
page.render_replay_page(state)
tree_whatif.render_tree_what_if(state.trace)  # a greedy run: what a token tree would have accepted
