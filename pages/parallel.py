"""Parallel: the user's own greedy run, replayed under the serial, PEARL and SSD schedules.

A run times only the passes it made. What a replay needs beyond them (SSD's batched
branch passes, a verify of another length, the target's one-token pass) is measured when
the page opens, in seconds, in a background thread that waits its turn for the engine
(``branch_costs.QuickCosts``); until it is known, the page shows no number that depends on it."""

import dataclasses
import functools
from pathlib import Path

import streamlit as st

from specviz import BadInput, RunConfig, SpecvizError, ui
from specviz import figures as F
from specviz.analysis.metrics import fmt_ms, fmt_pct
from specviz.measure import branch_costs
from specviz.measure import forward_costs as C
from specviz.measure.pearl_real import pearl_run
from specviz.replay import what_if as parallel
from specviz.replay.schedules import FANOUT_MODES
from specviz.ui import chrome
from specviz.ui.controller import ENGINE_LOCK
from specviz.ui.lang import _, language_switch
from specviz.ui.replay import load_trace_file
from specviz.ui.sources import MATCHED

POLL_S = 0.5  # how often the page looks whether a background measurement has finished

ui.page_chrome()
language_switch()
ss = st.session_state


@st.cache_resource(show_spinner=False, max_entries=16)
def quick_costs(_pair, pair_id: int, draft_quant: str, draft_vocab: int, ctx: int,
                refs: tuple) -> branch_costs.QuickCosts:
    """One background measurer per loaded pair, run draft, context and reference passes,
    shared by every session and rerun (what it measured stays known)."""
    cfg = RunConfig(draft_quant=draft_quant, draft_vocab=draft_vocab)
    return branch_costs.QuickCosts(_pair, cfg, ctx, {ref[0]: ref for ref in refs}, lock=ENGINE_LOCK)


@functools.lru_cache(maxsize=16)
def read_trace(path: Path, mtime_ns: int):
    return load_trace_file(path.read_bytes())


def remote_runs() -> dict[Path, object]:
    """The recorded runs whose target was a vLLM server (assets/traces/remote/: the draft here,
    the target on a server, each request's network and queue time recorded), by file; a file
    that cannot be read maps to its error."""
    folder = chrome.TRACES_DIR / "remote"
    runs = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            runs[path] = read_trace(path, path.stat().st_mtime_ns)
        except (BadInput, OSError) as exc:
            runs[path] = exc
    return runs


def remote_sources() -> dict:
    """Label -> loader of the recorded remote-target runs that drafted (not the target alone)."""
    def loader(run):
        def load():
            if isinstance(run, Exception):
                raise run
            return run
        return load

    return {_("Recorded, remote target: ") + path.stem: loader(run) for path, run in remote_runs().items()
            if isinstance(run, Exception) or run.config.mode == "speculative"}


def remote_baseline(trace):
    """The recorded remote target-alone run of ``trace``'s prompt and settings, or None."""
    want = {k: getattr(trace.config, k) for k in MATCHED}
    for run in remote_runs().values():
        if not isinstance(run, Exception) and run.config.mode == "autoregressive" and all(
                getattr(run.config, k) == v for k, v in want.items()):
            return run
    return None


def race_of(trace) -> tuple:
    """(the target-alone run raced with ``trace``, the race's speedup, which run it is in
    words): this session's Live race, or the recorded target-alone run of the same prompt
    and settings; (None, None, None) when there is none."""
    live = ss.get("live")
    if live is not None and live.trace is trace and live.comparison is not None and live.ar is not None:
        return live.ar, live.comparison.speedup, _("the target-alone run raced right after it on the Live page")
    ar = ui.recorded_baseline(trace) or remote_baseline(trace)
    if ar is not None and ar.summary.get("tokens_per_second"):
        return ar, trace.summary["tokens_per_second"] / ar.summary["tokens_per_second"], _(
            "the recorded target-alone run of the same prompt and settings")
    return None, None, None


