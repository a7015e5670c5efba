"""Cost curve: what one forward pass costs against the number of new tokens it reads, for
the draft and the target at batch 1, 4 and 16: the verify-cost curve, measured once per
pair, device and dtype and cached (``specviz.measure.forward_costs``), and what it does to c and to the
speedup formula."""

import streamlit as st

from specviz import BadInput, ui
from specviz.analysis import theory
from specviz.analysis.metrics import fmt_ms
from specviz.figures import theory as FT
from specviz.measure import forward_costs as C
from specviz.measure import sweep as S
from specviz.record.contention import Contention, describe
from specviz.record.limits import MAX_GAMMA
from specviz.replay import latency
from specviz.ui.controller import ENGINE_LOCK
from specviz.ui.lang import _, language_switch

ui.page_chrome()
language_switch()
ss = st.session_state
pair = ui.require_pair()
if pair is None:
    st.stop()

with st.sidebar:
    st.number_input(_("Timed passes per point"), 1, 15, value=3, key="costs_repeats",
                    help=_("Each point is the median of this many passes, after one warm-up pass."))
    st.slider(_("α for the speedup table"), 0.0, 0.99, value=0.7, step=0.01, key="costs_alpha")
ui.sidebar_pair()

grid = C.SPARSE_CURVE_GRID
ctx = C.curve_context_length(pair.context_length, grid)
device = str(pair.device)


def cached():
    return C.cached_curve(pair.draft_name, pair.target_name, device, pair.dtype, ctx,
                          grids=(C.CURVE_GRID, C.SPARSE_CURVE_GRID))


st.markdown("## " + _("The verify-cost curve"))
st.markdown(_("A target pass that checks γ draft tokens reads γ + 1 new tokens. How much more does it cost "
              "than a pass over one token? Each line is one model at one batch size: the time of one forward "
              "pass against the new tokens it reads, each sequence on top of a context of {ctx} tokens.").format(
    ctx=ctx))

def estimate() -> tuple[float, str]:
    """Seconds a measurement will take here (``S.measure_seconds``), and where the pass times come
    from: the curve measured last (exact per point), else the short probe run Tune makes (once
    per pair in a session, shared with Tune)."""
    repeats = int(ss["costs_repeats"])
    if found:
        return S.measure_seconds(found[0], grid, repeats, ctx), _("from the last measurement")
    probes = ss.setdefault("sweep_costs", {})
    key = (pair.draft_name, pair.target_name, device, pair.dtype)
    if key not in probes:
        with st.spinner(_("Timing a short probe run to estimate how long measuring takes…")):
            probes[key] = S.probe_costs(pair, ui.EXAMPLES[next(iter(ui.EXAMPLES))], lock=ENGINE_LOCK)
    return S.measure_seconds(probes[key], grid, repeats, ctx), _("estimated from a short probe run")


def how_long_text() -> str:
    """The estimate in one sentence (never a traceback: it is a courtesy)."""
    try:
        seconds, source = estimate()
    except Exception as exc:
        return _("How long it takes could not be estimated: ") + f"{type(exc).__name__}: {exc}"
    return _("Measuring takes about {time} on this machine, {source}.").format(time=fmt_ms(seconds * 1000),
                                                                                source=source)


