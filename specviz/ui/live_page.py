"""The Live page's widgets: the sidebar's settings and the toolbar's γ and buttons, each with a
slot under it for its input error, and the errors put in their slots.

The page's run is ``specviz.ui.state.LiveState`` (``live_state``), driven by
``specviz.ui.controller``; this module only draws what feeds it. ``error_placement`` decides
which message goes where (pure).
"""

from __future__ import annotations

import streamlit as st

from specviz.models.pair import ModelPair
from specviz.record.i18n import Translator
from specviz.record.limits import MAX_GAMMA, MAX_TREE_DEPTH, MAX_TREE_NODES, MAX_TREE_WIDTH
from specviz.record.run_config import RunConfig
from specviz.ui import links
from specviz.ui.chrome import DRAFT_SHAPES, EXAMPLES, SHORTCUTS, SPEEDS
from specviz.ui.lang import _
from specviz.ui.server_mode import ServerSettings
from specviz.ui.state import (
    context_note,
    draft_head_choices,
    draft_choice_note,
    draft_head_label,
    link_problems,
    pick_example,
    set_cmd,
    share_box,
    sync_link,
)

# The input errors' slots, in the order the page fills them: under the prompt, the draft head,
# γ, the max new tokens, the sampling settings, and one for the rest.
ERROR_SLOTS = ("prompt", "draft_vocab", "tree", "gamma", "max_new_tokens", "sampling", "general")

Slots = dict[str, "st.delta_generator.DeltaGenerator"]


def sidebar(pair: ModelPair, server: ServerSettings, tr: Translator) -> Slots:
    """The settings (prompt, examples, speed, race, baseline reuse, draft head, int8, sampling and
    length) and the share link; the error slots under them."""
    slots: Slots = {}
    with st.sidebar:
        st.text_area(_("Prompt"), key="prompt", height=110, persist_state="session", max_chars=server.max_prompt_chars,
                     placeholder=_("Type a prompt, or pick an example below"))
        slots["prompt"] = st.empty()
        st.pills(_("Examples"), list(EXAMPLES), key="example", on_change=pick_example, format_func=tr,
                 label_visibility="collapsed")
        st.caption(_("Why acceptance depends on the text: in code and JSON, syntax and keys pin the next token down, "
                     "so the small draft often guesses the target's own; in open prose or Chinese it picks another "
                     "wording, as plausible as the target's, and the target rejects it; counting is predictable almost "
                     "throughout. Compare them in the run history."))
        st.select_slider(_("Slow-motion speed"), list(SPEEDS), key="speed", persist_state="session", format_func=tr,
                         help=_("Step and Autoplay replay each round slowly after it ran at full speed. "
                                "The timings shown are always the real ones."))
        st.toggle(_("Race the target alone"), key="race", persist_state="session",
                  help=_("After the speculative run, time the target decoding by itself on the same prompt."))
        st.toggle(_("Reuse a recent baseline"), key="reuse_baseline", persist_state="session",
                  help=_("Off: the target alone is re-measured after every run, so the speedup compares two runs "
                         "measured side by side. On: a target-alone run from the last 10 minutes with the same "
                         "prompt and settings is reused while the machine's draft passes still take the same time."))
        heads = draft_head_choices(pair)
        if st.session_state.get("draft_vocab") not in heads:
            st.session_state["draft_vocab"] = 0
        st.selectbox(_("Draft head"), heads, key="draft_vocab", persist_state="session",
                     format_func=lambda n: draft_head_label(n, tr),
                     help=_("FR-Spec: the draft scores only the N most frequent tokens, a cheaper pass (smaller c). "
                            "The target decides, so the output stays exactly the target's own."))
        if pair.device.type == "cpu":
            st.toggle(_("int8 draft"), key="draft_int8", persist_state="session",
                      help=_("The draft's weights in int8 (PyTorch's dynamic quantization, CPU only): a pass about "
                             "2.5× cheaper, guesses a little less often right. The first run quantizes the draft "
                             "(seconds, off the clock). The output stays exactly the target's own."))
        else:
            st.session_state["draft_int8"] = False
        if note := draft_choice_note(pair, tr):
            st.caption(note)
        slots["draft_vocab"] = st.empty()
        draft_shape(tr)
        slots["tree"] = st.empty()
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
            slots["max_new_tokens"] = st.empty()
            st.number_input(_("Seed"), 0, links.MAX_SEED, step=1, key="seed", persist_state="session",
                            help=_("Fixes the random draws when temperature is above 0."))
            slots["sampling"] = st.empty()
        share_box(*sync_link(pair))  # the settings into the URL, and the link to copy
    return slots


