"""Parallel: the user's own greedy run, replayed under the serial, PEARL and SSD schedules."""

import dataclasses

import streamlit as st

from specviz import BadInput, SpecvizError
from specviz import costs as C
from specviz import figures as F
from specviz import parallel, ui
from specviz.metrics import fmt_ms, fmt_pct
from specviz.overlap import pearl_run
from specviz.schedules import FANOUT_MODES
from specviz.ui.controller import ENGINE_LOCK
from specviz.ui.lang import _, language_switch

ui.page_chrome()
language_switch()
ss = st.session_state

# --- which run -------------------------------------------------------------------------------
sources = ui.replay_sources(speculative_only=True)
with st.sidebar:
    st.selectbox(_("Run to replay"), list(sources), key="parallel_source",
                 help=_("A greedy speculative run: this session's last Live run, or a recorded one."))
trace, problem = ui.load_source(sources, ss.get("parallel_source"))
ui.sidebar_pair()

st.markdown("## " + _("Beyond the serial wait: PEARL and SSD on your own run"))
if trace is None:
    st.info(problem or _("Run a greedy speculative run on the Live page, or pick a recorded run in the sidebar."),
            icon=":material/info:")
    st.stop()
if (why := parallel.why_not_replayable(trace)) is not None:
    reasons = {
        "autoregressive": _("it is a target-alone run."),
        "sampling": _("it is a sampling run. At temperature above 0 each schedule would draw different random "
                      "numbers, so the same run cannot be replayed token for token: these schedules are shown "
                      "for greedy runs only."),
        "ngram": _("its drafter is the n-gram lookup, which has no draft model to overlap."),
        "no_ranks": _("it holds no draft ranks: record it again with this version of specviz."),
    }
    st.warning(_("This run cannot be replayed under other schedules: ") + reasons[why], icon=":material/info:")
    st.stop()

# --- costs and settings ----------------------------------------------------------------------
costs, costs_note, measured = ui.schedule_costs(trace)
cfg = trace.config
if not measured:
    pair = ui.loaded_pair()
    same = pair is not None and (pair.draft_name, pair.target_name, str(pair.device), pair.dtype) == (
        cfg.draft, cfg.target, cfg.device, cfg.dtype)
    ctx = parallel.replay_context(trace)
    if same and st.button(_("Measure this machine's costs at {ctx} tokens of context").format(ctx=ctx),
                          key="parallel_measure", icon=":material/timer:",
                          help=_("Times every verify pass (1 to 33 new tokens) and the draft at batch 1 to 32 "
                                 "over this run's mean context. About a minute on a CPU; live runs wait "
                                 "meanwhile. Kept for later runs of the same length.")):
        bar = st.progress(0.0, text=_("Waiting for the models…"))
        try:
            with ENGINE_LOCK:  # no live round is timed meanwhile, nor the reverse
                C.load_or_measure(pair, context_length=ctx, progress=lambda f, m: bar.progress(
                    min(max(f, 0.0), 1.0), text=_("Measuring forward passes: {pct}%").format(pct=int(100 * f))))
            bar.empty()
            costs, costs_note, measured = ui.schedule_costs(trace)
        except BadInput as exc:
            bar.empty()
            st.error(_("The costs cannot be measured: ") + str(exc), icon=":material/error:")
with st.sidebar:
    st.slider(_("γ · draft length"), 1, 16, value=min(cfg.gamma, 16), key="parallel_gamma")
    st.select_slider(_("SSD fan-out (branches per outcome)"), list(range(1, 9)), value=2, key="parallel_fanout")
    ui.keep_choices("parallel_fanmode", "parallel_policy")
    labels = {"uniform": _("uniform"), "geometric": _("geometric"), "constant": _("constant"),
              "heuristic": _("heuristic (+2 / −1)")}
    st.segmented_control(_("SSD fan-out shape"), FANOUT_MODES, key="parallel_fanmode", required=True,
                         default="uniform", format_func=labels.get)
    st.segmented_control(_("Serial γ policy"), ["constant", "heuristic"], key="parallel_policy", required=True,
                         default=cfg.policy, format_func=labels.get)

