"""The Cost curve page: what one forward pass costs against the number of new tokens it reads,
for the draft and the target at batch 1, 4 and 16 (``specviz.measure.forward_costs``), and what
it does to c and to the speedup formula.

``costs_state`` reads the page's session state into a ``CostsState`` (the sidebar's repeats and
α, the pair's curve context, the cached measurement); the pure functions decide the words and
numbers (``measured_note``, ``breakeven_text``, ``speedup_rows``, ``best_gamma_text``,
``compute_bound_text``), and the ``render_*`` functions draw and measure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from specviz.analysis import theory
from specviz.analysis.metrics import fmt_ms
from specviz.figures import theory as theory_fig
from specviz.measure import forward_costs as C
from specviz.measure import sweep
from specviz.models.pair import ModelPair
from specviz.record.contention import Contention, describe
from specviz.record.errors import BadInput
from specviz.record.i18n import N_, Translator
from specviz.record.limits import MAX_GAMMA
from specviz.replay import latency
from specviz.replay.latency import LatencyModel
from specviz.ui.chrome import EXAMPLES
from specviz.ui.lang import _
from specviz.ui.pair import engine_client, running_client

TABLE_GAMMAS = (1, 2, 3, 4, 6, 8, 12, 16)

Found = tuple[list[dict[str, Any]], dict[str, Any]]  # a measurement: its rows and its meta


@dataclass
class CostsState:
    """The Cost curve page: the pair, the curve's grid and context, the sidebar's repeats and
    α, and the measurement found in the cache (or just made)."""

    pair: ModelPair
    repeats: int
    alpha: float
    grid: list = field(default_factory=lambda: list(C.SPARSE_CURVE_GRID))
    ctx: int = 0
    found: Found | None = None

    @property
    def device(self) -> str:
        return str(self.pair.device)

    @property
    def curve(self) -> LatencyModel | None:
        return latency.latency_model(self.found[0], meta=self.found[1]) if self.found is not None else None


def sidebar() -> None:
    """The repeats per point and the α of the speedup table."""
    with st.sidebar:
        st.number_input(_("Timed passes per point"), 1, 15, value=3, key="costs_repeats",
                        help=_("Each point is the median of this many passes, after one warm-up pass."))
        st.slider(_("α for the speedup table"), 0.0, 0.99, value=0.7, step=0.01, key="costs_alpha")


def cached(pair: ModelPair, ctx: int) -> Found | None:
    return C.cached_curve(pair.draft_name, pair.target_name, str(pair.device), pair.dtype, ctx,
                          grids=(C.CURVE_GRID, C.SPARSE_CURVE_GRID))


def costs_state(pair: ModelPair) -> CostsState:
    """The page's state, the sidebar drawn: its widgets' values and the cached curve."""
    ss = st.session_state
    grid = C.SPARSE_CURVE_GRID
    ctx = C.curve_context_length(pair.context_length, grid)
    return CostsState(pair=pair, repeats=int(ss["costs_repeats"]), alpha=float(ss["costs_alpha"]), grid=grid,
                      ctx=ctx, found=cached(pair, ctx))


# --- the words and numbers: pure ----------------------------------------------------------------

def measured_note(meta: dict, device: str, dtype: str, ctx: int, tr: Translator = _) -> str:
    """Where the curve comes from: when, on what, at what context, how many passes a point,
    and whether other work ran meanwhile."""
    note = tr(N_("Measured on {when} ({device}, {dtype}, a context of {ctx} tokens, the median of {repeats} passes "
                 "per point).")).format(when=meta.get("measured_at", "?"), device=meta.get("device", device),
                                        dtype=meta.get("dtype", dtype), ctx=meta.get("context_length", ctx),
                                        repeats=meta.get("repeats", "?"))
    if jobs := meta.get("contention"):
        note += " " + tr(N_("Other work ran meanwhile ({jobs}), so these timings are pessimistic.")).format(
            jobs=describe((Contention.of(c) for c in jobs), tr))
    return note


def how_long_sentence(seconds: float, source: str, tr: Translator = _) -> str:
    return tr(N_("Measuring takes about {time} on this machine, {source}.")).format(time=fmt_ms(seconds * 1000, tr),
                                                                                    source=source)


def breakeven_text(curve: LatencyModel, tr: Translator = _) -> str:
    """The α below which speculative decoding loses, by the simple formula and the refined one."""
    td = curve.draft(1)
    return tr(N_("The simple formula takes a verify pass to cost one target step T(1); the refined one "
                 "takes the measured T(γ + 1). Speculative decoding loses for α ≤ {simple:.2f} by the "
                 "first, for α ≤ {refined:.2f} by the second.")).format(
        simple=theory.breakeven_alpha(curve.c), refined=theory.breakeven_alpha_refined(td, curve.verify, MAX_GAMMA))


def speedup_rows(curve: LatencyModel, alpha: float, tr: Translator = _) -> list[dict[str, Any]]:
    """The table: per γ, the verify pass, its shape T(γ + 1) ÷ T(1), and both speedups at α."""
    t1, td = curve.verify(1), curve.draft(1)
    return [{
        "γ": g,
        tr(N_("verify pass T(γ + 1)")): fmt_ms(curve.verify(g + 1), tr),
        tr(N_("T(γ + 1) ÷ T(1)")): f"{curve.verify(g + 1) / t1:.2f}",
        tr(N_("speedup, simple")): f"×{theory.expected_speedup(alpha, g, curve.c):.2f}",
        tr(N_("speedup, refined")): f"×{theory.refined_speedup(alpha, g, td, curve.verify):.2f}",
    } for g in TABLE_GAMMAS]


def best_gamma_text(curve: LatencyModel, alpha: float, tr: Translator = _) -> str:
    td = curve.draft(1)
    return tr(N_("At α = {alpha:.2f}: the best γ is {simple} by the simple formula and {refined} with the "
                 "measured curve.")).format(alpha=alpha, simple=theory.best_gamma(alpha, curve.c, MAX_GAMMA),
                                            refined=theory.best_gamma_refined(alpha, td, curve.verify, MAX_GAMMA))


def compute_bound_text(curve: LatencyModel | None, dtype: str, tr: Translator = _) -> str:
    """Why fp32 on a CPU is compute-bound, with the reference machine's numbers (named: the
    machine of docs/design.md's Measured timings), and this machine's when the curve is measured."""
    ref = theory.REFERENCE_TARGET_MS
    text = tr(N_(
        "**Compute-bound: every token costs.** Where the CPU's arithmetic, not its memory, is the limit (fp32 on a "
        "CPU), every extra token costs. On the reference machine of docs/design.md (a 2-core AMD EPYC with "
        "AVX512-BF16), the default pair's target took {f5:.0f} ms for a pass over 5 tokens against {f1:.0f} ms for 1 "
        "in float32, and {b5:.0f} ms against {b1:.0f} ms in bfloat16. A verify pass then costs several target "
        "steps, and the simple formula, which counts it as one, promises too much.")).format(
        f5=ref["float32"][5], f1=ref["float32"][1], b5=ref["bfloat16"][5], b1=ref["bfloat16"][1])
    if curve is not None:
        text += " " + tr(N_("On this machine ({dtype}, the curve above): {t5} for 5 tokens against {t1} for "
                            "1.")).format(dtype=curve.meta.get("dtype", dtype), t5=fmt_ms(curve.verify(5), tr),
                                          t1=fmt_ms(curve.verify(1), tr))
    return text


# --- measuring and drawing ------------------------------------------------------------------------

def estimate(state: CostsState) -> tuple[float, str]:
    """Seconds a measurement will take here (``sweep.measure_seconds``), and where the pass times come
    from: the curve measured last (exact per point), else the short probe run Tune makes (once
    per pair in a session, shared with Tune)."""
    pair = state.pair
    if state.found:
        return (sweep.measure_seconds(state.found[0], state.grid, state.repeats, state.ctx),
                _("from the last measurement"))
    probes = st.session_state.setdefault("sweep_costs", {})
    key = (pair.draft_name, pair.target_name, state.device, pair.dtype)
    if key not in probes:
        with st.spinner(_("Timing a short probe run to estimate how long measuring takes…")):
            probes[key] = sweep.probe_costs(pair, EXAMPLES[next(iter(EXAMPLES))], lock=engine_client())
    return (sweep.measure_seconds(probes[key], state.grid, state.repeats, state.ctx),
            _("estimated from a short probe run"))


def how_long_text(state: CostsState) -> str:
    """The estimate in one sentence (never a traceback: it is a courtesy)."""
    try:
        seconds, source = estimate(state)
    except Exception as exc:
        return _("How long it takes could not be estimated: ") + f"{type(exc).__name__}: {exc}"
    return how_long_sentence(seconds, source)


def render_intro(state: CostsState) -> None:
    st.markdown("## " + _("The verify-cost curve"))
    st.markdown(_("A target pass that checks γ draft tokens reads γ + 1 new tokens. How much more does it cost "
                  "than a pass over one token? Each line is one model at one batch size: the time of one forward "
                  "pass against the new tokens it reads, each sequence on top of a context of {ctx} tokens.").format(
        ctx=state.ctx))


def render_measure(state: CostsState) -> None:
    """The Measure button and its estimate; measures when pressed (``state.found`` then holds the
    new curve); the curve, or what to do without one."""
    found = state.found
    head = st.columns([1, 1, 3], vertical_alignment="center")
    label = _("Measure again") if found else _("Measure")
    how_long = how_long_text(state)
    pressed = head[0].button(label, key="costs_measure", type="secondary" if found else "primary",
                             icon=":material/timer:",
                             help=_("Times {n} points: both models, batch 1, 4 and 16, k = 1, 2, 4, 8, 16, 32 new "
                                    "tokens, each {repeats} times after a warm-up pass. {how_long} Live runs wait "
                                    "meanwhile.").format(n=len(state.grid), repeats=state.repeats,
                                                         how_long=how_long))
    head_note = head[2].empty()  # the estimate, or once measured where the curve comes from
    if not found:
        head_note.caption(how_long)
    if pressed:
        bar = st.progress(0.0, text=_("Waiting for the models…"))

        def tell(fraction: float, message: str) -> None:
            pct = int(100 * min(max(fraction, 0.0), 1.0))
            bar.progress(pct / 100, text=_("Measuring forward passes: {pct}%").format(pct=pct))

        try:
            # in the engine worker, its turn taken: no live round is timed meanwhile, nor the reverse
            state.found = running_client().call(f"{C.__name__}:load_or_measure", context_length=state.ctx,
                                                grid=list(state.grid), progress=tell, refresh=True,
                                                repeats=state.repeats)
            bar.empty()
            how_long = how_long_text(state)  # now from this measurement
        except BadInput as exc:
            bar.empty()
            st.error(_("The curve cannot be measured: ") + str(exc), icon=":material/error:")

    if not state.found:
        st.info(_("No curve is measured yet for this pair on this machine ({device}, {dtype}). Press Measure "
                  "(or run `specviz cost-curve` once): the result is kept, and this page and the Theory page "
                  "read it from then on.").format(device=state.device, dtype=state.pair.dtype), icon=":material/info:")
        return
    rows, meta = state.found
    st.plotly_chart(theory_fig.cost_curve_figure(rows, tr=_), key="costs_fig", config={"displayModeBar": False})
    head_note.caption(measured_note(meta, state.device, state.pair.dtype, state.ctx) + " " + how_long)
    render_feeds(state.curve, state.alpha)


def render_feeds(curve: LatencyModel, alpha: float) -> None:
    """What the curve feeds: c, the simple and refined formulas, the speedup table at α."""
    t1, td = curve.verify(1), curve.draft(1)
    st.markdown("#### " + _("What the curve feeds: c and the speedup"))
    left, right = st.columns([2, 3])
    with left:
        st.latex(r"c = \frac{t_{\mathrm{draft}}}{T(1)} = \frac{%.1f\ \mathrm{ms}}{%.1f\ \mathrm{ms}} = %.2f"
                 % (td, t1, curve.c))
        st.latex(r"S = \frac{1-\alpha^{\gamma+1}}{(1-\alpha)(\gamma c+1)}")
        st.latex(r"S_{\mathrm{refined}} = \frac{1-\alpha^{\gamma+1}}{1-\alpha}\cdot"
                 r"\frac{T(1)}{\gamma\, t_{\mathrm{draft}} + T(\gamma+1)}")
        st.markdown(breakeven_text(curve))
    with right:
        st.dataframe(speedup_rows(curve, alpha), hide_index=True, width="stretch")
        st.caption(best_gamma_text(curve, alpha))


def render_shape(state: CostsState) -> None:
    """Why the curve is flat, then rises: memory-bound, compute-bound, batches."""
    st.markdown("#### " + _("Why the curve is flat, then rises"))
    cols = st.columns(3, gap="large")
    cols[0].markdown(_(
        "**Memory-bound: checking 8 tokens costs about as much as checking 1.** A pass over one token reads every "
        "weight of the model from memory and does little arithmetic with each. A few more tokens reuse the same "
        "weights while they are at hand, so the pass barely takes longer. In bf16 on a CPU with bf16 arithmetic "
        "(AVX512-BF16, AMX) the target's curve is nearly flat: this is what makes speculative decoding pay."))
    cols[1].markdown(compute_bound_text(state.curve, state.pair.dtype))
    cols[2].markdown(_(
        "**Batches bring the knee sooner.** A server verifies many sequences at once: batch × (γ + 1) tokens are in "
        "flight in one pass. The more sequences, the fewer extra draft tokens fit before the pass turns "
        "compute-bound: compare the batch 16 line with batch 1. That is why speculative decoding's gain shrinks "
        "under high concurrency."))
