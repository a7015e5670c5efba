"""The Parallel page through AppTest on the tiny pair: the user's last greedy Live run
under serial, PEARL and SSD, redrawn by its sliders with no model re-run; in English
and in Chinese; sampling and rank-less runs are explained, not drawn."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.usefixtures("app_tiny_only")  # every test runs the app on the tiny pair
ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
PAGE = "pages/parallel.py"
TIMEOUT = 90


def _live_run(temperature: float = 0.0, race: bool = True, int8: bool = False, gamma: int = 3,
              stop: bool = False) -> AppTest:
    """A Live run on the tiny pair; a constant γ unless ``stop`` (the confidence policy, the page's default)."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.select_slider(key="speed").set_value("Instant")
    at.slider(key="gamma").set_value(gamma)
    at.toggle(key="draft_stop").set_value(stop)
    at.number_input(key="max_new_tokens").set_value(32)
    if temperature:
        at.slider(key="temperature").set_value(temperature)
    at.toggle(key="race").set_value(race)
    at.toggle(key="draft_int8").set_value(int8)
    at.run()
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    assert at.session_state["live"].sd_done
    return at


def _measuring(at: AppTest) -> bool:
    """Whether the page says it is measuring (its timer icon: in any language)."""
    return any(i.icon == ":material/timer:" for i in at.info)


def _settled(at: AppTest, timeout_s: float = 60.0) -> AppTest:
    """Rerun until the page's background measurement has finished (in the browser a fragment
    polls for it and reruns the page; AppTest runs no timers)."""
    deadline = time.monotonic() + timeout_s
    while _measuring(at):
        assert time.monotonic() < deadline, "the branch costs were still being measured"
        time.sleep(0.2)
        at.run()
        assert not at.exception, at.exception
    return at


def _parallel(at: AppTest) -> AppTest:
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    return _settled(at)


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


def _figure(at: AppTest) -> dict:
    return json.loads(at.get("plotly_chart")[0].proto.spec)


def _titles(at: AppTest) -> list[str]:
    return [a["text"] for a in _figure(at)["layout"]["annotations"]]


def test_ssd_shows_no_number_until_its_branch_costs_are_measured():
    """The run timed no batched draft pass: SSD shows nothing (no lane, no metric) while the
    page measures the few it needs, which waits its turn for the engine like any live round.
    (γ = 5: passes no other test here measures; what was measured stays known in the process.)"""
    from helpers import app_engine

    at = _live_run(gamma=5)
    with app_engine():  # a live round holds the engine
        at.switch_page(PAGE).run()
        assert not at.exception, at.exception
        assert _measuring(at)
        info = " ".join(i.value for i in at.info)
        assert "the draft for B sequences at once (B = " in info
        assert [m.label for m in at.metric].count("tokens / s") == 2
        assert "hit rate" not in [m.label for m in at.metric]
        assert not [t for t in _titles(at) if t.startswith("SSD")]
        assert any(c.value == "Measuring the branch costs…" for c in at.caption)
    _settled(at)
    assert [m.label for m in at.metric].count("tokens / s") == 3
    assert [t for t in _titles(at) if t.startswith("SSD")]
    captions = " ".join(c.value for c in at.caption)
    assert "Measured on this machine just now" in captions and "B = " in captions
    assert "upper bound" not in captions


def test_vs_target_alone_says_which_run_it_divides_by():
    """With the race: its target-alone run, whose speedup the caption quotes. Without: an
    estimate from the one-token pass, measured in the background (the run verified none)."""
    at = _parallel(_live_run())
    live = at.session_state["live"]
    captions = " ".join(c.value for c in at.caption)
    assert "raced right after it on the Live page" in captions
    assert f"That race measured ×{live.comparison.speedup:.2f}" in captions
    alone_tps = live.ar.summary["tokens_per_second"]
    shown = [m.value for m in at.metric if m.label == "vs target alone"]
    serial = [m.value for m in at.metric if m.label == "tokens / s"][0]
    assert shown[0] == f"×{float(serial) / alone_tps:.2f}" or abs(
        float(shown[0][1:]) - float(serial) / alone_tps) < 0.06  # tokens/s shown to 0.1
    at = _parallel(_live_run(race=False))
    captions = " ".join(c.value for c in at.caption)
    assert "“vs target alone” is an estimate" in captions and "one-token passes" in captions
    assert all(m.value != "…" for m in at.metric if m.label == "vs target alone")


def test_an_int8_run_says_what_pearl_for_real_needs_in_the_uis_words():
    at = _parallel(_live_run(int8=True))
    assert not [b for b in at.button if b.key == "parallel_real_run"]
    captions = " ".join(c.value for c in at.caption)
    assert "int8 draft" in captions and "Live sidebar" in captions and "quantization" not in captions
    at.button(key="parallel_plain_draft").click().run()
    assert at.session_state["draft_int8"] is False
    at.switch_page("pages/live.py").run()
    assert at.toggle(key="draft_int8").value is False


def test_sliders_redraw_without_running_a_model(monkeypatch):
    at = _parallel(_live_run())
    before = [m.value for m in at.metric]
    import specviz.engine.decode

    def no_model(*a, **k):
        raise AssertionError("the Parallel page ran a model")

    monkeypatch.setattr(specviz.engine.decode.Decoding, "__next__", no_model)
    at.slider(key="parallel_gamma").set_value(6).run()
    _settled(at)  # the passes γ = 6 needs are timed (forward passes over a fixed context), no run
    at.select_slider(key="parallel_fanout").set_value(4).run()
    _settled(at)
    assert not at.exception, at.exception
    assert [m.value for m in at.metric] != before
    assert [m.label for m in at.metric].count("tokens / s") == 3


def test_in_chinese():
    at = _live_run()
    at.switch_page(PAGE)
    at.query_params["lang"] = "zh"
    at.run()
    assert not at.exception, at.exception
    _settled(at)
    text = " ".join(m.value for m in at.markdown)
    assert "突破串行等待" in text and "每种调度改变了什么" in text
    titles = _titles(at)
    assert len([t for t in titles if "词元/秒" in t]) == 3 and not [t for t in titles if "tok/s" in t]


def test_a_sampling_run_is_explained_not_drawn():
    at = _parallel(_live_run(temperature=0.8))
    assert not at.get("plotly_chart")
    assert any("greedy runs only" in w.value for w in at.warning)


def test_a_recorded_trace_replays_with_no_model_run():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="parallel_source").value == "Recorded: code-gamma4-greedy"  # the featured run
    assert len(at.get("plotly_chart")) == 1
    assert not at.warning
    # its pair is not the one loaded: what the run did not time cannot be measured, so no SSD
    # number; PEARL's one-token verify comes from the recorded target-alone run of that prompt
    info = " ".join(i.value for i in at.info)
    assert "Load the pair it was recorded with" in info and "the draft for B sequences at once" in info
    assert [m.label for m in at.metric].count("tokens / s") == 2
    assert [t for t in _titles(at) if t.startswith("PEARL")] and not [t for t in _titles(at) if t.startswith("SSD")]
    assert "the recorded target-alone run of the same prompt and settings" in " ".join(c.value for c in at.caption)


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


