"""The draft's view of every output position, recorded off the clock for greedy runs:
the rank of the emitted token under the draft given the correct prefix, and its top
candidates. Serial speculative decoding accepts position j exactly when rank j is 0."""

from __future__ import annotations

import pytest
from helpers import run_ar, run_sd

from specviz import Trace
from specviz.engine.decode import TOP_F, teacher_forced_view

pytestmark = pytest.mark.usefixtures("single_thread")


def _check_against_rounds(trace) -> int:
    """Every proposed position that reached the output: accepted iff rank 0. Returns how
    many positions were checked."""
    pos = checked = 0
    for rnd in trace.rounds:
        for i in range(min(len(rnd.proposed), len(rnd.emitted))):
            assert (trace.draft_ranks[pos + i] == 0) == (i < rnd.accepted), (rnd.index, i)
            assert (trace.draft_top[pos + i][0] == rnd.proposed[i]), "the top candidate is the draft's proposal"
            checked += 1
        pos += len(rnd.emitted)
    return checked


@pytest.mark.parametrize("kw", [
    dict(gamma=1), dict(gamma=3), dict(gamma=6), dict(gamma=2, policy="heuristic"),
    dict(gamma=4, draft_vocab=24), dict(gamma=5, prompt="The quick brown fox", max_new_tokens=60),
])
def test_rank_zero_is_exactly_acceptance(tiny_pair, kw):
    kw = {"prompt": "Hello world", "max_new_tokens": 48, **kw}
    trace = run_sd(tiny_pair, **kw)
    n = len(trace.output_ids)
    assert len(trace.draft_ranks) == len(trace.draft_top) == n
    assert all(len(top) == TOP_F for top in trace.draft_top)
    assert _check_against_rounds(trace) > n / 2
    assert any(r > 0 for r in trace.draft_ranks) and any(r == 0 for r in trace.draft_ranks)


def test_bonus_positions_are_filled(tiny_pair):
    """A bonus token has no draft row in the run: the forced pass gives its view."""
    trace = run_sd(tiny_pair, prompt="Hello world", gamma=1, max_new_tokens=48)
    pos, bonus = 0, []
    for rnd in trace.rounds:
        if rnd.bonus and len(rnd.emitted) > rnd.accepted:
            bonus.append(pos + rnd.accepted)
        pos += len(rnd.emitted)
    assert bonus, "the case has no bonus token"
    assert all(len(trace.draft_top[j]) == TOP_F for j in bonus)


def test_the_forced_pass_agrees_with_the_real_rows_in_float32(tiny_pair):
    trace = run_sd(tiny_pair, prompt="Hello world", gamma=3, max_new_tokens=48)
    ranks, top, top_q = teacher_forced_view(tiny_pair, trace.config, trace.prompt_ids, trace.output_ids)
    assert ranks == trace.draft_ranks
    assert [t[:3] for t in top] == [t[:3] for t in trace.draft_top]
    assert len(trace.draft_top_q) == len(trace.output_ids)
    assert top_q == pytest.approx(trace.draft_top_q, rel=1e-3)


def test_the_view_survives_json(tiny_pair):
    trace = run_sd(tiny_pair, prompt="Hello world", gamma=3, max_new_tokens=24)
    back = Trace.from_json(trace.to_json())
    assert back.draft_ranks == trace.draft_ranks and back.draft_top == trace.draft_top


@pytest.mark.parametrize("which", ["sampling", "ngram", "autoregressive"])
def test_no_view_where_a_replay_would_mean_nothing(tiny_pair, which):
    if which == "sampling":
        trace = run_sd(tiny_pair, temperature=1.0, seed=1, max_new_tokens=16)
    elif which == "ngram":
        trace = run_sd(tiny_pair, drafter="ngram", prompt="abcabcabc", max_new_tokens=16)
    else:
        trace = run_ar(tiny_pair, max_new_tokens=16)
    assert trace.draft_ranks == [] and trace.draft_top == []


def test_ties_rank_as_argmax_breaks_them():
    """bf16 rows often hold exact ties: the lower id wins, as argmax picks it."""
    import torch

    from specviz.engine.decode import draft_view

    q = torch.tensor([[0.1, 0.4, 0.4, 0.1], [0.25, 0.25, 0.25, 0.25]])
    ranks, top, top_q = draft_view(q, [2, 0])
    assert ranks == [1, 0]
    assert top_q == pytest.approx([0.4, 0.25])  # the draft's probability of its own top choice
    assert top[0][:2] == [1, 2] and top[1][:4] == [0, 1, 2, 3]
    assert int(q[0].argmax()) == 1
