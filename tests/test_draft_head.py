"""The cut draft head (FR-Spec): a cheaper draft that never changes the output.

Greedy: the output equals the target's own, whatever the cut (in tests/test_exactness.py::
test_greedy_output_is_the_targets_own_for_every_draft_variant, the cut-head cases). Sampling: the tokens
follow the target's distribution exactly (chi-square against exact probabilities, in
tests/test_sampling.py::test_first_two_tokens_follow_the_target, the cut-head cases),
because q is renormalised over the kept ids and the acceptance rule uses that q.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import make_config, run_sd

from specviz import BadInput, speculative
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


def test_a_cut_changes_what_the_draft_proposes(tiny_pair):
    """The test above means something only if the cut really changes the draft."""
    full = run_sd(tiny_pair, prompt="Hello world", gamma=4, max_new_tokens=40)
    cut = run_sd(tiny_pair, prompt="Hello world", gamma=4, max_new_tokens=40, draft_vocab=6)
    assert [r.proposed for r in full.rounds] != [r.proposed for r in cut.rounds]


def test_sampling_q_is_renormalised_over_the_kept_ids(tiny_pair):
    dec = speculative(tiny_pair, make_config(temperature=1.0, seed=3, draft_vocab=12, max_new_tokens=12))
    rnd = next(dec)
    assert rnd.proposed and all(0.0 < q <= 1.0 for q in rnd.draft_probs)


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
