"""Theory: α, c and γ on sliders, and what Leviathan et al.'s formulas make of them: the
expected tokens per round and speedup against γ, the refined speedup with this machine's
measured verify curve, the region where speculative decoding loses, the best γ in words,
and the user's last Live run marked on the curves. Nothing here runs a model."""

import streamlit as st

from specviz import ui
from specviz.analysis import theory
from specviz.figures import theory as FT
from specviz.record.limits import MAX_GAMMA
from specviz.ui import pair as ui_pair
from specviz.ui.lang import _, language_switch
from specviz.ui.sources import verify_curve

ui.page_chrome()
language_switch()
ss = st.session_state
SHOWN_GAMMA = 16  # the γ axis of the figures (longer when the best γ is longer)

# --- the user's last Live run ----------------------------------------------------------------
live = ss.get("live")
trace = live.trace if live is not None else None
race = live.race if live is not None else None
measured = race.comparison.speedup if race is not None and race.comparison is not None else None
run = FT.run_point(trace, measured)


def use_run() -> None:
    """Set the sliders to the run's α, c and γ."""
    ss["theory_alpha"] = round(min(max(run.alpha, 0.0), 0.99), 2)
    ss["theory_c"] = round(min(max(run.c, 0.0), 1.0), 2)
    ss["theory_gamma"] = min(max(run.gamma, 1), SHOWN_GAMMA)


ss.setdefault("theory_alpha", 0.7)
ss.setdefault("theory_c", 0.2)
ss.setdefault("theory_gamma", 4)
with st.sidebar:
    st.slider(_("α · per-token acceptance"), 0.0, 0.99, step=0.01, key="theory_alpha",
              help=_("The probability that the target accepts one draft token (the same at every position)."))
    st.slider(_("c · cost ratio"), 0.0, 1.0, step=0.01, key="theory_c",
              help=_("One draft pass ÷ one target pass (one token each)."))
    st.slider(_("γ · draft length"), 1, SHOWN_GAMMA, key="theory_gamma")
    if run is not None:
        st.button(_("Use my run's α, c and γ"), key="theory_use_run", on_click=use_run,
                  icon=":material/my_location:")
ui.sidebar_pair()
alpha, c, gamma = float(ss["theory_alpha"]), float(ss["theory_c"]), int(ss["theory_gamma"])


# --- the measured verify curve, if this pair has one -------------------------------------------
pair = ui_pair.loaded_pair()  # the sidebar's pair once it has loaded: this page never waits for it
curve = verify_curve(pair)  # the LatencyModel of the cached measurement
verify = None
if curve is not None:
    t1 = curve.verify(1)
    verify = lambda k: curve.verify(k) / t1  # noqa: E731  the curve's shape: T(k) / T(1)

# --- the best γ, in words ----------------------------------------------------------------------
st.markdown("## " + _("Theory: what α, c and γ buy"))
best = theory.best_gamma(alpha, c, MAX_GAMMA)
s_best, s_gamma = theory.expected_speedup(alpha, best, c), theory.expected_speedup(alpha, gamma, c)
if alpha > c:
    verdict = _("With α = {alpha:.2f} and c = {c:.2f}, the best draft length is **γ = {best}**: an expected "
                "speedup of **×{s_best:.2f}** over the target alone. The slider's γ = {gamma} gives ×{s_gamma:.2f}.")
else:
    verdict = _("With α = {alpha:.2f} and c = {c:.2f}, no draft length gains: α ≤ c, so speculative decoding "
                "loses at every γ. The least bad is **γ = {best}** (×{s_best:.2f}); the slider's γ = {gamma} "
                "gives ×{s_gamma:.2f}.")
st.markdown(verdict.format(alpha=alpha, c=c, best=best, s_best=s_best, gamma=gamma, s_gamma=s_gamma))
if verify is not None:
    best_r = theory.best_gamma_refined(alpha, c, verify, MAX_GAMMA)
    s_r = theory.refined_speedup(alpha, best_r, c, verify)
    losing = theory.breakeven_alpha_refined(c, verify, MAX_GAMMA)
    if s_r > 1:
        refined_text = _("With this machine's measured verify curve (a pass over γ + 1 tokens costs T(γ + 1), "
                         "not one step T(1)), the best draft length is **γ = {best}**: ×{s:.2f}.")
    else:
        refined_text = _("With this machine's measured verify curve (a pass over γ + 1 tokens costs T(γ + 1), "
                         "not one step T(1)), no draft length gains at this α: at c = {c:.2f} it loses for "
                         "every α up to {losing:.2f}.")
    st.markdown(refined_text.format(best=best_r, s=s_r, c=c, losing=losing))
    st.caption(_("Verify curve measured on {when} ({device}, {dtype}, a context of {ctx} tokens): this "
                 "machine's c is {c:.2f}, and a pass over 8 tokens costs {r8:.2f}× a pass over 1. The refined "
                 "curve takes the slider's c and the measured shape T(k) / T(1).").format(
        when=curve.meta.get("measured_at", "?"), device=curve.meta.get("device", "?"),
        dtype=curve.meta.get("dtype", "?"), ctx=curve.meta.get("context_length", "?"), c=curve.c,
        r8=verify(8)))
elif pair is None:
    st.caption(_("The model pair is still loading: once it has loaded, this page also shows the speedup with "
                 "its measured verify-cost curve, if one is measured."))
