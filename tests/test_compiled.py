"""Passes that launch less (specviz.models.static_kv, ``RunConfig.compiled``), checked on the
CPU: torch.compile with Inductor here, CUDA graphs where a GPU runs them. A static cache gives
the dynamic cache's logits through rollbacks and a tree's compaction; compiled greedy runs
are the target's own output; a second run compiles nothing new."""

from __future__ import annotations

import pytest
import torch
from helpers import make_config, run_ar, run_sd

from specviz.models import static_kv
from specviz.models.kv import KVModel
from specviz.record.errors import BadInput
from specviz.record.validate import check_remote, check_settings

pytestmark = pytest.mark.usefixtures("single_thread")


def _ops(kv) -> list[torch.Tensor]:
    """One round's worth of cache work: a prefill, one-token steps, a verify over 4, a rollback,
    more steps, then a tree-style compaction (the prefix and every other new row)."""
    out = [kv.forward([5, 9, 17, 3, 8], 1)]
    out += [kv.forward([t], 1) for t in (11, 12)]
    out.append(kv.forward([13, 14, 15, 16], 4))
    kv.rollback(len(kv.tokens) - 3)
    out += [kv.forward([t], 1) for t in (21, 22, 23)]
    kept = list(range(5)) + [6, 8, 9]
    kv.keep_only(kept)
    out.append(kv.forward([30], 1))
    return out


def test_a_static_cache_gives_the_dynamic_caches_logits(tiny_pair):
    for model in (tiny_pair.target, tiny_pair.draft):
        dynamic = _ops(KVModel(model, tiny_pair.device))
        for step in (None, static_kv.compiled(model)):
            static = static_kv.StaticKV(model, tiny_pair.device, 64, step)
            got = _ops(static)
            assert static.cache_len == len(static.tokens)
            for a, b in zip(dynamic, got):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_a_static_cache_refuses_a_pass_past_its_length(tiny_pair):
    kv = static_kv.StaticKV(tiny_pair.target, tiny_pair.device, 8)
    kv.forward(list(range(6)), 1)
    with pytest.raises(ValueError, match="holds 8 positions"):
        kv.forward([1, 2, 3], 1)


@pytest.mark.parametrize("kw", [
    dict(gamma=3), dict(gamma=8, policy="confidence", confidence=0.3), dict(tree_nodes=8, tree_depth=4, tree_width=2),
    dict(gamma=4, draft_vocab=24), dict(gamma=2, draft_quant="int8"),  # these drafts run eager, the target compiled
], ids=["chain", "confidence", "tree", "cut-head", "int8"])
def test_compiled_greedy_runs_are_the_targets_own(tiny_pair, kw):
    prompt = "The quick brown fox"
    ar = run_ar(tiny_pair, prompt=prompt, max_new_tokens=40)
    sd = run_sd(tiny_pair, prompt=prompt, max_new_tokens=40, compiled=True, **kw)
    assert sd.config.compiled and sd.output_ids == ar.output_ids
    assert run_ar(tiny_pair, prompt=prompt, max_new_tokens=40, compiled=True).output_ids == ar.output_ids


def test_a_second_compiled_run_compiles_nothing_new(tiny_pair):
    from torch._dynamo.utils import counters

    kw = dict(prompt="Hello world", max_new_tokens=24, gamma=3, compiled=True)
    run_sd(tiny_pair, **kw)
    before = dict(counters["stats"])
    run_sd(tiny_pair, **{**kw, "prompt": "Another prompt, another length"})
    assert counters["stats"].get("unique_graphs", 0) == before.get("unique_graphs", 0)


def test_a_compiled_sampled_run_draws_as_the_eager_one(tiny_pair):
    kw = dict(prompt="Hello world", max_new_tokens=32, gamma=3, temperature=1.0, top_k=8, seed=4)
    assert run_sd(tiny_pair, compiled=True, **kw).output_ids == run_sd(tiny_pair, **kw).output_ids


def test_compiled_is_a_switch_and_needs_a_local_target():
    with pytest.raises(BadInput) as err:
        check_settings(make_config(compiled="yes"))
    assert err.value.field == "compiled"
    with pytest.raises(BadInput) as err:
        check_remote(make_config(compiled=True))
    assert err.value.field == "compiled"
