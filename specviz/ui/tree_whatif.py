"""The token-tree what-if, under a greedy run on the Replay page: what a static tree of a chosen
shape would have accepted on the run, beside the chain the run used, with the estimated tok/s of
each (``specviz.replay.tree_what_if``, drawn by ``specviz.figures.tree.tree_what_if_figure``).

The pure functions decide the shape (``shape_choice``: typed text or a preset, checked, with a
message in the page's language) and the costs (``tree_costs``: the run's schedule costs, with the
verify passes it never made taken from this machine's cost curve when one is measured);
``render_tree_what_if`` draws the section. No model runs.
"""

from __future__ import annotations

import streamlit as st

from specviz import figures as F
from specviz.analysis import theory
from specviz.figures import tree as FT
from specviz.measure import forward_costs as C
from specviz.record.errors import BadInput
from specviz.record.i18n import N_, Translator
from specviz.record.run_trace import Trace
from specviz.replay import latency
from specviz.replay import tree_what_if as T
from specviz.replay import what_if
from specviz.ui.lang import _
from specviz.ui.sources import schedule_costs

TEXT_KEY, PRESET_KEY = "tree_shape_text", "tree_shape_preset"
DEFAULT_SHAPE = "4,2,1,1"
PRESETS = ("2,1,1,1", "4,2,1,1", "4,2,2,1", "2,2,2,2", "8,1,1")
BEST = "best"  # the preset that picks the best shape of the family for this run
WHY_NOT = {  # what_if.NOT_REPLAYABLE's keys, as the page says them
    "autoregressive": N_("it is a target-alone run: nothing was drafted"),
    "sampling": N_("it is a sampling run: the ranks that replay a tree are recorded for greedy runs only"),
    "ngram": N_("its drafter is the n-gram lookup, which has no draft model to branch"),
    "no_ranks": N_("it holds no draft ranks (record it again with this version of specviz)"),
    "too_short": N_("it is too short to time a replay's passes"),
}


def shape_choice(text: str, tr: Translator = _) -> tuple[tuple[int, ...] | None, str | None]:
    """The shape typed (``4,2,2,1``), or (None, why not, in ``tr``'s language)."""
    try:
        return T.parse_shape(text, tr), None
    except BadInput as exc:
        return None, str(exc)


def reference_curve(dtype: str) -> latency.LatencyModel | None:
    """The reference machine's verify curve in ``dtype`` (docs/design.md's Measured timings: the
    target at 1, 5 and 9 tokens, ``theory.REFERENCE_TARGET_MS``), or None for another dtype."""
    ref = theory.REFERENCE_TARGET_MS.get(dtype)
    return latency.LatencyModel(draft_ms={1: 1.0}, verify_ms=dict(ref), source="reference",
                                meta={"dtype": dtype}) if ref else None


def tree_costs(trace: Trace, curve: latency.LatencyModel | None = None,
               tr: Translator = _) -> tuple[latency.LatencyModel, str, bool]:
    """The costs to time the what-if with, a sentence saying where they come from, and whether
    they are measured on this machine: the run's schedule costs (``schedule_costs``: this
    machine's measured passes at the run's context when cached, else the run's own); where only
    the run's own, its verify passes wider than it made come from ``curve`` (this machine's cost
    curve for the run's pair, device and dtype) when there is one, else from the shape of the
    reference machine's curve (``reference_curve``), scaled to the run's own passes."""
    costs, note, measured = schedule_costs(trace)
    if measured:
        return costs, note, measured
    if curve is not None:
        note += " " + tr(N_("Passes wider than the run made: this machine's measured cost curve, scaled to the "
                            "run's own passes."))
        return T.with_curve(costs, curve), note, True
    if (ref := reference_curve(trace.config.dtype)) is not None:
        note += " " + tr(N_("Verify passes wider than the run made: the shape of the reference machine's verify "
                            "curve in {dtype} (docs/design.md: 1, 5 and 9 tokens), scaled to the run's own "
                            "passes.")).format(dtype=trace.config.dtype)
        costs = T.with_curve(costs, ref)
    return costs, note, False


def run_curve(trace: Trace) -> latency.LatencyModel | None:
    """This machine's cost curve for the run's pair, device and dtype, when one was measured."""
    cfg = trace.config
    found = C.cached_curve(cfg.draft, cfg.target, cfg.device, cfg.dtype)
    return latency.latency_model(found[0], meta=found[1]) if found is not None else None


