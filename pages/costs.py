"""Cost curve: what one forward pass costs against the number of new tokens it reads, for
the draft and the target at batch 1, 4 and 16: the verify-cost curve, measured once per
pair, device and dtype and cached (``specviz.measure.forward_costs``), and what it does to c and to the
speedup formula. The logic is in specviz.ui.costs_page."""

import streamlit as st

from specviz import ui
from specviz.ui import costs_page as page
from specviz.ui.lang import _, language_switch

ui.page_chrome()
language_switch()
pair = ui.require_pair()
if pair is None:
    st.stop()

page.sidebar()
ui.sidebar_pair()
state = page.costs_state(pair)

page.render_intro(state)
page.render_measure(state)
page.render_shape(state)
st.page_link("pages/theory.py", label=_("Theory: the speedup with this curve, for any α, c and γ"),
             icon=":material/functions:")
