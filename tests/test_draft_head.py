"""The cut draft head (FR-Spec): a cheaper draft that never changes the output.

Greedy: the output equals the target's own, whatever the cut. Sampling: the tokens
follow the target's distribution exactly (chi-square against exact probabilities),
because q is renormalised over the kept ids and the acceptance rule uses that q.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import pytest
import torch
from conftest import make_config, run_ar, run_sd
from test_sampling import P_MIN, chi2_fit, exact_first_two

from specviz import BadInput, speculative
from specviz.engine.acceptance import Sampling
from specviz.models.draft_head import kept_ids
from specviz.models.kv import KVModel
from specviz.record.validate import encode_prompt

pytestmark = pytest.mark.usefixtures("single_thread")


def test_kept_ids_are_the_top_n_plus_eos():
    ranks = [5, 3, 9, 0, 1, 2, 4, 6, 7, 8]
    assert kept_ids(ranks, 3, always=[8], vocab_size=10).tolist() == [3, 5, 8, 9]
    with pytest.raises(BadInput, match="draft vocabulary"):
        kept_ids(ranks, 10, always=[], vocab_size=10)


def test_cut_head_logits_are_the_full_logits_of_the_kept_ids(tiny_pair):
    head = tiny_pair.cut_head(24)
    ids = encode_prompt(tiny_pair.tokenizer, "Hello world", chat=True)
    full = KVModel(tiny_pair.draft, tiny_pair.device).forward(ids, 3)
    cut = KVModel(tiny_pair.draft, tiny_pair.device, head).forward(ids, 3)
    assert cut.shape == (3, len(head))
    torch.testing.assert_close(cut, full[:, head.ids], rtol=1e-5, atol=1e-5)


def test_the_cut_keeps_the_end_of_sequence_ids(tiny_pair):
    head = tiny_pair.cut_head(8)
    assert set(tiny_pair.eos_ids) <= set(head.ids.tolist())
    assert len(head) >= 8


@pytest.mark.parametrize("n", [6, 12, 24, 60])
@pytest.mark.parametrize("gamma", [1, 3, 6])
@pytest.mark.parametrize("prompt", ["Hello world", "The quick brown fox jumps", "1, 2, 3, 4"])
def test_greedy_output_is_the_targets_own(tiny_pair, n, gamma, prompt):
    ar = run_ar(tiny_pair, prompt=prompt, max_new_tokens=40)
    sd = run_sd(tiny_pair, prompt=prompt, gamma=gamma, max_new_tokens=40, draft_vocab=n)
    assert sd.output_ids == ar.output_ids
    kept = set(tiny_pair.cut_head(n).ids.tolist())
    proposed = [t for r in sd.rounds for t in r.proposed]
    assert proposed and set(proposed) <= kept, "the cut draft proposed an id outside its head"
    assert sd.config.draft_vocab == n


def test_a_cut_changes_what_the_draft_proposes(tiny_pair):
    """The test above means something only if the cut really changes the draft."""
    full = run_sd(tiny_pair, prompt="Hello world", gamma=4, max_new_tokens=40)
    cut = run_sd(tiny_pair, prompt="Hello world", gamma=4, max_new_tokens=40, draft_vocab=6)
    assert [r.proposed for r in full.rounds] != [r.proposed for r in cut.rounds]


def test_sampling_q_is_renormalised_over_the_kept_ids(tiny_pair):
    dec = speculative(tiny_pair, make_config(temperature=1.0, seed=3, draft_vocab=12, max_new_tokens=12))
    rnd = next(dec)
    assert rnd.proposed and all(0.0 < q <= 1.0 for q in rnd.draft_probs)


@pytest.mark.parametrize("n, gamma, s, runs", [
    (12, 3, Sampling(1.0, 0, 1.0), 1500),
    (24, 2, Sampling(0.8, 0, 0.9), 1000),
])
def test_sampling_keeps_the_targets_distribution(tiny_pair, n, gamma, s, runs):
    """The first two tokens of many seeded runs, against exact P(t1, t2) of the target."""
    prompt = "Hello world"
    eos = set(tiny_pair.eos_ids)
    expected = Counter()
    for (t1, t2), v in exact_first_two(tiny_pair, encode_prompt(tiny_pair.tokenizer, prompt, True), s).items():
        expected[(t1, None) if t1 in eos else (t1, t2)] += v  # a run ends at an EOS
    assert math.isclose(sum(expected.values()), 1.0, abs_tol=1e-6)
    kept = set(tiny_pair.cut_head(n).ids.tolist())
    outside = sum(v for (t1, _), v in expected.items() if t1 not in kept)
    assert outside > 0.05, "the target must put mass outside the kept ids, or the residual goes untested"
    counts, accepted, drafted = sample_first_two(tiny_pair, prompt, gamma, s, runs, draft_vocab=n)
    pvalue = chi2_fit(counts, expected, runs)
    assert pvalue > P_MIN, f"chi-square p = {pvalue:.2e}; most common {counts.most_common(6)}"
    assert 0 < accepted < drafted


def sample_first_two(pair, prompt: str, gamma: int, s: Sampling, runs: int, **config) -> tuple[Counter, int, int]:
    """The first two tokens (or EOS) of ``runs`` seeded speculative runs, and the first
    rounds' accepted and drafted counts."""
    counts, accepted, drafted = Counter(), 0, 0
    for seed in range(runs):
        dec = speculative(pair, make_config(prompt=prompt, gamma=gamma, max_new_tokens=8, temperature=s.temperature,
                                            top_k=s.top_k, top_p=s.top_p, seed=seed, **config))
        counts[first_two_or_eos(dec)] += 1
        accepted += dec.trace.rounds[0].accepted
        drafted += len(dec.trace.rounds[0].proposed)
    return counts, accepted, drafted


def first_two_or_eos(dec) -> tuple[int, int | None]:
    for _ in dec:
        if len(dec.trace.output_ids) >= 2:
            break
    out = dec.trace.output_ids
    return (out[0], None) if dec.trace.stop_reason == "eos" and len(out) == 1 else tuple(out[:2])


def test_bad_draft_vocab_is_refused(tiny_pair):
    with pytest.raises(BadInput, match="not smaller") as exc:
        speculative(tiny_pair, make_config(draft_vocab=10_000))
    assert exc.value.field == "draft_vocab"
    with pytest.raises(BadInput, match="n-gram"):
        speculative(tiny_pair, make_config(draft_vocab=8, drafter="ngram"))
    with pytest.raises(BadInput, match="whole number"):
        speculative(tiny_pair, make_config(draft_vocab=-1))


def test_a_pair_without_a_ranking_refuses_a_cut(tiny_pair):
    """No built-in ranking, and no shipped one fits the tiny tokenizer's vocabulary."""
    bare = dataclasses.replace(tiny_pair, builtin_ranks=None, _heads={})
    with pytest.raises(BadInput, match="no token frequency ranking") as exc:
        speculative(bare, make_config(draft_vocab=8))
    assert exc.value.field == "draft_vocab"
    speculative(bare, make_config(draft_vocab=0))  # the full head needs no ranking