def _pick_preset() -> None:
    """A preset chosen: it becomes the typed shape (the best one is decided when drawn)."""
    ss = st.session_state
    if (preset := ss.get(PRESET_KEY)) and preset != BEST:
        ss[TEXT_KEY] = preset


def render_tree_what_if(trace: Trace) -> None:
    """The section: the shape chooser, the figure, the numbers, and what they rest on."""
    st.markdown("#### " + _("What if the draft had proposed a token tree?"))
    if (why := what_if.why_not_replayable(trace)) is not None:
        st.info(_("This run cannot be replayed as a tree: {why}. Pick a greedy speculative run.").format(
            why=_(WHY_NOT[why])), icon=":material/account_tree:")
        return
    st.caption(_("A tree gives each guess several alternatives: every node at depth d − 1 gets the draft's top w_d "
                 "tokens as children, and the target checks all of them in one verify pass. The run recorded where "
                 "the target's token ranked among the draft's guesses at every position, so this replays the same "
                 "tokens under a tree with no model: a position is accepted when its rank is below the width at "
                 "its depth."))
    ss = st.session_state
    ss.setdefault(TEXT_KEY, DEFAULT_SHAPE)
    curve = run_curve(trace)
    costs, note, _measured = tree_costs(trace, curve)
    left, right = st.columns([2, 3], vertical_alignment="bottom")
    right.pills(_("Presets"), [*PRESETS, BEST], key=PRESET_KEY, on_change=_pick_preset,
               format_func=lambda p: _("best for this run") if p == BEST else p)
    if ss.get(PRESET_KEY) == BEST:
        best = T.best_shapes(trace, costs)[0]
        ss[TEXT_KEY] = T.shape_text(best.shape)
    left.text_input(_("Tree shape: the width at each depth"), key=TEXT_KEY,
                     help=_("Widths separated by commas, from the root down: 4,2,2,1 gives the root 4 children, "
                            "each of those 2, and so on. 1,1,1,1 is a chain of 4."))
    shape, error = shape_choice(ss[TEXT_KEY])
    if shape is None:
        st.error(error, icon=":material/error:")
        return
    cmp = T.compare(trace, shape, costs)
    st.plotly_chart(FT.tree_what_if_figure(cmp.chain, cmp.tree, tr=_), key="tree_whatif_fig",
                    config={"displayModeBar": False})
    cols = st.columns(4)
    chain, tree = cmp.chain, cmp.tree
    cols[0].metric(_("Tokens / round"), f"{tree.tokens_per_round:.2f}",
                   f"{tree.tokens_per_round - chain.tokens_per_round:+.2f}",
                   help=_("The tree's, and its difference from the chain's."))
    cols[1].metric(_("Rounds"), str(len(tree.rounds)), str(len(tree.rounds) - len(chain.rounds)), delta_color="inverse")
    cols[2].metric(_("Verify pass"), F.fmt_ms(costs.verify(tree.nodes + 1), _),
                   help=_("One target pass over the tree's {n} nodes and the root; the chain's over {k} tokens: "
                          "{chain_ms}.").format(n=tree.nodes, k=chain.nodes + 1,
                                                 chain_ms=F.fmt_ms(costs.verify(chain.nodes + 1), _)))
    cols[3].metric(_("Estimated tok/s"), f"{tree.tokens_per_second:.2f}", f"{cmp.speedup - 1:+.0%}",
                   help=_("The tree's estimated tokens per second, and its ratio to the chain's."))
    best = T.best_shapes(trace, costs)[0]
    st.caption(_("Best static shape for this run among the presets and the chains of γ = 1 to 8: {shape}, "
                 "≈{tps:.2f} tok/s.").format(shape=best.label(_), tps=best.tokens_per_second) + " " + note)
    if tree.extrapolated:
        widest = max(T.levels(tree.shape)[:-1], default=1)
        st.warning(_("This run never timed passes as wide as this tree's (a verify pass over {k} tokens, draft passes "
                     "over up to {m} nodes), and no cost curve of this machine for its pair is measured: their cost "
                     "is stretched from the run's widest passes, so the tok/s is a rough estimate. Measure the curve "
                     "on the Cost curve page.").format(k=tree.nodes + 1, m=widest), icon=":material/warning:")
