"""The Parallel page through AppTest on the tiny pair: the user's last greedy Live run
under serial, PEARL and SSD, redrawn by its sliders with no model re-run; in English
and in Chinese; sampling and rank-less runs are explained, not drawn."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest


ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
PAGE = "pages/parallel.py"
TIMEOUT = 90


@pytest.fixture(autouse=True)
def tiny_only(app_tiny_only):
    """Every test here runs the app on the tiny pair (tests/conftest.py)."""


def _live_run(temperature: float = 0.0) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.select_slider(key="speed").set_value("Instant")
    at.slider(key="gamma").set_value(3)
    at.number_input(key="max_new_tokens").set_value(32)
    if temperature:
        at.slider(key="temperature").set_value(temperature)
    at.run()
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    assert at.session_state["live"].sd_done
    return at


def _parallel(at: AppTest) -> AppTest:
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    return at


def test_the_last_live_run_under_three_schedules():
    at = _parallel(_live_run())
    assert "This session's last Live run" in at.selectbox(key="parallel_source").value
    figs = at.get("plotly_chart")
    assert len(figs) == 1
    text = " ".join(m.value for m in at.markdown)
    assert "PEARL" in text and "4.43×" in text and "Llama-3 70B" in text
    assert "agrees with the real run" in text, text[:400]
    labels = [m.label for m in at.metric]
    assert labels.count("tokens / s") == 3 and "hit rate" in labels


def test_sliders_redraw_without_running_a_model(monkeypatch):
    at = _parallel(_live_run())
    before = [m.value for m in at.metric]
    import specviz.engine

    def no_model(*a, **k):
        raise AssertionError("the Parallel page ran a model")

    monkeypatch.setattr(specviz.engine.Decoding, "__next__", no_model)
    at.slider(key="parallel_gamma").set_value(6).run()
    at.select_slider(key="parallel_fanout").set_value(4).run()
    assert not at.exception, at.exception
    assert [m.value for m in at.metric] != before


def test_in_chinese():
    at = _live_run()
    at.switch_page(PAGE)
    at.query_params["lang"] = "zh"
    at.run()
    assert not at.exception, at.exception
    text = " ".join(m.value for m in at.markdown)
    assert "突破串行等待" in text and "每种调度改变了什么" in text


def test_a_sampling_run_is_explained_not_drawn():
    at = _parallel(_live_run(temperature=0.8))
    assert not at.get("plotly_chart")
    assert any("greedy runs only" in w.value for w in at.warning)


def test_a_recorded_trace_replays_with_no_model_run():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="parallel_source").value.startswith("Recorded:")
    assert len(at.get("plotly_chart")) == 1
    assert not at.warning


def test_a_trace_without_ranks_is_explained(tmp_path, monkeypatch):
    """A trace recorded before ranks existed (or with them stripped) says why it cannot replay."""
    import specviz.ui.chrome as chrome
    from specviz import Trace

    # a greedy speculative run, which the page would replay were its ranks kept
    trace = Trace.load(ROOT / "assets" / "traces" / "code-gamma4-greedy.json")
    assert trace.config.mode == "speculative" and trace.config.temperature == 0 and trace.draft_ranks
    trace.draft_ranks, trace.draft_top = [], []
    trace.save(tmp_path / "old.json")
    monkeypatch.setattr(chrome, "TRACES_DIR", tmp_path)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    assert not at.get("plotly_chart")
    assert any("draft ranks" in w.value for w in at.warning)


@pytest.mark.parametrize("page", [PAGE, "pages/inspect.py"])
def test_recorded_target_alone_runs_are_not_offered(tmp_path, monkeypatch, page):
    """A recorded target-alone run has nothing drafted: the Parallel and Inspect pages leave it
    out of their choices (the Replay page keeps it, to race against and to replay). The run's
    config says what it is, not its file name."""
    import shutil

    import specviz.ui.chrome as chrome

    traces = ROOT / "assets" / "traces"
    shutil.copy(traces / "code-gamma4-greedy.json", tmp_path / "code-gamma4-greedy.json")
    shutil.copy(traces / "code-autoregressive-greedy.json", tmp_path / "baseline.json")
    monkeypatch.setattr(chrome, "TRACES_DIR", tmp_path)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.switch_page(page).run()
    assert not at.exception, at.exception
    options = at.selectbox(key="parallel_source" if page == PAGE else "inspect_source").options
    assert "Recorded: code-gamma4-greedy" in options
    assert "Recorded: baseline" not in options
    at.switch_page("pages/replay.py").run()
    assert "Recorded: baseline" in at.selectbox(key="replay_source").options


def test_pearl_runs_for_real_beside_its_simulation():
    """The page runs PEARL on the loaded pair (draft and target in two threads) and puts the
    measured wall time beside the simulated one; the tokens are the run's own."""
    at = _parallel(_live_run())
    assert len(at.get("plotly_chart")) == 1
    at.button(key="parallel_real_run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    shown = {m.label: m.value for m in at.metric}
    assert shown["same tokens as the run"] == "yes"
    ratio = float(shown["measured ÷ simulated"])
    assert 0.05 < ratio < 20, ratio  # both are real times of the same work; the tiny pair is noisy
    assert len(at.get("plotly_chart")) == 2  # the measured run's own timeline


def test_pearl_for_real_needs_the_runs_pair():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.switch_page(PAGE).run()
    at.selectbox(key="parallel_source").set_value("Recorded: code-gamma4-greedy").run()
    assert not at.exception, at.exception
    assert not [b for b in at.button if b.key == "parallel_real_run"]
    assert any("Load the pair this run was recorded with" in c.value for c in at.caption)


@pytest.mark.parametrize("scale", [1.0, 1.5])
def test_a_gap_in_the_costs_is_explained(tmp_path, monkeypatch, scale):
    """A recorded run replayed with this machine's cached costs: the run's own passes (scale 1)
    agree; the same passes half as slow again (a machine that drifted) do not, and the page
    says the gap is in the costs, since every round is the same."""
    import json
    import shutil

    import specviz.ui.chrome as chrome
    from specviz import Trace, costs, parallel

    traces, cache = tmp_path / "traces", tmp_path / "cache"
    traces.mkdir()
    shutil.copy(ROOT / "assets" / "traces" / "code-gamma4-greedy.json", traces / "run.json")
    trace = Trace.load(traces / "run.json")
    own, cfg, ctx = costs.from_trace(trace), trace.config, parallel.replay_context(trace)
    cost = {"target": lambda b, k: own.verify(k), "draft": lambda b, k: own.draft(b) if k == 1 else own.draft_read(k)}
    rows = [{"model": m, "batch": b, "tokens": k, "ms": scale * cost[m](b, k), "min_ms": 0, "max_ms": 0}
            for m, b, k in costs.LATENCY_GRID]
    name = costs.cache_file_name(cfg.draft, cfg.target, cfg.device, cfg.dtype, ctx, "latency")
    (cache / "costs").mkdir(parents=True)
    (cache / "costs" / name).write_text(json.dumps({
        "format": costs.COSTS_FORMAT, "draft": cfg.draft, "target": cfg.target, "device": cfg.device,
        "dtype": cfg.dtype, "context_length": ctx, "measured_at": "2026-12-01T12:00:00+00:00", "rows": rows}))
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(cache))
    monkeypatch.setattr(chrome, "TRACES_DIR", traces)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    text = " ".join(m.value for m in at.markdown)
    captions = " ".join(c.value for c in at.caption)
    assert "measured on this machine on 2026-12-01T12:00:00" in captions
    assert "every round the same" in text
    if scale == 1.0:
        assert "agrees with the real run" in text and "the gap is in the costs" not in captions
    else:
        assert "does not agree" in text and "the gap is in the costs" in captions
