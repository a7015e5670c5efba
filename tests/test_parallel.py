"""specviz.parallel: a real run replayed under every schedule, and the serial replay
checked against the run itself (rounds exactly, wall time within the tolerance)."""

from __future__ import annotations

import pytest

from conftest import run_ar, run_sd
from specviz import BadInput, costs, parallel

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.mark.parametrize("kw", [
    dict(gamma=1), dict(gamma=3), dict(gamma=6), dict(gamma=2, policy="heuristic"), dict(gamma=4, draft_vocab=24),
])
def test_the_serial_replay_is_the_run(tiny_pair, kw):
    trace = run_sd(tiny_pair, prompt="Hello world", max_new_tokens=48, **kw)
    check = parallel.check_serial(trace, costs.from_trace(trace))
    assert check.rounds_match and check.sim_rounds == check.real_rounds == len(trace.rounds)
    # the costs are the run's own means (one- and two-token draft passes apart): the replay
    # adds them up to the run's wall time
    assert check.ok and abs(check.wall_error) < 0.01, check.to_dict()
    # with the run's own blocks the replay proposes the very same tokens, wrong ones included
    sim = parallel.replay(trace, costs.from_trace(trace), parallel.settings_for(trace))["serial"]
    assert [r.proposed for r in sim.trace.rounds] == [r.proposed for r in trace.rounds]


def test_the_draft_chains_are_the_runs_blocks_at_their_positions(tiny_pair):
    trace = run_sd(tiny_pair, prompt="Hello world", gamma=3, max_new_tokens=30)
    chains = parallel.draft_chains(trace)
    starts = [sum(len(r.emitted) for r in trace.rounds[:i]) for i in range(len(trace.rounds))]
    assert chains == {at: r.proposed for at, r in zip(starts, trace.rounds) if r.proposed}


def test_every_schedule_emits_the_runs_tokens(tiny_pair):
    trace = run_sd(tiny_pair, prompt="The quick brown fox", gamma=4, max_new_tokens=40)
    results = parallel.replay(trace, costs.from_trace(trace), parallel.settings_for(trace, fanout=3))
    assert set(results) == {"serial", "pearl", "ssd"}
    for r in results.values():
        assert r.trace.output_ids == trace.output_ids
        assert r.wall_ms > 0 and r.tokens_per_second > 0
    assert results["ssd"].hit_rate is not None and results["pearl"].hit_rate is None


def test_target_alone_estimate():
    model = costs.LatencyModel(draft_ms={1: 10.0}, verify_ms={1: 50.0, 5: 60.0}, target_prefill_ms=80.0,
                               overhead_ms=2.0)
    assert parallel.target_alone_ms(model, 1) == 80.0
    assert parallel.target_alone_ms(model, 11) == 80.0 + 10 * 52.0


@pytest.mark.parametrize("which, why", [
    ("ar", "autoregressive"), ("sampling", "sampling"), ("ngram", "ngram"), ("stripped", "no_ranks")])
def test_what_cannot_be_replayed_says_why(tiny_pair, which, why):
    if which == "ar":
        trace = run_ar(tiny_pair, max_new_tokens=8)
    elif which == "sampling":
        trace = run_sd(tiny_pair, temperature=0.9, max_new_tokens=8)
    elif which == "ngram":
        trace = run_sd(tiny_pair, drafter="ngram", prompt="abcabc", max_new_tokens=8)
    else:
        trace = run_sd(tiny_pair, max_new_tokens=8)
        trace.draft_ranks = []
    assert parallel.why_not_replayable(trace) == why
    assert why in parallel.NOT_REPLAYABLE
    with pytest.raises(BadInput, match="cannot be replayed"):
        parallel.replay(trace, costs.LatencyModel({1: 1.0}, {1: 1.0}), parallel.settings_for(trace))


def test_the_replay_context_is_the_runs_mean_context_to_a_step():
    assert costs.CONTEXT_STEP == 32
    assert costs.run_context(40, 64) == 64  # a mean of 40 + 32 = 72 tokens
    assert costs.run_context(40, 120) == 96  # 100
    assert costs.run_context(0, 0) == 32  # never below one step
    assert costs.run_context(1000, 0) == 992
    # the pair's context bounds it: the largest timed pass (33 tokens) must still fit
    assert costs.run_context(250, 0, pair_context=256) == 256 - max(k for _, _, k in costs.LATENCY_GRID)


def test_costs_for_a_run_take_the_measured_passes_at_its_context(tiny_pair):
    trace = run_sd(tiny_pair, prompt="Hello world", gamma=3, max_new_tokens=32)
    own = costs.from_trace(trace)
    assert parallel.costs_for(trace, None).verify_ms == own.verify_ms
    rows = [{"model": "draft", "batch": b, "tokens": 1, "ms": 3.0 * b} for b in (1, 2, 4)]
    rows += [{"model": "target", "batch": 1, "tokens": k, "ms": 20.0 + k} for k in range(1, 34)]
    meta = {"context_length": parallel.replay_context(trace), "measured_at": "then"}
    model = parallel.costs_for(trace, (rows, meta))
    assert model.source == "measured" and model.context_length == meta["context_length"]
    assert model.verify(4) == 24.0 and model.draft(2) == 6.0
    # prefills and bookkeeping are not passes over a fixed context: they are the run's own
    assert (model.draft_prefill_ms, model.target_prefill_ms, model.overhead_ms) == (
        own.draft_prefill_ms, own.target_prefill_ms, own.overhead_ms)


@pytest.mark.parametrize("kw", [dict(draft_vocab=24), dict(draft_quant="int8")])
def test_a_run_with_another_draft_keeps_its_own_draft_passes(tiny_pair, kw):
    """Measured draft passes are the plain draft's: a cut head or an int8 draft costs what the run says."""
    trace = run_sd(tiny_pair, prompt="Hello world", gamma=3, max_new_tokens=32, **kw)
    assert parallel.own_draft(trace)
    rows = [{"model": "draft", "batch": 1, "tokens": 1, "ms": 999.0},
            {"model": "target", "batch": 1, "tokens": 1, "ms": 20.0}]
    model = parallel.costs_for(trace, (rows, {}))
    assert model.draft(1) == costs.from_trace(trace).draft(1) != 999.0
    assert model.verify(1) == 20.0
