"""The Theory page: α, c and γ on sliders, and what Leviathan et al.'s formulas make of them.

``theory_state`` reads the page's session state into a ``TheoryState`` (the sliders, the
user's last Live run as a ``RunPoint``, this machine's measured verify curve); the pure
functions below decide the words (``verdict_text``, ``refined_text``, ``curve_caption``,
``run_text``, ``losing_text``), and the ``render_*`` functions draw. Nothing here runs a model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import streamlit as st

from specviz.analysis import theory
from specviz.analysis.metrics import varying_gamma_note
from specviz.figures import theory as theory_fig
from specviz.record.i18n import N_, Translator
from specviz.record.limits import MAX_GAMMA
from specviz.record.run_trace import Trace
from specviz.replay.latency import LatencyModel
from specviz.ui import pair as ui_pair
from specviz.ui.lang import _
from specviz.ui.sources import verify_curve

SHOWN_GAMMA = 16  # the γ axis of the figures (longer when the best γ is longer)
DEFAULTS = {"theory_alpha": 0.7, "theory_c": 0.2, "theory_gamma": 4}


@dataclass
class TheoryState:
    """What the Theory page shows: the sliders' α, c and γ, the user's last Live run (its
    trace and its point on the curves), and the loaded pair's measured verify curve."""

    alpha: float
    c: float
    gamma: int
    run: theory_fig.RunPoint | None = None
    trace: Trace | None = None
    curve: LatencyModel | None = None
    pair_loaded: bool = False

    @property
    def verify(self) -> Callable[[int], float] | None:
        """The measured curve's shape T(k) / T(1), or None without a curve."""
        if self.curve is None:
            return None
        curve, t1 = self.curve, self.curve.verify(1)
        return lambda k: curve.verify(k) / t1

    @property
    def best(self) -> int:
        return theory.best_gamma(self.alpha, self.c, MAX_GAMMA)

    @property
    def top(self) -> int:
        """The figures' longest γ."""
        return max(SHOWN_GAMMA, self.best)


def last_run() -> tuple[Trace | None, theory_fig.RunPoint | None]:
    """The user's last Live run (this session's), and its point on the curves."""
    live = st.session_state.get("live")
    trace = live.trace if live is not None else None
    race = live.race if live is not None else None
    measured = race.comparison.speedup if race is not None and race.comparison is not None else None
    return trace, theory_fig.run_point(trace, measured)


def sliders_for(run: theory_fig.RunPoint) -> dict[str, float | int]:
    """The sliders' values for a run's α, c and γ, clamped to their ranges."""
    return {"theory_alpha": round(min(max(run.alpha, 0.0), 0.99), 2),
            "theory_c": round(min(max(run.c, 0.0), 1.0), 2),
            "theory_gamma": min(max(run.gamma, 1), SHOWN_GAMMA)}


def use_run() -> None:
    """Set the sliders to the last run's α, c and γ (the button's callback)."""
    _trace, run = last_run()
    if run is not None:
        st.session_state.update(sliders_for(run))


def sidebar(run: theory_fig.RunPoint | None) -> None:
    """The sliders (seeded once per session), and the button that sets them to the run."""
    ss = st.session_state
    for key, value in DEFAULTS.items():
        ss.setdefault(key, value)
    with st.sidebar:
        st.slider(_("α · per-token acceptance"), 0.0, 0.99, step=0.01, key="theory_alpha",
                  help=_("The probability that the target accepts one draft token (the same at every position)."))
        st.slider(_("c · cost ratio"), 0.0, 1.0, step=0.01, key="theory_c",
                  help=_("One draft pass ÷ one target pass (one token each)."))
        st.slider(_("γ · draft length"), 1, SHOWN_GAMMA, key="theory_gamma")
        if run is not None:
            st.button(_("Use my run's α, c and γ"), key="theory_use_run", on_click=use_run,
                      icon=":material/my_location:")


def theory_state() -> TheoryState:
    """The page's state: the sliders as drawn, the last run, the loaded pair's curve (this page
    never waits for the pair to load)."""
    ss = st.session_state
    trace, run = last_run()
    pair = ui_pair.loaded_pair()
    return TheoryState(alpha=float(ss["theory_alpha"]), c=float(ss["theory_c"]), gamma=int(ss["theory_gamma"]),
                       run=run, trace=trace, curve=verify_curve(pair), pair_loaded=pair is not None)


