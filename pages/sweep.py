"""Tune: sweep γ on chosen prompts; measured tok/s against γ beside the formula's prediction.

The sweep's state and decisions live in specviz.ui.tune_page, its drawing in
specviz.ui.tune_parts."""

import streamlit as st

from specviz import ui
from specviz.ui import tune_page, tune_parts
from specviz.ui.lang import language_switch

ui.page_chrome()
language_switch()
pair = ui.require_pair()
if pair is None:
    st.stop()

state = tune_page.tune_state()
settings = tune_parts.render_sidebar()
slots = tune_parts.render_toolbar(state, settings)
tune_parts.render_plan(state, pair, settings, slots)
tune_parts.render_run(state, pair, slots)  # a started sweep runs here, then redraws
tune_parts.render_result(state, pair, settings, slots)
