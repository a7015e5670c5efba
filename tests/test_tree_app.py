"""The Live page's draft shape: chain, or a token tree with its node budget and width (AppTest, tiny pair)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.usefixtures("app_tiny_only")
APP = str(Path(__file__).resolve().parent.parent / "app.py")
TIMEOUT = 90


@pytest.fixture
def app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    at.select_slider(key="speed").set_value("Instant")
    at.number_input(key="max_new_tokens").set_value(32)
    return at.run()


def test_a_chain_by_default_with_no_tree_sliders(app):
    assert app.segmented_control(key="draft_shape").value == "chain"
    assert not [s for s in app.slider if s.key in ("tree_nodes", "tree_width")]
    assert app.slider(key="gamma").label == "γ · draft length"


def test_a_tree_run_from_the_live_page(app):
    app.segmented_control(key="draft_shape").set_value("tree").run()
    assert app.slider(key="gamma").label == "γ · tree depth"
    app.slider(key="tree_nodes").set_value(10)
    app.slider(key="tree_width").set_value(2)
    app.slider(key="gamma").set_value(5)
    app.button(key="run").click().run()
    assert not app.exception, app.exception
    state = app.session_state["live"]
    cfg = state.trace.config
    assert (cfg.tree_nodes, cfg.tree_width, cfg.tree_depth) == (10, 2, 5)
    drafted = [r for r in state.trace.rounds if r.gamma]
    assert drafted and all(0 < len(r.tree) <= 10 for r in drafted)
    assert state.comparison is not None and state.comparison.identical  # fp32 greedy: the target's own output
    row = app.session_state["history"][-1]
    assert row["tree"] == "10×2" and row["gamma"] == 5


def test_a_tree_with_a_cut_draft_head_is_refused_under_the_draft(app):
    app.segmented_control(key="draft_shape").set_value("tree").run()
    heads = app.selectbox(key="draft_vocab").options
    app.selectbox(key="draft_vocab").set_value(heads[1]).run()
    assert not app.exception
    assert any("full head" in e.value for e in app.error), [e.value for e in app.error]
    app.button(key="run").click().run()
    assert app.session_state["live"].trace is None, "a refused setting starts no run"


def test_the_gamma_sliders_range_follows_the_shape(app):
    """A chain drafts up to 32, a tree is at most 16 deep: a chain's γ 20 kept when the shape becomes
    a tree is brought down to 16, and the page says so; a run then starts with no refusal."""
    assert app.slider(key="gamma").max == 32
    app.slider(key="gamma").set_value(20).run()
    app.segmented_control(key="draft_shape").set_value("tree").run()
    assert not app.exception, app.exception
    assert app.slider(key="gamma").max == 16 and app.slider(key="gamma").value == 16
    assert any("γ = 20 is deeper than a tree may be: set to 16" in c.value for c in app.caption), \
        [c.value for c in app.caption]
    assert not app.error, [e.value for e in app.error]
    app.segmented_control(key="draft_shape").set_value("chain").run()
    assert app.slider(key="gamma").max == 32 and app.slider(key="gamma").value == 16


def test_a_share_link_carries_the_tree(monkeypatch):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update({"draft_shape": "tree", "tree_nodes": "12", "tree_width": "4"})
    at.run()
    assert not at.exception, at.exception
    assert at.segmented_control(key="draft_shape").value == "tree"
    assert (at.slider(key="tree_nodes").value, at.slider(key="tree_width").value) == (12, 4)
    at.query_params.clear()
    bad = AppTest.from_file(APP, default_timeout=TIMEOUT)
    bad.query_params.update({"draft_shape": "forest", "tree_nodes": "99"})
    bad.run()
    assert not bad.exception
    text = " ".join(w.value for w in bad.warning) + " ".join(m.value for m in bad.markdown)
    assert "forest" in text and "99" in text


def test_a_tree_run_draws_its_last_rounds_tree(app):
    app.segmented_control(key="draft_shape").set_value("tree").run()
    app.button(key="step").click().run()
    assert not app.exception, app.exception
    rnd = app.session_state["live"].trace.rounds[-1]
    assert rnd.tree
    titles = [c.proto.spec for c in app.get("plotly_chart")]
    assert any(n.text in spec for spec in titles for n in rnd.tree if n.text.strip()), "the tree figure is drawn"


def test_a_tree_runs_acceptance_and_theory_lines_say_the_chain_formula_is_a_chains(tiny_pair):
    """The closed form prices chains: for a tree the lines name the chain it is set against,
    and the nodes drafted beside the strip's line, and never claim the tree's own speedup."""
    from specviz import RunConfig, speculative
    from specviz.ui.view import acceptance_line, theory_line

    tree = speculative(tiny_pair, RunConfig(prompt="def f(x):", max_new_tokens=24, gamma=3, tree_nodes=8,
                                            tree_width=2)).run()
    nodes = sum(len(r.tree) for r in tree.rounds)
    line = acceptance_line(tree)
    assert f"{nodes} nodes drafted in all" in line and "A chain of γ = 3" in line
    assert theory_line(tree).startswith("Theory prices chains: this tree's")
    chain = speculative(tiny_pair, RunConfig(prompt="def f(x):", max_new_tokens=24, gamma=3)).run()
    assert "nodes" not in acceptance_line(chain)
    assert theory_line(chain).startswith("Theory: a per-token α")
