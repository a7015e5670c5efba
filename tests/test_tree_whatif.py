"""The token-tree what-if (specviz.replay.tree_what_if): a greedy run replayed under a static tree
shape from the draft's recorded ranks, with no model. A chain is the tree [1] * γ, and then the
what-if is the serial replay, which is the run itself: checked on every shipped greedy run."""

from __future__ import annotations

from pathlib import Path

import pytest

from specviz.record.errors import BadInput
from specviz.record.i18n import gettext_for
from specviz.record.run_trace import Trace
from specviz.replay import latency, schedules, what_if
from specviz.replay import tree_what_if as T

TRACES = Path(__file__).resolve().parent.parent / "assets" / "traces"
GREEDY = sorted(p for p in [*TRACES.glob("*greedy.json"), *TRACES.glob("remote/*greedy.json")]
                if "autoregressive" not in p.name)


def costs() -> latency.LatencyModel:
    return latency.LatencyModel(draft_ms={1: 10.0}, verify_ms={1: 100.0, 9: 100.0, 33: 200.0},
                                draft_read_ms={2: 12.0, 4: 14.0}, draft_prefill_ms=50.0, target_prefill_ms=300.0,
                                overhead_ms=1.0)


def recorded(ranks: list[int], eos_at: int | None = None) -> schedules.ReplayInput:
    """Tokens 100, 101, ...; the draft's top candidate is the target's token where its rank is 0."""
    tokens = [100 + j for j in range(len(ranks))]
    top = [[t if r == 0 else 999] for t, r in zip(tokens, ranks)]
    if eos_at is not None:
        top[eos_at] = [7]
    return schedules.ReplayInput(ranks, top, tokens)


def shape_of(result: T.TreeWhatIf) -> list[tuple[int, int, bool]]:
    return [(r.accepted, r.emitted, r.bonus) for r in result.rounds]


@pytest.mark.parametrize("path", GREEDY, ids=lambda p: p.stem)
def test_a_chain_is_the_run_itself(path):
    """[1] * γ gives the recorded run's rounds (drafted, accepted, emitted) and the serial replay's
    wall time, to the microsecond, with the run's own costs."""
    trace = Trace.load(path)
    own = latency.from_trace(trace)
    result = T.tree_what_if(trace, T.chain(trace.config.gamma), own)
    assert [(r.nodes, r.accepted, r.emitted) for r in result.rounds] == \
           [(len(r.proposed), r.accepted, len(r.emitted)) for r in trace.rounds]
    serial = what_if.replay(trace, own, what_if.settings_for(trace))["serial"]
    assert result.wall_ms == pytest.approx(serial.wall_ms, abs=1e-6)
    assert result.wall_ms == pytest.approx(trace.wall_ms, rel=1e-4)
    assert result.tokens == len(trace.output_ids) and result.is_chain


@pytest.mark.parametrize("path", GREEDY[:4], ids=lambda p: p.stem)
def test_a_wider_first_level_never_accepts_less(path):
    """Widths only add candidates: every round of [w, 1, ..] accepts at least as far as the chain
    from the same position, so the tree needs no more rounds."""
    trace = Trace.load(path)
    own = latency.from_trace(trace)
    g = trace.config.gamma
    chain = T.tree_what_if(trace, T.chain(g), own)
    tree = T.tree_what_if(trace, (4,) + T.chain(g - 1), own)
    assert len(tree.rounds) <= len(chain.rounds)
    assert tree.tokens_per_round >= chain.tokens_per_round
    assert tree.extrapolated  # 4 + 4 (g - 1) + 1 tokens: wider than any verify the run timed


def test_shape_2_1_by_hand():
    result = T.replay_tree(recorded([1, 0, 0, 3, 2, 0, 0, 1, 1, 0]), (2, 1), costs(), 64)
    # p=0: ranks 1 < 2, 0 < 1: both accepted, a bonus; p=3: 3 >= 2; p=4: 2 >= 2; p=5: 0, 0, bonus;
    # p=8: 1, 0, accepted, and the run ends after one token more
    assert shape_of(result) == [(2, 3, True), (0, 1, False), (0, 1, False), (2, 3, True), (2, 2, True)]
    assert [r.start for r in result.rounds] == [0, 3, 4, 5, 8]
    assert [r.nodes for r in result.rounds] == [4] * 5 and result.nodes == 4
    # draft: the prefill, then the root (2 tokens after a bonus) and the 2 nodes of depth 1
    assert [r.draft_ms for r in result.rounds] == [50 + 12, 12 + 12, 10 + 12, 10 + 12, 12 + 12]
    # verify: the target's prefill, then 1 + 4 tokens
    assert [r.verify_ms for r in result.rounds] == [300, 100, 100, 100, 100]
    assert result.wall_ms == pytest.approx(363 + 125 + 123 + 123 + 125)
    assert result.tokens_per_round == pytest.approx(10 / 5)
    assert result.tokens_per_second == pytest.approx(10 / 859 * 1000)


