"""Live: the draft proposes, the target verifies, round after round."""

import streamlit as st

from specviz import ui
from specviz.ui import links, server_mode
from specviz.ui.lang import _, language_switch
from specviz.ui.state import apply_link, link_problems, share_box, sync_link

ui.page_chrome()
language_switch()
pair = ui.require_pair()
if pair is None:
    st.stop()

state = ui.live_state()
ui.init_controls()
apply_link(pair)  # a share link's settings (once per session), before the widgets are drawn
server = server_mode.current()
# The button pressed (if any) is applied first, so the buttons below draw in the new state.
cfg = ui.read_config()
errors = ui.check_inputs(pair, cfg)
cmd = ui.handle_command(pair, state, cfg, errors)
busy = state.playing is not None
tr = ui.translator()  # the page's language, bound now for the widgets' format_func
ui.keep_choices("speed", "draft_vocab")  # shown translated: keep their values when the language changes

# --- widgets in (sidebar) ---------------------------------------------------------------
with st.sidebar:
    st.text_area(_("Prompt"), key="prompt", height=110, persist_state="session", max_chars=server.max_prompt_chars,
                 placeholder=_("Type a prompt, or pick an example below"))
    err_prompt = st.empty()
    st.pills(_("Examples"), list(ui.EXAMPLES), key="example", on_change=ui.pick_example, format_func=tr,
             label_visibility="collapsed")
    st.caption(_("Why acceptance depends on the text: in code and JSON, syntax and keys pin the next token down, "
                 "so the small draft often guesses the target's own; in open prose or Chinese it picks another "
                 "wording, as plausible as the target's, and the target rejects it; counting is predictable almost "
                 "throughout. Compare them in the run history."))
    st.select_slider(_("Slow-motion speed"), list(ui.SPEEDS), key="speed", persist_state="session", format_func=tr,
                     help=_("Step and Autoplay replay each round slowly after it ran at full speed. "
                            "The timings shown are always the real ones."))
    st.toggle(_("Race the target alone"), key="race", persist_state="session",
              help=_("After the speculative run, time the target decoding by itself on the same prompt."))
    st.toggle(_("Reuse a recent baseline"), key="reuse_baseline", persist_state="session",
              help=_("Off: the target alone is re-measured after every run, so the speedup compares two runs "
                     "measured side by side. On: a target-alone run from the last 10 minutes with the same "
                     "prompt and settings is reused while the machine's draft passes still take the same time."))
    heads = ui.draft_head_choices(pair)
    if st.session_state.get("draft_vocab") not in heads:
        st.session_state["draft_vocab"] = 0
    st.selectbox(_("Draft head"), heads, key="draft_vocab", persist_state="session",
                 format_func=lambda n: ui.draft_head_label(n, tr),
                 help=_("FR-Spec: the draft scores only the N most frequent tokens, a cheaper pass (smaller c). "
                        "The target decides, so the output stays exactly the target's own."))
    if pair.device.type == "cpu":
        st.toggle(_("int8 draft"), key="draft_int8", persist_state="session",
                  help=_("The draft's weights in int8 (PyTorch's dynamic quantization, CPU only): a pass about "
                         "2.5× cheaper, guesses a little less often right. The first run quantizes the draft "
                         "(seconds, off the clock). The output stays exactly the target's own."))
    else:
        st.session_state["draft_int8"] = False
    err_draft_vocab = st.empty()
    with st.expander(_("Sampling and length"), icon=":material/tune:"):
        remote = pair.remote is not None
        if remote and st.session_state.get("temperature"):
            st.session_state["temperature"] = 0.0  # a remote target is greedy only (validate.check_remote)
        st.slider(_("Temperature"), *links.TEMPERATURE_RANGE, step=0.05, key="temperature", persist_state="session",
                  disabled=remote,
                  help=_("A remote target is greedy only: a server returns its top log-probabilities, not whole "
                         "distributions.") if remote else
                  _("0 is greedy: accept while the draft matches the target's top token. Above 0, "
                    "speculative sampling keeps the target's exact distribution."))
        st.slider(_("Top-p"), *links.TOP_P_RANGE, step=0.05, key="top_p", persist_state="session",
                  help=_("Nucleus sampling, applied to both models alike. Ignored when temperature is 0."))
        st.number_input(_("Max new tokens"), 1, server.max_new_tokens, step=16, key="max_new_tokens",
                        persist_state="session")
        err_max = st.empty()
        st.number_input(_("Seed"), 0, links.MAX_SEED, step=1, key="seed", persist_state="session",
                        help=_("Fixes the random draws when temperature is above 0."))
        err_sampling = st.empty()
    share_box(*sync_link(pair))  # the settings into the URL, and the link to copy
ui.sidebar_pair()

# --- the toolbar: the knob and the buttons the class watches ---------------------------------
link_problems()  # a share link's values that could not be used, and what the page uses instead
bar = st.columns([2.3, 1, 1, 1.15, 1], vertical_alignment="bottom")
with bar[0]:
    st.slider(_("γ · draft length"), 1, ui.MAX_GAMMA, key="gamma", format="γ = %d", persist_state="session",
              help=_("γ is the number of tokens the draft proposes per round; the target checks them all "
                     "in one pass."))
bar[1].button(_("Run"), key="run", type="primary", icon=":material/play_arrow:", width="stretch",
              shortcut=ui.SHORTCUTS["run"], on_click=ui.set_cmd, args=("run",),
              help=_("A fresh run at full speed; the page updates as rounds complete."))
bar[2].button(_("Step"), key="step", icon=":material/skip_next:", width="stretch",
              shortcut=ui.SHORTCUTS["step"], on_click=ui.set_cmd, args=("step",),
              help=_("One round, in slow motion: draft, verify, verdict."))
bar[3].button(_("Autoplay"), key="autoplay", icon=":material/slow_motion_video:", width="stretch",
              shortcut=ui.SHORTCUTS["autoplay"], on_click=ui.set_cmd, args=("autoplay",),
              help=_("Step after step in slow motion, until the end or Stop."))
bar[4].button(_("Stop"), key="stop", icon=":material/stop:", width="stretch", disabled=not busy,
              shortcut=ui.SHORTCUTS["stop"], on_click=ui.set_cmd, args=("stop",),
              help=_("Pause Run or Autoplay; Step or Autoplay carries on from here."))
err_gamma = st.empty()
err_general = st.empty()

for slot, name in ((err_prompt, "prompt"), (err_draft_vocab, "draft_vocab"), (err_gamma, "gamma"), (err_max, "max_new_tokens"),
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
    ui.step(view, state, speed)
elif state.playing:
    ui.play(view, state, speed)
