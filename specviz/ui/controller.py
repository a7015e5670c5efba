"""The live run's controller: Run, Step, Autoplay and Stop drive a small state machine.

``handle_command`` applies the button pressed to the ``LiveState``; ``play`` and
``step`` then advance its race a round at a time (``advance``), run in the pair's engine worker
(``specviz.worker.races.RemoteRace``: this process draws, that one times): the speculative
run, then the target alone on the same prompt (re-measured unless the user allows a
recent, still-valid baseline to be reused: ``specviz.measure.race``), then the wrap-up with a
history row (``finish``). ``render_state`` draws the whole view from the state as it
stands. Engine failures become a message on the page, never a traceback; a worker that died
mid-run leaves the run unfinished (no history row) and the page offers to start it again.
"""

from __future__ import annotations

import dataclasses
import time

import streamlit as st

from specviz import figures as F
from specviz.analysis.metrics import metric
from specviz.figures.history import MEASURED, REUSED, chain_gamma_to_try, compared_line, compared_row
from specviz.models.pair import ModelPair
from specviz.record import contention
from specviz.record.errors import BadInput, SpecvizError
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Trace
from specviz.ui.chrome import SHORTCUTS
from specviz.ui.lang import _
from specviz.ui.pair import running_client
from specviz.ui.state import (
    LiveState,
    bad_input_text,
    example_of,
    field_of,
    remember_prefill,
    set_cmd,
    signature,
)
from specviz.ui.view import Badge, RunView, animate_round, stop_reason_text
from specviz.worker.client import exit_text
from specviz.worker.protocol import WorkerDied
from specviz.worker.races import RemoteRace

# Run at full speed redraws only its status line (the round, the tokens so far), at most this
# often; the tokens, numbers and charts are drawn once the run ends. Any bigger redraw took the
# CPU from the pass timed next (docs/design.md, "What the page draws while a run is timed"); the
# status line's costs the next pass about 30 ms, and is not waited for (``_next``).
STATUS_EVERY_S = 2.0
RACE_EVERY_S = 4.0  # the race's progress bar, while the target alone runs


def start_run(pair: ModelPair, state: LiveState, cfg: RunConfig) -> None:
    """Replace the live run with a fresh one (raises BadInput on a setting the engine refuses)."""
    ss = st.session_state
    history = ss.get("history", [])
    client = running_client()
    if state.race is not None:
        state.race.close()
    race = RemoteRace(client, dataclasses.replace(cfg), against_target=bool(ss.get("race", True)),
                      baselines=ss["baselines"], reuse=bool(ss.get("reuse_baseline", False)),
                      run=(history[-1]["run"] + 1) if history else 1, pair=pair)
    fresh = LiveState(race=race, sig=signature(cfg), example=example_of(cfg.prompt))
    for f in dataclasses.fields(LiveState):
        setattr(state, f.name, getattr(fresh, f.name))


def can_continue(state: LiveState, cfg: RunConfig) -> bool:
    return state.race is not None and not state.finished and state.sig == signature(cfg) and state.error is None


def _prev_row(state: LiveState) -> dict | None:
    """The run whose numbers this one's are compared with, once it has ended: for a chain, the
    latest earlier one of the same pair, prompt and settings (γ aside); for a tree, the best
    chain run of them; both timed on a quiet machine (``figures.history.compared_row``)."""
    tr = state.trace
    if tr is None or not tr.summary or state.race is None:
        return None
    run = state.run_no if state.recorded and state.run_no is not None else state.race.run_no
    if run is None:
        return None
    return compared_row(st.session_state.get("history", []), F.history_row(tr, run))


def chain_offer(state: LiveState) -> int | None:
    """The γ of the chain run to offer beside the live run (``figures.history.chain_gamma_to_try``)
    when it is a finished tree run, timed on a quiet machine, with no chain run of the same pair,
    prompt and settings in the history to set it against; else None."""
    tr = state.trace
    if not state.finished or tr is None or not tr.config.is_tree or tr.contention:
        return None
    rows = st.session_state.get("history", [])
    row = next((r for r in rows if r["run"] == state.run_no), None)
    if row is None or compared_row(rows, row) is not None:
        return None
    return chain_gamma_to_try(row)


