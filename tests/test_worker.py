"""The engine worker (specviz.worker): the pair in a process of its own, the UI's client to it.

Its races equal the same races run in this process; its lifecycle (start, a run, a stop mid-run,
a killed worker, a restart, the UI's own end) leaves no run that looks finished; its FIFO turns
tell each waiter its place and forget one that gives up; its failures arrive as the library's
exceptions. (Its busy mark, the UI process's own CPU time, is tested in test_busy.py.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from helpers import make_config

from specviz.measure.race import Race
from specviz.record.errors import BadInput, ModelError, SpecvizError
from specviz.worker.client import EngineClient, exit_text
from specviz.worker.protocol import EngineFailed, Spec, WorkerDied
from specviz.worker.races import SESSION, RemoteRace

TINY = Spec("tiny", dtype="float32", device="cpu")
DESCRIBE = "specviz.models.pair:ModelPair.describe"  # a quick call: the pair card's dict


@pytest.fixture(scope="module")
def client():
    c = EngineClient(TINY)
    c.hello(choose_draft=False)
    yield c
    c.stop()


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as f:  # a zombie (ended, not yet reaped) counts as gone
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        time.sleep(0.05)
    return False


# --- the same runs as in this process ---------------------------------------------------------

CASES = {
    "chain": dict(gamma=4),
    "tree": dict(gamma=3, tree_shape=[2, 2, 1]),
    "sampling": dict(gamma=3, temperature=0.8, top_k=20, seed=7),
    "stop string": dict(gamma=4, max_new_tokens=64, stop=["e"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_race_in_the_worker_equals_the_same_race_here(client, tiny_pair, case):
    cfg = make_config(**{"max_new_tokens": 40, **CASES[case]})
    here = Race(tiny_pair, cfg).run()
    seen = []
    there = RemoteRace(client, cfg, pair=tiny_pair)
    for which, rnd in there:
        seen.append((which, rnd.index, rnd.emitted))
    assert there.done and there.sd.done and there.ar.done and not there.reused
    for mine, theirs in ((here.sd.trace, there.sd.trace), (here.ar.trace, there.ar.trace)):
        assert theirs.output_ids == mine.output_ids and theirs.output_text == mine.output_text
        assert theirs.stop_reason == mine.stop_reason
        assert [(r.proposed, r.accepted, r.emitted) for r in theirs.rounds] == \
               [(r.proposed, r.accepted, r.emitted) for r in mine.rounds]
        assert theirs.summary.keys() == mine.summary.keys() and theirs.summary["rounds"] == len(theirs.rounds)
        assert theirs.wall_ms > 0 and [e.kind for e in theirs.events] == [e.kind for e in mine.events]
    # the streamed rounds are the trace's, speculative first, each once
    assert seen == [("speculative", r.index, r.emitted) for r in there.sd.trace.rounds] + \
                   [("autoregressive", r.index, r.emitted) for r in there.ar.trace.rounds]
    assert there.comparison.identical == here.comparison.identical
    assert there.fair is not None and there.pair is tiny_pair


def test_the_mirror_follows_the_race_round_by_round(client):
    """While it runs, the page reads the same trace a race here would show: its rounds, its
    output so far, its clock, before the run's whole trace arrives at its end."""
    race = RemoteRace(client, make_config(gamma=2, max_new_tokens=24))
    assert race.sd is not None and not race.sd.trace.rounds and race.ar is None  # opened, nothing run
    which, rnd = race.step()
    assert which == "speculative" and race.sd.trace.rounds == [rnd] and not race.sd.done
    assert race.sd.trace.output_ids == rnd.emitted and race.sd.trace.wall_ms > 0 and not race.sd.trace.summary
    while not race.sd.done:
        race.step()
    assert race.sd.trace.summary and race.ar is None and race.comparison is None
    which, rnd = race.step()
    assert which == "autoregressive" and race.ar.trace.rounds == [rnd] and not race.ar.done
    race.run()
    assert race.done and race.ar.done and race.comparison is not None
    with pytest.raises(StopIteration):
        race.step()


def test_a_measured_baseline_is_kept_for_the_session_and_sent_to_the_next_race(client):
    cfg = make_config(gamma=3, max_new_tokens=24)
    baselines: dict = {}
    first = RemoteRace(client, cfg, baselines=baselines, run=1).run()
    assert len(baselines) == 1 and next(iter(baselines.values())).trace.output_ids == first.ar.trace.output_ids
    second = RemoteRace(client, cfg, baselines=baselines, reuse=True, run=2).run()
    assert second.reused or second.not_reused_because  # reused, or told why not (the machine's speed moved)
    if second.reused:
        assert second.ar is None and second.baseline.run == 1
        assert second.baseline.trace.output_ids == first.ar.trace.output_ids


