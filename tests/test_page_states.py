"""The page states and their pure decisions: Tune (specviz.ui.tune_page), Inspect a round
(specviz.ui.inspect_page) and Parallel (specviz.ui.parallel_page), without a page run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from specviz import Trace
from specviz.measure import sweep as S
from specviz.record.i18n import gettext_for
from specviz.replay import what_if
from specviz.ui import inspect_page, parallel_page, tune_page
from specviz.ui.chrome import EXAMPLES
from specviz.ui.inspect_page import STEPS, InspectState
from specviz.ui.parallel_page import ParallelState
from specviz.ui.tune_page import TuneState

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "assets" / "traces" / "prose-gamma4-greedy.json"
ZH = gettext_for("zh_CN")


def settings(gammas=(1, 3), max_new_tokens=16, examples=("Code", "Prose"), custom=""):
    return tune_page.sweep_settings(list(examples), custom, gammas, 2, max_new_tokens)


# --- Tune: the state machine --------------------------------------------------------------------

def test_tune_starts_idle():
    state = TuneState()
    assert not state.active and state.job is None and state.done == {} and state.error is None


def test_tune_start_fixes_the_job_and_clears_the_last_error():
    state = TuneState(error="the last sweep failed")
    job = settings()
    state.start(job)
    assert state.active and state.running and state.job is job and state.error is None


def test_tune_stop_keeps_the_job_and_what_was_measured():
    state = TuneState()
    state.start(settings())
    state.done["cell"] = "measured"
    state.stop()
    assert not state.active and state.job is not None and state.done == {"cell": "measured"}


def test_tune_forget_drops_every_run_and_the_job():
    state = TuneState(error="kept: the status still says why the last sweep stopped")
    state.start(settings())
    state.error = "stopped"
    state.done["cell"] = "measured"
    state.forget()
    assert not state.active and state.job is None and state.done == {} and state.error == "stopped"


def test_tune_running_without_a_job_is_not_active():
    assert not TuneState(running=True).active


def test_tune_labels_are_the_jobs_once_started():
    state = TuneState()
    now = {"p": "now"}
    assert state.labels(now) is now
    state.start({**settings(), "labels": {"p": "then"}})
    assert state.labels(now) == {"p": "then"}


# --- Tune: the decisions ----------------------------------------------------------------------------

def test_sweep_settings_from_the_widgets():
    got = settings(gammas=(2, 4), custom="  my own prompt  ")
    assert got["prompts"] == [EXAMPLES["Code"], EXAMPLES["Prose"], "my own prompt"]
    assert got["labels"] == {EXAMPLES["Code"]: "Code", EXAMPLES["Prose"]: "Prose", "my own prompt": "Your prompt"}
    assert got["gammas"] == [2, 3, 4] and got["repeats"] == 2 and got["max_new_tokens"] == 16


def test_sweep_settings_name_the_examples_in_the_language():
    got = tune_page.sweep_settings(["Code", "JSON", "中文"], EXAMPLES["Code"], (1, 2), 1, 8, ZH)
    assert list(got["labels"].values()) == [ZH("Code"), "JSON", "中文"]  # the custom prompt is the Code example
    assert ZH("Code") != "Code"


def test_too_few_tokens_and_the_problems_before_a_plan():
    assert tune_page.too_few_tokens(settings(gammas=(1, 3), max_new_tokens=4)) == (4, False)
    assert tune_page.too_few_tokens(settings(gammas=(1, 3), max_new_tokens=3)) == (4, True)
    kind, text = tune_page.setup_problem(settings(examples=()), running=False)
    assert kind == "info" and "Pick at least one prompt" in text
    kind, text = tune_page.setup_problem(settings(max_new_tokens=1), running=False)
    assert kind == "error" and "must be at least 4 to sweep γ up to 3" in text and "− 1 = 0" in text
    assert tune_page.setup_problem(settings(max_new_tokens=1), running=True) is None  # the running job's own
    assert tune_page.setup_problem(settings(), running=False) is None


def test_plan_text_says_what_is_left_and_how_long():
    job = settings()
    assert tune_page.plan_text(job, total=16, todo=16, seconds=90) == (
        "16 runs: 2 prompt(s) × (3 γ values + the target alone) × 2 repeats. About 90 s on this machine, "
        "estimated from a short probe run.")
    assert tune_page.plan_text(job, total=16, todo=0, seconds=0).endswith(
        "16 of them were measured earlier in this session with the same settings and are not run again.")
    assert "About" in tune_page.plan_text(job, 16, 4, 2.0) and "12 of them" in tune_page.plan_text(job, 16, 4, 2.0)


def result(cells=3, complete=True, best=None):
    prompt = EXAMPLES["Code"]
    return SimpleNamespace(cells=[object()] * cells, complete=complete, total_cells=16, done_cells=cells,
                           prompts=[prompt], best_gamma_measured=best or {}, best_gamma_predicted={prompt: 4})


def test_a_finished_sweep_says_done_with_the_best_gamma():
    state = TuneState()
    job = settings()
    state.start(job)
    state.running = False  # as render_run leaves it once the sweep returned
    assert not state.active and state.job is job
    kind, text = tune_page.result_status(result(16, best={EXAMPLES["Code"]: 3}), state.labels({}))
    assert kind == "success" and text == "Done: 16 runs. Code: best γ measured 3, predicted 4"


def test_a_stopped_sweep_and_an_empty_one():
    kind, text = tune_page.result_status(result(3, complete=False), {})
    assert kind == "warning" and text.startswith("Stopped: 3 of 16 runs measured.")
    kind, text = tune_page.result_status(result(0, complete=False), {})
    assert kind == "info" and text == "Nothing measured yet with these settings on this pair."
    assert tune_page.result_status(result(16, best={EXAMPLES["Code"]: 3}), {}, ZH)[1].startswith(ZH("Done: {n} runs.")
                                                                                               .format(n=16))


def test_progress_text():
    cell = SimpleNamespace(gamma=S.AR, prompt="p", repeat=0)
    assert tune_page.progress_text(1, 16, cell, {"p": "Code"}, None) == "Run 1 of 16: Code, the target alone, repeat 1"
    cell = SimpleNamespace(gamma=3, prompt="p", repeat=1)
    assert tune_page.progress_text(5, 16, cell, {"p": "Code"}, 12.0) == (
        "Run 5 of 16: Code, γ = 3, repeat 2 · about 12 s left")


# --- Inspect a round ---------------------------------------------------------------------------------

def test_inspect_steps_clamp_and_restart():
    state = InspectState()
    state.back()
    assert state.step == 0
    for _ in range(STEPS + 2):
        state.next()
    assert state.step == STEPS - 1
    state.back()
    assert state.step == STEPS - 2
    state.restart()
    assert state.step == 0


@pytest.fixture(scope="module")
def trace():
    return Trace.load(TRACE)


def test_inspect_opens_afresh_on_another_run_or_round(trace):
    state = InspectState()
    rounds = [1, 2, 5]
    assert inspect_page.opens_afresh(state, trace, 2, rounds)  # never seen
    state.sig = inspect_page.run_sig(trace)
    assert not inspect_page.opens_afresh(state, trace, 2, rounds)
    assert inspect_page.opens_afresh(state, trace, 3, rounds)  # a round this run has not drafted in
    state.sig = ("another prompt", 1, 1.0)
    assert inspect_page.opens_afresh(state, trace, 2, rounds)


def test_inspect_round_label_and_strip(trace):
    r = trace.rounds[0]
    assert inspect_page.round_label(trace, 0) == f"1 · {r.accepted}/{len(r.proposed)} ✓"
    assert inspect_page.strip_phase(0, r) == ("draft", len(r.proposed))
    assert inspect_page.strip_phase(1, r) == ("verify", None)
    assert all(inspect_page.strip_phase(s, r) == ("done", None) for s in range(2, STEPS))


def test_inspect_steps_line_bolds_the_step_shown():
    line = inspect_page.steps_line(2)
    assert line.split(" · ")[2] == "**3\\. Accept while they agree**"
    assert line.count("**") == 2 and line.startswith("1\\. The draft proposes")
    assert ZH("Accept while they agree") in inspect_page.steps_line(2, ZH)


def test_inspect_caption(trace):
    from specviz.analysis import round_story

    index = round_story.default_round(trace)
    story = round_story.story(trace, index)
    text = inspect_page.caption(story, trace.rounds[index], index, trace.config)
    assert text.startswith(f"Round {index + 1} of {story.total} · greedy (temperature 0) · γ = ")
    assert f"on {trace.config.device} in {trace.config.dtype}" in text


# --- Parallel -------------------------------------------------------------------------------------------

def test_parallel_opens_a_run_at_its_own_settings_once(trace):
    state = ParallelState()
    key = parallel_page.run_key("Recorded: prose", trace)
    assert state.opens(key, seeded=True)
    state.run = key
    assert not state.opens(key, seeded=True)
    assert state.opens(key, seeded=False)  # the widgets lost their values: seed them again
    assert state.opens(parallel_page.run_key("Recorded: code", trace), seeded=True)


def test_parallel_real_key_is_stable_and_per_gamma(trace):
    assert parallel_page.real_key(trace, 4) == parallel_page.real_key(trace, 4)
    assert parallel_page.real_key(trace, 4) != parallel_page.real_key(trace, 5)


def test_points_text():
    points = {("draft", 4, 1), ("draft", 2, 1), ("draft", 1, 3), ("target", 1, 5), ("target", 1, 1)}
    assert parallel_page.points_text(points) == (
        "the draft for B sequences at once (B = 2, 4); the draft over k tokens of one sequence (k = 3); "
        "the target over k new tokens (k = 1, 5)")
    assert parallel_page.points_text(set()) == ""


def test_alone_rate(monkeypatch):
    raced = SimpleNamespace(summary={"tokens_per_second": 12.5})
    assert parallel_page.alone_rate(raced, {what_if.ALONE}, None, 10) == 12.5
    assert parallel_page.alone_rate(None, {what_if.ALONE}, None, 10) is None  # its pass is not known yet
    seen = []
    monkeypatch.setattr(what_if, "target_alone_ms", lambda costs, n: seen.append((costs, n)) or 500.0)
    assert parallel_page.alone_rate(None, set(), "costs", 40) == pytest.approx(80.0)  # the costs' estimate
    assert seen == [("costs", 40)]


def test_not_replayable_reasons_cover_every_reason():
    import inspect as stdlib_inspect

    src = stdlib_inspect.getsource(what_if.why_not_replayable)
    for reason in parallel_page.NOT_REPLAYABLE:
        assert f'"{reason}"' in src