settings = parallel.settings_for(trace, gamma=ss["parallel_gamma"], policy=ss["parallel_policy"],
                                 fanout=ss["parallel_fanout"], fanout_mode=ss["parallel_fanmode"])
results = parallel.replay(trace, costs, settings)
n = len(trace.output_ids)
alone_ms = parallel.target_alone_ms(costs, n)

st.caption(_("Simulated from measured costs: the same tokens the run emitted, with each step timed by "
             "this machine's forward passes. PEARL and SSD assume the draft has its own device, as in both "
             "papers; on one device the two models would share it.") + " " + costs_note)

names = {"serial": _("Serial speculative decoding"), "pearl": "PEARL", "ssd": _("SSD (speculative speculative)")}
titles = {k: f"{names[k]}: {fmt_ms(r.wall_ms)}, {r.tokens_per_second:.1f} tok/s" for k, r in results.items()}
chart, numbers = st.columns([2.6, 1.4])
with chart:
    st.plotly_chart(F.schedules_figure(results, titles, _("simulated time since start (ms), one axis for all three"),
                                       tr=_),
                    key="parallel_fig", config={"displayModeBar": False})
with numbers:
    serial_ms = results["serial"].wall_ms
    for key, r in results.items():
        with st.container(border=True):
            st.markdown(f"**{names[key]}**")
            c = st.columns(2)
            c[0].metric(_("tokens / s"), f"{r.tokens_per_second:.1f}")
            c[1].metric(_("vs serial"), f"×{serial_ms / r.wall_ms:.2f}")
            st.metric(_("vs target alone"), f"×{alone_ms / r.wall_ms:.2f}",
                      help=_("Speedup over the target decoding alone, estimated from its one-token pass."))
            st.caption(_("idle: draft {draft} / target {target}").format(
                draft=fmt_pct(r.draft_idle_fraction), target=fmt_pct(r.target_idle_fraction)))
            if key == "ssd":
                c = st.columns(2)
                c[0].metric(_("hit rate"), fmt_pct(r.hit_rate))
                c[1].metric(_("branches / round"), f"{r.branches_per_round or 0:.1f}")
                st.caption(_("Draft time spent on branches thrown away: ") + fmt_ms(r.wasted_draft_ms))

# --- checked against reality -----------------------------------------------------------------
check = parallel.check_serial(trace, costs)
verdict = _("agrees") if check.ok else _("does not agree")
st.markdown("#### " + _("Checked against the real run"))
st.markdown(
    _("Replayed serially with its own γ and policy, the simulator {verdict} with the real run: "
      "{sim_rounds} rounds against {real_rounds} ({rounds}), and {sim} against the measured {real} "
      "({err:+.1%}; the tolerance is ±10%).").format(
        verdict=verdict, sim_rounds=check.sim_rounds, real_rounds=check.real_rounds,
        rounds=_("every round the same") if check.rounds_match else _("rounds differ"),
        sim=fmt_ms(check.sim_wall_ms), real=fmt_ms(check.real_wall_ms), err=check.wall_error))
if measured and check.rounds_match and not check.ok:
    st.caption(_("Every round is the same, so the gap is in the costs: they were measured at another time, and "
                 "a shared machine's speed drifts by up to a fifth from one minute to the next. Timed right after "
                 "each run instead, the same passes bring the replay within a few percent of the real runs "
                 "(bench/schedules_check.py)."))

# --- PEARL for real ------------------------------------------------------------------------------
st.markdown("#### " + _("PEARL for real"))
pair = ui.loaded_pair()
same = pair is not None and (pair.draft_name, pair.target_name, str(pair.device), pair.dtype) == (
    cfg.draft, cfg.target, cfg.device, cfg.dtype) and (pair.remote.url if pair.remote else "") == cfg.target_url