def run_chain(gamma: int) -> None:
    """The offered chain run: the draft shape set to a chain at ``gamma``, then Run (a callback,
    before the widgets are drawn)."""
    st.session_state["draft_shape"] = "chain"
    st.session_state["gamma"] = gamma
    set_cmd("run")


def _compared(state: LiveState, prev: dict | None) -> str | None:
    """What the run the live run's numbers are compared with was (``compared_line``: for a tree,
    the best chain), once the run has ended."""
    tr = state.trace
    return compared_line(prev, tr.config.gamma, tr.config.is_tree, _) if prev and tr and tr.summary else None


def _chain_offer(view: RunView, state: LiveState, changed: bool) -> None:
    """Under a tree run's numbers, when it has no chain to be compared with: why, and one click
    that runs the chain (off once the settings changed)."""
    gamma = chain_offer(state)
    if gamma is None:
        view.chain_ph.empty()
        return
    with view.chain_ph.container():
        st.caption(_("No chain run of this prompt and settings timed on a quiet machine yet, so nothing to set "
                     "this tree against."))
        st.button(_("Run the chain at γ = {gamma}").format(gamma=gamma), key="run_chain",
                  icon=":material/linear_scale:", on_click=run_chain, args=(gamma,), disabled=changed,
                  help=_("Settings changed: set them back to the tree's to compare with it.") if changed else
                  _("A chain as deep as the tree: the same draft passes a round and one verify pass, so the two "
                    "differ only in the tree's width. Run chains at other γ too: the tree is compared with the "
                    "fastest."))


def contention_note(trace: Trace | None) -> str | None:
    """A warning beside a run's numbers when something competed with its timed work: a model
    loading in another thread, or other programs taking enough of the cores (specviz.record.contention)."""
    if trace is None or not trace.contention:
        return None
    named = contention.describe(trace.contention, _)
    if all(c.cpu_share is not None for c in trace.contention):  # other programs, or this app's pages
        return _("Timed on a busy machine: {jobs} ran meanwhile, so these numbers are slower than the pair's "
                 "own.").format(jobs=named)
    return _("Timed under contention: {jobs} ran at the same time, so these timings are slower than the pair's "
             "own. Run again once loading has finished.").format(jobs=named)


def race_note(state: LiveState) -> str | None:
    """When the race's two runs saw different load (``Race.fair`` is False): why its speedup is
    no fair ratio. The page offers to race again beside it."""
    race = state.race
    if race is None or race.fair is not False:
        return None
    nothing = _("nothing else")
    return _("The two runs saw different load (speculative: {sd}; target alone: {ar}), so the speedup {speedup} "
             "is not a fair ratio of the two. Run the race again, on a quieter machine if you can.").format(
        sd=contention.describe(state.trace.contention, _) or nothing,
        ar=contention.describe(state.ar.contention, _) or nothing,
        speedup=metric("speedup").text(race.comparison.speedup))


def _race_again(note: str, changed: bool) -> None:
    """The unfair race's note, and a button that races the same settings again (off once they changed)."""
    st.warning(note, icon=":material/balance:")
    st.button(_("Run the race again"), key="race_again", icon=":material/replay:", on_click=set_cmd, args=("run",),
              disabled=changed, help=_("Settings changed: Run races the new ones.") if changed else
              _("The same prompt and settings: a fresh speculative run, then the target alone."))


