"""The real overlapped PEARL run (specviz/measure/pearl_real.py) on the tiny fp32 pair:

* its output is the target's own greedy output, token for token, for several prompts and
  gammas, and it stops at EOS and at the budget as the engine does;
* its rounds are the ones ``specviz.replay.schedules.pearl`` replays from a serial run of the same
  config (same number of rounds, same accepted count and emitted tokens per round);
* its events keep to one clock: a lane never overlaps itself, and the draft and target
  lanes do run at once;
* its two threads are gone afterwards, and torch's thread count restored, also when the
  run raises; where the threads cannot be pinned it still runs, and says so.
"""

from __future__ import annotations

import dataclasses
import os
import threading

import pytest
import torch
from helpers import make_config, run_ar, run_sd

import specviz.measure.pearl_real
from specviz.measure.pearl_real import pearl_run
from specviz.record.errors import BadInput
from specviz.record.run_config import FORWARD_KINDS
from specviz.replay import schedules
from specviz.replay.latency import LatencyModel
from specviz.replay.what_if import settings_for

pytestmark = pytest.mark.usefixtures("single_thread")

COSTS = LatencyModel(draft_ms={1: 1.0}, verify_ms={1: 3.0})
PROMPTS = ["Hello world", "def add(a, b):", "1 2 3 4 5 6 7", "The quick brown fox"]


def lane_events(trace, lane):
    return sorted((e for e in trace.events if e.lane == lane), key=lambda e: e.start_ms)


def replayed(sd):
    """``schedules.pearl`` on the ranks and candidates a serial run recorded (the costs do
    not change the rounds, only their times)."""
    recorded = schedules.ReplayInput(sd.draft_ranks, sd.draft_top, sd.output_ids, prompt_ids=sd.prompt_ids,
                                     config=sd.config)
    return schedules.pearl(recorded, COSTS, settings_for(sd))


@pytest.mark.parametrize("gamma", [1, 3, 5])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_output_is_the_targets_and_rounds_are_the_replays(tiny_pair, prompt, gamma):
    run = pearl_run(tiny_pair, make_config(prompt=prompt, gamma=gamma, max_new_tokens=32))
    trace = run.trace
    assert trace.output_ids == run_ar(tiny_pair, prompt=prompt, max_new_tokens=32).output_ids
    assert trace.stop_reason == "max_new_tokens" and len(trace.output_ids) == 32
    assert trace.config.mode == "speculative" and trace.config.gamma == gamma
    assert run.schedule == "pearl" and run.threads == 1
    sd = run_sd(tiny_pair, prompt=prompt, gamma=gamma, max_new_tokens=32)
    sim = replayed(sd).trace
    assert len(trace.rounds) == len(sim.rounds)
    assert [(r.accepted, r.emitted) for r in trace.rounds] == [(r.accepted, r.emitted) for r in sim.rounds]
    # the checked tokens are real here where the replay has UNKNOWN after a wrong one
    for real, rep in zip(trace.rounds, sim.rounds):
        assert real.proposed[: real.accepted + 1] == rep.proposed[: rep.accepted + 1]
        assert real.bonus == rep.bonus
        if rep.correction is not None:  # the replay has no token past the run's end; the real run cut it off
            assert real.correction == rep.correction


def test_round_shape_and_lanes(tiny_pair):
    trace = pearl_run(tiny_pair, make_config(prompt="Hello world", gamma=4, max_new_tokens=40)).trace
    both_at_once = 0
    for rnd in trace.rounds:
        assert rnd.rejected == rnd.proposed[rnd.accepted:]
        targets = [e for e in rnd.events if e.lane == "target" and e.is_forward]
        assert len(targets) == 1, "one target pass per round"
        drafts = [e for e in rnd.events if e.lane == "draft" and e.is_forward]
        assert len(drafts) == rnd.gamma, "one draft pass per drafted token"
        t = targets[0]
        both_at_once += any(d.start_ms < t.end_ms and t.start_ms < d.end_ms for d in drafts)
    assert both_at_once >= 1, "the draft and the target must run at the same time somewhere"
    assert trace.rounds[0].events[0].start_ms >= 0
    assert [e.kind for e in trace.events if e.kind == "prefill"] == ["prefill", "prefill"]
    for lane in ("draft", "target"):
        events = lane_events(trace, lane)
        for a, b in zip(events, events[1:]):
            assert a.end_ms <= b.start_ms, f"the {lane} lane overlaps itself: {a} and {b}"
        assert all(e.kind in FORWARD_KINDS | {"sample", "rollback"} for e in events)
    starts = [r.start_ms for r in trace.rounds]
    assert starts == sorted(starts)
    assert all(a.end_ms <= b.start_ms for a, b in zip(trace.rounds, trace.rounds[1:])), "rounds follow one another"
    assert trace.wall_ms >= trace.rounds[-1].end_ms
    assert trace.summary["new_tokens"] == 40 and trace.summary["rounds"] == len(trace.rounds)
    assert trace.output_text == "".join(r.emitted_text for r in trace.rounds)