# --- the words: pure -----------------------------------------------------------------------------

def verdict_text(alpha: float, c: float, gamma: int, tr: Translator = _) -> str:
    """The best γ at the sliders' α and c, and what the slider's γ gives, in words."""
    best = theory.best_gamma(alpha, c, MAX_GAMMA)
    s_best, s_gamma = theory.expected_speedup(alpha, best, c), theory.expected_speedup(alpha, gamma, c)
    if alpha > c:
        verdict = tr(N_("With α = {alpha:.2f} and c = {c:.2f}, the best draft length is **γ = {best}**: an expected "
                     "speedup of **×{s_best:.2f}** over the target alone. The slider's γ = {gamma} gives "
                     "×{s_gamma:.2f}."))
    else:
        verdict = tr(N_("With α = {alpha:.2f} and c = {c:.2f}, no draft length gains: α ≤ c, so speculative "
                        "decoding loses at every γ. The least bad is **γ = {best}** (×{s_best:.2f}); the slider's γ = {gamma} "
                     "gives ×{s_gamma:.2f}."))
    return verdict.format(alpha=alpha, c=c, best=best, s_best=s_best, gamma=gamma, s_gamma=s_gamma)


def refined_text(alpha: float, c: float, verify: Callable[[int], float], tr: Translator = _) -> str:
    """The best γ with the measured verify curve's shape, or where it loses, in words."""
    best_r = theory.best_gamma_refined(alpha, c, verify, MAX_GAMMA)
    s_r = theory.refined_speedup(alpha, best_r, c, verify)
    losing = theory.breakeven_alpha_refined(c, verify, MAX_GAMMA)
    if s_r > 1:
        text = tr(N_("With this machine's measured verify curve (a pass over γ + 1 tokens costs T(γ + 1), "
                  "not one step T(1)), the best draft length is **γ = {best}**: ×{s:.2f}."))
    else:
        text = tr(N_("With this machine's measured verify curve (a pass over γ + 1 tokens costs T(γ + 1), "
                  "not one step T(1)), no draft length gains at this α: at c = {c:.2f} it loses for "
                  "every α up to {losing:.2f}."))
    return text.format(best=best_r, s=s_r, c=c, losing=losing)


def curve_caption(state: TheoryState, tr: Translator = _) -> str:
    """Under the refined verdict: where the verify curve comes from, or why there is none."""
    if state.curve is not None:
        meta = state.curve.meta
        return tr(N_("Verify curve measured on {when} ({device}, {dtype}, a context of {ctx} tokens): this "
                  "machine's c is {c:.2f}, and a pass over 8 tokens costs {r8:.2f}× a pass over 1. The refined "
                  "curve takes the slider's c and the measured shape T(k) / T(1).")).format(
            when=meta.get("measured_at", "?"), device=meta.get("device", "?"), dtype=meta.get("dtype", "?"),
            ctx=meta.get("context_length", "?"), c=state.curve.c, r8=state.verify(8))
    if not state.pair_loaded:
        return tr(N_("The model pair is still loading: once it has loaded, this page also shows the speedup with "
                  "its measured verify-cost curve, if one is measured."))
    return tr(N_("No verify-cost curve is measured for the loaded pair yet: the refined formula appears here "
              "once the Cost curve page (or `specviz cost-curve`) has measured one."))


def run_text(run: theory_fig.RunPoint, policy: str, tr: Translator = _) -> str:
    """The last Live run in words: its γ, tokens per round, inferred α, c, the formula's
    prediction and, when raced, its measured speedup."""
    said = tr(N_("**Your last Live run** (★ on the figures): γ = {gamma}, {tokens:.2f} tokens per round, so "
              "α ≈ {alpha:.2f} (inferred from the tokens per round, not the acceptance rate), and c = {c:.2f}. "
              "The formula predicts ×{predicted:.2f}.")).format(
        gamma=run.gamma, tokens=run.tokens_per_round, alpha=run.alpha, c=run.c,
        predicted=theory.expected_speedup(run.alpha, run.gamma, run.c))
    if run.speedup is not None:
        said += " " + tr(N_("Raced against the target alone, it measured ×{speedup:.2f}.")).format(speedup=run.speedup)
    return said + varying_gamma_note(policy, tr=tr)