gamma = settings.gamma
real_key = (cfg.prompt, cfg.target_url, tuple(trace.output_ids), gamma)  # stable across reruns
if not same:
    st.caption(_("Load the pair this run was recorded with (sidebar) to run PEARL on it for real."))
else:
    where = (_("the draft here and the target on {url}: the draft is really free while the server verifies").format(
        url=cfg.target_url) if cfg.target_url else
        _("the draft and the target in two threads, each held to one CPU core: on this machine they share "
          "its memory bandwidth"))
    st.caption(_("Runs the same prompt under PEARL at γ = {gamma}, {where}, and compares its wall time with "
                 "the simulation above.").format(gamma=gamma, where=where))
    if st.button(_("Run PEARL for real at γ = {gamma}").format(gamma=gamma), key="parallel_real_run",
                 icon=":material/play_circle:"):
        run_cfg = dataclasses.replace(cfg, gamma=gamma, policy="constant", stop=[])
        with st.spinner(_("Running PEARL: both models at once…")):
            try:
                with ENGINE_LOCK:
                    ss["parallel_real"] = (real_key, pearl_run(pair, run_cfg))
            except SpecvizError as exc:
                ss.pop("parallel_real", None)
                st.error(_("PEARL could not run: ") + str(exc), icon=":material/error:")
if (got := ss.get("parallel_real")) is not None and got[0] == real_key:
    real = got[1].trace
    sim = results["pearl"]
    err = real.wall_ms / sim.wall_ms - 1 if sim.wall_ms else 0.0
    same_text = real.output_ids == trace.output_ids[: len(real.output_ids)]
    cols = st.columns(4)
    cols[0].metric(_("measured"), fmt_ms(real.wall_ms), help=_("Wall time of the real overlapped run."))
    cols[1].metric(_("simulated"), fmt_ms(sim.wall_ms))
    cols[2].metric(_("measured ÷ simulated"), f"{1 + err:.2f}")
    cols[3].metric(_("same tokens as the run"), _("yes") if same_text else _("no"))
    st.plotly_chart(F.timeline_figure(real, tr=_, title=_("PEARL, measured: {tokens} tokens in {time}").format(
        tokens=len(real.output_ids), time=fmt_ms(real.wall_ms))), key="parallel_real_fig",
        config={"displayModeBar": False})
    if not got[1].pinned and got[1].note:
        st.caption(_("Not pinned: ") + got[1].note)

# --- what each schedule changes ----------------------------------------------------------------
st.markdown("#### " + _("What each schedule changes"))
cols = st.columns(3, gap="large")
cols[0].markdown(_(
    "**Serial.** Draft γ tokens, then verify them in one target pass, strictly one after the other: the "
    "target idles while the draft guesses, the draft idles while the target checks. That wait is the "
    "ceiling on what plain speculative decoding gains."))
cols[1].markdown(_(
    "**PEARL** (Liu et al., ICLR 2025). The target verifies while the draft drafts: it pre-verifies the "
    "first draft token during drafting, and post-verifies the previous block while the next one is drafted. "
    "A round takes the longer of the two, not their sum, and the draft length adapts. The paper reports up "
    "to 4.43× over autoregressive decoding and 1.50× over vanilla speculative decoding."))
cols[2].markdown(_(
    "**SSD, speculative speculative decoding** (Saguaro; Kumar, Dao and May, 2026). While the target "
    "verifies, the draft predicts the likely outcomes (how many tokens are accepted, and the target's "
    "token) and pre-drafts the next block for each. On a hit the next block is ready at once. The paper "
    "reports up to 2× over optimised speculative decoding and 5× over autoregressive decoding, with a "
    "Llama-3 70B target on 4 H100s and a 1B draft on a fifth GPU."))
st.markdown(_(
    "**Why the gain differs here.** The papers give the draft its own GPU, and their targets are "
    "large enough that one verify pass costs far more than a draft pass. On this machine the two "
    "small models would share two CPU cores and the same memory bandwidth, and the cost ratio c is "
    "high, so overlapping hides less; the timelines above show what the schedules would buy with a "
    "device for each model, at this machine's measured costs."))