def points_text(points) -> str:
    """The passes in ``points`` in words: the draft's batches, its multi-token reads, the target's."""
    batches = sorted(b for m, b, _k in points if m == "draft" and b > 1)
    reads = sorted(k for m, b, k in points if m == "draft" and b == 1)
    verifies = sorted(k for m, _b, k in points if m == "target")
    listed = lambda xs: ", ".join(map(str, xs))  # noqa: E731
    parts = []
    if batches:
        parts.append(_("the draft for B sequences at once (B = {list})").format(list=listed(batches)))
    if reads:
        parts.append(_("the draft over k tokens of one sequence (k = {list})").format(list=listed(reads)))
    if verifies:
        parts.append(_("the target over k new tokens (k = {list})").format(list=listed(verifies)))
    return "; ".join(parts)


# --- which run -------------------------------------------------------------------------------
sources = {**ui.replay_sources(speculative_only=True), **remote_sources()}
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
        "too_short": _("it is too short: past reading the prompt the draft or the target made no pass, so "
                       "nothing times a replay's passes. Generate a few more tokens."),
    }
    st.warning(_("This run cannot be replayed under other schedules: ") + reasons[why], icon=":material/info:")
    st.stop()

# --- costs and settings ----------------------------------------------------------------------
cfg = trace.config
run_key = (ss.get("parallel_source"), cfg.prompt, trace.wall_ms, len(trace.output_ids))
if ss.get("parallel_run") != run_key or "parallel_gamma" not in ss:  # a run opens at its own γ and policy
    ss["parallel_run"] = run_key
    ss["parallel_gamma"], ss["parallel_policy"] = min(cfg.gamma, 16), cfg.policy
