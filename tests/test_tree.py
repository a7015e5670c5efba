"""Token trees (specviz/engine/tree.py) are exact, and keep the caches a chain would keep.

* Greedy: a tree run's output is the target's own greedy output, token for token (fp32,
  tiny pair; the real pair in tests/test_default_pair.py); the static tree [1] * gamma is
  the chain, round for round.
* Sampling: SpecInfer's multi-step speculative sampling on hand-made rows keeps p (the
  first and second token, chi-square), and end to end on the tiny pair the first two
  tokens of many seeded tree runs follow the warped target, as for chains
  (tests/test_sampling.py).
* After every round both caches hold exactly the accepted path: the target's KV rows equal
  those of a chain run that emitted the same tokens.
* What a round records: every node, parents first, the accepted path marked and equal to
  what the round emitted, the bonus at a leaf.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import torch
from helpers import P_MIN, chi2_fit, exact_first_two_or_eos, make_config, run_ar, run_sd, sample_first_two

from specviz import speculative
from specviz.engine.acceptance import Sampling
from specviz.engine.tree import DraftTree, TreeDrafter, TreeShape, accept_tree
from specviz.models.kv import Clock, KVModel
from specviz.record.errors import BadInput
from specviz.record.limits import tree_size
from specviz.record.run_trace import tree_depths
from specviz.record.validate import check_settings, encode_prompt

pytestmark = pytest.mark.usefixtures("single_thread")

SHAPES = {
    "static 2,2,1,1": dict(tree_shape=[2, 2, 1, 1]),
    "static 4,2,2,1": dict(tree_shape=[4, 2, 2, 1]),
    "static 3 wide, 1 deep": dict(tree_shape=[3]),
    "dynamic 16 nodes, depth 5, width 3": dict(tree_nodes=16, tree_depth=5, tree_width=3),
    "dynamic 8 nodes, depth 4, width 2": dict(tree_nodes=8, tree_depth=4, tree_width=2),
    "dynamic 3 nodes, depth 6, width 4": dict(tree_nodes=3, tree_depth=6, tree_width=4),
    "dynamic 16 nodes, width 3, widened only where unsure (τ 0.3)": dict(tree_nodes=16, tree_depth=5, tree_width=3,
                                                                        policy="confidence", confidence=0.3),
}
PROMPTS = ["Hello world", "def fib(n):\n    return", "The quick brown fox jumps over"]


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_tree_output_is_the_targets_own(tiny_pair, shape, prompt):
    kw = dict(prompt=prompt, max_new_tokens=40)
    tree = run_sd(tiny_pair, **kw, **SHAPES[shape])
    assert tree.output_ids == run_ar(tiny_pair, **kw).output_ids
    assert all(r.tree for r in tree.rounds if r.gamma), "every drafted round holds its tree"


def test_the_static_tree_of_width_one_is_the_chain(tiny_pair):
    kw = dict(prompt="The quick brown fox jumps over", max_new_tokens=48, gamma=4)
    chain, tree = run_sd(tiny_pair, **kw), run_sd(tiny_pair, **kw, tree_shape=[1, 1, 1, 1])
    assert [(r.proposed, r.accepted, r.emitted) for r in chain.rounds] == \
        [(r.proposed, r.accepted, r.emitted) for r in tree.rounds]
    assert any(r.rejected for r in chain.rounds) and any(r.bonus for r in chain.rounds)


def test_a_wider_tree_accepts_more_per_round(tiny_pair):
    """Where the draft is unsure, the second and third guesses pay: more tokens per round."""
    kw = dict(prompt="The quick brown fox jumps over", max_new_tokens=64)
    chain = run_sd(tiny_pair, gamma=4, **kw)
    tree = run_sd(tiny_pair, tree_shape=[4, 2, 2, 1], **kw)
    assert tree.summary["mean_acceptance_length"] > chain.summary["mean_acceptance_length"]
    assert len(tree.rounds) < len(chain.rounds)


@pytest.mark.parametrize("shape", ["static 4,2,2,1", "dynamic 16 nodes, depth 5, width 3"])
def test_a_round_records_its_tree(tiny_pair, shape):
    trace = run_sd(tiny_pair, prompt="The quick brown fox", max_new_tokens=40, **SHAPES[shape])
    settings = SHAPES[shape]
    budget = tree_size(settings["tree_shape"]) if "tree_shape" in settings else settings["tree_nodes"]
    depth = len(settings.get("tree_shape", [])) or settings.get("tree_depth")
    for r in trace.rounds:
        nodes = r.tree
        if not r.gamma:  # a last round cut to no draft by the budget: a plain target pass
            assert not nodes and not r.proposed
            continue
        assert 0 < len(nodes) <= budget
        assert all(n.parent < i for i, n in enumerate(nodes)), "parents come first"
        assert max(tree_depths(nodes)) <= r.gamma <= depth
        path = [i for i, n in enumerate(nodes) if n.accepted]
        # the accepted nodes form one path from the root, and it is what the round emitted
        assert [nodes[i].parent for i in path] == [-1] + path[:-1]
        assert [nodes[i].token for i in path] == r.proposed[: r.accepted] == r.emitted[: r.accepted]
        assert r.emitted[r.accepted:] == [r.correction][: len(r.emitted) - r.accepted]
        last = path[-1] if path else -1
        children = [i for i, n in enumerate(nodes) if n.parent == last]
        assert r.bonus == (not children)
        assert r.correction not in [nodes[i].token for i in children], "a matching child would have been taken"
        siblings = {}
        for n in nodes:
            siblings.setdefault(n.parent, []).append(n.token)
        assert all(len(set(t)) == len(t) for t in siblings.values()), "greedy children are distinct"
        assert all(0 < n.q <= 1 and 0 <= n.p <= 1 and n.text for n in nodes)


def test_the_cache_after_a_tree_round_is_a_chains(tiny_pair, kv_recorder):
    """Both caches keep only the accepted path: gathered, equal (fp32, to rounding) to the
    cache a chain run that emitted the same tokens ends with."""
    kw = dict(prompt="The quick brown fox jumps over", max_new_tokens=30)
    tree = run_sd(tiny_pair, tree_shape=[3, 2, 2], **kw)
    tree_target, tree_draft = kv_recorder.target(tiny_pair), kv_recorder.draft(tiny_pair)
    kv_recorder.mark()
    chain = run_sd(tiny_pair, gamma=3, **kw)
    chain_target, chain_draft = kv_recorder.target(tiny_pair), kv_recorder.draft(tiny_pair)
    assert tree.output_ids == chain.output_ids
    ids = tree.prompt_ids + tree.output_ids
    assert tree_target.tokens == chain_target.tokens == ids[:-1]
    assert tree_target.cache_len == len(ids) - 1
    for a, b in zip(tree_target.cache.layers, chain_target.cache.layers, strict=True):
        torch.testing.assert_close(a.keys, b.keys, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(a.values, b.values, atol=1e-5, rtol=1e-4)
    n = min(len(tree_draft.tokens), len(chain_draft.tokens))
    assert n > len(tree.prompt_ids) and tree_draft.tokens[:n] == chain_draft.tokens[:n] == ids[:n]
    assert tree_draft.cache_len == len(tree_draft.tokens)
    for a, b in zip(tree_draft.cache.layers, chain_draft.cache.layers, strict=True):
        torch.testing.assert_close(a.keys[..., :n, :], b.keys[..., :n, :], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("nodes, depth, width", [(6, 6, 3), (10, 8, 2), (16, 5, 3), (3, 6, 4)])
def test_a_greedy_dynamic_tree_skips_only_nodes_the_cut_drops(tiny_pair, nodes, depth, width):
    """Pruning the frontier (a node outside the best ``nodes`` drafted so far is not read) gives
    the very tree that reading every expanded node gives, for fewer columns of draft passes."""
    shape = TreeShape(nodes=nodes, depth=depth, width=width)
    trees, read = {}, {}  # prune -> the trees drafted; the tokens their passes read after the first
    for prune in (True, False):
        drafter = TreeDrafter(KVModel(tiny_pair.draft_model("none"), tiny_pair.device), Sampling(),
                              torch.Generator(), Clock(others=False), shape, prune=prune)
        drafted = [drafter.propose(encode_prompt(tiny_pair.tokenizer, p, chat=False), depth, set()) for p in PROMPTS]
        trees[prune] = [(t.tokens, t.parents, t.steps) for t in drafted]
        read[prune] = sum(len(e.tokens) for t in drafted for e in t.events[1:])
    assert trees[True] == trees[False]
    assert all(len(tokens) == nodes for tokens, _, _ in trees[True])
    assert read[True] < read[False], "the cut drops some expanded nodes at these budgets"


@pytest.mark.parametrize("confidence", [0.2, 0.35])
def test_a_confident_tree_widens_only_where_the_draft_is_unsure(tiny_pair, confidence):
    """Under the confidence policy a node whose draft row has a top probability >= τ has one
    child; the others may have up to the width; the output is still the target's own."""
    kw = dict(prompt="The quick brown fox jumps over", max_new_tokens=48)
    run = run_sd(tiny_pair, tree_nodes=16, tree_depth=5, tree_width=3, policy="confidence", confidence=confidence,
                 **kw)
    assert run.output_ids == run_ar(tiny_pair, **kw).output_ids
    sure = unsure = 0
    for rnd in run.rounds:
        children: dict[int, list] = {}
        for n in rnd.tree:
            children.setdefault(n.parent, []).append(n)
        for kids in children.values():
            top = max(k.q for k in kids)  # the greedy top child carries the row's top probability
            if top >= confidence:
                sure += 1
                assert len(kids) == 1, "a sure node got a second guess"
            elif len(kids) > 1:
                unsure += 1
    assert sure and unsure, "the run must have both sure and unsure nodes, or the test proves nothing"