# --- failures arrive as the library's exceptions ------------------------------------------------


def test_a_refused_setting_is_bad_input_naming_its_field_and_the_worker_goes_on(client):
    with pytest.raises(BadInput, match="gamma") as err:
        RemoteRace(client, make_config(gamma=0))
    assert err.value.field == "gamma"
    with pytest.raises(BadInput) as err:
        RemoteRace(client, make_config(prompt=""))
    assert err.value.field == "prompt"
    assert RemoteRace(client, make_config(max_new_tokens=8)).run().done


def test_an_unexpected_failure_names_its_type_and_only_specviz_runs_there(client):
    with pytest.raises(EngineFailed, match="TypeError"):
        client.call(DESCRIBE, "an argument too many")
    with pytest.raises(SpecvizError, match="specviz's own functions only"):
        client.call("os:system", "true")
    assert client.call(DESCRIBE)["draft"] == "tiny-draft"


def test_a_pair_that_cannot_load_says_why_at_hello():
    bad = EngineClient(Spec("no-such-pair", dtype="float32", device="cpu"))
    try:
        with pytest.raises(SpecvizError) as err:
            bad.hello()
        assert not isinstance(err.value, WorkerDied) and "no-such-pair" in str(err.value)
        assert isinstance(err.value, (BadInput, ModelError))
        assert bad.alive  # still there, saying it to every caller
    finally:
        bad.stop()


def test_work_in_the_worker_reports_its_progress(client):
    told = []
    rows = client.call("specviz.measure.forward_costs:measure", context_length=16, tokens=[1, 2], batches=[1],
                       repeats=1, progress=lambda fraction, message: told.append(fraction))
    assert rows and all(r["ms"] > 0 for r in rows)
    assert told and told == sorted(told) and 0 < told[-1] <= 1


# --- the lifecycle ----------------------------------------------------------------------------------


def test_start_run_stop_mid_run_kill_and_restart(tiny_pair):
    """A fresh worker runs a race; stopped mid-run, the race says the engine was stopped; started
    again and killed mid-run, the race says how it died, and nothing of it looks finished; the
    next request's restart loads a fresh worker, in which the old race no longer exists."""
    c = EngineClient(TINY)
    try:
        hello = c.hello(choose_draft=False)
        assert hello.pid == c.pid != os.getpid() and hello.describe["draft"] == "tiny-draft" and hello.load_s > 0
        folder = os.path.dirname(c.address)
        assert os.path.exists(c.address)
        cfg = make_config(gamma=2, max_new_tokens=64)
        race = RemoteRace(c, cfg)
        race.step()
        c.stop()
        assert not c.alive and not os.path.exists(folder)
        with pytest.raises(WorkerDied) as err:
            race.step()
        assert err.value.stopped
        assert not c.ensure_running()  # stopped on purpose: not started again behind the app's back

        c.start()
        c.hello(choose_draft=False)
        race = RemoteRace(c, cfg)
        race.step()
        rounds = len(race.sd.trace.rounds)
        os.kill(c.pid, signal.SIGKILL)
        with pytest.raises(WorkerDied) as err:
            race.step()
        assert err.value.code == -signal.SIGKILL and "killed by SIGKILL" in str(err.value)
        assert not race.done and not race.sd.done and race.comparison is None
        assert len(race.sd.trace.rounds) == rounds and not race.sd.trace.summary  # as it stood: unfinished

        generation = c.generation
        assert c.ensure_running() and c.generation == generation + 1
        assert not c.ensure_running()  # one restart, whoever asks next
        c.hello(choose_draft=False)
        with pytest.raises(WorkerDied) as err:
            race.step()  # it lived in the old worker
        assert err.value.restarted
        assert RemoteRace(c, cfg).run().comparison is not None
    finally:
        c.stop()


def test_a_worker_ends_with_the_ui_that_started_it():
    """The UI killed outright (SIGKILL: no atexit, no cleanup) takes its worker with it."""
    script = textwrap.dedent("""
        import sys, time
        from specviz.worker.client import EngineClient
        from specviz.worker.protocol import Spec
        c = EngineClient(Spec("tiny", dtype="float32", device="cpu"))
        c.hello(choose_draft=False)
        print(c.pid, flush=True)
        time.sleep(600)
    """)
    ui = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(ui.stdout.readline())
        assert not _gone(worker, 0.2)
        ui.kill()
        ui.wait()
        assert _gone(worker), "the worker outlived the UI"
    finally:
        ui.kill()


