"""Tune: sweep γ on chosen prompts; measured tok/s against γ beside the formula's prediction.

A click reruns the script, so the sweep lives in session_state: the job (its settings,
fixed at Start), whether it runs, and every measured run (``sweep_done``, keyed by its
full settings: a rerun, or a second sweep with the same settings, runs only what is
missing). Stop ends the loop at the next redraw and keeps what was measured. Each run
holds the engine lock, so sessions do not time each other's passes.
"""

import json
import time

import pandas as pd
import streamlit as st

from specviz import RunConfig, SpecvizError, ui
from specviz.analysis.metrics import fmt_ms
from specviz.figures.sweep import acceptance_vs_gamma_figure, prompt_label, sweep_figure
from specviz.measure import sweep as S
from specviz.record.contention import describe
from specviz.ui import server_mode
from specviz.ui.controller import ENGINE_LOCK
from specviz.ui.lang import _, language_switch

ui.page_chrome()
language_switch()
pair = ui.require_pair()
if pair is None:
    st.stop()
ss = st.session_state
ss.setdefault("sweep_done", {})  # cell_key -> Cell: every run measured in this session
ss.setdefault("sweep_running", False)
REDRAW_EVERY_S = 1.0  # partial figures at most this often (the browser shares the CPU with the models)
EXAMPLE_NAMES = {"Code": _("Code"), "JSON": "JSON", "Prose": _("Prose"), "中文": "中文", "Counting": _("Counting")}


def example_name(name: str) -> str:
    return EXAMPLE_NAMES.get(name, name)


# --- widgets in (sidebar) ----------------------------------------------------------------------
with st.sidebar:
    st.multiselect(_("Prompts"), list(ui.EXAMPLES), default=[n for n in ("Code", "Prose") if n in ui.EXAMPLES],
                   key="sweep_examples", format_func=example_name,
                   help=_("The Live page's examples: the draft guesses some far better than others, so their "
                          "best γ differ."))
    st.text_area(_("Your own prompt"), key="sweep_custom", height=80,
                 placeholder=_("Optional: a prompt of your own, swept as well"))
    st.slider(_("γ range"), 1, ui.MAX_GAMMA, value=(1, 10), key="sweep_gamma_range")
    st.number_input(_("Repeats per point"), 1, S.MAX_REPEATS, value=3, key="sweep_repeats",
                    help=_("Each point is the median of this many runs, the spread shown as error bars. The runs "
                           "of the different γ are interleaved, so a slow moment of the machine does not land on "
                           "one γ."))
    st.number_input(_("Max new tokens"), 1, server_mode.current().max_new_tokens, value=64, step=16,
                    key="sweep_max_new_tokens",
                    help=_("At least the largest γ + 1: every round ends with the target's own token, so a run "
                           "drafts at most one token fewer than it writes."))
ui.sidebar_pair()

custom = (ss.get("sweep_custom") or "").strip()
labels = {ui.EXAMPLES[n]: example_name(n) for n in ss.get("sweep_examples", []) if n in ui.EXAMPLES}
if custom and custom not in labels:
    labels[custom] = _("Your prompt")
lo, hi = ss["sweep_gamma_range"]
settings = {"prompts": list(labels), "labels": labels, "gammas": list(range(int(lo), int(hi) + 1)),
            "repeats": int(ss["sweep_repeats"]), "max_new_tokens": int(ss["sweep_max_new_tokens"])}
BASE = RunConfig()  # greedy, the full draft head, a constant γ: as the Live page starts
least = S.least_new_tokens(settings["gammas"])
too_few = settings["max_new_tokens"] < least  # nothing to measure at the longest γ (S.check_max_new_tokens)


def start() -> None:
    ss["sweep_job"] = settings
    ss["sweep_running"] = True
    ss.pop("sweep_error", None)


def stop() -> None:
    ss["sweep_running"] = False


def forget() -> None:
    ss["sweep_done"] = {}
    ss.pop("sweep_job", None)
    ss["sweep_running"] = False


def args(job: dict) -> tuple:
    return pair, job["prompts"], job["gammas"], job["repeats"], job["max_new_tokens"], BASE


def probe():
    """The pair's costs from a short probe run, once per pair in this session."""
    costs = ss.setdefault("sweep_costs", {})
    key = (pair.draft_name, pair.target_name, str(pair.device), pair.dtype)
    if key not in costs:
        with st.spinner(_("Timing a short probe run to estimate how long a sweep takes…")):
            costs[key] = S.probe_costs(pair, settings["prompts"][0], BASE, lock=ENGINE_LOCK)
    return costs[key]


