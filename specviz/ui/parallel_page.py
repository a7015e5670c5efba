"""The Parallel page (pages/parallel.py): the user's own greedy run, replayed under the
serial, PEARL and SSD schedules.

A run times only the passes it made. What a replay needs beyond them (SSD's batched
branch passes, a verify of another length, the target's one-token pass) is measured when
the page opens, in seconds, in a background thread that waits its turn for the engine
(``branch_costs.QuickCosts``); until it is known, the page shows no number that depends on it.

``ParallelState`` (one session_state key) holds the run shown and the last PEARL run for
real; ``prepare`` works out the replay (its costs, what is missing, what is being measured)
into a ``Replay``, which the parts in specviz.ui.parallel_parts draw.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

from specviz.measure import branch_costs
from specviz.measure import forward_costs as C
from specviz.models.pair import ModelPair
from specviz.record.errors import BadInput
from specviz.record.i18n import N_, Translator
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Trace
from specviz.replay import what_if as parallel
from specviz.replay.schedules import FANOUT_MODES
from specviz.ui import chrome
from specviz.ui.chrome import keep_choices
from specviz.ui.controller import ENGINE_LOCK
from specviz.ui.lang import _
from specviz.ui.pair import loaded_pair, sidebar_pair
from specviz.ui.replay import load_trace_file
from specviz.ui.sources import MATCHED, load_source, recorded_baseline, replay_sources, schedule_costs

KEY = "parallel_page"  # the one session_state key of the page's own state
POLL_S = 0.5  # how often the page looks whether a background measurement has finished
MAX_GAMMA = 16  # the γ slider's end
NOT_REPLAYABLE = {  # parallel.why_not_replayable's reasons, shown as tr(reason)
    "autoregressive": N_("it is a target-alone run."),
    "sampling": N_("it is a sampling run. At temperature above 0 each schedule would draw different random "
                   "numbers, so the same run cannot be replayed token for token: these schedules are shown "
                   "for greedy runs only."),
    "ngram": N_("its drafter is the n-gram lookup, which has no draft model to overlap."),
    "no_ranks": N_("it holds no draft ranks: record it again with this version of specviz."),
    "too_short": N_("it is too short: past reading the prompt the draft or the target made no pass, so "
                    "nothing times a replay's passes. Generate a few more tokens."),
}
FANOUT_LABELS = {"uniform": N_("uniform"), "geometric": N_("geometric"), "constant": N_("constant"),
                 "heuristic": N_("heuristic (+2 / −1)")}  # shown as tr(label)


@dataclass
class ParallelState:
    """The run shown (``run_key``) and the last PEARL run for real: (``real_key``, its ``PearlRun``)."""

    run: tuple | None = None
    real: tuple | None = None

    def opens(self, key: tuple, seeded: bool) -> bool:
        """Another run than last time (or the widgets not seeded yet): it opens at its own γ and policy."""
        return self.run != key or not seeded


def parallel_state() -> ParallelState:
    ss = st.session_state
    if KEY not in ss:
        ss[KEY] = ParallelState()
    return ss[KEY]


# --- the decisions --------------------------------------------------------------------------------

def run_key(source: Any, trace: Trace) -> tuple:
    return source, trace.config.prompt, trace.wall_ms, len(trace.output_ids)


def real_key(trace: Trace, gamma: int) -> tuple:
    """A PEARL run for real's key: stable across reruns."""
    cfg = trace.config
    return cfg.prompt, cfg.target_url, tuple(trace.output_ids), gamma


def points_text(points, tr: Translator = N_) -> str:
    """The passes in ``points`` in words: the draft's batches, its multi-token reads, the target's."""
    batches = sorted(b for m, b, _k in points if m == "draft" and b > 1)
    reads = sorted(k for m, b, k in points if m == "draft" and b == 1)
    verifies = sorted(k for m, _b, k in points if m == "target")
    listed = lambda xs: ", ".join(map(str, xs))  # noqa: E731
    parts = []
    if batches:
        parts.append(tr(N_("the draft for B sequences at once (B = {list})")).format(list=listed(batches)))
    if reads:
        parts.append(tr(N_("the draft over k tokens of one sequence (k = {list})")).format(list=listed(reads)))
    if verifies:
        parts.append(tr(N_("the target over k new tokens (k = {list})")).format(list=listed(verifies)))
    return "; ".join(parts)


