"""Inspect a round on a token-tree run (specviz.analysis.tree_story, specviz.ui.inspect_tree).

* the pure story on real tree runs of the tiny pair: each draft pass's event, what it read and
  the nodes it added; the cumulative q; the tree mask; the walk down the accepted path; the
  verify pass's pending tokens and positions; what the chain of the draft's first choices
  would have accepted, checked against a real chain run from the same prefix;
* the page's decisions: a tree round's steps (S draft passes + 5), their titles and the steps
  line; a chain round keeps its six;
* the figures: the mask, and the p/q chart marking every child drafted at a node;
* the page through AppTest: a tree run on the Live page, then every step of its rounds walked
  in English and in Chinese, greedy and sampled, with no exception.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import run_sd
from streamlit.testing.v1 import AppTest

from specviz import Trace
from specviz.analysis import round_story
from specviz.analysis import tree_story as tst
from specviz.analysis.metrics import fmt_ms
from specviz.figures import round_story as FI
from specviz.figures import tree as FT
from specviz.record.i18n import gettext_for
from specviz.record.run_trace import is_draft_step, tree_depths
from specviz.ui import inspect_page
from specviz.ui.inspect_page import STEPS, InspectState
from specviz.ui.markdown import token_span

pytestmark = pytest.mark.usefixtures("single_thread")

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
PAGE = "pages/inspect_round.py"
TIMEOUT = 90
ZH = gettext_for("zh_CN")
PROMPT = "The quick brown fox jumps over"
RUNS = {
    "dynamic greedy": dict(tree_nodes=10, tree_depth=5, tree_width=2),
    "static greedy": dict(tree_shape=[3, 2, 2, 1]),
    "dynamic sampled": dict(tree_nodes=12, tree_depth=4, tree_width=3, temperature=0.9, seed=1),
}


@pytest.fixture(scope="module", params=list(RUNS))
def tree_run(request, tiny_pair) -> tuple[str, Trace]:
    return request.param, run_sd(tiny_pair, prompt=PROMPT, max_new_tokens=40, **RUNS[request.param])


def _drafted(trace: Trace) -> list[int]:
    return [r.index for r in trace.rounds if r.tree]


# --- the pure story ---------------------------------------------------------------------------------------------


def test_each_draft_pass_is_one_event_and_adds_the_nodes_of_its_depth(tree_run):
    name, trace = tree_run
    depth_one_reads = []
    for i in _drafted(trace):
        rnd = trace.rounds[i]
        passes = tst.tree_passes(rnd)
        events = [e for e in rnd.events if is_draft_step(e)]
        assert [p.event for p in passes] == events and [p.step for p in passes] == list(range(1, len(events) + 1))
        depth = tree_depths(rnd.tree)
        assert sorted(n for p in passes for n in p.added) == list(range(len(rnd.tree)))
        for p in passes:
            assert all(depth[n] == p.step for n in p.added)
            assert p.expanded == list(dict.fromkeys(rnd.tree[n].parent for n in p.added))
            if p.step == 1:
                assert p.expanded in ([-1], []) and p.read == len(p.event.tokens) >= 1
            else:
                assert all(depth[v] == p.step - 1 for v in p.expanded)
                assert p.read == len(p.event.tokens) >= len(p.expanded)  # what it read, kept children or not
                if "static" in name:  # every node of the depth above is read and keeps its children
                    above = [v for v in range(len(rnd.tree)) if depth[v] == p.step - 1]
                    assert p.read == len(above)
                    assert p.event.tokens == [rnd.tree[v].token for v in above]
        depth_one_reads.append(passes[0].read)
    assert depth_one_reads[0] > 1  # the first round's first pass read the prompt


def test_cumulative_q_is_the_product_along_the_path(tree_run):
    _, trace = tree_run
    for i in _drafted(trace):
        nodes = trace.rounds[i].tree
        cum = tst.cumulative_q(nodes)
        for v, node in enumerate(nodes):
            product, a = 1.0, v
            while a >= 0:
                product *= nodes[a].q
                a = nodes[a].parent
            assert math.isclose(cum[v], product, rel_tol=1e-12)
            assert 0 < cum[v] <= (cum[node.parent] if node.parent >= 0 else 1.0)


def test_the_mask_is_ancestors_and_self(tree_run):
    _, trace = tree_run
    for i in _drafted(trace):
        nodes = trace.rounds[i].tree
        mask = tst.sees(nodes)
        kids = tst.children(nodes)
        for v in range(len(nodes)):
            assert mask[v][v]
            for c in kids[v]:
                assert mask[c][v] and not mask[v][c]  # a child sees its parent, never the other way
            for a, b in zip(kids[v], kids[v][1:]):
                assert not mask[a][b] and not mask[b][a]  # siblings never see each other
        assert sum(map(sum, mask)) == sum(tree_depths(nodes))  # each node sees its depth's worth of nodes


def test_the_walk_follows_the_accepted_path(tree_run):
    name, trace = tree_run
    kinds = set()
    for i in _drafted(trace):
        rnd = trace.rounds[i]
        walk = tst.tree_walk(rnd)
        k = rnd.accepted
        assert len(walk) == k + 1 and [w.depth for w in walk] == list(range(1, k + 2))
        chosen = [w.chosen for w in walk[:-1]]
        assert walk[-1].chosen is None and None not in chosen
        assert [rnd.tree[c].token for c in chosen] == rnd.proposed[:k]
        assert [w.at for w in walk] == [-1, *chosen]
        assert all(w.chosen in w.children for w in walk[:-1])
        assert rnd.bonus == (not walk[-1].children)
        if walk[-1].children and rnd.correction is not None:
            # the target's own token is none of the children it turned down (greedy: not its argmax;
            # sampling: a rejected draw leaves it no residual mass)
            assert rnd.correction not in [rnd.tree[c].token for c in walk[-1].children]
        kinds.add("bonus" if rnd.bonus else "fix")
    assert "fix" in kinds


def test_the_verify_pass_reads_the_pending_tokens_then_every_node(tree_run):
    _, trace = tree_run
    for i in _drafted(trace):
        rnd = trace.rounds[i]
        T = tst.tree_story(trace, i)
        ids = trace.prompt_ids + [t for r in trace.rounds[:i] for t in r.emitted]
        assert T.prefix == len(ids) and T.root_position == len(ids) - 1
        tokens = T.base.verify.tokens
        assert tokens[T.pending:] == [n.token for n in rnd.tree]
        assert tokens[T.pending - 1] == ids[-1]  # the root, the last verified token, is read last before the nodes
        assert T.pending == (len(trace.prompt_ids) if i == 0 else 1)
        assert T.read == len(tokens) and T.chain_read == T.pending + T.depth
        assert T.nodes == len(rnd.tree) and T.depth == max(tree_depths(rnd.tree))
        assert T.setup == tst.tree_setup(trace.config)


def test_chain_accepts_what_a_real_chain_accepts_from_the_same_prefix(tiny_pair):
    """Greedy: a static tree whose first child at each depth is the draft's top token: the chain of those
    first children accepts, from the same prefix, exactly what a real chain run of the same depth accepts."""
    compared, differ = 0, 0
    for prompt in (PROMPT, "Hello world", "def fib(n):\n    return"):
        kw = dict(prompt=prompt, max_new_tokens=48)
        tree = run_sd(tiny_pair, tree_shape=[3, 2, 2, 1], **kw)
        chain = run_sd(tiny_pair, gamma=4, **kw)
        assert tree.output_ids == chain.output_ids  # both the target's own greedy output
        starts, at = {}, 0
        for r in chain.rounds:
            starts[at] = r
            at += len(r.emitted)
        at = 0
        for r in tree.rounds:
            c = starts.get(at)
            if r.tree and r.gamma == 4 and c is not None and c.gamma == 4 and len(c.emitted) == c.accepted + 1:
                j = tst.chain_accepts(r, greedy=True)
                assert j == c.accepted, (prompt, r.index, j, c.accepted)
                compared += 1
                differ += r.accepted > j
            at += len(r.emitted)
    assert compared >= 3 and differ >= 1  # the tree kept more than the chain somewhere
    assert tst.chain_accepts(tree.rounds[0], greedy=False) is None


def test_a_chain_round_has_no_tree_story(tiny_pair):
    trace = run_sd(tiny_pair, prompt=PROMPT, max_new_tokens=12)
    with pytest.raises(ValueError):
        tst.tree_story(trace, 0)
    assert tst.tree_setup(trace.config) is None
    assert tst.tree_setup(run_sd(tiny_pair, prompt=PROMPT, max_new_tokens=4, tree_shape=[2, 1]).config).widths == (2, 1)


# --- the page's decisions ---------------------------------------------------------------------------------------


def test_a_tree_round_steps_through_its_passes_then_five_steps(tree_run):
    _, trace = tree_run
    for i in _drafted(trace):
        rnd = trace.rounds[i]
        passes = len(tst.tree_passes(rnd))
        n = inspect_page.n_steps(rnd)
        assert n == passes + 5
        kinds = [inspect_page.step_kind(s, rnd) for s in range(n)]
        assert kinds == [("draft", s) for s in range(1, passes + 1)] + [
            (k, 0) for k in ("verify", "accept", "target", "rollback", "wait")]
        assert inspect_page.step_title(0, rnd) == f"The draft grows the tree: pass 1 of {passes}"
        assert inspect_page.step_title(passes, rnd) == "The target checks every node in one pass"
        assert [inspect_page.strip_phase(s, rnd) for s in range(n)] == [None] * (passes + 1) + [("done", None)] * 4
        line = inspect_page.steps_line(passes + 1, rnd=rnd)
        assert line.count("**") == 2 and f"**{passes + 2}\\. Walk down the tree while the target agrees**" in line
        assert line.startswith(f"1–{passes}\\. The draft grows the tree" if passes > 1 else "1\\. The draft grows")
        assert f"(2/{passes})**" in inspect_page.steps_line(1, rnd=rnd) or passes < 2
        assert inspect_page.round_label(trace, i) == f"{i + 1} · {rnd.accepted}/{len(rnd.tree)} ✓"
        assert ZH("The draft grows the tree") in inspect_page.steps_line(0, ZH, rnd)


def test_the_state_clamps_to_the_rounds_steps():
    state = InspectState()
    state.steps = 9
    for _ in range(12):
        state.next()
    assert state.step == 8
    state.steps = STEPS  # a chain round: back to six
    state.restart()
    for _ in range(12):
        state.next()
    assert state.step == STEPS - 1


def test_a_chain_round_keeps_its_six_steps(tiny_pair):
    trace = run_sd(tiny_pair, prompt=PROMPT, max_new_tokens=12)
    rnd = trace.rounds[0]
    assert inspect_page.n_steps(rnd) == STEPS
    assert [inspect_page.step_kind(s, rnd)[0] for s in range(STEPS)] == list(inspect_page.KINDS)
    assert inspect_page.steps_line(2, rnd=rnd) == inspect_page.steps_line(2)
    assert inspect_page.step_title(2, rnd) == "Accept while they agree"
    story = round_story.story(trace, 0)
    assert " · γ = 4 · " in inspect_page.caption(story, rnd, 0, trace.config)


def test_the_caption_names_the_trees_settings(tree_run):
    name, trace = tree_run
    i = _drafted(trace)[0]
    text = inspect_page.caption(round_story.story(trace, i), trace.rounds[i], i, trace.config)
    want = "static token tree, widths 3·2·2·1" if "static" in name else "token tree of at most"
    assert want in text and "γ =" not in text


# --- the figures -------------------------------------------------------------------------------------------------


def test_the_mask_figure_draws_what_each_node_sees(tree_run):
    _, trace = tree_run
    rnd = trace.rounds[_drafted(trace)[-1]]
    fig = FT.tree_mask_figure(rnd)
    (heat,) = fig.data
    z = [list(row) for row in heat.z]
    assert [row[0] for row in z] == [1] * len(rnd.tree)  # every node reads the prefix
    assert [[bool(v) for v in row[1:]] for row in z] == tst.sees(rnd.tree)
    assert all((t == "●") == bool(v) for row_t, row in zip(heat.text, z) for t, v in zip(row_t, row))


def test_the_pq_chart_marks_every_child_drafted_at_the_node(tree_run):
    name, trace = tree_run
    greedy = trace.config.temperature == 0
    for i in _drafted(trace):
        rnd = trace.rounds[i]
        stop = tst.tree_walk(rnd)[-1]
        pos = round_story.position(rnd, rnd.accepted, greedy)
        kids = tuple(rnd.tree[c].token for c in stop.children)
        if len(set(kids) & {c.id for c in pos.candidates}) < 2:  # a sampled child can lie outside the rows
            continue
        fig = FI.pq_figure(pos, drafted_ids=kids)
        outlined = [w == 3 for w in fig.data[0].marker.line.width]
        shown = {c.id for c in FI.shown(pos.candidates, keep=(pos.token, pos.target_token, *kids))}
        assert sum(outlined) == len(set(kids) & shown) >= 2
        assert sum("drafted" in a.text for a in fig.layout.annotations) == sum(outlined)
        plain = FI.pq_figure(pos)  # a chain's chart: the one drafted token
        assert sum(w == 3 for w in plain.data[0].marker.line.width) == 1
        return
    pytest.fail(f"{name}: no round stopped below a node with two children")


# --- the page ----------------------------------------------------------------------------------------------------


def dur(ms: float) -> str:
    return f"{ms:.2f} ms" if ms < 1 else fmt_ms(ms)


def _tree_run_then_inspect(temperature: float = 0.0) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.select_slider(key="speed").set_value("Instant")
    at.number_input(key="max_new_tokens").set_value(32)
    at.segmented_control(key="draft_shape").set_value("tree").run()
    at.slider(key="tree_nodes").set_value(10)
    at.slider(key="tree_width").set_value(2)
    at.slider(key="gamma").set_value(4)
    if temperature:
        at.slider(key="temperature").set_value(temperature)
    at.run()
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    assert at.session_state["live"].sd_done and at.session_state["live"].trace.config.is_tree
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    return at


def _charts(at: AppTest) -> list[str]:
    names = []
    for chart in at.get("plotly_chart"):
        names += [t.get("name", "") for t in json.loads(chart.proto.spec).get("data", [])]
    return names


def _walk(at: AppTest, n: int) -> tuple[list[str], list[list[str]]]:
    """Press Next through the round's n steps; each step's text and chart traces."""
    texts, charts = [], []
    for step in range(n):
        assert not at.exception, (step, at.exception)
        body = " ".join(m.value for m in at.markdown) + " " + " ".join(c.value for c in at.caption)
        assert f"### {step + 1} · " in body, step
        texts.append(body)
        charts.append(_charts(at))
        if step < n - 1:
            at.button(key="inspect_next").click().run()
    assert at.button(key="inspect_next").disabled
    return texts, charts


def test_every_step_of_a_greedy_tree_round(app_tiny_only):
    at = _tree_run_then_inspect()
    trace = at.session_state["live"].trace
    index = at.session_state["inspect_round"]
    rnd = trace.rounds[index]
    T = tst.tree_story(trace, index)
    S = len(T.passes)
    texts, charts = _walk(at, S + 5)
    for s, p in enumerate(T.passes, start=1):
        text = texts[s - 1]
        assert f"The draft grows the tree: pass {s} of {S}" in text and dur(p.ms) in text
        assert "nodes" in charts[s - 1]  # the tree, growing (its hover markers)
        for v in p.added[:12]:
            assert token_span(rnd.tree[v].text) in text
        frontier = (1 if s == 2 else T.passes[s - 3].read) * T.setup.width if s > 1 else 0
        pruned = s > 1 and p.read < min(T.setup.width, frontier)  # nodes outside the best N drafted so far
        assert ("already outside the best" in text) == pruned, (s, p.read, frontier)
    assert f"In all, {S} draft passes drafted {T.nodes} nodes" in texts[S - 1]
    verify = texts[S]
    assert "ONE forward pass" in verify and dur(T.base.verify_ms) in verify
    assert f"all {T.nodes} nodes, {T.read} tokens" in verify
    assert f"root sits at position {T.root_position}" in verify
    assert f"would read {T.chain_read} tokens" in verify
    assert "mask" in charts[S]
    walk = texts[S + 1]
    assert "Greedy decoding walks down the tree" in walk
    for w in T.walk:
        assert f"Depth {w.depth}: " in walk
    assert f"Accepted: {rnd.accepted} of the {T.nodes} nodes" in walk
    assert "q · draft" in charts[S + 1] and "p · target" in charts[S + 1]
    assert token_span(rnd.correction_text) in texts[S + 2]
    assert "gathered in place" in texts[S + 3] or "No node was accepted" in texts[S + 3]
    assert "started drafting at" in texts[S + 4] or "last round" in texts[S + 4]
    for idea in ("a token tree, one draft pass per depth", "Why one verify pass checks the whole tree"):
        assert idea in texts[0]
    assert "The draft wrote" not in " ".join(texts)  # the chain's wording never appears for a tree
    at.button(key="inspect_restart").click().run()
    assert "### 1 · The draft grows the tree: pass 1" in " ".join(m.value for m in at.markdown)


def test_every_round_of_a_sampled_tree_run_walks_in_both_languages(app_tiny_only):
    at = _tree_run_then_inspect(temperature=0.9)
    trace = at.session_state["live"].trace
    rounds = round_story.drafted_rounds(trace)
    for lang in ("en", "zh"):
        at.query_params["lang"] = lang
        at.run()
        for index in rounds if lang == "en" else rounds[:3]:
            at.selectbox(key="inspect_round").set_value(index).run()
            n = inspect_page.n_steps(trace.rounds[index])
            texts, _ = _walk(at, n)
            if lang == "zh":
                assert ZH("The target checks every node in one pass") in texts[n - 5]
                assert ZH("Walk down the tree while the target agrees") in texts[n - 4]
            else:
                assert "SpecInfer's multi-step speculative sampling" in texts[n - 4]
            at.button(key="inspect_restart").click().run()


def test_a_greedy_tree_round_walks_in_chinese(app_tiny_only):
    at = _tree_run_then_inspect()
    at.query_params["lang"] = "zh"
    at.run()
    trace = at.session_state["live"].trace
    rnd = trace.rounds[at.session_state["inspect_round"]]
    n = inspect_page.n_steps(rnd)
    texts, charts = _walk(at, n)
    assert ZH("The draft grows the tree: pass {s} of {n}").format(s=1, n=n - 5) in texts[0]
    assert "mask" in charts[n - 5]
    assert "Greedy decoding walks down the tree" not in " ".join(texts)  # said in Chinese
