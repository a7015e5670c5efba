"""The Live page sets a tree run against the best chain run of the history, and offers one
click to run that chain when there is none (AppTest, tiny pair, English and Chinese)."""

from __future__ import annotations

import pytest
from helpers import drop_app_engines
from streamlit.testing.v1 import AppTest

from specviz.record.i18n import gettext_for, template_pattern
from tests.test_busy import _mark_busy, open_live


@pytest.fixture(scope="module", autouse=True)
def runs_unmarked_by_the_machine():
    """These runs are marked only by ``_mark_busy``, never by the machine's load (this module runs
    beside others): the threshold is the engine worker's, read when it starts, so the app's worker
    starts afresh with it, and again without it after the module."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECVIZ_BUSY_CORES", "inf")
        drop_app_engines()
        yield
    drop_app_engines()


@pytest.fixture
def live_app(app_tiny_only) -> AppTest:
    return open_live()


def tps_delta(at: AppTest, label: str = "Tokens / s") -> str | None:
    return next(m for m in at.metric if m.label == label).delta or None


def said_under(at: AppTest, line: str) -> bool:
    return any(c.value == line for c in at.caption)


def run_tree(at: AppTest, depth: int = 5) -> AppTest:
    at.segmented_control(key="draft_shape").set_value("tree").run()
    at.slider(key="tree_nodes").set_value(10)
    at.slider(key="tree_width").set_value(2)
    at.slider(key="gamma").set_value(depth)
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    assert at.session_state["live"].trace.config.is_tree
    return at


def vs_chain_column(at: AppTest) -> dict[str, str]:
    table = at.dataframe[0].value
    return dict(zip(table["run"], table["vs chain"], strict=True))


def test_a_tree_compares_with_the_best_chain_not_the_latest(live_app):
    at = live_app
    at.slider(key="gamma").set_value(2)
    at.button(key="run").click().run()  # 1: a chain at γ 2
    at.slider(key="gamma").set_value(6)
    at.button(key="run").click().run()  # 2: a chain at γ 6, the latest
    assert tps_delta(at).endswith("vs #1"), tps_delta(at)  # a chain: as before
    assert said_under(at, "vs #1: the same prompt and settings at γ = 2.")
    history = at.session_state["history"]
    # make #1, the earlier, the faster: the best chain, and faster than any run of the tiny pair (×3 of #2 was
    # not: on a loaded machine #2 ran slow and the tree after it 2.4× faster than that)
    history[0]["tok/s"] = 1e5
    history[0]["speedup"] = 1e3
    run_tree(at)  # 3: the tree
    assert tps_delta(at).endswith("vs #1"), tps_delta(at)
    assert tps_delta(at).startswith("-")  # slower than #1's (raised) speed
    assert said_under(at, "vs #1: the best chain, γ = 2: of this prompt and settings, the chain run with the "
                          "highest speedup over the target alone, raced on a quiet machine.")
    assert any("Against the best chain: **×" in m.value and "#1 at γ = 2" in m.value for m in at.markdown)
    assert not [b for b in at.button if b.key == "run_chain"], "a chain to compare with: nothing offered"
    cells = vs_chain_column(at)
    assert cells["1"] == "★ best" and cells["2"] == "" and cells["3"].endswith(" #1") and cells["3"].startswith("×")


def test_a_tree_with_no_chain_offers_one_click_to_run_it(live_app):
    at = run_tree(live_app, depth=5)  # 1: the tree, alone in the history
    assert tps_delta(at) is None
    assert any(c.value.startswith("No chain run of this prompt and settings") for c in at.caption)
    offer = at.button(key="run_chain")
    assert offer.label == "Run the chain at γ = 5" and not offer.disabled
    assert vs_chain_column(at) == {"1": "no chain"}
    offer.click().run()  # 2: the chain as deep as the tree, same prompt and settings
    assert not at.exception, at.exception
    cfg = at.session_state["live"].trace.config
    assert not cfg.is_tree and cfg.gamma == 5
    assert at.segmented_control(key="draft_shape").value == "chain" and at.slider(key="gamma").value == 5
    assert [r["tree"] for r in at.session_state["history"]] == ["10×2", ""]
    assert tps_delta(at).endswith("vs #1"), tps_delta(at)
    assert said_under(at, "vs #1: a token tree, γ = 5 · 10×2.")
    assert not [b for b in at.button if b.key == "run_chain"]
    cells = vs_chain_column(at)
    assert cells["2"] == "★ best" and cells["1"].startswith("×") and cells["1"].endswith(" #2")
    run_tree(at)  # 3: the tree again: now set against #2
    assert tps_delta(at).endswith("vs #2"), tps_delta(at)
    assert any(c.value.startswith("vs #2: the best chain, γ = 5:") for c in at.caption)


def test_the_offer_is_off_once_the_settings_change_and_absent_for_a_busy_tree(live_app):
    at = run_tree(live_app)
    at.text_area(key="prompt").set_value("Name three rivers.").run()
    assert at.button(key="run_chain").disabled
    at.text_area(key="prompt").set_value(at.session_state["live"].trace.config.prompt).run()
    assert not at.button(key="run_chain").disabled
    _mark_busy(at)
    at.run()
    assert not [b for b in at.button if b.key == "run_chain"], "a tree timed on a busy machine: no offer"
    assert vs_chain_column(at) == {"1": "–"}


def test_the_comparison_in_chinese(app_tiny_only, monkeypatch):
    zh = gettext_for("zh_CN")

    def said(template: str, text: str | None, **values) -> bool:
        assert zh(template) != template, f"untranslated: {template}"
        m = template_pattern(zh(template)).match(text or "")
        return bool(m) and all(m.group(k) == str(v) for k, v in values.items())

    at = open_live(lang="zh")
    run_tree(at)
    offer = at.button(key="run_chain")
    assert said("Run the chain at γ = {gamma}", offer.label, gamma=5)
    assert any(c.value == zh("No chain run of this prompt and settings timed on a quiet machine yet, so nothing "
                             "to set this tree against.") for c in at.caption)
    offer.click().run()
    assert not at.exception, at.exception
    tps = zh("Tokens / s")
    assert said("{delta} vs #{run}", tps_delta(at, tps), run=1), tps_delta(at, tps)
    assert any(said("vs #{run}: a token tree, γ = {gamma} · {tree}.", c.value, run=1, gamma=5) for c in at.caption)
    run_tree(at)
    assert not at.exception, at.exception
    assert said("{delta} vs #{run}", tps_delta(at, tps), run=2)
    assert any(said("vs #{run}: the best chain, γ = {gamma}: of this prompt and settings, the chain run with the "
                    "highest speedup over the target alone, raced on a quiet machine.", c.value, run=2, gamma=5)
               for c in at.caption)
    assert vs_chain_column(at)["2"] == zh("★ best") != "★ best"