def test_budget_and_eos_cut_a_tree_as_they_cut_a_chain(tiny_pair):
    for budget in (1, 2, 3, 5):
        kw = dict(prompt="Hello world", max_new_tokens=budget)
        tree = run_sd(tiny_pair, tree_shape=[4, 2, 2, 1], **kw)
        assert tree.output_ids == run_ar(tiny_pair, **kw).output_ids
        assert all(r.gamma <= budget - 1 for r in tree.rounds)
    kw = dict(prompt="Hello world", max_new_tokens=30, stop=["o"])
    assert run_sd(tiny_pair, tree_nodes=10, **kw).output_ids == run_ar(tiny_pair, **kw).output_ids


# --- sampling -------------------------------------------------------------------------------------


def _row(*values) -> torch.Tensor:
    t = torch.tensor(values, dtype=torch.float32)
    return t / t.sum()


P_ROOT = _row(0.4, 0.3, 0.15, 0.1, 0.05)
P_CHILD = _row(0.05, 0.05, 0.1, 0.3, 0.5)
Q_CASES = {
    "q uniform": _row(1, 1, 1, 1, 1),
    "q overconfident": _row(0.02, 0.9, 0.04, 0.02, 0.02),
    "q one-hot on an unlikely token": _row(0, 0, 0, 0, 1),
    "q on the two least likely tokens": _row(0, 0, 0, 0.5, 0.5),
}


