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
    # the costs are the run's own means: the replay adds them up to the run's wall time
    assert check.ok and abs(check.wall_error) < 0.05, check.to_dict()


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
