"""The Parallel page's "SSD for real" (pages/parallel.py): SSD run on the loaded pair, the draft
and the target in two pinned threads (or the target on its server), beside its simulation
from a serial run of the same prompt (specviz.measure.real_vs_sim, the code of
``specviz overlap``): the measured timeline under the simulated one on one time axis, the hit
rate measured against simulated, the branches a round, the draft time thrown away, the
wall-time error, and the gap taken apart from measurements."""

from __future__ import annotations

import dataclasses

import streamlit as st

from specviz import figures as F
from specviz.analysis.metrics import fmt_ms, fmt_pct
from specviz.figures.schedules import PAYS
from specviz.measure.real_vs_sim import RealVsSim
from specviz.measure.ssd_real import tree_ms
from specviz.record.errors import SpecvizError
from specviz.record.i18n import N_, Translator
from specviz.ui.lang import _
from specviz.ui.pair import running_client
from specviz.ui.parallel_page import ParallelState, real_key
from specviz.ui.parallel_replay import Replay, round_trip_sweep

GAP_WORDS = {  # Gap's fields, as tr(words)
    "verify": N_("the target's verify passes"),
    "network": N_("the network"),
    "draft_before": N_("drafting after a miss"),
    "draft_after": N_("branch work past the verify"),
    "other": N_("bookkeeping and thread hand-offs"),
}


def ssd_key(r: Replay, fit: bool) -> tuple:
    """An SSD run for real's key: the run, the γ, and the budget asked for."""
    s = r.settings
    return (*real_key(r.trace, s.gamma), fit, None if fit else (s.fanout, s.fanout_mode))


def run_ssd(r: Replay, fit: bool) -> RealVsSim:
    """SSD for real at the replay's γ: a fresh serial run of the same prompt, made just before it
    (after a short untimed warm-up of both), is its baseline and gives the simulation its costs.
    The run shown is not reused: it was timed at another moment, its first passes perhaps the
    process's first. All of it runs in the engine worker, its turn taken."""
    cfg, s = r.cfg, r.settings
    run_cfg = dataclasses.replace(cfg, gamma=s.gamma, policy="constant", stop=[])
    return running_client().call("specviz.measure.real_vs_sim:real_vs_simulated", run_cfg, "ssd",
                                 None if fit else s.fanout, "geometric" if fit else s.fanout_mode, warm_up=True)


def gap_text(result: RealVsSim, tr: Translator = N_) -> str:
    """The gap between the measured and the simulated wall time, by part, largest first, in words."""
    g = result.gap().to_dict()
    parts = sorted(((k, v) for k, v in g.items() if k in GAP_WORDS and abs(v) >= 0.5), key=lambda kv: -abs(kv[1]))
    listed = tr(N_("; ")).join(f"{tr(GAP_WORDS[k])} {'+' if v > 0 else '−'}{fmt_ms(abs(v), tr)}" for k, v in parts)
    text = tr(N_("Measured minus simulated, by part: {parts}.")).format(parts=listed or "—")
    if g["rounds_differ"]:
        text += " " + tr(N_("The real rounds are not the simulated ones (a near-tie rounded differently), so part "
                            "of the gap is in the rounds themselves."))
    return text


def cause_text(result: RealVsSim, tr: Translator = N_) -> str:
    """Why the measured run differs, from its own measurements: the cores, the branch batch, the network."""
    g, budget, real = result.gap(), result.budget, result.real
    st_ = real.stats()
    out = []
    if result.serial.config.target_url:
        out.append(tr(N_("The target is a server: its network and queue time differ from the serial run's by {net} "
                         "in all.")).format(net=fmt_ms(g.network, tr)))
    else:
        real_v, sim_v = (sum(e.duration_ms for e in t.events if e.lane == "target" and e.is_forward)
                         for t in (real.trace, result.sim.trace))
        out.append(tr(N_("Cores: here each model runs on one core beside the other, while the serial run gave "
                         "every pass both cores: the target's passes took {real} in all, against {sim} "
                         "simulated from the serial run's.")).format(real=fmt_ms(real_v, tr), sim=fmt_ms(sim_v, tr)))
    if budget is not None and budget.branches:
        out.append(tr(N_("The branch batch: {branch} of glue and branch passes in all, {over} of it past the verify's "
                         "end (predicted per round: {tree} against a verify of {verify}).")).format(
            branch=fmt_ms(st_["branch_ms"], tr), over=fmt_ms(st_["over_verify_ms"], tr),
            tree=fmt_ms(budget.tree_ms, tr), verify=fmt_ms(budget.verify_ms, tr)))
    return " ".join(out)


def budget_text(result: RealVsSim, tr: Translator = N_) -> str:
    b = result.budget
    if not b.branches:
        return tr(N_("Budget: no branch fits inside the verify ({verify}; the glue pass and γ passes of one "
                     "branch would take {tree}), so SSD runs as plain speculative decoding and never loses to "
                     "serial by construction.")).format(verify=fmt_ms(b.verify_ms, tr),
                                                       tree=fmt_ms(tree_ms(result.costs, b.gamma, 1), tr))
    how = tr(N_("fitted so the branch work fits inside the verify")) if b.fitted else tr(N_("the sidebar's fan-out"))
    text = tr(N_("Budget ({how}): B = {b} branches a round, predicted {tree} of branch work against a verify of "
                 "{verify}.")).format(how=how, b=b.branches, tree=fmt_ms(b.tree_ms, tr), verify=fmt_ms(b.verify_ms, tr))
    if b.dropped:
        text += " " + tr(N_("The cap took {n} of the {wanted} branches the fan-out asks for off every full "
                            "block; {rounds} rounds lost branches.")).format(
            n=b.dropped, wanted=b.wanted, rounds=result.real.capped_rounds)
    return text