def test_exit_status_in_words():
    assert exit_text(-signal.SIGKILL) == "killed by SIGKILL"
    assert exit_text(1) == "exit code 1" and exit_text(None) == "no exit status"


# --- turns ------------------------------------------------------------------------------------------


def test_turns_are_first_come_first_served_and_a_waiter_who_gives_up_leaves(client):
    """While the engine is held, callers wait in the order they asked, each told its place as it
    changes; one that gives up (its ``waiting`` raises, as a Streamlit rerun does) leaves the line
    and the ones behind it move up. The worker numbers the objects it opens in the order it serves
    them, so the handles show the serve order (the order the threads wake up in does not)."""
    handles, places, errors = {}, {}, []

    class GaveUp(Exception):
        pass

    def caller(name: str, give_up: bool = False) -> None:
        def waiting(n: int) -> None:
            places.setdefault(name, []).append(n)
            if give_up:
                raise GaveUp

        try:
            handles[name], _ = client.open(SESSION, make_config(max_new_tokens=4), False, {}, False, None,
                                           waiting=waiting)
        except GaveUp:
            handles[name] = None
        except Exception as exc:  # pragma: no cover - shown by the assertion below
            errors.append(exc)

    def told(name: str, n: int) -> None:
        deadline = time.monotonic() + 30
        while places.get(name, [None])[-1] != n:
            assert time.monotonic() < deadline, places
            time.sleep(0.01)

    threads = []
    with client:  # the engine held, as a page measuring on its own copy of the pair holds it
        for name, place, give_up in (("a", 1, False), ("b", 2, True), ("c", 2, False), ("d", 3, False)):
            threads.append(threading.Thread(target=caller, args=(name, give_up)))
            threads[-1].start()
            if give_up:
                threads[-1].join(30)  # b left the line: c takes its place
            else:
                told(name, place)
        assert handles == {"b": None}  # nobody served while the engine is held
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert handles["b"] is None and handles["a"] < handles["c"] < handles["d"], handles
    for name in "acd":
        client.close(handles[name])
    # each told its place whenever it changed: at the release, and as each ahead was served
    assert places == {"a": [1], "b": [2], "c": [2, 1], "d": [3, 2, 1]}


def test_a_turn_without_a_worker_holds_nothing():
    c = EngineClient(TINY)
    c.stop()
    with c.turn():  # a page may measure on its own copy while no worker runs
        pass


# --- the Live page's full-speed loop over the worker ------------------------------------------------


class _DrawnView:
    """A RunView's drawing methods, recording which ones the loop calls (the page itself is tested
    in the browser; here, the loop's choice of what to redraw while a run is timed)."""

    DRAWS = ("status", "strip", "output", "stats", "charts", "timeline", "tree", "race")

    def __init__(self):
        self.calls: list[str] = []

    def reading_prompt(self, read):
        return contextlib.nullcontext()

    def __getattr__(self, name):
        if name not in self.DRAWS:
            raise AttributeError(name)
        return lambda *args, **kwargs: self.calls.append(name)


def test_a_full_speed_run_redraws_only_its_status_line_until_it_ends(client, monkeypatch):
    """Run at full speed (controller.play) redraws its status line and nothing else while a pass
    may be timed: the tokens, numbers and charts come when the run ends (the page's redraw took
    the CPU from the next pass: docs/design.md). Redrawing as often as possible here, the status
    is drawn after rounds; the race's progress only once the speculative run has ended."""
    import streamlit as st
    from streamlit.runtime.scriptrunner_utils.exceptions import RerunException

    from specviz.ui import controller
    from specviz.ui.state import LiveState

    monkeypatch.setattr(controller, "STATUS_EVERY_S", 0.0)
    monkeypatch.setattr(controller, "RACE_EVERY_S", 0.0)
    st.session_state["history"] = []
    state = LiveState(race=RemoteRace(client, make_config(max_new_tokens=24)))
    state.playing = "run"
    view = _DrawnView()
    with contextlib.suppress(RerunException):  # play ends with st.rerun(): the page drawn afresh
        controller.play(view, state, speed=0.0)
    assert state.error is None and state.race.done
    sd_rounds = len(state.trace.rounds)
    assert view.calls[:sd_rounds - 1] == ["status"] * (sd_rounds - 1), view.calls
    assert set(view.calls) == {"status", "race"}, view.calls
    assert len(st.session_state["history"]) == 1