# --- what a sweep will measure, and how long it will take ------------------------------------------
st.markdown("## " + _("Tune: the best γ for this pair on this machine"))
st.caption(_("For each prompt the sweep times the target alone and speculative decoding at every γ, several "
             "times, and draws the measured speed against γ beside the curve the formula predicts from the "
             "measured α and c."))
running = bool(ss["sweep_running"]) and "sweep_job" in ss
plan_slot = st.empty()  # filled below the buttons are drawn: the probe may take a moment
bar = st.columns([1, 1, 1, 3], vertical_alignment="bottom")
bar[0].button(_("Start"), key="sweep_start", type="primary", icon=":material/play_arrow:", width="stretch",
              on_click=start, disabled=running or not settings["prompts"] or too_few)
bar[1].button(_("Stop"), key="sweep_stop", icon=":material/stop:", width="stretch", on_click=stop,
              disabled=not running, help=_("Stop after the run in progress; what was measured is kept."))
bar[2].button(_("Forget"), key="sweep_forget", icon=":material/delete:", type="tertiary", on_click=forget,
              disabled=running, help=_("Forget every run measured on this page, so the next sweep measures "
                                       "them all again."))
status, progress_bar = st.empty(), st.empty()
slots = {"figure": st.empty(), "acceptance": st.empty(), "notes": st.container(), "table": st.empty()}
if not settings["prompts"]:
    plan_slot.info(_("Pick at least one prompt in the sidebar, or type your own."), icon=":material/info:")
elif too_few and not running:
    plan_slot.error(_("**Max new tokens** must be at least {least} to sweep γ up to {gamma}: every round ends with "
                      "the target's own token, so a run drafts at most max new tokens − 1 = {drafted}, and a longer γ "
                      "would be timed as a shorter draft (at 1 token nothing is drafted at all). Raise max new "
                      "tokens, or lower the γ range.").format(
        least=least, gamma=settings["gammas"][-1], drafted=settings["max_new_tokens"] - 1), icon=":material/error:")
elif not running:
    try:
        todo = S.pending(*args(settings), done=ss["sweep_done"])
        total = len(S.schedule(settings["prompts"], settings["gammas"], settings["repeats"]))
        seconds = S.estimate_seconds(probe(), settings["prompts"], settings["gammas"], settings["repeats"],
                                     settings["max_new_tokens"], BASE, cells=todo) if todo else 0.0
        plan = _("{runs} runs: {prompts} prompt(s) × ({gammas} γ values + the target alone) × {repeats} "
                 "repeats.").format(runs=total, prompts=len(settings["prompts"]), gammas=len(settings["gammas"]),
                                    repeats=settings["repeats"])
        if todo:
            plan += " " + _("About {time} on this machine, estimated from a short probe run.").format(
                time=fmt_ms(seconds * 1000, _))
        if len(todo) < total:
            plan += " " + _("{n} of them were measured earlier in this session with the same settings and are "
                            "not run again.").format(n=total - len(todo))
        plan_slot.markdown(plan)
    except SpecvizError as exc:
        plan_slot.error(str(exc), icon=":material/error:")
    except Exception as exc:  # never a traceback on the page
        plan_slot.error(_("The estimate failed: ") + f"{type(exc).__name__}: {exc}", icon=":material/error:")


# --- figures out ---------------------------------------------------------------------------------
COLUMNS = {  # row key -> (header, format of a measured value)
    "label": (_("Prompt"), "{}"),
    "gamma": ("γ", "{:d}"),
    "tokens_per_second": (_("tok/s (median)"), "{:.1f}"),
    "tokens_per_second_min": (_("slowest"), "{:.1f}"),
    "tokens_per_second_max": (_("fastest"), "{:.1f}"),
    "speedup": (_("speedup"), "×{:.2f}"),
    "predicted_speedup": (_("formula"), "×{:.2f}"),
    "acceptance_rate": (_("acceptance rate"), "{:.0%}"),
    "mean_acceptance_length": (_("tokens / round"), "{:.2f}"),
    "alpha": ("α", "{:.2f}"),
    "cost_ratio_c": (_("cost ratio c"), "{:.2f}"),
    "verify_ms": (_("verify pass (ms)"), "{:.1f}"),
    "n": (_("runs"), "{:d}"),
}
NOT_MEASURED = "–"  # a cell with nothing measured (no target-alone run yet: no speedup), never "None"