def alone_rate(alone_run: Trace | None, waiting: set, costs: Any, n: int) -> float | None:
    """The target alone's tokens per second: the raced or recorded run's, else the costs' estimate
    (None while the costs still miss the target's one-token pass)."""
    if alone_run is not None:
        return alone_run.summary["tokens_per_second"]
    if parallel.ALONE not in waiting:
        return n / parallel.target_alone_ms(costs, n) * 1000
    return None


# --- the runs -------------------------------------------------------------------------------------

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
    live = st.session_state.get("live")
    if live is not None and live.trace is trace and live.comparison is not None and live.ar is not None:
        return live.ar, live.comparison.speedup, _("the target-alone run raced right after it on the Live page")
    ar = recorded_baseline(trace) or remote_baseline(trace)
    if ar is not None and ar.summary.get("tokens_per_second"):
        return ar, trace.summary["tokens_per_second"] / ar.summary["tokens_per_second"], _(
            "the recorded target-alone run of the same prompt and settings")
    return None, None, None


# --- the page's parts -------------------------------------------------------------------------------

def render_choice() -> Trace | None:
    """The run picker (sidebar) and the title; None (with the reason shown) when there is no
    run, or one that cannot be replayed."""
    sources = {**replay_sources(speculative_only=True), **remote_sources()}
    with st.sidebar:
        st.selectbox(_("Run to replay"), list(sources), key="parallel_source",
                     help=_("A greedy speculative run: this session's last Live run, or a recorded one."))
    trace, problem = load_source(sources, st.session_state.get("parallel_source"))
    sidebar_pair()

    st.markdown("## " + _("Beyond the serial wait: PEARL and SSD on your own run"))
    if trace is None:
        st.info(problem or _("Run a greedy speculative run on the Live page, or pick a recorded run in the "
                             "sidebar."), icon=":material/info:")
        return None
    if (why := parallel.why_not_replayable(trace)) is not None:
        st.warning(_("This run cannot be replayed under other schedules: ") + _(NOT_REPLAYABLE[why]),
                   icon=":material/info:")
        return None
    return trace


@dataclass
class Replay:
    """The run replayed under the three schedules, and what its replay still waits for."""

    trace: Trace
    pair: ModelPair | None
    same: bool  # the loaded pair is the run's own
    costs: Any
    costs_note: str
    measured: bool  # this machine's costs were measured at the run's context
    settings: Any
    alone_run: Trace | None
    race_speedup: float | None
    alone_what: str | None
    quick: branch_costs.QuickCosts | None
    needed: set
    to_measure: set
    measuring: set  # the schedules whose missing passes are being measured
    waiting: set  # the schedules that miss a pass
    results: dict
    alone_tps: float | None

    @property
    def cfg(self) -> RunConfig:
        return self.trace.config

    @property
    def n(self) -> int:
        return len(self.trace.output_ids)


def render_measure_button(pair: ModelPair, trace: Trace, ctx: int) -> tuple | None:
    """The button that measures this machine's costs; the new (costs, note, measured) once it did."""
    if not st.button(_("Measure this machine's costs at {ctx} tokens of context").format(ctx=ctx),
                     key="parallel_measure", icon=":material/timer:",
                     help=_("Times every verify pass (1 to 33 new tokens) and the draft at batch 1 to 32 "
                            "over this run's mean context. About a minute on a CPU; live runs wait "
                            "meanwhile. Kept for later runs of the same length.")):
        return None
    bar = st.progress(0.0, text=_("Waiting for the models…"))
    try:
        with ENGINE_LOCK:  # no live round is timed meanwhile, nor the reverse
            C.load_or_measure(pair, context_length=ctx, progress=lambda f, m: bar.progress(
                min(max(f, 0.0), 1.0), text=_("Measuring forward passes: {pct}%").format(pct=int(100 * f))))
        bar.empty()
        return schedule_costs(trace)
    except BadInput as exc:
        bar.empty()
        st.error(_("The costs cannot be measured: ") + str(exc), icon=":material/error:")
        return None