found = cached()
head = st.columns([1, 1, 3], vertical_alignment="center")
label = _("Measure again") if found else _("Measure")
how_long = how_long_text()
pressed = head[0].button(label, key="costs_measure", type="secondary" if found else "primary",
                         icon=":material/timer:",
                         help=_("Times {n} points: both models, batch 1, 4 and 16, k = 1, 2, 4, 8, 16, 32 new "
                                "tokens, each {repeats} times after a warm-up pass. {how_long} Live runs wait "
                                "meanwhile.").format(n=len(grid), repeats=int(ss["costs_repeats"]),
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
        with ENGINE_LOCK:  # no live round is timed while the curve is measured, nor the reverse
            rows, meta = C.load_or_measure(pair, context_length=ctx, grid=grid, progress=tell,
                                           refresh=True, repeats=int(ss["costs_repeats"]))
        found = (rows, meta)
        bar.empty()
        how_long = how_long_text()  # now from this measurement
    except BadInput as exc:
        bar.empty()
        st.error(_("The curve cannot be measured: ") + str(exc), icon=":material/error:")

if not found:
    st.info(_("No curve is measured yet for this pair on this machine ({device}, {dtype}). Press Measure "
              "(or run `specviz cost-curve` once): the result is kept, and this page and the Theory page "
              "read it from then on.").format(device=device, dtype=pair.dtype), icon=":material/info:")
else:
    rows, meta = found
    labels = {"ms_axis": _("one forward pass (ms)"), "k_axis": _("new tokens per pass (k = γ + 1 in a verify pass)"),
              "draft": _("draft"), "target": _("target"), "batch": _("batch {batch}"),
              "pass_hover": _("k = %{x}: %{y:.1f} ms")}
    st.plotly_chart(FT.cost_curve_figure(rows, labels), key="costs_fig", config={"displayModeBar": False})
    note = _("Measured on {when} ({device}, {dtype}, a context of {ctx} tokens, the median of {repeats} passes "
             "per point).").format(when=meta.get("measured_at", "?"), device=meta.get("device", device),
                                   dtype=meta.get("dtype", pair.dtype), ctx=meta.get("context_length", ctx),
                                   repeats=meta.get("repeats", "?"))
    if jobs := meta.get("contention"):
        note += " " + _("Other work ran meanwhile ({jobs}), so these timings are pessimistic.").format(
            jobs=describe((Contention.of(c) for c in jobs), _))
    head_note.caption(note + " " + how_long)

    # --- what the curve feeds: c and the refined formula --------------------------------------
    curve = latency.latency_model(rows, meta=meta)
    t1, td = curve.verify(1), curve.draft(1)
    shape = lambda k: curve.verify(k) / t1  # noqa: E731
    alpha = float(ss["costs_alpha"])
    st.markdown("#### " + _("What the curve feeds: c and the speedup"))
    left, right = st.columns([2, 3])
    with left:
        st.latex(r"c = \frac{t_{\mathrm{draft}}}{T(1)} = \frac{%.1f\ \mathrm{ms}}{%.1f\ \mathrm{ms}} = %.2f"
                 % (td, t1, curve.c))
        st.latex(r"S = \frac{1-\alpha^{\gamma+1}}{(1-\alpha)(\gamma c+1)}")
        st.latex(r"S_{\mathrm{refined}} = \frac{1-\alpha^{\gamma+1}}{1-\alpha}\cdot"
                 r"\frac{T(1)}{\gamma\, t_{\mathrm{draft}} + T(\gamma+1)}")
        st.markdown(_("The simple formula takes a verify pass to cost one target step T(1); the refined one "
                      "takes the measured T(γ + 1). Speculative decoding loses for α ≤ {simple:.2f} by the "
                      "first, for α ≤ {refined:.2f} by the second.").format(
            simple=theory.breakeven_alpha(curve.c),
            refined=theory.breakeven_alpha_refined(td, curve.verify, MAX_GAMMA)))
    with right:
        table = []
        for g in (1, 2, 3, 4, 6, 8, 12, 16):
            table.append({
                "γ": g,
                _("verify pass T(γ + 1)"): fmt_ms(curve.verify(g + 1), _),
                _("T(γ + 1) ÷ T(1)"): f"{shape(g + 1):.2f}",
                _("speedup, simple"): f"×{theory.expected_speedup(alpha, g, curve.c):.2f}",
                _("speedup, refined"): f"×{theory.refined_speedup(alpha, g, td, curve.verify):.2f}",
            })
        st.dataframe(table, hide_index=True, width="stretch")
        st.caption(_("At α = {alpha:.2f}: the best γ is {simple} by the simple formula and {refined} with the "
                     "measured curve.").format(alpha=alpha, simple=theory.best_gamma(alpha, curve.c, MAX_GAMMA),
                                               refined=theory.best_gamma_refined(alpha, td, curve.verify, MAX_GAMMA)))

# --- why the curve has the shape it has ------------------------------------------------------------
st.markdown("#### " + _("Why the curve is flat, then rises"))
cols = st.columns(3, gap="large")
ref = theory.REFERENCE_TARGET_MS
cols[0].markdown(_(
    "**Memory-bound: checking 8 tokens costs about as much as checking 1.** A pass over one token reads every "
    "weight of the model from memory and does little arithmetic with each. A few more tokens reuse the same "
    "weights while they are at hand, so the pass barely takes longer. In bf16 on a CPU with bf16 arithmetic "
    "(AVX512-BF16, AMX) the target's curve is nearly flat: this is what makes speculative decoding pay."))
compute_bound = _(
    "**Compute-bound: every token costs.** Where the CPU's arithmetic, not its memory, is the limit (fp32 on a "
    "CPU), every extra token costs. On the reference machine of docs/design.md (a 2-core AMD EPYC with "
    "AVX512-BF16), the default pair's target took {f5:.0f} ms for a pass over 5 tokens against {f1:.0f} ms for 1 "
    "in float32, and {b5:.0f} ms against {b1:.0f} ms in bfloat16. A verify pass then costs several target "
    "steps, and the simple formula, which counts it as one, promises too much.").format(
    f5=ref["float32"][5], f1=ref["float32"][1], b5=ref["bfloat16"][5], b1=ref["bfloat16"][1])
if found:
    compute_bound += " " + _("On this machine ({dtype}, the curve above): {t5} for 5 tokens against {t1} for "
                             "1.").format(dtype=meta.get("dtype", pair.dtype), t5=fmt_ms(curve.verify(5)),
                                          t1=fmt_ms(curve.verify(1)))
cols[1].markdown(compute_bound)
cols[2].markdown(_(
    "**Batches bring the knee sooner.** A server verifies many sequences at once: batch × (γ + 1) tokens are in "
    "flight in one pass. The more sequences, the fewer extra draft tokens fit before the pass turns "
    "compute-bound: compare the batch 16 line with batch 1. That is why speculative decoding's gain shrinks "
    "under high concurrency."))
st.page_link("pages/theory.py", label=_("Theory: the speedup with this curve, for any α, c and γ"),
             icon=":material/functions:")
