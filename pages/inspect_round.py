"""Inspect a round: one real round of a run, walked through a key press at a time, with the
p/q inspector (sampling) or the argmax comparison (greedy) at each position.

The page's state and decisions live in specviz.ui.inspect_page, its six steps in
specviz.ui.inspect_steps. (Named inspect_round.py, not inspect.py, which would shadow the
standard library's inspect; its URL stays /inspect: see specviz.ui.chrome.URLS.)"""

import streamlit as st

from specviz import ui
from specviz.ui import inspect_page, inspect_steps
from specviz.ui.lang import language_switch

ui.page_chrome()
language_switch()
state = inspect_page.inspect_state()
walk = inspect_page.render_choice(state)
if walk is None:
    st.stop()
inspect_page.render_toolbar(state, walk)
inspect_steps.render_step(walk)
