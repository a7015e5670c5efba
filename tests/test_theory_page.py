"""The Theory and Cost curve pages through AppTest on the tiny pair, and `specviz cost-curve`
on the tiny pair: the sliders redraw and restate the best γ, the last Live run is marked,
the cost page measures a (small) grid with progress and draws the curve, which the Theory
page then uses; the CLI writes the curve's JSON and reads it back from the cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import specviz.measure.forward_costs as C
import specviz.models.pair
from specviz.analysis import theory
from specviz.cli.commands import main
from specviz.ui import pair as ui_pair

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
THEORY, COSTS = "pages/theory.py", "pages/costs.py"
TIMEOUT = 90
SMALL = [("draft", 1, 1), ("draft", 1, 2), ("target", 1, 1), ("target", 1, 2), ("target", 4, 1)]


@pytest.fixture(autouse=True)
def tiny_only(monkeypatch, specviz_cache):
    """Only the tiny pair may load (in the app and the CLI); measurements go to a fresh cache."""
    for module in (ui_pair, specviz.models.pair):
        real = module.load_pair

        def guarded(name=None, *args, _real=real, **kw):
            assert name == "tiny", f"a test asked for the {name!r} pair"
            return _real(name, *args, **kw)

        monkeypatch.setattr(module, "load_pair", guarded)
    monkeypatch.setenv("SPECVIZ_PAIR", "tiny")


def _page(page: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


def _text(at: AppTest) -> str:
    return " ".join(m.value for m in at.markdown)


def _best_line(at: AppTest) -> str:
    lines = [m.value for m in at.markdown if "draft length" in m.value and "α =" in m.value]
    assert lines, _text(at)[:500]
    return lines[0]


# --- Theory ------------------------------------------------------------------------------------


def test_theory_states_the_best_gamma_and_draws_three_figures():
    at = _page(THEORY)
    best = theory.best_gamma(0.7, 0.2, 32)
    assert f"the best draft length is **γ = {best}**" in _best_line(at)
    assert len(at.get("plotly_chart")) == 3
    captions = " ".join(c.value for c in at.caption)
    assert "No verify-cost curve is measured" in captions or "still loading" in captions


def test_moving_a_slider_changes_the_stated_best_gamma():
    at = _page(THEORY)
    at.slider(key="theory_c").set_value(0.05)
    at.slider(key="theory_alpha").set_value(0.5).run()
    assert not at.exception, at.exception
    before = _best_line(at)
    assert f"**γ = {theory.best_gamma(0.5, 0.05, 32)}**" in before
    at.slider(key="theory_alpha").set_value(0.9).run()
    after = _best_line(at)
    assert f"**γ = {theory.best_gamma(0.9, 0.05, 32)}**" in after
    assert theory.best_gamma(0.5, 0.05, 32) != theory.best_gamma(0.9, 0.05, 32) and after != before


def test_alpha_below_c_is_stated_as_a_loss():
    at = _page(THEORY)
    at.slider(key="theory_c").set_value(0.4)
    at.slider(key="theory_alpha").set_value(0.3).run()
    assert "no draft length gains: α ≤ c" in _best_line(at)


def test_the_last_live_run_is_marked_and_its_values_can_be_taken():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.select_slider(key="speed").set_value("Instant")
    at.slider(key="gamma").set_value(3)
    at.number_input(key="max_new_tokens").set_value(24)
    at.toggle(key="race").set_value(False)
    at.toggle(key="draft_stop").set_value(False)  # a constant γ: the run's point is at γ = 3
    at.run()
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    at.switch_page(THEORY).run()
    assert not at.exception, at.exception
    text = _text(at)
    assert "Your last Live run" in text and "γ = 3" in text, text[:600]
    assert "stopped early where it was unsure" not in text
    names = [t.get("name") for fig in at.get("plotly_chart") for t in json.loads(fig.proto.spec)["data"]]
    assert sum(n.startswith("your run") for n in names if n) >= 3  # a star on each figure
    at.button(key="theory_use_run").click().run()
    assert not at.exception, at.exception
    assert at.slider(key="theory_gamma").value == 3


def test_a_confidence_run_is_marked_at_its_mean_gamma_and_says_so():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.select_slider(key="speed").set_value("Instant")
    at.number_input(key="max_new_tokens").set_value(24)
    at.toggle(key="race").set_value(False)
    at.run()
    at.button(key="run").click().run()
    trace = at.session_state["live"].trace
    assert trace.config.policy == "confidence"
    at.switch_page(THEORY).run()
    assert not at.exception, at.exception
    mean = max(1, round(sum(len(r.proposed) for r in trace.rounds) / len(trace.rounds)))
    text = _text(at)
    assert f"γ = {mean}," in text and "stopped early where it was unsure" in text, text[:800]


def test_in_chinese():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.switch_page(THEORY)
    at.query_params["lang"] = "zh"
    at.run()
    assert not at.exception, at.exception
    assert len(at.get("plotly_chart")) == 3


# --- Cost curve ----------------------------------------------------------------------------------


@pytest.mark.serial  # a measured curve is kept only when no other program ran beside it: needs the machine alone
def test_the_cost_page_measures_a_small_grid_and_draws_the_curve(monkeypatch):
    monkeypatch.setattr(C, "SPARSE_CURVE_GRID", SMALL)
    at = _page(THEORY)  # no curve yet: no dashed line drawn, and the text does not point at one
    assert "the dashed line" not in _text(at) and "drawn as a dashed line once the Cost curve page" in _text(at)
    at = _page(COSTS)
    assert not at.get("plotly_chart")
    assert any("No curve is measured yet" in i.value for i in at.info)
    assert at.button(key="costs_measure").label == "Measure"
    assert any("Measuring takes about" in c.value and "estimated from a short probe run" in c.value
               for c in at.caption), [c.value for c in at.caption]
    assert "measured here" not in _text(at) and "956 ms" not in _text(at)
    assert "On the reference machine of docs/design.md (a 2-core AMD EPYC with AVX512-BF16)" in _text(at)
    at.number_input(key="costs_repeats").set_value(1)
    at.button(key="costs_measure").click().run()
    assert not at.exception, at.exception
    assert len(at.get("plotly_chart")) == 1
    assert any("Measured on" in c.value and "from the last measurement" in c.value for c in at.caption)
    assert "What the curve feeds" in _text(at)
    assert "On this machine (float32, the curve above):" in _text(at)
    # the next visit reads the cache: no measuring, and the Theory page uses the curve
    monkeypatch.setattr(C, "measure", lambda *a, **k: pytest.fail("measured again"))
    at = _page(COSTS)
    assert len(at.get("plotly_chart")) == 1 and at.button(key="costs_measure").label == "Measure again"
    at = _page(THEORY)
    assert "measured verify curve" in _text(at)
    names = [t.get("name") for t in json.loads(at.get("plotly_chart")[1].proto.spec)["data"]]
    assert "with the measured verify curve" in names
    region = json.loads(at.get("plotly_chart")[2].proto.spec)["data"]
    assert any(t.get("line", {}).get("dash") == "dash" for t in region)  # now drawn, so the text may name it
    assert "from this machine's measured verify curve, the dashed line" in _text(at)


# --- the CLI --------------------------------------------------------------------------------------


@pytest.mark.serial  # a measured curve is kept only when no other program ran beside it: needs the machine alone
def test_cli_cost_curve_writes_the_json(tmp_path, capsys):
    out = tmp_path / "curve.json"
    args = ["cost-curve", "--pair", "tiny", "--context-length", "64", "--tokens", "1,2,4", "--batches", "1,4",
            "--repeats", "1", "--json", str(out)]
    assert main(args) == 0
    data = json.loads(out.read_text())
    assert {"device", "dtype", "context_length", "rows"} <= set(data)
    assert data["context_length"] == 64 and data["cached"] is False
    points = {(r["model"], r["batch"], r["tokens"]) for r in data["rows"]}
    assert points == {(m, b, k) for m in ("draft", "target") for b in (1, 4) for k in (1, 2, 4)}
    assert all({"model", "batch", "tokens", "ms"} <= set(r) and r["ms"] > 0 for r in data["rows"])
    printed = capsys.readouterr().out
    assert "target B=4" in printed and "c = draft pass / target pass" in printed
    # again: from the cache
    assert main(args) == 0
    assert json.loads(out.read_text())["cached"] is True


def test_cli_cost_curve_refuses_bad_input(tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["cost-curve", "--pair", "tiny", "--tokens", "4-1", "--json", str(tmp_path / "x.json")])
    assert exc.value.code == 2
    # 300 tokens of context + 32 do not fit the tiny pair's 256
    assert main(["cost-curve", "--pair", "tiny", "--repeats", "1", "--json", str(tmp_path / "x.json")]) == 2
    assert main(["cost-curve", "--pair", "tiny", "--json", str(tmp_path / "no" / "x.json")]) == 2
