"""The Parallel page's parts below its settings (specviz.ui.parallel_page): the schedules
side by side, what "vs target alone" divides by, the check against the real run, PEARL run
for real, and what each schedule changes."""

from __future__ import annotations

import dataclasses

import streamlit as st

from specviz import figures as F
from specviz.analysis.metrics import fmt_ms, fmt_pct
from specviz.record.errors import SpecvizError
from specviz.replay import what_if
from specviz.ui.lang import _
from specviz.ui.pair import running_client
from specviz.ui.parallel_page import ParallelState, real_key
from specviz.ui.parallel_replay import Replay


def render_schedules(r: Replay) -> None:
    """The three schedules' timelines (chart) and their numbers, side by side."""
    names = {"serial": _("Serial speculative decoding"), "pearl": "PEARL", "ssd": _("SSD (speculative speculative)")}
    shown = {k: res for k, res in r.results.items() if k not in r.waiting}
    titles = {k: _("{schedule}: {time}, {rate:.1f} tok/s").format(schedule=names[k], time=fmt_ms(res.wall_ms, _),
                                                                  rate=res.tokens_per_second)
              for k, res in shown.items()}
    chart, numbers = st.columns([2.6, 1.4])
    with chart:
        if shown:
            st.plotly_chart(F.schedules_figure(shown, titles, _("simulated time since start (ms), one axis for all"),
                                               tr=_),
                            key="parallel_fig", config={"displayModeBar": False})
    with numbers:
        serial = r.results["serial"]
        for key, res in r.results.items():
            with st.container(border=True):
                st.markdown(f"**{names[key]}**")
                if key in r.measuring:
                    st.caption(_("Measuring the branch costs…") if key == "ssd" else
                               _("Measuring the passes γ = {gamma} needs…").format(gamma=r.settings.gamma))
                    continue
                if key in r.waiting:
                    st.caption(_("Not shown: the run did not make every pass this replay needs (above)."))
                    continue
                c = st.columns(2)
                c[0].metric(_("tokens / s"), f"{res.tokens_per_second:.1f}")
                c[1].metric(_("vs serial"),
                            f"×{serial.wall_ms / res.wall_ms:.2f}" if "serial" not in r.waiting else "…")
                st.metric(_("vs target alone"),
                          f"×{res.tokens_per_second / r.alone_tps:.2f}" if r.alone_tps else "…",
                          help=_("This schedule's tokens per second over the target alone's (the caption under the "
                                 "chart says which)."))
                st.caption(_("idle: draft {draft} / target {target}").format(
                    draft=fmt_pct(res.draft_idle_fraction), target=fmt_pct(res.target_idle_fraction)))
                if key == "ssd":
                    c = st.columns(2)
                    c[0].metric(_("hit rate"), fmt_pct(res.hit_rate))
                    c[1].metric(_("branches / round"), f"{res.branches_per_round or 0:.1f}")
                    st.caption(_("Draft time spent on branches thrown away: ") + fmt_ms(res.wasted_draft_ms, _))


def render_check(r: Replay) -> None:
    """What "vs target alone" divides by, and the serial replay checked against the real run."""
    check = what_if.check_serial(r.trace, r.costs)
    n, alone_run, alone_tps, costs = r.n, r.alone_run, r.alone_tps, r.costs
    if alone_run is not None:
        st.caption(_("“vs target alone” divides by {which}: {rate:.2f} tokens/s ({tokens} tokens in {time}). That "
                     "race measured ×{race:.2f} for this run; its serial replay (its own γ and policy) gives "
                     "×{replay:.2f}, as its wall time is {err:+.1%} off the run's.").format(
            which=r.alone_what, rate=alone_tps, tokens=len(alone_run.output_ids), time=fmt_ms(alone_run.wall_ms, _),
            race=r.race_speedup, replay=n / check.sim_wall_ms * 1000 / alone_tps, err=check.wall_error))
    elif alone_tps:
        how = (_("measured on this machine") if r.measured else
               _("measured just now, scaled to the run's own verify pass")
               if r.quick is not None and ("target", 1, 1) in r.quick.ratios else _("the run's own"))
        st.caption(_("“vs target alone” is an estimate, as no target-alone run of this prompt and settings was "
                     "raced or recorded: the target's prefill of the prompt ({prefill}), then {n} one-token passes "
                     "of {one} each ({how}) and the run's bookkeeping, {rate:.2f} tokens/s.").format(
            prefill=fmt_ms(costs.target_prefill_ms, _), n=max(0, n - 1), one=fmt_ms(costs.verify(1), _), how=how,
            rate=alone_tps))

    verdict = _("agrees") if check.ok else _("does not agree")
    st.markdown("#### " + _("Checked against the real run"))
    st.markdown(
        _("Replayed serially with its own γ and policy, the simulator {verdict} with the real run: "
          "{sim_rounds} rounds against {real_rounds} ({rounds}), and {sim} against the measured {real} "
          "({err:+.1%}; the tolerance is ±10%).").format(
            verdict=verdict, sim_rounds=check.sim_rounds, real_rounds=check.real_rounds,
            rounds=_("every round the same") if check.rounds_match else _("rounds differ"),
            sim=fmt_ms(check.sim_wall_ms, _), real=fmt_ms(check.real_wall_ms, _), err=check.wall_error))
    if r.measured and check.rounds_match and not check.ok:
        st.caption(_("Every round is the same, so the gap is in the costs: they were measured at another time, and "
                     "a shared machine's speed drifts by up to a fifth from one minute to the next. Timed right "
                     "after each run instead, the same passes bring the replay within a few percent of the real "
                     "runs (bench/schedules_check.py)."))


