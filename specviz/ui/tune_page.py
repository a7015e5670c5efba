"""The Tune page (pages/sweep.py): sweep γ on chosen prompts; measured tok/s against γ beside
the formula's prediction.

A click reruns the script, so the sweep lives in session state, one ``TuneState`` under one
key: the job (its settings, fixed at Start), whether it runs, and every measured run
(``done``, keyed by its full settings: a rerun, or a second sweep with the same settings,
runs only what is missing). Stop ends the loop at the next redraw and keeps what was
measured. Each run holds the engine lock, so sessions do not time each other's passes.

The decisions (the settings the widgets describe, what the plan says, which status the
result gets) are pure functions of their arguments and a translator ``tr``; the page's parts
that draw are in specviz.ui.tune_parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from specviz.analysis.metrics import fmt_ms
from specviz.figures.sweep import prompt_label
from specviz.measure import sweep
from specviz.models.pair import ModelPair
from specviz.record.i18n import N_, Translator
from specviz.record.run_config import RunConfig
from specviz.ui.chrome import EXAMPLES

KEY = "tune_page"  # the one session_state key of the page's own state
BASE = RunConfig()  # greedy, the full draft head, a constant γ: as the Live page starts
EXAMPLE_NAMES = {"Code": N_("Code"), "Prose": N_("Prose"), "Counting": N_("Counting")}  # shown as tr(name)


@dataclass
class TuneState:
    """The sweep of this session: the job started last, whether it runs, what was measured."""

    done: dict = field(default_factory=dict)  # cell_key -> Cell: every run measured in this session
    running: bool = False
    job: dict | None = None  # the settings fixed at Start
    error: str | None = None  # why the last sweep stopped early
    costs: dict = field(default_factory=dict)  # pair key -> the probe run's costs

    @property
    def active(self) -> bool:
        """A sweep is under way (Start was pressed, Stop not yet)."""
        return self.running and self.job is not None

    def start(self, settings: dict) -> None:
        self.job = settings
        self.running = True
        self.error = None

    def stop(self) -> None:
        self.running = False

    def forget(self) -> None:
        """Forget every measured run, so the next sweep measures them all again."""
        self.done = {}
        self.job = None
        self.running = False

    def labels(self, fallback: dict) -> dict:
        """The prompts' short names: the job's, else those the widgets describe now."""
        return (self.job or {}).get("labels") or fallback


def tune_state() -> TuneState:
    ss = st.session_state
    if KEY not in ss:
        ss[KEY] = TuneState()
    return ss[KEY]


# --- the decisions --------------------------------------------------------------------------------

def example_name(name: str, tr: Translator = N_) -> str:
    return tr(EXAMPLE_NAMES[name]) if name in EXAMPLE_NAMES else name


def sweep_settings(examples: list[str], custom: str, gamma_range: tuple[int, int], repeats: int,
                   max_new_tokens: int, tr: Translator = N_) -> dict:
    """The sweep the widgets describe: its prompts (the examples picked, then the user's own),
    their short names, the γ values, the repeats and the token budget."""
    custom = (custom or "").strip()
    labels = {EXAMPLES[n]: example_name(n, tr) for n in examples if n in EXAMPLES}
    if custom and custom not in labels:
        labels[custom] = tr(N_("Your prompt"))
    lo, hi = gamma_range
    return {"prompts": list(labels), "labels": labels, "gammas": list(range(int(lo), int(hi) + 1)),
            "repeats": int(repeats), "max_new_tokens": int(max_new_tokens)}


def too_few_tokens(settings: dict) -> tuple[int, bool]:
    """(the least max new tokens the γ range needs, whether the settings have fewer): nothing
    to measure at the longest γ (``sweep.check_max_new_tokens``)."""
    least = sweep.least_new_tokens(settings["gammas"])
    return least, settings["max_new_tokens"] < least


def setup_problem(settings: dict, running: bool, tr: Translator = N_) -> tuple[str, str] | None:
    """Why no plan can be shown, as (kind "info" | "error", text); None when one can."""
    least, too_few = too_few_tokens(settings)
    if not settings["prompts"]:
        return "info", tr(N_("Pick at least one prompt in the sidebar, or type your own."))
    if too_few and not running:
        return "error", tr(N_(
            "**Max new tokens** must be at least {least} to sweep γ up to {gamma}: every round ends with "
            "the target's own token, so a run drafts at most max new tokens − 1 = {drafted}, and a longer γ "
            "would be timed as a shorter draft (at 1 token nothing is drafted at all). Raise max new "
            "tokens, or lower the γ range.")).format(
            least=least, gamma=settings["gammas"][-1], drafted=settings["max_new_tokens"] - 1)
    return None


def plan_text(settings: dict, total: int, todo: int, seconds: float, tr: Translator = N_) -> str:
    """What a sweep will measure (``total`` runs, ``todo`` of them not measured yet) and how
    long it will take (``seconds``, estimated)."""
    plan = tr(N_("{runs} runs: {prompts} prompt(s) × ({gammas} γ values + the target alone) × {repeats} "
                 "repeats.")).format(runs=total, prompts=len(settings["prompts"]), gammas=len(settings["gammas"]),
                                     repeats=settings["repeats"])
    if todo:
        plan += " " + tr(N_("About {time} on this machine, estimated from a short probe run.")).format(
            time=fmt_ms(seconds * 1000, tr))
    if todo < total:
        plan += " " + tr(N_("{n} of them were measured earlier in this session with the same settings and are "
                            "not run again.")).format(n=total - todo)
    return plan


def summary_line(result: Any, names: dict, tr: Translator = N_) -> str:
    parts = []
    for p in result.prompts:
        if p in result.best_gamma_measured:
            parts.append(tr(N_("{prompt}: best γ measured {measured}, predicted {predicted}")).format(
                prompt=prompt_label(p, names), measured=result.best_gamma_measured[p],
                predicted=result.best_gamma_predicted.get(p, "–")))
    return " · ".join(parts)


def result_status(result: Any, names: dict, tr: Translator = N_) -> tuple[str, str]:
    """The status line of a sweep's result, as (kind "info" | "success" | "warning", text)."""
    if not result.cells:
        return "info", tr(N_("Nothing measured yet with these settings on this pair."))
    if result.complete:
        return "success", tr(N_("Done: {n} runs.")).format(n=result.total_cells) + " " + summary_line(
            result, names, tr)
    return "warning", tr(N_("Stopped: {done} of {total} runs measured.")).format(
        done=result.done_cells, total=result.total_cells) + " " + summary_line(result, names, tr)


def progress_text(done: int, total: int, cell: Any, labels: dict, seconds_left: float | None,
                  tr: Translator = N_) -> str:
    """The progress bar's text: which run of how many, and (once one is measured) the time left."""
    what = tr(N_("the target alone")) if cell.gamma == sweep.AR else f"γ = {cell.gamma}"
    left = ""
    if seconds_left is not None:
        left = " · " + tr(N_("about {time} left")).format(time=fmt_ms(seconds_left * 1000, tr))
    return tr(N_("Run {done} of {total}: {prompt}, {what}, repeat {repeat}")).format(
        done=done, total=total, prompt=prompt_label(cell.prompt, labels), what=what, repeat=cell.repeat + 1) + left


def sweep_args(pair: ModelPair, job: dict) -> tuple:
    return pair, job["prompts"], job["gammas"], job["repeats"], job["max_new_tokens"], BASE