def test_shape_4_2_2_1_by_hand():
    ranks = [3, 1, 0, 0, 2, 5, 0, 1, 1, 0, 0, 0]
    result = T.replay_tree(recorded(ranks), (4, 2, 2, 1), costs(), 64)
    assert shape_of(result) == [(4, 5, True), (0, 1, False), (4, 5, True), (1, 1, False)]
    assert result.nodes == 4 + 8 + 16 + 16
    first = result.rounds[1]
    assert first.ranks == (5, 0, 1, 1) and first.depth == 4
    # passes over the root (after a bonus: 2 tokens), then 4, 8 and 16 nodes (extrapolated reads)
    c = costs()
    assert first.draft_ms == pytest.approx(c.draft_read(2) + c.draft_read(4) + c.draft_read(8) + c.draft_read(16))
    assert first.verify_ms == pytest.approx(c.verify(45))
    # the same run, the chain of 4: it stops at every rank above 0
    assert shape_of(T.replay_tree(recorded(ranks), (1, 1, 1, 1), costs(), 64))[:2] == [(0, 1, False), (0, 1, False)]


def test_the_budget_cuts_the_tree():
    """Near max_new_tokens the tree is cut to the depth left, as the serial replay cuts γ."""
    ranks = [3, 1, 0, 0, 2, 5, 0, 1, 1, 0, 0, 0]
    result = T.replay_tree(recorded(ranks), (4, 2, 2, 1), costs(), 12)
    last = result.rounds[-1]
    assert (last.start, last.depth, last.nodes, last.accepted, last.emitted) == (11, 0, 0, 0, 1)
    assert last.verify_ms == costs().verify(1) and last.draft_ms == 0


def test_an_eos_on_the_top_line_has_no_children():
    assert T.levels((2, 2, 2)) == [2, 4, 8]
    assert T.levels((2, 2, 2), eos_depth=1) == [2, 2, 4]
    assert T.levels((1, 1, 1), eos_depth=1) == [1, 0, 0]
    # the draft's top line proposes EOS (7) at position 1, where the target wrote 101
    chain = T.replay_tree(recorded([0, 1, 0, 0], eos_at=1), (1, 1, 1), costs(), 64, eos_ids=[7])
    assert [(r.nodes, r.depth) for r in chain.rounds][0] == (2, 2)
    tree = T.replay_tree(recorded([0, 1, 0, 0], eos_at=1), (2, 2, 1), costs(), 64, eos_ids=[7])
    assert tree.rounds[0].nodes == 2 + 4 + (4 - 1) and tree.rounds[0].accepted == 3


def test_parse_shape():
    assert T.parse_shape("4,2,2,1") == (4, 2, 2, 1)
    assert T.parse_shape(" 4, 2 ,2 1 ") == (4, 2, 2, 1)
    assert T.parse_shape("2x2x1") == (2, 2, 1)
    assert T.parse_shape("3，1") == (3, 1)  # a Chinese keyboard's comma
    for bad, says in (("", "separated by commas"), ("4,a", "not a list of whole numbers"),
                      ("4,0,1", "from 1 to 8"), ("9", "got 9"), ("1," * 17, "at most 16 levels"),
                      ("8,8", "72 nodes"), ("-1", "not a list")):
        with pytest.raises(BadInput, match=says) as err:
            T.parse_shape(bad)
        assert err.value.field == "tree_shape"


def test_parse_shape_speaks_chinese():
    with pytest.raises(BadInput) as err:
        T.parse_shape("8,8", gettext_for("zh_CN"))
    assert "节点" in str(err.value) and "72" in str(err.value)



def test_labels_and_presets():
    assert T.chain(3) == (1, 1, 1)
    r = T.replay_tree(recorded([0, 0, 0]), (4, 2, 2, 1), costs(), 64)
    assert r.label() == "tree 4,2,2,1 (44 nodes)"
    assert T.replay_tree(recorded([0, 0, 0]), (1, 1), costs(), 64).label() == "chain γ=2"
    for shape in T.PRESETS:
        assert T.check_shape(shape) == shape


