"""The Parallel page's replay (specviz.ui.parallel_page): the run's costs (measured here on
request, filled in by the background measurer), the replay's settings (sidebar), the
target alone to divide by, and the replay under each schedule, into a ``Replay``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import streamlit as st

from specviz.measure import branch_costs
from specviz.measure import forward_costs as C
from specviz.models.pair import ModelPair
from specviz.record.errors import BadInput
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Trace
from specviz.replay import what_if
from specviz.replay.latency import with_rtt
from specviz.replay.schedules import FANOUT_MODES
from specviz.ui.chrome import keep_choices
from specviz.ui.lang import _
from specviz.ui.pair import loaded_pair, running_client
from specviz.ui.parallel_page import (
    FANOUT_LABELS,
    MAX_GAMMA,
    POLL_S,
    ParallelState,
    alone_rate,
    points_text,
    quick_costs,
    race_of,
    run_key,
)
from specviz.ui.sources import schedule_costs


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
    rtt_ms: float = 0.0  # network time added to every verify of the replays (a remote run's slider)

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
        # in the engine worker, its turn taken: no live round is timed meanwhile, nor the reverse
        running_client().call(f"{C.__name__}:load_or_measure", context_length=ctx, progress=lambda f, m: bar.progress(
            min(max(f, 0.0), 1.0), text=_("Measuring forward passes: {pct}%").format(pct=int(100 * f))))
        bar.empty()
        return schedule_costs(trace)
    except BadInput as exc:
        bar.empty()
        st.error(_("The costs cannot be measured: ") + str(exc), icon=":material/error:")
        return None


RTT_MAX_MS = 2000  # the round-trip slider's end
RTT_STEP_MS = 50


def serial_policies(trace: Trace) -> list[str]:
    """The serial replay's policies for this run: the confidence policy needs the draft's top-1
    probability at every position (recorded since it exists)."""
    confident = len(trace.draft_top_q) == len(trace.output_ids) and bool(trace.output_ids)
    return ["constant", "heuristic", *(["confidence"] if confident else [])]


def render_settings(trace: Trace, remote: bool = False) -> None:
    """The replay's knobs (sidebar); for a remote run, the network time added to every verify."""
    with st.sidebar:
        st.slider(_("γ · draft length"), 1, MAX_GAMMA, key="parallel_gamma")
        if remote:
            st.slider(_("Added round trip (ms)"), 0, RTT_MAX_MS, 0, RTT_STEP_MS, key="parallel_rtt",
                      help=_("Network time added to every verify request of the replayed schedules, on top of "
                             "the round trip the run measured (a server on this machine: its loopback)."))
        st.select_slider(_("SSD fan-out (branches per outcome)"), list(range(1, 9)), value=2, key="parallel_fanout")
        keep_choices("parallel_fanmode", "parallel_policy")
        st.segmented_control(_("SSD fan-out shape"), FANOUT_MODES, key="parallel_fanmode", required=True,
                             default="uniform", format_func=lambda m: _(FANOUT_LABELS[m]))
        policies = serial_policies(trace)
        if st.session_state.get("parallel_policy") not in policies:
            st.session_state["parallel_policy"] = "constant"
        st.segmented_control(_("Serial γ policy"), policies, key="parallel_policy", required=True,
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
    render_settings(trace, remote=bool(cfg.target_url))

    settings = what_if.settings_for(trace, gamma=ss["parallel_gamma"], policy=ss["parallel_policy"],
                                     fanout=ss["parallel_fanout"], fanout_mode=ss["parallel_fanmode"])
    alone_run, race_speedup, alone_what = race_of(trace)
    missing = what_if.missing_passes(trace, settings, measured, alone_run)
    if not measured:
        costs = what_if.with_alone(costs, trace, alone_run)
    refs = what_if.references(trace)
    quick = (quick_costs(pair, id(pair), cfg.draft_quant, cfg.draft_vocab, ctx, tuple(sorted(refs.values())))
             if branch_costs.same_draft(pair, cfg) else None)

    def measurable(point) -> bool:
        """The run's draft is loaded: its passes can be measured here; the target's only where the
        loaded target is the run's own, and local (not a server's)."""
        return quick is not None and (point[0] == "draft" or same and pair.target is not None)

    if quick is not None:
        costs = what_if.fill_in(costs, trace, quick.ratios)
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
    rtt = float(ss.get("parallel_rtt") or 0) if cfg.target_url else 0.0
    results = what_if.replay(trace, with_rtt(costs, rtt), settings)
    return Replay(trace=trace, pair=pair, same=same, costs=costs, costs_note=costs_note, measured=measured,
                  settings=settings, alone_run=alone_run, race_speedup=race_speedup, alone_what=alone_what,
                  quick=quick, needed=needed, to_measure=to_measure, measuring=measuring, waiting=waiting,
                  results=results, alone_tps=alone_rate(alone_run, waiting, with_rtt(costs, rtt), len(trace.output_ids)),
                  rtt_ms=rtt)


def round_trip_sweep(r: Replay, step_ms: int = 100) -> tuple[list[float], dict[str, list[float]]]:
    """PEARL's and SSD's speedup over serial with 0..RTT_MAX_MS of network added to every verify
    (the replays at the page's settings; SSD only once its branch costs are known)."""
    xs = [float(x) for x in range(0, RTT_MAX_MS + 1, step_ms)]
    names = [n for n in ("pearl", "ssd") if n not in r.waiting]
    ys: dict[str, list[float]] = {n: [] for n in names}
    for x in xs:
        res = what_if.replay(r.trace, with_rtt(r.costs, x), r.settings)
        for n in names:
            ys[n].append(res["serial"].wall_ms / res[n].wall_ms)
    return xs, ys


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