def draft_shape(tr: Translator) -> None:
    """Chain or tree: a tree's node budget and width (its depth is γ, in the toolbar)."""
    if st.session_state.get("draft_shape") not in DRAFT_SHAPES:
        st.session_state["draft_shape"] = "chain"
    st.segmented_control(_("Draft shape"), list(DRAFT_SHAPES), key="draft_shape", required=True,
                         persist_state="session", format_func=lambda k: tr(DRAFT_SHAPES[k]),
                         help=_("A chain drafts one guess per position. A tree also drafts the second and third "
                                "guesses where the draft is unsure, and the target checks every branch in the same "
                                "one pass: its spare width. The output stays exactly the target's own."))
    if st.session_state["draft_shape"] == "chain":
        st.toggle(_("Stop where the draft is unsure"), key="draft_stop", persist_state="session",
                  help=_("The confidence policy: the draft stops right after a token it gave a probability below "
                         "τ, so it drafts deep where it is sure and hands over at once where it hesitates; γ is "
                         "then the most it drafts. Off: exactly γ tokens every round. Either way the output is "
                         "exactly the target's own."))
        if st.session_state.get("draft_stop", True):
            st.slider(_("Confidence threshold τ"), *links.CONFIDENCE_RANGE, step=0.05, key="confidence",
                      persist_state="session", format="τ = %.2f",
                      help=_("Stop drafting after a token whose draft probability is below τ "
                             "(Hugging Face's assistant_confidence_threshold)."))
    if st.session_state["draft_shape"] == "tree":
        st.slider(_("Tree nodes"), 2, MAX_TREE_NODES, key="tree_nodes", persist_state="session",
                  help=_("The node budget: how many drafted tokens the one verify pass reads. The draft grows the "
                         "tree where its cumulative probability is highest (EAGLE-2)."))
        st.slider(_("Tree width"), 1, MAX_TREE_WIDTH, key="tree_width", persist_state="session",
                  help=_("Children per expanded node, and nodes expanded per depth. γ sets the depth."))


def gamma_most(tree: bool) -> int:
    """The γ slider's top: a chain's longest draft, or a tree's deepest (the shape sets the range)."""
    return MAX_TREE_DEPTH if tree else MAX_GAMMA


def is_tree() -> bool:
    return st.session_state.get("draft_shape") == "tree"


def fit_gamma() -> int | None:
    """Bring a γ above the slider's top (a chain's γ kept when the shape became a tree, or a share
    link's) down to it, before the settings are read; returns the γ it was, or None when it fit."""
    most, gamma = gamma_most(is_tree()), st.session_state.get("gamma")
    if isinstance(gamma, int) and gamma > most:
        st.session_state["gamma"] = most
        return gamma
    return None


def toolbar(busy: bool, lowered: int | None = None) -> Slots:
    """A share link's unusable values, then γ and the Run, Step, Autoplay and Stop buttons (Stop
    only while a run plays); the error slots under them. ``lowered``: the γ ``fit_gamma`` brought
    down to the slider's top in this script run, said under the slider."""
    link_problems()  # a share link's values that could not be used, and what the page uses instead
    bar = st.columns([2.3, 1, 1, 1.15, 1], vertical_alignment="bottom")
    with bar[0]:
        tree = is_tree()
        most = gamma_most(tree)
        st.slider(_("γ · tree depth") if tree else _("γ · draft length"), 1, most, key="gamma",
                  format="γ = %d", persist_state="session",
                  help=_("γ is the depth of the tree: the draft passes per round; the target checks every node in "
                         "one pass.") if tree else
                  _("γ is the number of tokens the draft proposes per round; the target checks them all "
                    "in one pass."))
        if lowered is not None:
            st.caption(_("γ = {old} is deeper than a tree may be: set to {most}.").format(old=lowered, most=most))
    bar[1].button(_("Run"), key="run", type="primary", icon=":material/play_arrow:", width="stretch",
                  shortcut=SHORTCUTS["run"], on_click=set_cmd, args=("run",),
                  help=_("A fresh run at full speed; the status line counts its rounds, and the page draws the run when it ends."))
    bar[2].button(_("Step"), key="step", icon=":material/skip_next:", width="stretch",
                  shortcut=SHORTCUTS["step"], on_click=set_cmd, args=("step",),
                  help=_("One round, in slow motion: draft, verify, verdict."))
    bar[3].button(_("Autoplay"), key="autoplay", icon=":material/slow_motion_video:", width="stretch",
                  shortcut=SHORTCUTS["autoplay"], on_click=set_cmd, args=("autoplay",),
                  help=_("Step after step in slow motion, until the end or Stop."))
    bar[4].button(_("Stop"), key="stop", icon=":material/stop:", width="stretch", disabled=not busy,
                  shortcut=SHORTCUTS["stop"], on_click=set_cmd, args=("stop",),
                  help=_("Pause Run or Autoplay; Step or Autoplay carries on from here."))
    return {"gamma": st.empty(), "general": st.empty()}


def error_placement(errors: dict[str, str], note: str | None) -> list[tuple[str, str, str]]:
    """(slot, kind, message) for each input error, in slot order; the context note (a warning)
    under the max new tokens when that field has no error."""
    placed = [(name, "error", errors[name]) for name in ERROR_SLOTS if name in errors]
    if "max_new_tokens" not in errors and note:
        placed.append(("max_new_tokens", "warning", note))
    return placed


def show_errors(slots: Slots, errors: dict[str, str], pair: ModelPair, cfg: RunConfig) -> None:
    """The input errors in their slots, and the note on the context length."""
    note = None if "max_new_tokens" in errors else context_note(pair, cfg)
    for name, kind, message in error_placement(errors, note):
        if kind == "error":
            slots[name].error(message, icon=":material/error:")
        else:
            slots[name].warning(message, icon=":material/warning:")