def test_best_shapes_and_compare():
    trace = Trace.load(TRACES / "prose-gamma4-greedy.json")
    own = latency.from_trace(trace)
    ranked = T.best_shapes(trace, own)
    assert [r.wall_ms for r in ranked] == sorted(r.wall_ms for r in ranked)
    assert len({r.shape for r in ranked}) == len(ranked) == len(T.PRESETS) + 8
    two = T.best_shapes(trace, own, [(2, 1), (1, 1, 1, 1), (2, 1)])
    assert {r.shape for r in two} == {(2, 1), (1, 1, 1, 1)}
    cmp = T.compare(trace, (4, 2, 2, 1), own)
    assert cmp.chain.shape == (1, 1, 1, 1) and cmp.tree.shape == (4, 2, 2, 1)
    assert cmp.speedup == pytest.approx(cmp.chain.wall_ms / cmp.tree.wall_ms)


def test_memory_bound_costs_favour_a_tree_and_compute_bound_ones_a_chain():
    """The lesson of the cost curve: with a flat verify curve (bf16 here: 16 tokens cost what 1
    does) a tree beats the chain on prose; with a steep one (fp32) it loses."""
    trace = Trace.load(TRACES / "prose-gamma4-greedy.json")
    own = latency.from_trace(trace)
    flat = latency.LatencyModel(draft_ms={1: 95.0}, verify_ms={1: 230.0, 33: 255.0},
                                draft_read_ms={2: 94.0, 33: 123.0}, draft_prefill_ms=own.draft_prefill_ms,
                                target_prefill_ms=own.target_prefill_ms, overhead_ms=own.overhead_ms)
    steep = latency.LatencyModel(draft_ms={1: 115.0}, verify_ms={1: 295.0, 5: 568.0, 9: 665.0, 33: 2000.0},
                                 draft_read_ms={2: 180.0, 33: 900.0}, draft_prefill_ms=own.draft_prefill_ms,
                                 target_prefill_ms=own.target_prefill_ms, overhead_ms=own.overhead_ms)
    assert T.compare(trace, (4, 2, 1, 1), flat).speedup > 1.05
    assert T.compare(trace, (4, 2, 1, 1), steep).speedup < 0.95


def test_with_curve_takes_the_curves_shape_at_the_runs_level():
    own = latency.LatencyModel(draft_ms={1: 10.0}, verify_ms={1: 100.0, 5: 110.0}, draft_read_ms={2: 12.0})
    curve = latency.LatencyModel(draft_ms={1: 5.0}, verify_ms={1: 50.0, 5: 50.0, 17: 75.0, 33: 100.0},
                                 draft_read_ms={2: 5.0, 17: 10.0})
    out = T.with_curve(own, curve)
    assert out.verify_ms == {1: 100.0, 5: 110.0, 17: 165.0, 33: 220.0}
    assert out.draft_read_ms == {2: 12.0, 17: 24.0}
    assert own.verify_ms == {1: 100.0, 5: 110.0}  # not changed


def test_a_run_that_cannot_be_replayed():
    with pytest.raises(BadInput, match="sampling run"):
        T.tree_what_if(Trace.load(TRACES / "prose-gamma4-sampled.json"), (2, 1), costs())
    with pytest.raises(BadInput, match="target-alone"):
        T.tree_what_if(Trace.load(TRACES / "prose-autoregressive-greedy.json"), (2, 1), costs())


# --- the Replay page's tree what-if (AppTest on the tiny pair: no model is loaded) ---------------------


@pytest.fixture
def replay_page(app_tiny_only):
    from streamlit.testing.v1 import AppTest

    def open_page(run: str, lang: str | None = None) -> AppTest:
        at = AppTest.from_file(str(TRACES.parent.parent / "pages" / "replay.py"), default_timeout=90)
        if lang:
            at.query_params["lang"] = lang
        at.run()
        at.selectbox(key="replay_source").set_value(f"Recorded: {run}").run()
        assert not at.exception, at.exception
        return at

    return open_page


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_the_shape_chooser_draws_the_what_if(replay_page):
    from specviz.ui import tree_whatif

    at = replay_page("prose-gamma4-greedy")
    assert at.text_input(key=tree_whatif.TEXT_KEY).value == tree_whatif.DEFAULT_SHAPE
    trace = Trace.load(TRACES / "prose-gamma4-greedy.json")
    costs, _, _ = tree_whatif.tree_costs(trace, tree_whatif.run_curve(trace))
    want = T.compare(trace, T.parse_shape(tree_whatif.DEFAULT_SHAPE), costs)
    assert metrics(at)["Estimated tok/s"] == f"{want.tree.tokens_per_second:.2f}"
    assert metrics(at)["Tokens / round"] == f"{want.tree.tokens_per_round:.2f}"
    fig = at.get("plotly_chart")[-1]
    assert "tree 4,2,1,1" in fig.proto.spec
    # bad input: a clear message, no figure of a wrong shape
    charts = len(at.get("plotly_chart"))
    at.text_input(key=tree_whatif.TEXT_KEY).set_value("4,9").run()
    assert [e.value for e in at.error] == ["Each width must be from 1 to 8 (the draft's top candidates a run "
                                           "records); got 9."]
    assert len(at.get("plotly_chart")) == charts - 1
    # a preset becomes the typed shape; "best" picks the best of the family for this run
    at.button_group(key=tree_whatif.PRESET_KEY).set_value("4,2,2,1").run()
    assert at.text_input(key=tree_whatif.TEXT_KEY).value == "4,2,2,1" and not at.error
    at.button_group(key=tree_whatif.PRESET_KEY).set_value(tree_whatif.BEST).run()
    best = T.best_shapes(trace, costs)[0]
    assert at.text_input(key=tree_whatif.TEXT_KEY).value == T.shape_text(best.shape)
    assert not at.exception, at.exception


