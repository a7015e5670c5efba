"""The Tune page's parts (specviz.ui.tune_page): the sidebar, the buttons, the plan, the
running sweep and its result, drawn into placeholders below the buttons."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from specviz.analysis.metrics import fmt_ms
from specviz.figures.sweep import acceptance_vs_gamma_figure, prompt_label, sweep_figure
from specviz.measure import sweep
from specviz.models.pair import ModelPair
from specviz.record.contention import describe
from specviz.record.errors import SpecvizError
from specviz.record.i18n import N_
from specviz.record.limits import MAX_GAMMA
from specviz.ui import server_mode
from specviz.ui.chrome import EXAMPLES
from specviz.ui.lang import _
from specviz.ui.pair import engine_client, sidebar_pair
from specviz.ui.tune_page import (
    BASE,
    TuneState,
    example_name,
    plan_text,
    progress_text,
    result_status,
    setup_problem,
    sweep_args,
    sweep_settings,
    too_few_tokens,
)

REDRAW_EVERY_S = 1.0  # partial figures at most this often (the browser shares the CPU with the models)
NOT_MEASURED = "–"  # a cell with nothing measured (no target-alone run yet: no speedup), never "None"


@dataclass
class Slots:
    """The placeholders the page fills below its buttons."""

    plan: Any
    status: Any
    progress: Any
    figure: Any
    acceptance: Any
    notes: Any
    table: Any


def render_sidebar() -> dict:
    """The sweep's widgets, and the settings they describe."""
    with st.sidebar:
        st.multiselect(_("Prompts"), list(EXAMPLES), default=[n for n in ("Code", "Prose") if n in EXAMPLES],
                       key="sweep_examples", format_func=lambda n: example_name(n, _),
                       help=_("The Live page's examples: the draft guesses some far better than others, so their "
                              "best γ differ."))
        st.text_area(_("Your own prompt"), key="sweep_custom", height=80,
                     placeholder=_("Optional: a prompt of your own, swept as well"))
        st.slider(_("γ range"), 1, MAX_GAMMA, value=(1, 10), key="sweep_gamma_range")
        st.number_input(_("Repeats per point"), 1, sweep.MAX_REPEATS, value=3, key="sweep_repeats",
                        help=_("Each point is the median of this many runs, the spread shown as error bars. The "
                               "runs of the different γ are interleaved, so a slow moment of the machine does not "
                               "land on one γ."))
        st.number_input(_("Max new tokens"), 1, server_mode.current().max_new_tokens, value=64, step=16,
                        key="sweep_max_new_tokens",
                        help=_("At least the largest γ + 1: every round ends with the target's own token, so a "
                               "run drafts at most one token fewer than it writes."))
    sidebar_pair()
    ss = st.session_state
    return sweep_settings(ss.get("sweep_examples", []), ss.get("sweep_custom") or "", ss["sweep_gamma_range"],
                          ss["sweep_repeats"], ss["sweep_max_new_tokens"], _)


def render_toolbar(state: TuneState, settings: dict) -> Slots:
    """The title, Start, Stop and Forget, and the placeholders below them."""
    st.markdown("## " + _("Tune: the best γ for this pair on this machine"))
    st.caption(_("For each prompt the sweep times the target alone and speculative decoding at every γ, several "
                 "times, and draws the measured speed against γ beside the curve the formula predicts from the "
                 "measured α and c."))
    running = state.active
    _least, too_few = too_few_tokens(settings)
    plan = st.empty()  # filled below the buttons are drawn: the probe may take a moment
    bar = st.columns([1, 1, 1, 3], vertical_alignment="bottom")
    bar[0].button(_("Start"), key="sweep_start", type="primary", icon=":material/play_arrow:", width="stretch",
                  on_click=state.start, args=(settings,), disabled=running or not settings["prompts"] or too_few)
    bar[1].button(_("Stop"), key="sweep_stop", icon=":material/stop:", width="stretch", on_click=state.stop,
                  disabled=not running, help=_("Stop after the run in progress; what was measured is kept."))
    bar[2].button(_("Forget"), key="sweep_forget", icon=":material/delete:", type="tertiary", on_click=state.forget,
                  disabled=running, help=_("Forget every run measured on this page, so the next sweep measures "
                                           "them all again."))
    status, progress = st.empty(), st.empty()
    return Slots(plan=plan, status=status, progress=progress, figure=st.empty(), acceptance=st.empty(),
                 notes=st.container(), table=st.empty())


