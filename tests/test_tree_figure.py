"""The token-tree figures (specviz.figures.tree): one tree round, built by hand here (greedy and
sampling), its marks at every step of step mode; and the what-if figure, chain against tree."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import pytest

from specviz.figures import tree as FT
from specviz.record.i18n import N_
from specviz.record.run_trace import Round, Trace, TreeNode
from specviz.replay import latency
from specviz.replay import tree_what_if as T

TRACES = Path(__file__).resolve().parent.parent / "assets" / "traces"


def greedy_round() -> Round:
    """Root "def"; the draft's tree of 11 nodes over 3 passes; the target accepts " merge" then "(",
    and writes "left" where the draft guessed "a" and "xs": a fix."""
    N = TreeNode
    tree = [N(11, -1, 0.61, 0, True, " merge", 1), N(12, -1, 0.22, 0, False, " sort", 1),
            N(21, 0, 0.70, 0, True, "(", 2), N(22, 0, 0.15, 0, False, "_sorted", 2),
            N(23, 1, 0.5, 0, False, "ed", 2), N(24, 1, 0.3, 0, False, "(", 2),
            N(31, 2, 0.40, 0, False, "a", 3), N(32, 2, 0.35, 0, False, "xs", 3), N(33, 3, 0.9, 0, False, "(", 3),
            N(34, 4, 0.6, 0, False, "(", 3), N(35, 5, 0.8, 0, False, "lst", 3)]
    return Round(index=2, gamma=3, proposed=[11, 21, 31], proposed_text=[" merge", "(", "a"], accepted=2,
                 rejected=[31], correction=41, correction_text="left", emitted=[11, 21, 41],
                 emitted_text=" merge(left", tree=tree)


def sampling_round() -> Round:
    """A Chinese sampling round: both depth-2 children on the accepted path's side accepted to the
    end, then a bonus; q and p recorded for every node."""
    N = TreeNode
    tree = [N(1, -1, 0.8, 0.9, True, "只", 1), N(2, -1, 0.1, 0.05, False, "不<b>", 1),
            N(3, 0, 0.7, 0.8, True, "是", 2), N(4, 1, 0.6, 0.5, False, "过", 2)]
    return Round(index=0, gamma=2, proposed=[1, 3], proposed_text=["只", "是"], accepted=2, correction=9,
                 correction_text="一个", bonus=True, emitted=[1, 3, 9], emitted_text="只是一个", tree=tree)


def annotations(fig: go.Figure, kind: str) -> list[str]:
    return [a.text for a in fig.layout.annotations if a.name == f"node-{kind}"]


def hover(fig: go.Figure) -> list[str]:
    return list(next(t for t in fig.data if t.name == "nodes").hovertext)


def test_greedy_round_marks_the_accepted_path_and_strikes_the_rest():
    rnd = greedy_round()
    marks = FT.node_marks(rnd)
    assert [m.kind for m in marks] == ["accepted", "rejected", "accepted"] + ["rejected"] * 8
    assert [m.x for m in marks] == [1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3]
    fig = FT.tree_figure(rnd, root_text="def")
    assert annotations(fig, "accepted") == ["<b><u>·merge</u></b>", "<b><u>(</u></b>"]
    rejected = annotations(fig, "rejected")
    assert len(rejected) == 9 and all(t.startswith("<s>") and t.endswith("</s>") for t in rejected)
    fix = annotations(fig, "fix")
    assert len(fix) == 1 and "left" in fix[0] and "fix" in fix[0]
    assert not annotations(fig, "bonus")
    # the fix is the last accepted node's child: one column right of "(", on its own row
    box = next(a for a in fig.layout.annotations if a.name == "node-fix")
    assert box.x == 3 and box.bordercolor == FT.TARGET
    rows = {m.y for m in marks if m.x == 3}
    assert box.y not in rows
    # the accepted path: thick green edges root -> merge -> "(", and the dashed edge to the fix
    edges = {t.name: t for t in fig.data if t.name.startswith("edges-")}
    assert list(edges["edges-accepted"].x) == [0, 1, None, 1, 2, None]
    assert edges["edges-accepted"].line.color == FT.ACCEPTED
    assert edges["edges-target"].line.dash == "dash"
    # q on hover, no p in a greedy round that recorded none
    tips = hover(fig)
    assert any("·merge" in t and "q=0.610" in t and "accepted" in t for t in tips)
    assert not any("p=" in t for t in tips)


def test_sampling_round_shows_q_and_p_and_boxes_the_bonus():
    rnd = sampling_round()
    fig = FT.tree_figure(rnd, tr=N_)
    assert [m.kind for m in FT.node_marks(rnd)] == ["accepted", "rejected", "accepted", "rejected"]
    bonus = annotations(fig, "bonus")
    assert len(bonus) == 1 and "一个" in bonus[0] and "bonus" in bonus[0]
    box = next(a for a in fig.layout.annotations if a.name == "node-bonus")
    assert box.x == 3  # past the deepest node: a new column
    assert fig.layout.xaxis.range[1] == pytest.approx(3.5)
    tips = hover(fig)
    assert any("只" in t and "q=0.800" in t and "p=0.900" in t for t in tips)
    # model text is escaped: a token "不<b>" shows as written, never as markup
    assert any("不&lt;b&gt;" in t for t in annotations(fig, "rejected"))


def test_upto_step_grows_the_tree_then_lights_the_verify_then_the_verdict():
    rnd = greedy_round()
    assert FT.tree_steps(rnd) == 5  # 3 draft passes, the verify, the verdict
    counts = []
    for step in (1, 2, 3):
        fig = FT.tree_figure(rnd, step)
        assert FT.tree_phase(rnd, step) == ("draft", step)
        marks = FT.node_marks(rnd, step)
        assert all((m.kind == "hidden") == (rnd.tree[m.index].step > step) for m in marks)
        assert not annotations(fig, "accepted") and not annotations(fig, "rejected") and not annotations(fig, "fix")
        counts.append(len(annotations(fig, "pending")))
        assert not fig.layout.shapes
    assert counts == [2, 6, 11]
    verify = FT.tree_figure(rnd, 4)
    assert FT.tree_phase(rnd, 4) == ("verify", 3)
    assert len(annotations(verify, "pending")) == 11 and len(verify.layout.shapes) == 1
    assert any("checks all 11 nodes" in a.text for a in verify.layout.annotations)
    done = FT.tree_figure(rnd, 5)
    assert FT.tree_phase(rnd, 5) == FT.tree_phase(rnd, None) == ("done", 3)
    assert len(annotations(done, "accepted")) == 2 and len(annotations(done, "fix")) == 1
    # nothing moves as the tree grows
    assert [(m.x, m.y) for m in FT.node_marks(rnd, 1) if m.kind != "hidden"] == \
           [(m.x, m.y) for m in FT.node_marks(rnd)][:2]


def test_captions():
    rnd = greedy_round()
    assert FT.tree_caption(rnd, 2) == "Draft pass 2: 6 nodes so far, each with its q from the draft."
    assert "all 11 nodes in one pass" in FT.tree_caption(rnd, 4)
    assert FT.tree_caption(rnd) == "2 of 11 nodes accepted along one path; the other branches are thrown away."


def test_cut_nodes_and_a_round_with_nothing_accepted():
    rnd = greedy_round()
    rnd.emitted = [11]  # the run stopped after " merge": "(" was accepted past the stop
    marks = FT.node_marks(rnd)
    assert marks[0].kind == "accepted" and marks[2].kind == "cut"
    assert not annotations(FT.tree_figure(rnd), "fix")  # the target's token was not emitted either
    none = greedy_round()
    for node in none.tree:
        node.accepted = False
    none.accepted, none.emitted = 0, [41]
    fig = FT.tree_figure(none)
    box = next(a for a in fig.layout.annotations if a.name == "node-fix")
    assert box.x == 1  # the root's child
    with pytest.raises(ValueError):
        FT.tree_figure(Round(index=0, gamma=2))


def test_chinese_labels():
    from specviz.record.i18n import gettext_for

    zh = gettext_for("zh_CN")
    fig = FT.tree_figure(sampling_round(), tr=zh)
    assert "奖励" in annotations(fig, "bonus")[0]
    assert fig.layout.xaxis.ticktext[0] == zh("root")


def test_the_height_follows_the_leaves():
    assert FT.tree_figure(sampling_round()).layout.height == FT.MIN_HEIGHT
    wide = Round(index=0, gamma=1, tree=[TreeNode(i, -1, 0.1, text=str(i)) for i in range(8)] +
                 [TreeNode(100 + i, i // 2 * 0, 0.1, text="x", step=2) for i in range(16)])
    assert FT.tree_figure(wide).layout.height == 70 + FT.ROW_PX * 23


def test_what_if_figure():
    trace = Trace.load(TRACES / "prose-gamma4-greedy.json")
    cmp = T.compare(trace, (4, 2, 1, 1), latency.from_trace(trace))
    fig = FT.tree_what_if_figure(cmp.chain, cmp.tree)
    chain, tree = fig.data
    assert list(chain.y) == cmp.chain.accepted and list(tree.y) == cmp.tree.accepted
    assert list(chain.x) == list(range(1, len(cmp.chain.rounds) + 1))
    assert chain.name.startswith("chain γ=4 · ") and "tok/s" in chain.name
    assert tree.name.startswith("tree 4,2,1,1 (28 nodes) · ")
    assert chain.marker.pattern.shape == "/"  # not colour alone
    assert f"×{cmp.speedup:.2f}" in fig.layout.annotations[0].text


def test_root_text_is_the_last_token_the_round_before_emitted():
    rnd = greedy_round()
    assert FT.root_text(None) == ""
    assert FT.root_text(rnd) == "left"  # its fix
    bonus = sampling_round()
    assert FT.root_text(bonus) == "一个"
    cut = greedy_round()
    cut.emitted = [11, 21]  # stopped before its fix: its last accepted token
    assert FT.root_text(cut) == "("