def render_settings() -> None:
    """The replay's knobs (sidebar)."""
    with st.sidebar:
        st.slider(_("γ · draft length"), 1, MAX_GAMMA, key="parallel_gamma")
        st.select_slider(_("SSD fan-out (branches per outcome)"), list(range(1, 9)), value=2, key="parallel_fanout")
        keep_choices("parallel_fanmode", "parallel_policy")
        st.segmented_control(_("SSD fan-out shape"), FANOUT_MODES, key="parallel_fanmode", required=True,
                             default="uniform", format_func=lambda m: _(FANOUT_LABELS[m]))
        st.segmented_control(_("Serial γ policy"), ["constant", "heuristic"], key="parallel_policy", required=True,
                             format_func=lambda m: _(FANOUT_LABELS[m]))


def prepare(state: ParallelState, trace: Trace) -> Replay:
    """The run's costs (measured here on request, filled in by the background measurer), the
    settings, the target alone to divide by, and the replay under each schedule."""
    ss = st.session_state
    cfg = trace.config
    key = run_key(ss.get("parallel_source"), trace)
    if state.opens(key, "parallel_gamma" in ss):  # a run opens at its own γ and policy
        state.run = key
        ss["parallel_gamma"], ss["parallel_policy"] = min(cfg.gamma, MAX_GAMMA), cfg.policy
    costs, costs_note, measured = schedule_costs(trace)
    pair = loaded_pair()
    same = branch_costs.same_pair(pair, cfg)
    ctx = branch_costs.replay_context(trace)
    if not measured and same and pair.target is not None:
        if (got := render_measure_button(pair, trace, ctx)) is not None:
            costs, costs_note, measured = got
    render_settings()

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
            costs_note += " " + _("Measured on this machine just now, each beside the run's own pass it is scaled "
                                  "to ({seconds:.1f} s): {passes}.").format(seconds=quick.seconds or 0.0,
                                                                            passes=points_text(filled, _))
    needed = set().union(*missing.values())
    to_measure = {p for p in needed if measurable(p)}
    if to_measure and quick.error is None:
        quick.start(to_measure)
    measuring = {name for name, points in missing.items() if points and points <= to_measure and quick.error is None}
    waiting = {name for name, points in missing.items() if points}
    results = parallel.replay(trace, costs, settings)
    return Replay(trace=trace, pair=pair, same=same, costs=costs, costs_note=costs_note, measured=measured,
                  settings=settings, alone_run=alone_run, race_speedup=race_speedup, alone_what=alone_what,
                  quick=quick, needed=needed, to_measure=to_measure, measuring=measuring, waiting=waiting,
                  results=results, alone_tps=alone_rate(alone_run, waiting, costs, len(trace.output_ids)))


def render_measuring(r: Replay) -> None:
    """What the numbers rest on, what is being measured (or could not be), and the wait for it."""
    st.caption(_("Simulated: the same tokens the run emitted, each step timed by the forward-pass costs below. "
                 "PEARL and SSD assume the draft has its own device, as in both papers; on one device the two "
                 "models would share it.") + " " + r.costs_note)
    quick, cfg = r.quick, r.cfg
    if quick is not None and quick.error and r.to_measure:
        st.error(_("The passes this replay needs could not be measured: ") + quick.error, icon=":material/error:")
        st.button(_("Try again"), key="parallel_quick_retry", icon=":material/refresh:", on_click=quick.forget_error)
    elif r.to_measure:
        st.info(_("Measuring the branch costs… {passes}: the run did not make these passes. Seconds; a live "
                  "run waits its turn meanwhile, off its clock.").format(passes=points_text(r.to_measure, _)),
                icon=":material/timer:")
    if unmeasurable := r.needed - r.to_measure:
        st.info(_("This run did not make every pass its replay needs ({passes}). Load the pair it was recorded "
                  "with ({draft} → {target}, {dtype} on {device}) to measure them: seconds.").format(
            passes=points_text(unmeasurable, _), draft=cfg.draft, target=cfg.target,
            dtype=cfg.dtype, device=cfg.device), icon=":material/info:")
    if r.to_measure and quick.error is None:
        @st.fragment(run_every=POLL_S)
        def wait_for_quick_costs() -> None:
            """Redraw the page once the background measurement is done (at once if it already is)."""
            if not quick.running:
                st.rerun()

        wait_for_quick_costs()