def probe(state: TuneState, pair: ModelPair, prompt: str):
    """The pair's costs from a short probe run, once per pair in this session."""
    key = (pair.draft_name, pair.target_name, str(pair.device), pair.dtype)
    if key not in state.costs:
        with st.spinner(_("Timing a short probe run to estimate how long a sweep takes…")):
            state.costs[key] = sweep.probe_costs(pair, prompt, BASE, lock=engine_client())
    return state.costs[key]


def render_plan(state: TuneState, pair: ModelPair, settings: dict, slots: Slots) -> None:
    """What a sweep will measure, and how long it will take (or why there is nothing to plan)."""
    if (problem := setup_problem(settings, state.active, _)) is not None:
        kind, text = problem
        getattr(slots.plan, kind)(text, icon=":material/info:" if kind == "info" else ":material/error:")
        return
    if state.active:
        return
    try:
        todo = sweep.pending(*sweep_args(pair, settings), done=state.done)
        total = len(sweep.schedule(settings["prompts"], settings["gammas"], settings["repeats"]))
        seconds = sweep.estimate_seconds(probe(state, pair, settings["prompts"][0]), settings["prompts"],
                                     settings["gammas"], settings["repeats"], settings["max_new_tokens"], BASE,
                                     cells=todo) if todo else 0.0
        slots.plan.markdown(plan_text(settings, total, len(todo), seconds, _))
    except SpecvizError as exc:
        slots.plan.error(str(exc), icon=":material/error:")
    except Exception as exc:  # never a traceback on the page
        slots.plan.error(_("The estimate failed: ") + f"{type(exc).__name__}: {exc}", icon=":material/error:")


COLUMNS = {  # row key -> (header, shown as _(header), the format of a measured value)
    "label": (N_("Prompt"), "{}"),
    "gamma": ("γ", "{:d}"),
    "tokens_per_second": (N_("tok/s (median)"), "{:.1f}"),
    "tokens_per_second_min": (N_("slowest"), "{:.1f}"),
    "tokens_per_second_max": (N_("fastest"), "{:.1f}"),
    "speedup": (N_("speedup"), "×{:.2f}"),
    "predicted_speedup": (N_("formula"), "×{:.2f}"),
    "acceptance_rate": (N_("acceptance rate"), "{:.0%}"),
    "mean_acceptance_length": (N_("tokens / round"), "{:.2f}"),
    "alpha": ("α", "{:.2f}"),
    "cost_ratio_c": (N_("cost ratio c"), "{:.2f}"),
    "verify_ms": (N_("verify pass (ms)"), "{:.1f}"),
    "n": (N_("runs"), "{:d}"),
}


def table(result: sweep.SweepResult, names: dict):
    """The rows as the page shows them: each value formatted, a dash where nothing was measured
    (a pandas Styler: the numbers stay numbers, so a column still sorts by value)."""
    rows = [{**r, "label": prompt_label(r["prompt"], names)} for r in result.rows]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame.style.format({k: fmt for k, (_header, fmt) in COLUMNS.items()}, na_rep=NOT_MEASURED)


def column_config() -> dict:
    return {key: st.column_config.Column(_(header)) for key, (header, _fmt) in COLUMNS.items()}


def draw(result: sweep.SweepResult, names: dict, slots: Slots, tag: str = "") -> None:
    """The figures and the table, into their placeholders (``tag`` keeps keys unique when a
    running sweep redraws them within one script run)."""
    slots.figure.plotly_chart(sweep_figure(result, names, _), key=f"sweep_fig{tag}",
                              config={"displayModeBar": False})
    slots.acceptance.plotly_chart(acceptance_vs_gamma_figure(result, names, _), key=f"sweep_acc{tag}",
                                  config={"displayModeBar": False})
    slots.table.dataframe(table(result, names), hide_index=True, column_config=column_config(),
                          key=f"sweep_table{tag}")