def test_a_run_too_short_to_time_a_replay_is_explained(tmp_path, monkeypatch):
    """Two tokens: the prefills give the first, a verify alone the second; no draft pass to scale by."""
    import specviz.ui.chrome as chrome
    from specviz import RunConfig, load_pair, speculative

    speculative(load_pair("tiny", dtype="float32"), RunConfig(prompt="Hello", max_new_tokens=2)).run().save(
        tmp_path / "short.json")
    monkeypatch.setattr(chrome, "TRACES_DIR", tmp_path)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    assert not at.get("plotly_chart")
    assert any("too short" in w.value for w in at.warning)


def test_a_remote_runs_network_time_is_drawn_and_its_draft_measured(tmp_path, monkeypatch):
    """A recorded run whose target was a server (each request's network span recorded): the
    replays draw that span on the target's lane; the loaded pair holds the run's draft, so
    SSD's branch passes are measured here; a target pass the run did not make cannot be (the
    server's target is not the loaded one), and the page says what to load instead."""
    import specviz.ui.chrome as chrome
    from specviz import Event, load_pair, speculative
    from specviz.record.run_config import RunConfig

    trace = speculative(load_pair("tiny", dtype="float32"),
                        RunConfig(prompt="Hello world", gamma=3, max_new_tokens=32)).run()
    trace.config.target, trace.config.target_url = "remote-target", "http://127.0.0.1:9"
    for rnd in trace.rounds:  # the first third of each request: its network and queue
        for i, e in enumerate(rnd.events):
            if e.lane == "target" and e.kind in ("prefill", "verify_forward"):
                split = e.start_ms + e.duration_ms / 3
                rnd.events[i] = Event("target", e.kind, split, e.end_ms, e.tokens)
                rnd.events.append(Event("target", "network", e.start_ms, split))
    trace.save(tmp_path / "remote.json")
    monkeypatch.setattr(chrome, "TRACES_DIR", tmp_path)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()  # the tiny pair loads
    at.switch_page(PAGE).run()
    _settled(at)
    assert not at.exception, at.exception
    spec = at.get("plotly_chart")[0].proto.spec
    assert "Network and queue (remote target)" in spec and "Target (remote)" in spec
    assert [t for t in _titles(at) if t.startswith("SSD")]  # its branches: the tiny draft, measured here
    info = " ".join(i.value for i in at.info)
    assert "Load the pair it was recorded with (tiny-draft → remote-target" in info and "the target over" in info