def table(result: S.SweepResult):
    """The rows as the page shows them: each value formatted, a dash where nothing was measured
    (a pandas Styler: the numbers stay numbers, so a column still sorts by value)."""
    rows = [{**r, "label": prompt_label(r["prompt"], labels_of(result))} for r in result.rows]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame.style.format({k: fmt for k, (_header, fmt) in COLUMNS.items()}, na_rep=NOT_MEASURED)


def labels_of(result: S.SweepResult) -> dict:
    return (ss.get("sweep_job") or {}).get("labels") or labels


def column_config() -> dict:
    return {key: st.column_config.Column(header) for key, (header, _fmt) in COLUMNS.items()}


def draw(result: S.SweepResult, tag: str = "") -> None:
    """The figures and the table, into their placeholders (``tag`` keeps keys unique when a
    running sweep redraws them within one script run)."""
    names = labels_of(result)
    slots["figure"].plotly_chart(sweep_figure(result, names, _), key=f"sweep_fig{tag}",
                                 config={"displayModeBar": False})
    slots["acceptance"].plotly_chart(acceptance_vs_gamma_figure(result, names, _), key=f"sweep_acc{tag}",
                                     config={"displayModeBar": False})
    slots["table"].dataframe(table(result), hide_index=True, column_config=column_config(),
                             key=f"sweep_table{tag}")


def explain(result: S.SweepResult) -> None:
    """Why the measured and predicted best γ may differ, with this machine's numbers."""
    names = labels_of(result)
    with slots["notes"]:
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


def summary_line(result: S.SweepResult) -> str:
    names = labels_of(result)
    parts = []
    for p in result.prompts:
        if p in result.best_gamma_measured:
            parts.append(_("{prompt}: best γ measured {measured}, predicted {predicted}").format(
                prompt=prompt_label(p, names), measured=result.best_gamma_measured[p],
                predicted=result.best_gamma_predicted.get(p, "–")))
    return " · ".join(parts)


# --- running -------------------------------------------------------------------------------------
job = ss.get("sweep_job")
if running:
    drawn = {"at": 0.0, "n": 0, "t0": time.monotonic()}

    def on_progress(done: int, total: int, partial: S.SweepResult) -> None:
        c = partial.cells[-1]
        what = _("the target alone") if c.gamma == S.AR else f"γ = {c.gamma}"
        left = ""
        if partial.measured:
            per_run = (time.monotonic() - drawn["t0"]) / partial.measured
            left = " · " + _("about {time} left").format(time=fmt_ms(per_run * (total - done) * 1000, _))
        text = _("Run {done} of {total}: {prompt}, {what}, repeat {repeat}").format(
            done=done, total=total, prompt=prompt_label(c.prompt, job["labels"]), what=what, repeat=c.repeat + 1)
        progress_bar.progress(done / total, text=text + left)
        now = time.monotonic()
        if now - drawn["at"] >= REDRAW_EVERY_S or done == total:
            drawn["n"] += 1
            draw(partial, f"_{drawn['n']}")
            drawn["at"] = now

    status.info(_("Measuring. Stop keeps what has been measured so far."), icon=":material/timer:")
    try:
        S.sweep(*args(job), progress=on_progress, stop=lambda: not ss.get("sweep_running"),
                done=ss["sweep_done"], lock=ENGINE_LOCK)
    except SpecvizError as exc:
        ss["sweep_error"] = str(exc)
    except Exception as exc:  # engine failures are shown, never raised at the user
        ss["sweep_error"] = _("The sweep stopped with ") + f"{type(exc).__name__}: {exc}"
    ss["sweep_running"] = False
    st.rerun()  # one clean redraw: the final figures, the table, the downloads

# --- the result as it stands -----------------------------------------------------------------------
if "sweep_error" in ss:
    status.error(ss["sweep_error"], icon=":material/error:")
if job is not None:
    try:
        result = S.collect(*args(job), done=ss["sweep_done"])
    except SpecvizError as exc:
        status.error(str(exc), icon=":material/error:")
        st.stop()
    if not result.cells:
        status.info(_("Nothing measured yet with these settings on this pair."), icon=":material/info:")
        st.stop()
    if "sweep_error" not in ss:
        if result.complete:
            status.success(_("Done: {n} runs.").format(n=result.total_cells) + " " + summary_line(result),
                           icon=":material/check_circle:")
        else:
            status.warning(_("Stopped: {done} of {total} runs measured.").format(
                done=result.done_cells, total=result.total_cells) + " " + summary_line(result),
                icon=":material/pause_circle:")
    draw(result)
    explain(result)
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
