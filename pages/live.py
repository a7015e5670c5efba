"""Live: the draft proposes, the target verifies, round after round."""

import streamlit as st

from specviz import ui

ui.page_chrome()
pair = ui.require_pair()
if pair is None:
    st.stop()

state = ui.live_state()
ui.init_controls()
# The button pressed (if any) is applied first, so the buttons below draw in the new state.
cfg = ui.read_config()
errors = ui.check_inputs(pair, cfg)
cmd = ui.handle_command(pair, state, cfg, errors)
busy = state.playing is not None

# --- widgets in (sidebar) ---------------------------------------------------------------
with st.sidebar:
    st.text_area("Prompt", key="prompt", height=110, persist_state="session",
                 placeholder="Type a prompt, or pick an example below")
    err_prompt = st.empty()
    st.pills("Examples", list(ui.EXAMPLES), key="example", on_change=ui.pick_example,
             label_visibility="collapsed")
    st.caption("Examples of different kinds: the draft guesses some far better than others. "
               "Compare them in the run history.")
    st.select_slider("Slow-motion speed", list(ui.SPEEDS), key="speed", persist_state="session",
                     help="Step and Autoplay replay each round slowly after it ran at full speed. "
                          "The timings shown are always the real ones.")
    st.toggle("Race the target alone", key="race", persist_state="session",
              help="After the speculative run, time the target decoding by itself on the same prompt.")
    with st.expander("Sampling and length", icon=":material/tune:"):
        st.slider("Temperature", 0.0, 2.0, step=0.05, key="temperature", persist_state="session",
                  help="0 is greedy: accept while the draft matches the target's top token. Above 0, "
                       "speculative sampling keeps the target's exact distribution.")
        st.slider("Top-p", 0.05, 1.0, step=0.05, key="top_p", persist_state="session",
                  help="Nucleus sampling, applied to both models alike. Ignored when temperature is 0.")
        st.number_input("Max new tokens", 1, 4096, step=16, key="max_new_tokens", persist_state="session")
        err_max = st.empty()
        st.number_input("Seed", 0, 2**31 - 1, step=1, key="seed", persist_state="session",
                        help="Fixes the random draws when temperature is above 0.")
        err_sampling = st.empty()
ui.sidebar_pair()

# --- the toolbar: the knob and the buttons the class watches ---------------------------------
bar = st.columns([2.3, 1, 1, 1.15, 1], vertical_alignment="center")
with bar[0]:
    st.slider("γ, the draft length: tokens the draft proposes per round", 1, 16, key="gamma",
              format="γ = %d", label_visibility="collapsed", persist_state="session")
bar[1].button("Run", key="run", type="primary", icon=":material/play_arrow:", width="stretch",
              shortcut=ui.SHORTCUTS["run"], on_click=ui.set_cmd, args=("run",),
              help="A fresh run at full speed; the page updates as rounds complete.")
bar[2].button("Step", key="step", icon=":material/skip_next:", width="stretch",
              shortcut=ui.SHORTCUTS["step"], on_click=ui.set_cmd, args=("step",),
              help="One round, in slow motion: draft, verify, verdict.")
bar[3].button("Autoplay", key="autoplay", icon=":material/slow_motion_video:", width="stretch",
              shortcut=ui.SHORTCUTS["autoplay"], on_click=ui.set_cmd, args=("autoplay",),
              help="Step after step in slow motion, until the end or Stop.")
bar[4].button("Stop", key="stop", icon=":material/stop:", width="stretch", disabled=not busy,
              shortcut=ui.SHORTCUTS["stop"], on_click=ui.set_cmd, args=("stop",),
              help="Pause Run or Autoplay; Step or Autoplay carries on from here.")
err_gamma = st.empty()
err_general = st.empty()

for slot, name in ((err_prompt, "prompt"), (err_gamma, "gamma"), (err_max, "max_new_tokens"),
                   (err_sampling, "sampling"), (err_general, "general")):
    if name in errors:
        slot.error(errors[name], icon=":material/error:")
if "max_new_tokens" not in errors and (note := ui.context_note(pair, cfg)):
    err_max.warning(note, icon=":material/warning:")

# --- figures out (main) ------------------------------------------------------------------
view = ui.RunView()
ui.render_state(view, state, cfg)
st.divider()
ui.history_section(state)

speed = ui.SPEEDS.get(st.session_state.get("speed"), 1.0)
if cmd == "step":
    ui.step(pair, view, state, speed)
elif state.playing:
    ui.play(pair, view, state, speed)