def _status(view: RunView, state: LiveState, cfg: RunConfig) -> None:
    tr = state.trace
    changed = state.race is not None and state.sig != signature(cfg)
    note = _("Settings changed: the next Run or Step starts a new run.") if changed else None
    keys = dict(run=SHORTCUTS["run"], step=SHORTCUTS["step"])
    if state.error and state.engine_died:
        view.engine_died(state.error)
    elif state.error:
        view.error(_("{error} Run or Step starts a new run.").format(error=state.error))
    elif tr is None:
        view.status(_("Ready. Run ({run}) decodes at full speed; Step ({step}) shows one round at a time.").format(
            **keys), _("ready"), Badge.READY)
    elif state.finished:
        s = F.live_summary(tr)
        why = stop_reason_text(tr.stop_reason, _).replace("_", " ")
        view.status(_("Done: {tokens} tokens in {rounds} rounds, {time} ({why})").format(
            tokens=s["new_tokens"], rounds=s["rounds"], time=F.fmt_ms(tr.wall_ms, _), why=why), _("done"),
            Badge.FINISHED, note, run=state.run_no)
    elif state.sd_done:
        view.status(_("Speculative run done; the target-alone race is next."), _("paused"), Badge.WAITING, note)
    elif state.stopped:
        view.status(_("Stopped after round {n}. Step or Autoplay continues; Run starts over.").format(
            n=len(tr.rounds)), _("stopped"), Badge.STOPPED, note)
    elif tr.rounds:
        view.status(_("{caption}. Next: Step ({step}).").format(
            caption=F.round_caption(tr.rounds[-1], tr=_), **keys), _("paused"), Badge.PAUSED, note)
    elif state.playing:
        view.status(_("Starting: the draft and the target read the prompt…"), _("starting"), Badge.STARTING)
    else:
        view.status(_("Ready: prompt read. Step ({step}) drafts the first round.").format(**keys), _("ready"),
                    Badge.READY, note)


def render_state(view: RunView, state: LiveState, cfg: RunConfig) -> None:
    """Draw the whole view from the state, as it stands."""
    _status(view, state, cfg)
    tr = state.trace
    if tr is not None:
        view.strip(tr.rounds, plain=tr.output_text if state.sd_done else None)
    else:
        view.strip([])
    view.tree(tr)
    view.stats(tr, prev := _prev_row(state), contention_note(tr), _compared(state, prev))
    _chain_offer(view, state, state.sig != signature(cfg))
    view.charts(tr)
    view.race(state, best_chain=prev)  # a tree run: the best chain (view.chain_line)
    if note := race_note(state):
        _race_again(note, state.sig != signature(cfg))


def _fail(state: LiveState, exc: Exception) -> None:
    state.playing = None
    state.engine_died = isinstance(exc, WorkerDied)
    if state.engine_died:
        state.error = died_text(exc)
    elif isinstance(exc, SpecvizError):
        state.error = str(exc)
    else:
        state.error = _("The engine stopped with {error}").format(error=f"{type(exc).__name__}: {exc}")


def died_text(exc: WorkerDied) -> str:
    """What happened to the engine's process, for the page."""
    if exc.stopped:
        return _("The engine was stopped (the model pair was unloaded), so this run is lost.")
    if exc.restarted:
        return _("The engine's process was started again since this run began, so this run is lost and was not "
                 "added to the history.")
    return _("The engine's process stopped mid-run ({how}), so this run is lost and was not added to the "
             "history.").format(how=exit_text(exc.code, _))


def _waiting(view: RunView, ahead: int) -> None:
    view.status(_("Waiting for the model: {n} runs ahead. The wait is not counted in any timing.").format(n=ahead)
                if ahead > 1 else _("Waiting for the model: 1 run ahead. The wait is not counted in any timing."),
                _("queued"), Badge.QUEUED)


def _next(view: RunView, state: LiveState):
    """One round of the race: ("speculative" | "autoregressive", Round), or None at its end.
    Waits its turn for the engine, saying so on the page while others are ahead; a round
    that reads the prompt first says so while it runs, and its reads are kept as this
    machine's prefill rate. A run's first round (the page was just drawn) and a round after one
    in slow motion wait, off the clock, for the machine to settle (``EngineClient.next``, at
    most half a second): the browser draws what it was just sent meanwhile."""
    read = state.next_read
    settle, view.drawn = getattr(view, "drawn", True), False  # a fresh view: the page was just drawn
    try:
        with view.reading_prompt(read):
            step = state.race.step(waiting=lambda n: _waiting(view, n), settle=settle)
    except StopIteration:
        return None
    if read is not None:
        remember_prefill(state.trace.config, step[1])
    return step