def _hand_tree(q: torch.Tensor, width: int, gen: torch.Generator) -> DraftTree:
    """A root with ``width`` draws from q, each child with two draws from a fixed row."""
    tree = DraftTree()
    tree.rows[-1] = q
    for tok in torch.multinomial(q, width, replacement=True, generator=gen).tolist():
        tree.add(-1, tok, 1)
    q_child = _row(1, 2, 3, 2, 1)
    for c in tree.children(-1):
        tree.rows[c] = q_child
        for tok in torch.multinomial(q_child, 2, replacement=True, generator=gen).tolist():
            tree.add(c, tok, 2)
    return tree


@pytest.mark.parametrize("case", list(Q_CASES))
@pytest.mark.parametrize("width", [1, 3])
def test_multi_step_speculative_sampling_keeps_p(case, width):
    """Rows that ignore context: the first emitted token follows p_root whatever q is, and
    a second one (an accepted child's child, its correction or a bonus) follows p_child."""
    gen = torch.Generator().manual_seed(7)
    sampling = Sampling(1.0)
    trials = 4000
    first, second = Counter(), Counter()
    accepted_any = 0
    for _ in range(trials):
        tree = _hand_tree(Q_CASES[case], width, gen)
        rows = torch.stack([P_ROOT] + [P_CHILD] * len(tree))
        v = accept_tree(tree, rows.log(), sampling, gen)
        out = [tree.tokens[i] for i in v.path] + [v.token]
        first[out[0]] += 1
        if len(out) > 1:
            second[out[1]] += 1
        accepted_any += bool(v.path)
    assert chi2_fit(first, {i: float(P_ROOT[i]) for i in range(5)}, trials) > P_MIN, first
    if accepted_any > 50:
        assert chi2_fit(second, {i: float(P_CHILD[i]) for i in range(5)}, sum(second.values())) > P_MIN, second


