"""Live: the draft proposes, the target verifies, round after round.
The run is specviz.ui.state.LiveState, driven by specviz.ui.controller; the widgets are
specviz.ui.live_page's."""

import streamlit as st

from specviz import ui
from specviz.ui import live_page as page
from specviz.ui import server_mode
from specviz.ui.lang import language_switch
from specviz.ui.state import apply_draft_choice, apply_link

ui.page_chrome()
language_switch()
pair = ui.require_pair()
if pair is None:
    st.stop()

state = ui.live_state()
ui.init_controls()
apply_draft_choice(pair)  # the draft this machine's measurement picked (once per session and pair)
apply_link(pair)  # a share link's settings (once per session), before the widgets are drawn
lowered = page.fit_gamma()  # γ within the shape's range (a tree is shallower than a chain may be long)
# The button pressed (if any) is applied first, so the buttons below draw in the new state.
cfg = ui.read_config()
errors = ui.check_inputs(pair, cfg)
cmd = ui.handle_command(pair, state, cfg, errors)
tr = ui.translator()  # the page's language, bound now for the widgets' format_func
ui.keep_choices("speed", "draft_vocab")  # shown translated: keep their values when the language changes

# --- widgets in (sidebar, toolbar), figures out (main) ------------------------------------------
slots = page.sidebar(pair, server_mode.current(), tr)
ui.sidebar_pair()
slots |= page.toolbar(busy=state.playing is not None, lowered=lowered)
page.show_errors(slots, errors, pair, cfg)

view = ui.RunView()
ui.render_state(view, state, cfg)
st.divider()
ui.history_section(state)

speed = ui.SPEEDS.get(st.session_state.get("speed"), 1.0)
if cmd == "step":
    ui.step(view, state, speed)
elif state.playing:
    ui.play(view, state, speed)
