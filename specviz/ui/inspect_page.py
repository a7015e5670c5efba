"""The Inspect a round page (pages/inspect_round.py): which run, which round, which step.

One real round of a run, walked through a key press at a time. ``InspectState`` (one
session_state key) holds the step shown and the run it belongs to; the widgets keep the
run, the round and the position picked. The decisions (which round a run opens on, the
next step, what the token strip shows) are pure; the ``render_*`` functions draw. The six
steps' text and charts are in specviz.ui.inspect_steps.

A tree round (a token-tree run: ``Round.tree``) walks through one step per draft pass (the tree
grows a depth at a time), then the verify pass over every node, the walk down the tree, the
target's token, the caches and the wait: S + 5 steps for S draft passes (``n_steps``,
``step_kind``); its steps are in specviz.ui.inspect_tree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st

from specviz.analysis import round_story as insp
from specviz.analysis import tree_story as tst
from specviz.figures import token_strip_html
from specviz.record.i18n import N_, Translator
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Round, Trace
from specviz.ui.lang import _
from specviz.ui.pair import sidebar_pair
from specviz.ui.sources import load_source, replay_sources

KEY = "inspect_page"  # the one session_state key of the page's own state
STEPS = 6
TITLES = (  # shown as _(title)
    N_("The draft proposes"),
    N_("The target checks them all in one pass"),
    N_("Accept while they agree"),
    N_("The target's own token"),
    N_("Both KV caches roll back"),
    N_("The next round waits"),
)
KINDS = ("draft", "verify", "accept", "target", "rollback", "wait")  # what each chain step, and a tree's, shows
TREE_TITLES = {  # a tree round's steps after its draft passes, shown as _(title)
    "verify": N_("The target checks every node in one pass"),
    "accept": N_("Walk down the tree while the target agrees"),
    "target": TITLES[3],
    "rollback": N_("Both KV caches keep only the accepted path"),
    "wait": TITLES[5],
}
DRAFT_PASS = N_("The draft grows the tree: pass {s} of {n}")
DRAFT_GROUP = N_("The draft grows the tree")


@dataclass
class InspectState:
    """The step shown (0 to ``steps`` − 1: STEPS for a chain round, ``n_steps`` for a tree
    round) and the run it walks through (``run_sig``)."""

    step: int = 0
    sig: tuple | None = None
    steps: int = STEPS

    def next(self) -> None:
        self.step = min(self.steps - 1, self.step + 1)

    def back(self) -> None:
        self.step = max(0, self.step - 1)

    def restart(self) -> None:
        self.step = 0


def inspect_state() -> InspectState:
    ss = st.session_state
    if KEY not in ss:
        ss[KEY] = InspectState()
    return ss[KEY]


def new_round() -> None:
    """Another run or round picked: back to the first step, the position picked afresh."""
    inspect_state().restart()
    st.session_state.pop("inspect_pos", None)
    st.session_state.pop("inspect_depth", None)


# --- the decisions --------------------------------------------------------------------------------

def run_sig(trace: Trace) -> tuple:
    """The run, whatever the language of its label."""
    return trace.config.prompt, len(trace.rounds), trace.wall_ms


def opens_afresh(state: InspectState, trace: Trace, picked: Any, rounds: list[int]) -> bool:
    """Another run, or a round picked that this run does not have: open on its default round."""
    return state.sig != run_sig(trace) or picked not in rounds


def round_label(trace: Trace, i: int) -> str:
    """Language-neutral (a label that changed with the language would lose the choice): 6 · 2/4 ✓
    (two of four guesses accepted; in a tree round, of the tree's nodes)."""
    r = trace.rounds[i]
    return f"{i + 1} · {r.accepted}/{len(r.tree) or len(r.proposed)} ✓"


def n_passes(rnd: Round) -> int:
    """A tree round's draft passes (one per depth); 0 for a chain round."""
    return len(tst.tree_passes(rnd)) if rnd.tree else 0


def n_steps(rnd: Round) -> int:
    """The steps of a round's walkthrough: six for a chain, S + 5 for a tree drafted in S passes."""
    return n_passes(rnd) + len(KINDS) - 1 if rnd.tree else STEPS


def step_kind(step: int, rnd: Round) -> tuple[str, int]:
    """What step ``step`` (0-based) shows (one of KINDS), and for a tree's draft steps which pass
    (1-based; 0 otherwise)."""
    passes = n_passes(rnd)
    if not rnd.tree:
        return KINDS[step], 0
    if step < passes:
        return "draft", step + 1
    return KINDS[step - passes + 1], 0


def step_title(step: int, rnd: Round, tr: Translator = N_) -> str:
    kind, s = step_kind(step, rnd)
    if not rnd.tree:
        return tr(TITLES[step])
    return tr(DRAFT_PASS).format(s=s, n=n_passes(rnd)) if kind == "draft" else tr(TREE_TITLES[kind])


def strip_phase(step: int, rnd: Round) -> tuple[str, int | None] | None:
    """What the token strip shows at a step: the draft's guesses, the verify, or the verdict. A
    tree round shows it only from the walk on (None before): the strip holds one line of the tree,
    the accepted path and the draft's first choices below it, which the walk decides."""
    if rnd.tree:
        return ("done", None) if step_kind(step, rnd)[0] not in ("draft", "verify") else None
    if step == 0:
        return "draft", len(rnd.proposed)
    return ("verify", None) if step == 1 else ("done", None)


def tree_text(setup: tst.TreeSetup, tr: Translator = N_) -> str:
    """The run's tree settings in words: a static shape, or a dynamic tree's budget."""
    if setup.static:
        return tr(N_("static token tree, widths {widths}")).format(widths="·".join(map(str, setup.widths)))
    return tr(N_("token tree of at most {n} nodes, depth {d}, width {k}")).format(
        n=setup.nodes, d=setup.depth, k=setup.width)


def caption(story: insp.Story, rnd: Round, index: int, cfg: RunConfig, tr: Translator = N_) -> str:
    """Which round of which run, in which mode, on what (a tree run: its tree settings for γ)."""
    mode = (tr(N_("greedy (temperature 0)")) if story.greedy
            else tr(N_("sampling at temperature {t:g}, seed {seed}")).format(t=cfg.temperature, seed=cfg.seed))
    setup = tst.tree_setup(cfg) if rnd.tree else None
    if setup is not None:
        text = tr(N_("Round {n} of {total} · {mode} · {shape} · {draft} → {target} on {device} in {dtype}"))
    else:
        text = tr(N_("Round {n} of {total} · {mode} · γ = {gamma} · {draft} → {target} on {device} in {dtype}"))
    return text.format(
        n=index + 1, total=story.total, mode=mode, gamma=rnd.gamma, shape=tree_text(setup, tr) if setup else "",
        draft=cfg.draft or tr(N_("draft")), target=cfg.target or tr(N_("target")), device=cfg.device, dtype=cfg.dtype)


def steps_line(step: int, tr: Translator = N_, rnd: Round | None = None) -> str:
    """Every step's title, numbered, the current one in bold. A tree round's draft passes are one
    entry (1–S), with the pass shown while on one of them."""
    if rnd is None or not rnd.tree:
        return " · ".join(f"**{i + 1}\\. {tr(t)}**" if i == step else f"{i + 1}\\. {tr(t)}"
                          for i, t in enumerate(TITLES))
    passes = n_passes(rnd)
    first = f"1–{passes}" if passes > 1 else "1"
    items = []
    if step < passes:
        items.append(f"**{first}\\. {tr(DRAFT_GROUP)} ({step + 1}/{passes})**")
    else:
        items.append(f"{first}\\. {tr(DRAFT_GROUP)}")
    for i in range(passes, n_steps(rnd)):
        title = step_title(i, rnd, tr)
        items.append(f"**{i + 1}\\. {title}**" if i == step else f"{i + 1}\\. {title}")
    return " · ".join(items)


@dataclass
class Walk:
    """The round shown, at the step shown, and its story (``round_story.story``; a tree round's
    also ``tree_story.tree_story``)."""

    trace: Trace
    index: int
    step: int
    story: insp.Story
    tree: tst.TreeStory | None = None

    @property
    def rnd(self) -> Round:
        return self.trace.rounds[self.index]

    @property
    def cfg(self) -> RunConfig:
        return self.trace.config


# --- the page's parts -------------------------------------------------------------------------------

def live_source() -> dict[str, Callable[[], Trace]]:
    """This session's Live run while it is still running and has drafted, as a source."""
    live = st.session_state.get("live")
    if live is not None and live.trace is not None and not live.sd_done and any(r.proposed for r in live.trace.rounds):
        return {_("This session's Live run, so far"): lambda: live.trace}
    return {}


def render_choice(state: InspectState) -> Walk | None:
    """The run and round pickers (sidebar) and the title; None (with the reason shown) when
    there is no drafted round to walk through."""
    ss = st.session_state
    sources = {**live_source(), **replay_sources(speculative_only=True)}
    with st.sidebar:
        st.selectbox(_("Run"), list(sources), key="inspect_source", on_change=new_round,
                     help=_("This session's last Live run, or a recorded one."))
    trace, problem = load_source(sources, ss.get("inspect_source"))
    rounds = insp.drafted_rounds(trace) if trace is not None else []

    st.markdown("## " + _("Inspect a round"))
    if trace is None or not rounds:
        sidebar_pair()
        st.info(problem or _("Run a speculative run on the Live page, or pick a recorded run in the sidebar: "
                             "this page walks through one of its rounds."), icon=":material/info:")
        return None

    if opens_afresh(state, trace, ss.get("inspect_round"), rounds):
        state.sig = run_sig(trace)
        ss["inspect_round"] = insp.default_round(trace)
        new_round()
    with st.sidebar:
        st.selectbox(_("Round"), rounds, key="inspect_round", format_func=lambda i: round_label(trace, i),
                     on_change=new_round,
                     help=_("Every round in which the draft proposed tokens, with how many of them were accepted "
                            "(2/4 ✓: two of four; in a token-tree run, of the tree's nodes). The page opens on one "
                            "with a rejection."))
    sidebar_pair()
    index = ss["inspect_round"]
    rnd = trace.rounds[index]
    state.steps = n_steps(rnd)
    state.step = min(state.step, state.steps - 1)
    tree = tst.tree_story(trace, index) if rnd.tree else None
    return Walk(trace, index, state.step, tree.base if tree is not None else insp.story(trace, index), tree)


def render_toolbar(state: InspectState, walk: Walk) -> None:
    """The caption, Back, Next (N), Start over, where we are, and the round's token strip."""
    step = walk.step
    st.caption(caption(walk.story, walk.rnd, walk.index, walk.cfg, _))
    bar = st.columns([1.2, 1.2, 1.4, 3.6], vertical_alignment="center")  # labels whole at 1280 px, in Chinese too
    bar[0].button(_("Back"), key="inspect_back", icon=":material/chevron_left:", width="stretch",
                  on_click=state.back, disabled=step == 0)
    bar[1].button(_("Next"), key="inspect_next", type="primary", icon=":material/chevron_right:", width="stretch",
                  shortcut="N", on_click=state.next, disabled=step == state.steps - 1,
                  help=_("The next step of this round (key N)."))
    bar[2].button(_("Start over"), key="inspect_restart", icon=":material/first_page:", width="stretch",
                  on_click=state.restart, disabled=step == 0)
    bar[3].markdown(steps_line(step, _, walk.rnd))
    if (strip := strip_phase(step, walk.rnd)) is not None:
        st.html(token_strip_html([], live=walk.rnd, phase=strip[0], shown=strip[1], tr=_))
    st.markdown(f"### {step + 1} · {step_title(step, walk.rnd, _)}")