def test_the_shipped_remote_run_shows_its_network_time():
    """The recorded run whose target was a vLLM server is offered; its replays draw each
    request's network and queue span; its race is the recorded remote target-alone run."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.switch_page(PAGE).run()
    label = "Recorded, remote target: code-gamma4-remote-greedy"
    assert label in at.selectbox(key="parallel_source").options
    options = at.selectbox(key="parallel_source").options
    assert "Recorded, remote target: code-autoregressive-remote-greedy" not in options  # the target alone
    at.selectbox(key="parallel_source").set_value(label).run()
    assert not at.exception, at.exception
    spec = at.get("plotly_chart")[0].proto.spec
    assert "Network and queue (remote target)" in spec and "Target (remote)" in spec
    assert "the recorded target-alone run of the same prompt and settings" in " ".join(c.value for c in at.caption)


@pytest.mark.parametrize("page", [PAGE, "pages/inspect_round.py"])
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


def test_another_run_opens_at_its_own_gamma():
    """γ and the policy belong to the run: picking another run starts from its own, not the last one's."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.switch_page(PAGE).run()
    at.selectbox(key="parallel_source").set_value("Recorded: code-gamma8-greedy").run()
    assert at.slider(key="parallel_gamma").value == 8
    at.slider(key="parallel_gamma").set_value(3).run()
    at.selectbox(key="parallel_source").set_value("Recorded: code-gamma4-greedy").run()
    assert not at.exception, at.exception
    assert at.slider(key="parallel_gamma").value == 4


def test_pearl_for_real_needs_the_runs_pair():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.switch_page(PAGE).run()
    at.selectbox(key="parallel_source").set_value("Recorded: code-gamma4-greedy").run()
    assert not at.exception, at.exception
    assert not [b for b in at.button if b.key == "parallel_real_run"]
    assert any("Load the pair this run was recorded with" in c.value for c in at.caption)


@pytest.mark.parametrize("scale", [1.0, 1.5])
def test_a_gap_in_the_costs_is_explained(tmp_path, monkeypatch, specviz_cache, scale):
    """A recorded run replayed with this machine's cached costs: the run's own passes (scale 1)
    agree; the same passes half as slow again (a machine that drifted) do not, and the page
    says the gap is in the costs, since every round is the same."""
    import json
    import shutil

    import specviz.ui.chrome as chrome
    from specviz import Trace
    from specviz.measure import branch_costs
    from specviz.measure import forward_costs as costs
    from specviz.replay import latency

    traces, cache = tmp_path / "traces", specviz_cache
    traces.mkdir()
    shutil.copy(ROOT / "assets" / "traces" / "code-gamma4-greedy.json", traces / "run.json")
    trace = Trace.load(traces / "run.json")
    own, cfg, ctx = latency.from_trace(trace), trace.config, branch_costs.replay_context(trace)
    cost = {"target": lambda b, k: own.verify(k), "draft": lambda b, k: own.draft(b) if k == 1 else own.draft_read(k)}
    rows = [{"model": m, "batch": b, "tokens": k, "ms": scale * cost[m](b, k), "min_ms": 0, "max_ms": 0}
            for m, b, k in costs.LATENCY_GRID]
    name = costs.cache_file_name(cfg.draft, cfg.target, cfg.device, cfg.dtype, ctx, "latency")
    (cache / "costs").mkdir()
    (cache / "costs" / name).write_text(json.dumps({
        "format": costs.COSTS_FORMAT, "draft": cfg.draft, "target": cfg.target, "device": cfg.device,
        "dtype": cfg.dtype, "context_length": ctx, "measured_at": "2026-12-01T12:00:00+00:00", "rows": rows}))
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


def test_the_run_picker_opens_on_the_live_run_else_the_featured_recorded_one():
    """A first click on Parallel shows the session's own run, or else the code run at γ 4 (not the
    first file in alphabetical order)."""
    from specviz.ui.parallel_page import opening_index

    recorded = ["Recorded: chinese-gamma2-greedy", "Recorded: code-gamma4-greedy", "Recorded: prose-gamma8-greedy"]
    assert opening_index(["This session's last Live run", *recorded], tr=str) == 0
    assert opening_index(recorded, tr=str) == 1
    assert opening_index(["Recorded: chinese-gamma2-greedy"], tr=str) == 0
    assert opening_index([], tr=str) == 0