def finish(state: LiveState) -> None:
    """Add the run to the history (once)."""
    if state.recorded:
        return
    race, history = state.race, st.session_state["history"]
    run_no = race.run_no
    cmp = race.comparison
    baseline = None
    if race.baseline is not None:
        baseline = REUSED.format(run=race.baseline.run) if race.reused else MEASURED  # English: data
    history.append(F.history_row(state.trace, run_no, state.example, state.ar,
                                 cmp.speedup if cmp else None, cmp.identical if cmp else None, baseline,
                                 race.fair))
    state.run_no = run_no
    state.recorded = True


def advance(view: RunView, state: LiveState, speed: float, animate: bool) -> bool:
    """One unit of progress: a round of either run, or the wrap-up. False once the run has ended."""
    try:
        step = _next(view, state)
        if step is None:
            finish(state)
            return False
        which, rnd = step
        if which == "speculative" and animate:
            animate_round(view, state.trace, rnd, speed)
            view.drawn = True
        elif which == "autoregressive":
            ar = state.race.ar.trace
            _race_progress(view, state, len(ar.output_ids), ar.config.max_new_tokens)
        return True
    except Exception as exc:  # engine failures are shown, never raised at the user
        _fail(state, exc)
        return False


def _race_progress(view: RunView, state: LiveState, done: int, total: int) -> None:
    """Redraw the race's progress bar at most every RACE_EVERY_S."""
    now = time.monotonic()
    if now - getattr(view, "race_drawn_at", 0.0) > RACE_EVERY_S:
        view.race(state, progress=(done, total))
        view.race_drawn_at = now


def play(view: RunView, state: LiveState, speed: float) -> None:
    """Keep going while Run or Autoplay is on. A click on any widget interrupts this loop
    (Streamlit reruns); the state survives and the next script run picks it up."""
    last = time.monotonic()
    while state.playing:
        animate = state.playing == "autoplay" and speed > 0
        if not advance(view, state, speed, animate):
            state.playing = None
            break
        now = time.monotonic()
        if not animate and not state.sd_done and now - last > STATUS_EVERY_S:
            tr = state.trace
            view.status(_("Running at full speed: round {n}, {tokens} tokens").format(
                n=len(tr.rounds), tokens=len(tr.output_ids)), _("live"), Badge.LIVE,
                note=_("The tokens and charts are drawn when the run ends: drawing them now would take "
                       "the CPU from the models being timed."))
            last = now
    st.rerun()  # one clean redraw of the whole page: history, buttons, final numbers


def step(view: RunView, state: LiveState, speed: float) -> None:
    """Exactly one round (then, after the last one, the race and the wrap-up)."""
    state.stopped = False
    if not state.sd_done:
        advance(view, state, speed, animate=True)
    if state.sd_done and state.error is None:
        while advance(view, state, speed, animate=False):
            pass
    st.rerun()  # redraw the page in its new state (after the last round: with its history row)


def handle_command(pair: ModelPair, state: LiveState, cfg: RunConfig, errors: dict[str, str]) -> str | None:
    """Apply the button pressed (if any) to the state; returns the command to carry out."""
    cmd = st.session_state.pop("_cmd", None)
    if cmd is None:
        return None
    if cmd == "stop":
        if state.playing or (state.race is not None and not state.finished):
            state.stopped = state.race is not None and not state.sd_done
        state.playing = None
        return "stop"
    if errors:
        return None  # the errors are already shown next to their widgets
    try:
        if cmd == "run" or not can_continue(state, cfg):
            start_run(pair, state, cfg)
    except BadInput as exc:
        errors[field_of(exc)] = bad_input_text(exc)
        return None
    except Exception as exc:  # never a traceback on the page
        errors["general"] = _("The run could not start: {error}").format(error=f"{type(exc).__name__}: {exc}")
        return None
    state.stopped = False
    state.error = None
    state.playing = {"run": "run", "autoplay": "autoplay"}.get(cmd)
    return cmd