else:
    st.caption(_("No verify-cost curve is measured for the loaded pair yet: the refined formula appears here "
                 "once the Cost curve page (or `specviz cost-curve`) has measured one."))

# --- the run -----------------------------------------------------------------------------------
if run is not None:
    said = _("**Your last Live run** (★ on the figures): γ = {gamma}, {tokens:.2f} tokens per round, so "
             "α ≈ {alpha:.2f} (inferred from the tokens per round, not the acceptance rate), and c = {c:.2f}. "
             "The formula predicts ×{predicted:.2f}.").format(
        gamma=run.gamma, tokens=run.tokens_per_round, alpha=run.alpha, c=run.c,
        predicted=theory.expected_speedup(run.alpha, run.gamma, run.c))
    if run.speedup is not None:
        said += " " + _("Raced against the target alone, it measured ×{speedup:.2f}.").format(speedup=run.speedup)
    if trace.config.policy != "constant":
        said += " " + _("(γ changed from round to round under the heuristic policy: the mean is shown.)")
    st.markdown(said)
else:
    st.caption(_("Run speculative decoding on the Live page and your run is marked on these curves."))

# --- the figures -------------------------------------------------------------------------------
labels = {
    "gamma_axis": _("γ · draft length"),
    "tokens_axis": _("expected tokens per round"),
    "speedup_axis": _("expected speedup (× target alone)"),
    "alpha_axis": _("α · per-token acceptance"),
    "c_axis": _("c · draft pass ÷ target pass"),
    "tokens_curve": _("E[tokens per round] at α = {alpha:.2f}"),
    "ceiling": _("limit 1 / (1 − α) = {limit:.2f}"),
    "simple": _("simple formula (verify = one target step)"),
    "refined": _("with the measured verify curve"),
    "breakeven": _("break-even (×1)"),
    "chosen": _("γ = {gamma}"),
    "best": _("best γ = {gamma}"),
    "run": _("your run: γ = {gamma}, α ≈ {alpha:.2f}"),
    "run_curve": _("at your run's α and c"),
    "run_measured": _("your run, measured"),
    "loses": _("speculative decoding loses (α ≤ c)"),
    "refined_boundary": _("break-even with the measured verify curve"),
    "sliders": _("the sliders: α = {alpha:.2f}, c = {c:.2f}"),
}
top = max(SHOWN_GAMMA, best)
left, right = st.columns(2)
with left:
    st.markdown("#### " + _("Tokens per round"))
    st.plotly_chart(FT.tokens_per_round_figure(alpha, gamma, top, run, labels), key="theory_tokens",
                    config={"displayModeBar": False})
    st.caption(_("A round emits the accepted prefix plus one token of the target's own, so at least 1 and at "
                 "most γ + 1. Longer drafts add less and less: the curve flattens towards 1 / (1 − α)."))
with right:
    st.markdown("#### " + _("Speedup"))
    st.plotly_chart(FT.speedup_figure(alpha, c, gamma, top, verify, run, labels), key="theory_speedup",
                    config={"displayModeBar": False})
    st.caption(_("Each draft token costs c of a target step whether it is accepted or not, so past the best γ "
                 "the speedup falls again. Below the dotted line speculative decoding is slower than the "
                 "target alone."))

left, right = st.columns([3, 2])
with left:
    st.markdown("#### " + _("Where speculative decoding loses"))
    boundary = FT.refined_boundary(verify, max_gamma=MAX_GAMMA) if verify is not None else None
    st.plotly_chart(FT.loss_region_figure(alpha, c, run, boundary, labels), key="theory_region",
                    config={"displayModeBar": False})
with right:
    st.markdown("#### " + _("The formulas"))
    st.markdown(_("Expected tokens per round (Leviathan et al. 2023, Eq. 1):"))
    st.latex(r"E = \frac{1-\alpha^{\gamma+1}}{1-\alpha}")
    st.markdown(_("Expected speedup when a verify pass costs one target step (Theorem 3.8):"))
    st.latex(r"S = \frac{1-\alpha^{\gamma+1}}{(1-\alpha)(\gamma c+1)}")
    st.markdown(_("With the measured cost T(k) of a target pass over k tokens: per round, γ draft passes and "
                  "one verify pass over γ + 1 tokens; the target alone pays T(1) per token:"))
    st.latex(r"S = \frac{E \cdot T(1)}{\gamma\, t_{\mathrm{draft}} + T(\gamma+1)}")
    no_gain = _("**No γ gains when α ≤ c** (simple formula): then α^i ≤ α ≤ c for every i, so a round's extra "
                "tokens α + … + α^γ never pay for its γc extra cost; when α > c, γ = 1 already gains "
                "(1 + α) / (1 + c) (Corollary 3.9).")
    if boundary is not None:
        larger = _("With a verify pass that grows with γ, the losing region is larger: it is found numerically "
                   "from this machine's measured verify curve, the dashed line.")
    else:
        larger = _("With a verify pass that grows with γ, the losing region is larger. It is found numerically "
                   "from a measured verify curve, and drawn as a dashed line once the Cost curve page has "
                   "measured one for the loaded pair.")
    st.markdown(no_gain + " " + larger)
st.page_link("pages/costs.py", label=_("The verify-cost curve: measure this machine's T(k)"),
             icon=":material/show_chart:")