def render_pearl_real(state: ParallelState, r: Replay) -> None:
    """PEARL run for real on the loaded pair, beside its simulation."""
    ss = st.session_state
    cfg = r.cfg
    st.markdown("#### " + _("PEARL for real"))
    gamma = r.settings.gamma
    key = real_key(r.trace, gamma)
    other_draft = [what for what, on in ((_("int8 draft"), cfg.draft_quant != "none"),
                                         (_("a cut draft head"), bool(cfg.draft_vocab))) if on]
    if not r.same:
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
        where = (_("the draft here and the target on {url}: the draft is really free while the server "
                   "verifies").format(url=cfg.target_url) if cfg.target_url else
                 _("the draft and the target in two threads, each held to one CPU core: on this machine they share "
                   "its memory bandwidth"))
        st.caption(_("Runs the same prompt under PEARL at γ = {gamma}, {where}, and compares its wall time with "
                     "the simulation above.").format(gamma=gamma, where=where))
        if st.button(_("Run PEARL for real at γ = {gamma}").format(gamma=gamma), key="parallel_real_run",
                     icon=":material/play_circle:"):
            run_cfg = dataclasses.replace(cfg, gamma=gamma, policy="constant", stop=[])
            with st.spinner(_("Running PEARL: both models at once…")):
                try:
                    state.real = (key, running_client().call("specviz.measure.pearl_real:pearl_run", run_cfg))
                except SpecvizError as exc:
                    state.real = None
                    st.error(_("PEARL could not run: ") + str(exc), icon=":material/error:")
    if (got := state.real) is not None and got[0] == key and "pearl" not in r.waiting:
        real = got[1].trace
        sim = r.results["pearl"]
        err = real.wall_ms / sim.wall_ms - 1 if sim.wall_ms else 0.0
        same_text = real.output_ids == r.trace.output_ids[: len(real.output_ids)]
        cols = st.columns(4)
        cols[0].metric(_("measured"), fmt_ms(real.wall_ms, _), help=_("Wall time of the real overlapped run."))
        cols[1].metric(_("simulated"), fmt_ms(sim.wall_ms, _))
        cols[2].metric(_("measured ÷ simulated"), f"{1 + err:.2f}")
        cols[3].metric(_("same tokens as the run"), _("yes") if same_text else _("no"))
        st.plotly_chart(F.timeline_figure(real, tr=_, title=_("PEARL, measured: {tokens} tokens in {time}").format(
            tokens=len(real.output_ids), time=fmt_ms(real.wall_ms, _))), key="parallel_real_fig",
            config={"displayModeBar": False})
        if not got[1].pinned and got[1].note:
            st.caption(_("Not pinned: ") + got[1].note)


def render_changes(r: Replay) -> None:
    """What each schedule changes, and why the gain differs on this machine."""
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
    if "serial" in r.waiting:
        return
    costs, gamma = r.costs, r.settings.gamma
    gain = what_if.overlap_bound(costs, gamma)
    block, verify = gamma * costs.draft(1), costs.network_ms + costs.verify(gamma + 1)
    st.markdown(_(
        "**Why the gain differs here.** The papers give the draft its own GPU, and their targets are large "
        "enough that one verify pass costs far more than a draft pass, so there is much drafting to hide. In "
        "this replay γ = {gamma} draft passes take {block} and the verify of their {k} tokens {verify}. "
        "Running the two at once hides the shorter of them, so a round shrinks at most from {both} to "
        "{longer}: neither PEARL nor SSD can beat ×{gain:.2f} over serial here, and SSD gets that only on a "
        "hit.").format(gamma=gamma, block=fmt_ms(block, _), k=gamma + 1, verify=fmt_ms(verify, _),
                       both=fmt_ms(block + verify, _), longer=fmt_ms(max(block, verify), _), gain=gain)
        + " " + (_("The draft is the cheap side ({share} of the verify), so the target's verify passes set the "
                   "pace.") if block < verify else
                 _("The draft is the slow side ({share} of the verify), so the target waits for it even when both "
                   "run at once.")).format(share=fmt_pct(block / verify))
        + " " + _("On one device ({device}) the two models would also share its cores and memory bandwidth; the "
                  "timelines above give each model its own.").format(device=r.cfg.device))