def test_a_sampling_run_says_why_not(replay_page):
    at = replay_page("prose-gamma4-sampled")
    assert any("cannot be replayed as a tree" in i.value and "sampling run" in i.value for i in at.info)
    assert "Estimated tok/s" not in metrics(at)


def test_the_what_if_in_chinese(replay_page):
    at = replay_page("chinese-gamma4-greedy", lang="zh")
    assert any("词元树" in m.value for m in at.markdown)
    assert "估计词元/秒" in metrics(at)
    at.text_input(key="tree_shape_text").set_value("8,8").run()
    assert "节点" in at.error[0].value


def test_a_stretched_draft_read_costs_at_most_one_pass_per_node():
    """A float32 run's two-token read is slow (oneDNN), so stretching it to 8 nodes would charge
    more than 8 one-token passes: the replay charges at most that."""
    slow = latency.LatencyModel(draft_ms={1: 100.0}, verify_ms={1: 100.0}, draft_read_ms={2: 300.0})
    result = T.replay_tree(recorded([0, 0, 0, 0, 0, 0]), (8, 1), slow, 64)
    assert slow.draft_read(8) == 1500.0
    assert result.rounds[1].draft_ms == pytest.approx(300.0 + 8 * 100.0)  # after a bonus: the 2-token read


def test_tree_costs_fall_back_on_the_reference_curve(monkeypatch):
    """No measured costs and no curve: the verify passes wider than the run made follow the shape
    of the reference machine's curve in the run's dtype (docs/design.md), at the run's level."""
    from specviz.analysis import theory
    from specviz.ui import tree_whatif

    trace = Trace.load(TRACES / "prose-gamma4-greedy.json")
    own = latency.from_trace(trace)
    monkeypatch.setattr(tree_whatif, "schedule_costs", lambda t: (own, "from the run.", False))
    costs, note, measured = tree_whatif.tree_costs(trace, None, tr=lambda m: m)
    ref = theory.REFERENCE_TARGET_MS["float32"]
    assert not measured and "reference machine" in note
    assert costs.verify(9) == pytest.approx(own.verify(5) * ref[9] / ref[5])
    curve = latency.LatencyModel(draft_ms={1: 1.0}, verify_ms={1: 10.0, 5: 10.0, 33: 20.0})
    costs, note, measured = tree_whatif.tree_costs(trace, curve, tr=lambda m: m)
    assert measured and "this machine's measured cost curve" in note
    assert costs.verify(33) == pytest.approx(own.verify(5) * 2)


@pytest.mark.parametrize("path", GREEDY[:6], ids=lambda p: p.stem)
def test_check_static_tree_on_a_chain_run(path):
    """A chain run is the static tree [1] * γ: its check passes, with its shape given or not."""
    import dataclasses

    trace = Trace.load(path)
    own = latency.from_trace(trace)
    check = T.check_static_tree(trace, own)
    assert check.ok and check.rounds_match and abs(check.wall_error) < 1e-6
    shaped = dataclasses.replace(trace, config=dataclasses.replace(trace.config, tree_shape=[1] * trace.config.gamma))
    assert T.check_static_tree(shaped, own).ok
    wide = [2] + [1] * (trace.config.gamma - 1)
    wider = dataclasses.replace(trace, config=dataclasses.replace(trace.config, tree_shape=wide))
    assert not T.check_static_tree(wider, own).rounds_match  # a wider tree accepts more than the run did
    dynamic = dataclasses.replace(trace, config=dataclasses.replace(trace.config, tree_nodes=16))
    with pytest.raises(BadInput, match="dynamic tree"):
        T.check_static_tree(dynamic, own)