def test_rejection_rolls_both_caches_back(tiny_pair):
    trace = pearl_run(tiny_pair, make_config(prompt="def add(a, b):", gamma=3, max_new_tokens=32)).trace
    rejected = [r for r in trace.rounds if r.accepted < len(r.proposed)]
    assert rejected, "this prompt has rejections"
    for rnd in rejected:
        back = {e.lane: e.tokens for e in rnd.events if e.kind == "rollback"}
        assert back["draft"][0] == rnd.proposed[rnd.accepted], "the draft drops from the first rejected token on"
        assert rnd.correction is not None and rnd.emitted[-1] == rnd.correction


def test_stops_at_eos_like_the_engine(tiny_pair):
    plain = run_ar(tiny_pair, prompt="Hello world", max_new_tokens=24).output_ids
    for at in (0, 5, 11):
        pair = dataclasses.replace(tiny_pair)
        pair.__dict__["eos_ids"] = [plain[at]]  # a token the target emits first at position `at`
        first = plain.index(plain[at])
        for gamma in (1, 3, 5):
            config = make_config(prompt="Hello world", gamma=gamma, max_new_tokens=24)
            trace = pearl_run(pair, config).trace
            assert trace.output_ids == run_ar(pair, prompt="Hello world", max_new_tokens=24).output_ids
            assert trace.output_ids == plain[: first + 1] and trace.stop_reason == "eos"
            sim = replayed(speculative_run := run_sd(pair, prompt="Hello world", gamma=gamma, max_new_tokens=24))
            assert speculative_run.output_ids == trace.output_ids
            assert [r.emitted for r in trace.rounds] == [r.emitted for r in sim.trace.rounds]


@pytest.mark.parametrize("budget", [1, 2, 3])
def test_small_budgets(tiny_pair, budget):
    trace = pearl_run(tiny_pair, make_config(prompt="1 2 3", gamma=5, max_new_tokens=budget)).trace
    assert trace.output_ids == run_ar(tiny_pair, prompt="1 2 3", max_new_tokens=budget).output_ids
    assert len(trace.output_ids) == budget and trace.stop_reason == "max_new_tokens"
    drafted = sum(len([e for e in r.events if e.lane == "draft" and e.is_forward]) for r in trace.rounds)
    assert drafted <= budget, "the draft never drafts past the budget"


def test_threads_are_gone_and_thread_count_restored(tiny_pair):
    before = set(threading.enumerate())
    run = pearl_run(tiny_pair, make_config(gamma=3, max_new_tokens=8))
    assert set(threading.enumerate()) == before
    assert torch.get_num_threads() == 1  # the single_thread fixture's count, put back
    if run.pinned:
        assert run.worker_cores == {"draft": [run.cores[0]], "target": [run.cores[1]]}


def test_threads_are_gone_when_the_run_raises(tiny_pair, monkeypatch):
    before = set(threading.enumerate())
    calls = []
    real_verify = specviz.measure.pearl_real.verify

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the target failed")
        return real_verify(*args, **kwargs)

    monkeypatch.setattr(specviz.measure.pearl_real, "verify", failing)
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError, match="the target failed"):
            pearl_run(tiny_pair, make_config(gamma=3, max_new_tokens=16))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)
    assert set(threading.enumerate()) == before


def test_unpinned_still_runs_and_says_so(tiny_pair):
    config = make_config(prompt="Hello world", gamma=3, max_new_tokens=16)
    run = pearl_run(tiny_pair, config, cores=(0, 0))
    assert not run.pinned and "two different cores" in run.note
    assert run.trace.output_ids == run_ar(tiny_pair, prompt="Hello world", max_new_tokens=16).output_ids
    far = pearl_run(tiny_pair, config, cores=(0, 4096))
    assert not far.pinned and far.note


def test_no_affinity_still_runs(tiny_pair, monkeypatch):
    config = make_config(prompt="def add(a, b):", gamma=2, max_new_tokens=12)
    expected = run_ar(tiny_pair, prompt="def add(a, b):", max_new_tokens=12).output_ids

    def refuse(pid, cores):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "sched_setaffinity", refuse, raising=False)
    run = pearl_run(tiny_pair, config)
    assert not run.pinned and "failed" in run.note and run.trace.output_ids == expected
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)  # not Linux
    run = pearl_run(tiny_pair, config)
    assert not run.pinned and "Linux only" in run.note and run.trace.output_ids == expected


@pytest.mark.parametrize("field, value", [("temperature", 0.7), ("drafter", "ngram"), ("draft_vocab", 64),
                                          ("policy", "heuristic"), ("stop", ["\n"])])
def test_refuses_what_it_does_not_do(tiny_pair, field, value):
    before = set(threading.enumerate())
    with pytest.raises(BadInput) as err:
        pearl_run(tiny_pair, make_config(**{field: value}))
    assert err.value.field == field
    assert set(threading.enumerate()) == before


def test_config_is_not_changed(tiny_pair):
    config = make_config(gamma=2, max_new_tokens=4, mode="autoregressive")
    pearl_run(tiny_pair, config)
    assert config.mode == "autoregressive" and config.draft == ""