def explain(result: sweep.SweepResult, names: dict, slots: Slots) -> None:
    """Why the measured and predicted best γ may differ, with this machine's numbers."""
    with slots.notes:
        far = result.disagreements()
        if far:
            p = far[0]
            rows = result.rows_of(p)
            longest = max(rows, key=lambda r: r["gamma"])
            step = result.target_step_ms.get(p)
            numbers = ""
            if step and longest.get("verify_ms"):
                numbers = " " + _("Here a one-token step of the target takes {step}, and a verify pass over "
                                  "{k} tokens {verify}.").format(step=fmt_ms(step, _), k=longest["gamma"] + 1,
                                                                 verify=fmt_ms(longest["verify_ms"], _))
            st.info(_("On {prompts}, the best γ measured and the best γ the formula predicts differ by more than "
                      "1. That can happen: the formula assumes a verify pass over γ + 1 tokens costs the same as "
                      "one target step, but on this machine a k-token pass costs more than a one-token pass, so "
                      "long drafts pay more than the formula charges them.").format(
                          prompts=", ".join(prompt_label(q, names) for q in far)) + numbers + " " +
                    _("Near the optimum the curve is flat, and run-to-run noise can move the measured best by a "
                      "step or two; more repeats narrow it."), icon=":material/info:")
        if jobs := result.contended():
            st.warning(_("Some runs were timed under contention ({jobs} ran at the same time): those timings are "
                         "slower than the pair's own.").format(jobs=describe(jobs, _)), icon=":material/speed:")


def render_run(state: TuneState, pair: ModelPair, slots: Slots) -> None:
    """Run the started sweep here, drawing as it goes; then one clean redraw."""
    if not state.active:
        return
    job = state.job
    drawn = {"at": 0.0, "n": 0, "t0": time.monotonic()}

    def on_progress(done: int, total: int, partial: sweep.SweepResult) -> None:
        left = None
        if partial.measured:
            left = (time.monotonic() - drawn["t0"]) / partial.measured * (total - done)
        slots.progress.progress(done / total, text=progress_text(done, total, partial.cells[-1], job["labels"],
                                                                 left, _))
        now = time.monotonic()
        if now - drawn["at"] >= REDRAW_EVERY_S or done == total:
            drawn["n"] += 1
            draw(partial, state.labels({}), slots, f"_{drawn['n']}")
            drawn["at"] = now

    slots.status.info(_("Measuring. Stop keeps what has been measured so far."), icon=":material/timer:")
    try:
        sweep.sweep(*sweep_args(pair, job), progress=on_progress, stop=lambda: not state.running,
                done=state.done, lock=engine_client())
    except SpecvizError as exc:
        state.error = str(exc)
    except Exception as exc:  # engine failures are shown, never raised at the user
        state.error = _("The sweep stopped with ") + f"{type(exc).__name__}: {exc}"
    state.running = False
    st.rerun()  # one clean redraw: the final figures, the table, the downloads


ICONS = {"info": ":material/info:", "success": ":material/check_circle:", "warning": ":material/pause_circle:"}


def render_result(state: TuneState, pair: ModelPair, settings: dict, slots: Slots) -> None:
    """The result as it stands: the status, the figures, the notes, the table and the downloads."""
    if state.error is not None:
        slots.status.error(state.error, icon=":material/error:")
    if state.job is None:
        return
    names = state.labels(settings["labels"])
    try:
        result = sweep.collect(*sweep_args(pair, state.job), done=state.done)
    except SpecvizError as exc:
        slots.status.error(str(exc), icon=":material/error:")
        return
    kind, text = result_status(result, names, _)
    if not result.cells:
        slots.status.info(text, icon=ICONS[kind])
        return
    if state.error is None:
        getattr(slots.status, kind)(text, icon=ICONS[kind])
    draw(result, names, slots)
    explain(result, names, slots)
    st.caption(_("Dashed: the target alone. Dotted: the formula, (1 − α^(γ+1)) / ((1 − α)(γc + 1)) times the "
                 "target alone's speed, with α inferred from each prompt's tokens per round and c = one draft "
                 "pass ÷ one target step, both measured in this sweep. Star: the fastest γ measured; open "
                 "diamond: the best γ by the formula."))
    raw = pd.DataFrame([{**r, "tokens_per_second_values": json.dumps(r["tokens_per_second_values"])}
                        for r in result.rows])
    cols = st.columns([1.6, 1.6, 2.8])  # the labels whole at 1280 px
    cols[0].download_button(_("Download CSV"), raw.to_csv(index=False).encode("utf-8"), "specviz-sweep.csv",
                            "text/csv", icon=":material/download:", key="sweep_csv", width="stretch")
    cols[1].download_button(_("Download JSON"),
                            json.dumps(result.to_dict(), ensure_ascii=False, indent=1).encode("utf-8"),
                            "specviz-sweep.json", "application/json", icon=":material/data_object:",
                            key="sweep_json", width="stretch")