costs, costs_note, measured = ui.schedule_costs(trace)
pair = ui.loaded_pair()
same = branch_costs.same_pair(pair, cfg)
ctx = branch_costs.replay_context(trace)
if not measured and same and pair.target is not None:
    if st.button(_("Measure this machine's costs at {ctx} tokens of context").format(ctx=ctx),
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
    st.slider(_("γ · draft length"), 1, 16, key="parallel_gamma")
    st.select_slider(_("SSD fan-out (branches per outcome)"), list(range(1, 9)), value=2, key="parallel_fanout")
    ui.keep_choices("parallel_fanmode", "parallel_policy")
    labels = {"uniform": _("uniform"), "geometric": _("geometric"), "constant": _("constant"),
              "heuristic": _("heuristic (+2 / −1)")}
    st.segmented_control(_("SSD fan-out shape"), FANOUT_MODES, key="parallel_fanmode", required=True,
                         default="uniform", format_func=labels.get)
    st.segmented_control(_("Serial γ policy"), ["constant", "heuristic"], key="parallel_policy", required=True,
                         format_func=labels.get)

settings = parallel.settings_for(trace, gamma=ss["parallel_gamma"], policy=ss["parallel_policy"],
                                 fanout=ss["parallel_fanout"], fanout_mode=ss["parallel_fanmode"])
alone_run, race_speedup, alone_what = race_of(trace)
missing = parallel.missing_passes(trace, settings, measured, alone_run)
if not measured:
    costs = parallel.with_alone(costs, trace, alone_run)
refs = parallel.references(trace)
quick = (quick_costs(pair, id(pair), cfg.draft_quant, cfg.draft_vocab, ctx, tuple(sorted(refs.values())))
         if branch_costs.same_draft(pair, cfg) else None)


def measurable(point) -> bool:
    """The run's draft is loaded: its passes can be measured here; the target's only where the
    loaded target is the run's own, and local (not a server's)."""
    return quick is not None and (point[0] == "draft" or same and pair.target is not None)


if quick is not None:
    costs = parallel.fill_in(costs, trace, quick.ratios)
    filled = {p for points in missing.values() for p in points if p in quick.ratios}
    missing = {name: quick.missing(points) for name, points in missing.items()}
    if filled:
        costs_note += " " + _("Measured on this machine just now, each beside the run's own pass it is scaled to "
                              "({seconds:.1f} s): {passes}.").format(seconds=quick.seconds or 0.0,
                                                                      passes=points_text(filled))
needed = set().union(*missing.values())
to_measure = {p for p in needed if measurable(p)}
if to_measure and quick.error is None:
    quick.start(to_measure)
measuring = {name for name, points in missing.items() if points and points <= to_measure and quick.error is None}
waiting = {name for name, points in missing.items() if points}
results = parallel.replay(trace, costs, settings)
n = len(trace.output_ids)
if alone_run is not None:
    alone_tps = alone_run.summary["tokens_per_second"]
elif parallel.ALONE not in waiting:
    alone_tps = n / parallel.target_alone_ms(costs, n) * 1000
else:
    alone_tps = None

st.caption(_("Simulated: the same tokens the run emitted, each step timed by the forward-pass costs below. "
             "PEARL and SSD assume the draft has its own device, as in both papers; on one device the two "
             "models would share it.") + " " + costs_note)

if quick is not None and quick.error and to_measure:
    st.error(_("The passes this replay needs could not be measured: ") + quick.error, icon=":material/error:")
    st.button(_("Try again"), key="parallel_quick_retry", icon=":material/refresh:", on_click=quick.forget_error)
elif to_measure:
    st.info(_("Measuring the branch costs… {passes}: the run did not make these passes. Seconds; a live "
              "run waits its turn meanwhile, off its clock.").format(passes=points_text(to_measure)),
            icon=":material/timer:")
if unmeasurable := needed - to_measure:
    st.info(_("This run did not make every pass its replay needs ({passes}). Load the pair it was recorded "
              "with ({draft} → {target}, {dtype} on {device}) to measure them: seconds.").format(
        passes=points_text(unmeasurable), draft=cfg.draft, target=cfg.target,
        dtype=cfg.dtype, device=cfg.device), icon=":material/info:")
if to_measure and quick.error is None:
    @st.fragment(run_every=POLL_S)
    def wait_for_quick_costs() -> None:
        """Redraw the page once the background measurement is done (at once if it already is)."""
        if not quick.running:
            st.rerun()

    wait_for_quick_costs()

names = {"serial": _("Serial speculative decoding"), "pearl": "PEARL", "ssd": _("SSD (speculative speculative)")}
shown = {k: r for k, r in results.items() if k not in waiting}
titles = {k: _("{schedule}: {time}, {rate:.1f} tok/s").format(schedule=names[k], time=fmt_ms(r.wall_ms),
                                                              rate=r.tokens_per_second) for k, r in shown.items()}
chart, numbers = st.columns([2.6, 1.4])
with chart:
    if shown:
        st.plotly_chart(F.schedules_figure(shown, titles, _("simulated time since start (ms), one axis for all"),
                                           tr=_),
                        key="parallel_fig", config={"displayModeBar": False})
with numbers:
    serial = results["serial"]
    for key, r in results.items():
        with st.container(border=True):
            st.markdown(f"**{names[key]}**")
            if key in measuring:
                st.caption(_("Measuring the branch costs…") if key == "ssd" else
                           _("Measuring the passes γ = {gamma} needs…").format(gamma=settings.gamma))
                continue
            if key in waiting:
                st.caption(_("Not shown: the run did not make every pass this replay needs (above)."))
                continue
            c = st.columns(2)
            c[0].metric(_("tokens / s"), f"{r.tokens_per_second:.1f}")
            c[1].metric(_("vs serial"), f"×{serial.wall_ms / r.wall_ms:.2f}" if "serial" not in waiting else "…")
            st.metric(_("vs target alone"), f"×{r.tokens_per_second / alone_tps:.2f}" if alone_tps else "…",
                      help=_("This schedule's tokens per second over the target alone's (the caption under the "
                             "chart says which)."))
            st.caption(_("idle: draft {draft} / target {target}").format(
                draft=fmt_pct(r.draft_idle_fraction), target=fmt_pct(r.target_idle_fraction)))
            if key == "ssd":
                c = st.columns(2)
                c[0].metric(_("hit rate"), fmt_pct(r.hit_rate))
                c[1].metric(_("branches / round"), f"{r.branches_per_round or 0:.1f}")
                st.caption(_("Draft time spent on branches thrown away: ") + fmt_ms(r.wasted_draft_ms))

check = parallel.check_serial(trace, costs)
# --- what "vs target alone" divides by ------------------------------------------------------------
if alone_run is not None:
    st.caption(_("“vs target alone” divides by {which}: {rate:.2f} tokens/s ({tokens} tokens in {time}). That "
                 "race measured ×{race:.2f} for this run; its serial replay (its own γ and policy) gives "
                 "×{replay:.2f}, as its wall time is {err:+.1%} off the run's.").format(
        which=alone_what, rate=alone_tps, tokens=len(alone_run.output_ids), time=fmt_ms(alone_run.wall_ms),
        race=race_speedup, replay=n / check.sim_wall_ms * 1000 / alone_tps, err=check.wall_error))
elif alone_tps:
    how = (_("measured on this machine") if measured else
           _("measured just now, scaled to the run's own verify pass")
           if quick is not None and ("target", 1, 1) in quick.ratios else _("the run's own"))
    st.caption(_("“vs target alone” is an estimate, as no target-alone run of this prompt and settings was raced "
                 "or recorded: the target's prefill of the prompt ({prefill}), then {n} one-token passes of "
                 "{one} each ({how}) and the run's bookkeeping, {rate:.2f} tokens/s.").format(
        prefill=fmt_ms(costs.target_prefill_ms), n=max(0, n - 1), one=fmt_ms(costs.verify(1)), how=how,
        rate=alone_tps))

# --- checked against reality -----------------------------------------------------------------
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
gamma = settings.gamma
real_key = (cfg.prompt, cfg.target_url, tuple(trace.output_ids), gamma)  # stable across reruns
other_draft = [what for what, on in ((_("int8 draft"), cfg.draft_quant != "none"),
                                     (_("a cut draft head"), bool(cfg.draft_vocab))) if on]
if not same:
    st.caption(_("Load the pair this run was recorded with (sidebar) to run PEARL on it for real."))
elif other_draft:
    st.caption(_("This run drafted with {what}. PEARL for real runs the draft as loaded, with its full head, so "
                 "it would time another draft than the one replayed above. Turn off **int8 draft** and set "
                 "**Draft head** to **full vocabulary** in the Live sidebar, run again, and come back.").format(
        what=_(" and ").join(other_draft)))
    cols = st.columns([1, 1, 2])
    cols[0].button(_("Use the draft as loaded"), key="parallel_plain_draft", icon=":material/toggle_off:",
                   on_click=lambda: ss.update(draft_int8=False, draft_vocab=0),
                   help=_("Turns off the int8 draft and the cut head for the next Live run."))
    cols[1].page_link("pages/live.py", label=_("Live: run again"), icon=":material/play_circle:")
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
if (got := ss.get("parallel_real")) is not None and got[0] == real_key and "pearl" not in waiting:
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
if "serial" not in waiting:
    gain = parallel.overlap_bound(costs, gamma)
    block, verify = gamma * costs.draft(1), costs.network_ms + costs.verify(gamma + 1)
    st.markdown(_(
        "**Why the gain differs here.** The papers give the draft its own GPU, and their targets are large "
        "enough that one verify pass costs far more than a draft pass, so there is much drafting to hide. In "
        "this replay γ = {gamma} draft passes take {block} and the verify of their {k} tokens {verify}. "
        "Running the two at once hides the shorter of them, so a round shrinks at most from {both} to "
        "{longer}: neither PEARL nor SSD can beat ×{gain:.2f} over serial here, and SSD gets that only on a "
        "hit.").format(gamma=gamma, block=fmt_ms(block), k=gamma + 1, verify=fmt_ms(verify),
                       both=fmt_ms(block + verify), longer=fmt_ms(max(block, verify)), gain=gain)
        + " " + (_("The draft is the cheap side ({share} of the verify), so the target's verify passes set the "
                   "pace.") if block < verify else
                 _("The draft is the slow side ({share} of the verify), so the target waits for it even when both "
                   "run at once.")).format(share=fmt_pct(block / verify))
        + " " + _("On one device ({device}) the two models would also share its cores and memory bandwidth; the "
                  "timelines above give each model its own.").format(device=cfg.device))