def render_ssd_real(state: ParallelState, r: Replay) -> None:
    """SSD run for real on the loaded pair, beside its simulation."""
    cfg = r.cfg
    st.markdown("#### " + _("SSD for real"))
    if not r.same or cfg.draft_quant != "none" or cfg.draft_vocab:
        st.caption(_("Load the pair this run was recorded with, with the draft as loaded (no int8, full head), to "
                     "run SSD on it for real."))
        return
    fit = st.toggle(_("Fit the budget to the verify"), value=True, key="parallel_ssd_fit",
                    help=_("On: as many branches as fit inside one verify pass, spread over the likely outcomes "
                           "(geometric). Off: the sidebar's fan-out and shape, to see what a larger budget costs."))
    where = (_("the draft here and the target on {url}").format(url=cfg.target_url) if cfg.target_url else
             _("the draft and the target in two threads, each held to one CPU core"))
    st.caption(_("Runs the same prompt serially (the baseline, and the costs the simulation uses), then under SSD "
                 "at γ = {gamma}, {where}: while the target verifies, the draft prepares the next block for each "
                 "likely outcome.").format(gamma=r.settings.gamma, where=where))
    key = ssd_key(r, fit)
    if st.button(_("Run SSD for real at γ = {gamma}").format(gamma=r.settings.gamma), key="parallel_ssd_run",
                 icon=":material/play_circle:"):
        with st.spinner(_("Running SSD: a serial run, then both models at once…")):
            try:
                state.ssd = (key, run_ssd(r, fit))
            except SpecvizError as exc:
                state.ssd = None
                st.error(_("SSD could not run: ") + str(exc), icon=":material/error:")
    if (got := state.ssd) is not None and got[0] == key:
        render_result(got[1])


def render_result(result: RealVsSim) -> None:
    m, s, real = result.measured, result.simulated, result.real
    cols = st.columns(4)
    cols[0].metric(_("measured"), fmt_ms(m.wall_ms, _), help=_("Wall time of the real SSD run."))
    cols[1].metric(_("simulated"), fmt_ms(s.wall_ms, _))
    cols[2].metric(_("measured ÷ simulated"), f"{1 + result.wall_error:.2f}")
    cols[3].metric(_("same tokens as serial"), _("yes") if result.identical else _("no"))
    cols = st.columns(3)
    both = _("measured / simulated")
    cols[0].metric(_("hit rate"), f"{fmt_pct(m.hit_rate)} / {fmt_pct(s.hit_rate)}", help=both)
    cols[1].metric(_("branches / round"),
                   f"{real.branches_per_round or 0:.1f} / {result.sim.branches_per_round or 0:.1f}", help=both)
    cols[2].metric(_("wasted draft time"),
                   f"{fmt_ms(real.wasted_draft_ms, _)} / {fmt_ms(result.sim.wasted_draft_ms or 0, _)}",
                   help=both + " " + _("Draft time spent on branches thrown away."))
    st.caption(budget_text(result, _) + " " + _("The serial run it is checked against: {time}.").format(
        time=fmt_ms(result.serial.wall_ms, _)))
    titles = (_("SSD, simulated: {time}").format(time=fmt_ms(s.wall_ms, _)),
              _("SSD, measured: {time}").format(time=fmt_ms(m.wall_ms, _)))
    st.plotly_chart(F.measured_vs_simulated_figure(result.sim.trace, real.trace, titles,
                                                   _("time since start (ms), one axis for both"), tr=_),
                    key="parallel_ssd_fig", config={"displayModeBar": False})
    st.markdown(gap_text(result, _) + " " + cause_text(result, _))
    if not real.pinned and real.note:
        st.caption(_("Not pinned: ") + real.note)


def render_round_trip(r: Replay) -> None:
    """A remote run: PEARL's and SSD's gain over serial as the network grows, where each stops paying."""
    if not r.cfg.target_url or "serial" in r.waiting:
        return
    st.markdown("#### " + _("Speculation at a distance: when does overlapping pay?"))
    xs, ys = round_trip_sweep(r)
    labels = {"pearl": "PEARL", "ssd": "SSD"}
    st.plotly_chart(F.round_trip_figure(xs, ys, labels, r.costs.network_ms, r.rtt_ms,
                                        _("network added to every verify, on top of the measured {start}"),
                                        _("speedup over serial"), tr=_),
                    key="parallel_rtt_fig", config={"displayModeBar": False})
    st.caption(_("Each request already took {start} of network, HTTP and queue (measured). A longer round trip "
                 "lengthens every verify: the draft's work, hidden inside it by PEARL and SSD, becomes a smaller "
                 "share of the round, and their gain over serial shrinks towards ×1 (“Speculation at a "
                 "distance”, 2026). A dotted line marks where each falls below ×{pays:.2f}; the solid one is the "
                 "sidebar's added round trip.").format(start=fmt_ms(r.costs.network_ms, _), pays=PAYS))
