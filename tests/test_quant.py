"""The int8 draft (``--draft-quant int8``, specviz.models.int8): a cheaper draft pass that never
changes the output.

Greedy: the output equals the target's own (in tests/test_exactness.py::
test_greedy_output_is_the_targets_own_for_every_draft_variant, the int8 cases). Sampling: the tokens follow the target's
distribution exactly (chi-square against exact probabilities, in
tests/test_sampling.py::test_first_two_tokens_follow_the_target, the int8 case), because the
acceptance rule uses the q the int8 draft really sampled from.
"""

from __future__ import annotations

import pytest
import torch
from helpers import int8_needs_cpu, make_config, run_sd

from specviz import BadInput, speculative
from specviz.models.kv import KVModel
from specviz.record.limits import QUANTS, check_quant
from specviz.record.validate import encode_prompt

pytestmark = pytest.mark.usefixtures("single_thread")


def test_the_int8_copy_is_quantized_once_and_leaves_the_draft_as_it_was(tiny_pair):
    int8_needs_cpu(tiny_pair)
    before = {k: v.clone() for k, v in tiny_pair.draft.state_dict().items()}
    q = tiny_pair.draft_model("int8")
    assert q is tiny_pair.draft_model("int8") and q is not tiny_pair.draft
    assert tiny_pair.draft_model("none") is tiny_pair.draft
    linears = [m for m in q.modules() if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]
    assert len(linears) == 1 + 7 * tiny_pair.draft.config.num_hidden_layers  # q k v o gate up down, the LM head
    assert not any(type(m) is torch.nn.Linear for m in q.modules())
    after = tiny_pair.draft.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_int8_logits_are_close_to_the_drafts_but_not_the_same(tiny_pair):
    int8_needs_cpu(tiny_pair)
    ids = encode_prompt(tiny_pair.tokenizer, "Hello world", chat=True)
    full = KVModel(tiny_pair.draft, tiny_pair.device).forward(ids, 4)
    q = KVModel(tiny_pair.draft_model("int8"), tiny_pair.device).forward(ids, 4)
    assert q.shape == full.shape
    assert not torch.equal(q, full), "quantization changed nothing: the tests below would prove nothing"
    spread = (full.max() - full.min()).item()
    assert (q - full).abs().max().item() < 0.1 * spread


def test_int8_changes_the_drafts_probabilities(tiny_pair):
    int8_needs_cpu(tiny_pair)
    full = run_sd(tiny_pair, prompt="Hello world", gamma=4, max_new_tokens=24)
    q = run_sd(tiny_pair, prompt="Hello world", gamma=4, max_new_tokens=24, draft_quant="int8")
    assert [r.draft_probs for r in full.rounds] != [r.draft_probs for r in q.rounds]


def test_bad_quantization_is_refused(tiny_pair):
    with pytest.raises(BadInput, match="one of none, int8") as exc:
        speculative(tiny_pair, make_config(draft_quant="int4"))
    assert exc.value.field == "draft_quant"
    with pytest.raises(BadInput, match="n-gram"):
        speculative(tiny_pair, make_config(draft_quant="int8", drafter="ngram"))
    with pytest.raises(BadInput, match="CPU only"):
        check_quant("int8", "cuda")
    for quant in QUANTS:
        check_quant(quant, "cpu")


def test_the_overlapped_pearl_run_refuses_an_int8_draft(tiny_pair):
    from specviz.measure.pearl_real import pearl_run

    with pytest.raises(BadInput, match="quantization none") as exc:
        pearl_run(tiny_pair, make_config(draft_quant="int8"))
    assert exc.value.field == "draft_quant"
