"""Theory: α, c and γ on sliders, and what Leviathan et al.'s formulas make of them: the
expected tokens per round and speedup against γ, the refined speedup with this machine's
measured verify curve, the region where speculative decoding loses, the best γ in words,
and the user's last Live run marked on the curves. Nothing here runs a model.
The logic is in specviz.ui.theory_page."""

import streamlit as st

from specviz import ui
from specviz.ui import theory_page as page
from specviz.ui.lang import _, language_switch

ui.page_chrome()
language_switch()
_trace, run = page.last_run()
page.sidebar(run)
ui.sidebar_pair()
state = page.theory_state()

page.render_verdicts(state)
page.render_figures(state)
st.page_link("pages/costs.py", label=_("The verify-cost curve: measure this machine's T(k)"),
             icon=":material/show_chart:")