def losing_text(measured: bool, tr: Translator = _) -> str:
    """Beside the formulas: why no γ gains when α ≤ c, and the larger losing region of a
    measured verify curve (drawn when there is one)."""
    no_gain = tr(N_("**No γ gains when α ≤ c** (simple formula): then α^i ≤ α ≤ c for every i, so a round's "
                    "extra tokens α + … + α^γ never pay for its γc extra cost; when α > c, γ = 1 already gains "
                 "(1 + α) / (1 + c) (Corollary 3.9)."))
    if measured:
        larger = tr(N_("With a verify pass that grows with γ, the losing region is larger: it is found numerically "
                    "from this machine's measured verify curve, the dashed line."))
    else:
        larger = tr(N_("With a verify pass that grows with γ, the losing region is larger. It is found numerically "
                    "from a measured verify curve, and drawn as a dashed line once the Cost curve page has "
                    "measured one for the loaded pair."))
    return no_gain + " " + larger


# --- drawing -----------------------------------------------------------------------------------

def render_verdicts(state: TheoryState) -> None:
    """The title, the best γ in words (simple, then refined), and the last run."""
    st.markdown("## " + _("Theory: what α, c and γ buy"))
    st.markdown(verdict_text(state.alpha, state.c, state.gamma))
    if state.verify is not None:
        st.markdown(refined_text(state.alpha, state.c, state.verify))
    st.caption(curve_caption(state))
    if state.run is not None:
        st.markdown(run_text(state.run, state.trace.config.policy))
    else:
        st.caption(_("Run speculative decoding on the Live page and your run is marked on these curves."))


def render_figures(state: TheoryState) -> None:
    """Tokens per round and the speedup against γ; the losing region beside the formulas."""
    alpha, c, gamma, run, verify = state.alpha, state.c, state.gamma, state.run, state.verify
    left, right = st.columns(2)
    with left:
        st.markdown("#### " + _("Tokens per round"))
        st.plotly_chart(theory_fig.tokens_per_round_figure(alpha, gamma, state.top, run, tr=_), key="theory_tokens",
                        config={"displayModeBar": False})
        st.caption(_("A round emits the accepted prefix plus one token of the target's own, so at least 1 and at "
                     "most γ + 1. Longer drafts add less and less: the curve flattens towards 1 / (1 − α)."))
    with right:
        st.markdown("#### " + _("Speedup"))
        st.plotly_chart(theory_fig.speedup_figure(alpha, c, gamma, state.top, verify, run, tr=_), key="theory_speedup",
                        config={"displayModeBar": False})
        st.caption(_("Each draft token costs c of a target step whether it is accepted or not, so past the best γ "
                     "the speedup falls again. Below the dotted line speculative decoding is slower than the "
                     "target alone."))

    left, right = st.columns([3, 2])
    with left:
        st.markdown("#### " + _("Where speculative decoding loses"))
        boundary = theory_fig.refined_boundary(verify, max_gamma=MAX_GAMMA) if verify is not None else None
        st.plotly_chart(theory_fig.loss_region_figure(alpha, c, run, boundary, tr=_), key="theory_region",
                        config={"displayModeBar": False})
    with right:
        render_formulas(boundary is not None)


def render_formulas(measured: bool) -> None:
    """Leviathan et al.'s formulas, the refined one, and when no γ gains."""
    st.markdown("#### " + _("The formulas"))
    st.markdown(_("Expected tokens per round (Leviathan et al. 2023, Eq. 1):"))
    st.latex(r"E = \frac{1-\alpha^{\gamma+1}}{1-\alpha}")
    st.markdown(_("Expected speedup when a verify pass costs one target step (Theorem 3.8):"))
    st.latex(r"S = \frac{1-\alpha^{\gamma+1}}{(1-\alpha)(\gamma c+1)}")
    st.markdown(_("With the measured cost T(k) of a target pass over k tokens: per round, γ draft passes and "
                  "one verify pass over γ + 1 tokens; the target alone pays T(1) per token:"))
    st.latex(r"S = \frac{E \cdot T(1)}{\gamma\, t_{\mathrm{draft}} + T(\gamma+1)}")
    st.markdown(losing_text(measured))
