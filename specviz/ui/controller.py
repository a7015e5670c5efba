"""The live run's controller: Run, Step, Autoplay and Stop drive a small state machine.

``handle_command`` applies the button pressed to the ``LiveState``; ``play`` and
``step`` then advance it a round at a time (``advance``), race the target alone on the
same prompt (``run_race``, reusing a baseline measured with the same settings) and
wrap up with the comparison and a history row (``finish``). ``render_state`` draws the
whole view from the state as it stands. Engine failures become a message on the page,
never a traceback.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import streamlit as st

from specviz import (
    BadInput,
    ModelPair,
    RunConfig,
    SpecvizError,
    autoregressive,
    speculative,
)
from specviz import figures as F
from specviz.compare import compare
from specviz.ui.chrome import SHORTCUTS
from specviz.ui.pair import pair_key
from specviz.ui.state import LiveState, _sentence, field_of, kind_of, signature
from specviz.ui.view import RunView, animate_round

# One round at a time in this process: viewers in several browser tabs share the models,
# and a forward pass timed while another session's pass runs would not be the real cost.
# The lock is taken around next(), where the engine's clock runs; waiting for it happens
# while the clock is paused, so it never shows up in the timings.
ENGINE_LOCK = threading.Lock()
RENDER_EVERY_S = 0.4  # Run at full speed redraws the text at most this often...
CHARTS_EVERY_S = 1.2  # ...and the charts this often: the browser shares the CPU with the models


def _baseline_key(cfg: RunConfig) -> tuple:
    return (pair_key(), cfg.prompt, cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed)


def start_run(pair: ModelPair, state: LiveState, cfg: RunConfig) -> None:
    """Replace the live run with a fresh one (raises BadInput on a setting the engine refuses)."""
    dec = speculative(pair, dataclasses.replace(cfg))
    fresh = LiveState(dec=dec, sig=signature(cfg), kind=kind_of(cfg.prompt),
                      race=bool(st.session_state.get("race", True)))
    for f in dataclasses.fields(LiveState):
        setattr(state, f.name, getattr(fresh, f.name))


def can_continue(state: LiveState, cfg: RunConfig) -> bool:
    return state.dec is not None and not state.finished and state.sig == signature(cfg) and state.error is None


def _prev_row(state: LiveState) -> dict | None:
    rows = st.session_state.get("history", [])
    if state.recorded and state.run_no is not None:
        earlier = [r for r in rows if r["run"] < state.run_no]
        return earlier[-1] if earlier else None
    return rows[-1] if rows else None


def render_state(view: RunView, state: LiveState, cfg: RunConfig) -> None:
    """Draw the whole view from the state, as it stands."""
    tr = state.trace
    changed = state.dec is not None and state.sig != signature(cfg)
    note = "Settings changed: the next Run or Step starts a new run." if changed else None
    if state.error:
        view.error(f"{state.error} Run or Step starts a new run.")
    elif tr is None:
        view.status(f"Ready. Run ({SHORTCUTS['run']}) decodes at full speed; Step ({SHORTCUTS['step']}) "
                    f"shows one round at a time.", "ready", "sv-done")
    elif state.finished:
        s = F.live_summary(tr)
        view.status(f"Done: {s['new_tokens']} tokens in {s['rounds']} rounds, {F.fmt_ms(tr.wall_ms)} "
                    f"({tr.stop_reason.replace('_', ' ')})", "done", "sv-done", note)
    elif state.sd_done:
        view.status("Speculative run done; the target-alone race is next.", "paused", "sv-stop", note)
    elif state.stopped:
        view.status(f"Stopped after round {len(tr.rounds)}. Step or Autoplay continues; Run starts over.",
                    "stopped", "sv-stop", note)
    elif tr.rounds:
        view.status(F.round_caption(tr.rounds[-1]) + f". Next: Step ({SHORTCUTS['step']}).", "paused",
                    "sv-done", note)
    else:
        view.status(f"Ready: prompt read. Step ({SHORTCUTS['step']}) drafts the first round.", "ready",
                    "sv-done", note)
    if tr is not None:
        plain = tr.output_text if state.sd_done else None
        view.strip(tr.rounds, plain=plain)
    else:
        view.strip([])
    view.stats(tr, _prev_row(state))
    view.charts(tr)
    view.race(state)


def _fail(state: LiveState, exc: Exception) -> None:
    state.playing = None
    if isinstance(exc, SpecvizError):
        state.error = str(exc)
    else:
        state.error = f"The engine stopped with {type(exc).__name__}: {exc}"


def _next_round(state: LiveState):
    try:
        with ENGINE_LOCK:
            return next(state.dec)
    except StopIteration:
        return None


def run_race(pair: ModelPair, view: RunView, state: LiveState) -> None:
    """Time the target alone on the same prompt (or reuse a baseline measured with the same settings)."""
    sd = state.trace
    key = _baseline_key(sd.config)
    baselines = st.session_state["baselines"]
    if key in baselines:
        state.ar, state.ar_reused_from = baselines[key]
        return
    if state.ar_dec is None:
        cfg = dataclasses.replace(sd.config, mode="autoregressive", stop=list(sd.config.stop))
        state.ar_dec = autoregressive(pair, cfg)
    ar = state.ar_dec
    total = ar.trace.config.max_new_tokens
    last = 0.0
    view.race(state, progress=(len(ar.trace.output_ids), total))
    while not ar.done:
        try:
            with ENGINE_LOCK:
                next(ar)
        except StopIteration:
            break
        if time.monotonic() - last > CHARTS_EVERY_S:
            view.race(state, progress=(len(ar.trace.output_ids), total))
            last = time.monotonic()
    state.ar = ar.trace
    state.ar_dec = None


def finish(pair: ModelPair, state: LiveState) -> None:
    """Compare with the baseline and add the run to the history (once)."""
    if state.recorded:
        return
    history = st.session_state["history"]
    run_no = (history[-1]["run"] + 1) if history else 1
    speedup = identical = None
    if state.ar is not None:
        state.comparison = compare(state.ar, state.trace, pair.tokenizer)
        speedup, identical = state.comparison.speedup, state.comparison.identical
        if state.ar_reused_from is None:
            st.session_state["baselines"][_baseline_key(state.trace.config)] = (state.ar, run_no)
    history.append(F.history_row(state.trace, run_no, state.kind, state.ar, speedup, identical))
    state.run_no = run_no
    state.recorded = True


def advance(pair: ModelPair, view: RunView, state: LiveState, speed: float, animate: bool) -> bool:
    """One unit of progress: a round, the race, or the wrap-up. False once the run has ended."""
    try:
        if not state.dec.done:
            rnd = _next_round(state)
            if rnd is not None and animate:
                animate_round(view, state.trace, rnd, speed)
            return True
        if state.race and state.ar is None:
            run_race(pair, view, state)
            return True
        finish(pair, state)
        return False
    except Exception as exc:  # engine failures are shown, never raised at the user
        _fail(state, exc)
        return False


def play(pair: ModelPair, view: RunView, state: LiveState, speed: float) -> None:
    """Keep going while Run or Autoplay is on. A click on any widget interrupts this loop
    (Streamlit reruns); the state survives and the next script run picks it up."""
    last = last_charts = time.monotonic()
    while state.playing:
        animate = state.playing == "autoplay" and speed > 0
        if not advance(pair, view, state, speed, animate):
            state.playing = None
            break
        now = time.monotonic()
        if not animate and now - last > RENDER_EVERY_S:
            tr = state.trace
            view.status(f"Running at full speed: round {len(tr.rounds)}, {len(tr.output_ids)} tokens",
                        "live", "sv-live")
            view.strip(tr.rounds)
            view.stats(tr)
            if now - last_charts > CHARTS_EVERY_S:
                view.charts(tr)
                last_charts = now
            last = now
    st.rerun()  # one clean redraw of the whole page: history, buttons, final numbers


def step(pair: ModelPair, view: RunView, state: LiveState, speed: float) -> None:
    """Exactly one round (then, after the last one, the race and the wrap-up)."""
    state.stopped = False
    if not state.dec.done:
        try:
            rnd = _next_round(state)
        except Exception as exc:
            _fail(state, exc)
            st.rerun()
        if rnd is not None:
            animate_round(view, state.trace, rnd, speed)
    if state.dec.done:
        while advance(pair, view, state, speed, animate=False):
            pass
    st.rerun()  # redraw the page in its new state (after the last round: with its history row)


def handle_command(pair: ModelPair, state: LiveState, cfg: RunConfig, errors: dict[str, str]) -> str | None:
    """Apply the button pressed (if any) to the state; returns the command to carry out."""
    cmd = st.session_state.pop("_cmd", None)
    if cmd is None:
        return None
    if cmd == "stop":
        if state.playing or (state.dec is not None and not state.finished):
            state.stopped = state.dec is not None and not state.sd_done
        state.playing = None
        return "stop"
    if errors:
        return None  # the errors are already shown next to their widgets
    try:
        if cmd == "run" or not can_continue(state, cfg):
            start_run(pair, state, cfg)
    except BadInput as exc:
        errors[field_of(exc)] = _sentence(str(exc))
        return None
    except Exception as exc:  # never a traceback on the page
        errors["general"] = f"The run could not start: {type(exc).__name__}: {exc}"
        return None
    state.stopped = False
    state.error = None
    state.playing = {"run": "run", "autoplay": "autoplay"}.get(cmd)
    return cmd