def test_more_draws_accept_more():
    """The point of width: with three draws from a poor q the first token is accepted more often."""
    gen = torch.Generator().manual_seed(3)
    q = Q_CASES["q overconfident"]
    rates = []
    for width in (1, 3):
        hits = 0
        for _ in range(3000):
            tree = _hand_tree(q, width, gen)
            hits += bool(accept_tree(tree, torch.stack([P_ROOT] + [P_CHILD] * len(tree)).log(),
                                     Sampling(1.0), gen).path)
        rates.append(hits / 3000)
    assert rates[1] > rates[0] + 0.1, rates


TREE_E2E = {
    "static 3,2, T=1, top-k 8": (Sampling(1.0, 8, 1.0), 1200, dict(tree_shape=[3, 2])),
    "dynamic 6 nodes, width 2, T=0.8, top-p 0.9": (Sampling(0.8, 0, 0.9), 1000,
                                                    dict(tree_nodes=6, tree_depth=3, tree_width=2)),
    "dynamic 6 nodes, width 3, widened where unsure (τ 0.3), T=1": (
        Sampling(1.0, 0, 1.0), 1200, dict(tree_nodes=6, tree_depth=3, tree_width=3, policy="confidence",
                                          confidence=0.3)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TREE_E2E))
def test_first_two_tokens_of_a_sampled_tree_follow_the_target(tiny_pair, name):
    s, runs, rest = TREE_E2E[name]
    prompt = "Hello world"
    expected = exact_first_two_or_eos(tiny_pair, encode_prompt(tiny_pair.tokenizer, prompt, True), s)
    counts, accepted, drafted = sample_first_two(
        tiny_pair, speculative, runs, prompt=prompt, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
        **rest)
    pvalue = chi2_fit(counts, expected, runs)
    assert pvalue > P_MIN, f"{name}: chi-square p = {pvalue:.2e}; most common {counts.most_common(6)}"
    assert 0 < accepted < drafted, "drafts were both accepted and rejected"


def test_sampled_tree_runs_are_reproducible_by_seed(tiny_pair):
    kw = dict(prompt="Hello world", temperature=1.0, top_k=20, tree_shape=[3, 2], max_new_tokens=24, seed=5)
    assert run_sd(tiny_pair, **kw).output_ids == run_sd(tiny_pair, **kw).output_ids


# --- settings -------------------------------------------------------------------------------------


@pytest.mark.parametrize("settings, field", [
    (dict(tree_shape=[8, 8]), "tree_shape"),
    (dict(tree_shape=[0, 2]), "tree_shape"),
    (dict(tree_shape=[9]), "tree_shape"),
    (dict(tree_nodes=65), "tree_nodes"),
    (dict(tree_nodes=-1), "tree_nodes"),
    (dict(tree_nodes=8, tree_depth=0), "tree_depth"),
    (dict(tree_nodes=8, tree_width=9), "tree_width"),
    (dict(tree_nodes=8, drafter="ngram"), "drafter"),
    (dict(tree_nodes=8, policy="heuristic"), "policy"),
    (dict(tree_shape=[2, 1], policy="confidence"), "policy"),
    (dict(tree_nodes=8, draft_vocab=16), "draft_vocab"),
])
def test_bad_tree_settings_are_refused_by_name(settings, field):
    with pytest.raises(BadInput) as err:
        check_settings(make_config(**settings))
    assert err.value.field == field


def test_a_remote_target_verifies_chains_only():
    from specviz.record.validate import check_remote

    with pytest.raises(BadInput, match="chain only"):
        check_remote(dataclasses.replace(make_config(tree_nodes=8), target_url="http://127.0.0.1:1"))


@pytest.mark.parametrize("shape", [[2, 1], [4, 2, 2, 1], [3, 3], [1, 1, 1]])
def test_the_tree_what_if_replays_a_real_static_tree_round_for_round(tiny_pair, shape):
    """The what-if from a chain run's draft ranks (specviz/replay/tree_what_if.py) against the
    engine running that static tree for real: the same rounds, exactly (fp32, tiny pair)."""
    from specviz.replay import tree_what_if as W
    from specviz.replay import what_if

    kw = dict(prompt="The quick brown fox jumps over", max_new_tokens=48)
    real = run_sd(tiny_pair, tree_shape=shape, **kw)
    check = W.check_static_tree(real, what_if.costs_for(real, None))
    assert check.rounds_match, (check, [(r.accepted, len(r.emitted)) for r in real.rounds])
    chain = run_sd(tiny_pair, gamma=4, **kw)
    sim = W.tree_what_if(chain, tuple(shape), what_if.costs_for(chain, None))
    assert [(r.accepted, r.emitted) for r in sim.rounds] == [(r.accepted, len(r.emitted)) for r in real.rounds]
