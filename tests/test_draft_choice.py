"""Defaults that pay: which draft variant this machine's measurement picks
(specviz.measure.draft_choice), what the Live page starts with, and the marks where the
confidence policy stopped a round early (the timeline and Inspect a round)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specviz.measure import draft_choice as dc
from specviz.measure.draft_choice import Choice, Cost, Variant
from specviz.record.limits import DEFAULT_CONFIDENCE, DEFAULT_GAMMA
from specviz.ui import pair as ui_pair
from specviz.ui import state as ui_state

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
TIMEOUT = 90
FULL, INT8, CUT, INT8_CUT = Variant(), Variant("int8"), Variant("none", dc.CUT_HEAD), Variant("int8", dc.CUT_HEAD)


def costs(**c: float) -> list[Cost]:
    """Stand-in measurements: c per variant (full, int8, cut, int8_cut), the target at 100 ms."""
    names = {"full": FULL, "int8": INT8, "cut": CUT, "int8_cut": INT8_CUT}
    return [Cost(names[k], 100.0 * v, 100.0) for k, v in c.items()]


# --- the choice, on stand-in machines whose costs are given ----------------------------------------


@pytest.mark.parametrize("machine, picked", [
    (dict(full=0.42, int8=0.18, cut=0.34, int8_cut=0.15), INT8),  # a CPU with native bf16 (measured here)
    (dict(full=0.40, int8=0.55), FULL),  # a CPU whose int8 kernels lose to its float ones
    (dict(full=0.84), FULL),  # a GPU: no int8; no ranking, no cut head
    (dict(full=0.42, int8=0.18, int8_cut=0.10), INT8_CUT),  # a cut head far cheaper still: it pays
    (dict(full=0.42, cut=0.36), FULL),  # a cut head only a little cheaper: the full head keeps every token
    (dict(full=0.30, int8=0.30), FULL),  # a tie: the simpler variant
])
def test_the_cheapest_draft_is_picked_and_a_cut_head_only_by_a_margin(machine, picked):
    assert dc.choose(costs(**machine)) == picked


def test_nothing_measured_is_an_error():
    with pytest.raises(ValueError):
        dc.choose([])


@pytest.mark.parametrize("device, ranks, vocab, expected", [
    ("cpu", True, 151_936, [FULL, INT8, CUT, INT8_CUT]),
    ("cuda", True, 151_936, [FULL, CUT]),  # int8 is CPU only
    ("cpu", False, 151_936, [FULL, INT8]),  # no token ranking: no cut head
    ("cpu", True, 100, [FULL, INT8]),  # a vocabulary smaller than the cut
])
def test_the_variants_measured_are_those_this_device_has(device, ranks, vocab, expected):
    assert dc.variants(device, ranks, vocab) == expected


def test_the_defaults_are_the_confidence_policy_on_the_picked_draft():
    choice = Choice(INT8, 0.18, 0.42, tuple(costs(full=0.42, int8=0.18)))
    cfg = dc.default_config(None, choice, prompt="hi", max_new_tokens=7)
    assert (cfg.policy, cfg.confidence, cfg.gamma) == ("confidence", DEFAULT_CONFIDENCE, DEFAULT_GAMMA)
    assert (cfg.draft_quant, cfg.draft_vocab, cfg.prompt, cfg.max_new_tokens) == ("int8", 0, "hi", 7)
    assert dc.default_config(None, None, prompt="hi").draft_quant == "none"  # nothing measured: the plain draft


def test_a_real_measurement_is_cached_per_machine(tiny_pair, tmp_path, monkeypatch):
    """On the tiny pair: every variant timed (positive ms), the file written once, then read back."""
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    from specviz.models import busy

    monkeypatch.setattr(busy, "entries", lambda *a, **k: [])  # a loaded test machine must not stop the write
    first = dc.load_or_measure(tiny_pair)
    assert not first.cached and dc.cached(tiny_pair)
    assert {k.variant for k in first.costs} == set(dc.variants("cpu", tiny_pair.has_token_ranks(),
                                                                tiny_pair.draft_vocab_size))
    assert all(k.draft_ms > 0 and k.target_ms > 0 for k in first.costs)
    data = json.loads(dc.cache_path(tiny_pair).read_text())
    assert data["draft"] == tiny_pair.draft_name and len(data["costs"]) == len(first.costs)
    again = dc.load_or_measure(tiny_pair)
    assert again.cached and again.costs == first.costs and again.variant == first.variant


def test_a_measurement_beside_other_work_is_used_but_not_kept(tiny_pair, tmp_path, monkeypatch):
    from specviz.models import busy
    from specviz.record.contention import Contention

    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(busy, "entries", lambda *a, **k: [Contention("other processes", 1.0)])
    choice = dc.load_or_measure(tiny_pair)
    assert choice.contention and not dc.cached(tiny_pair)


# --- the Live page: the picked draft as its start, and the sidebar saying why ------------------------


STAND_IN = Choice(INT8, 0.18, 0.42, tuple(costs(full=0.42, int8=0.18, cut=0.34)))


@pytest.fixture
def picked(monkeypatch, app_tiny_only):
    """The tiny pair's loader, with a stand-in measurement: the int8 draft picked."""
    greet = ui_pair.PairLoader._greet_worker

    def choose(self):  # the worker's answer, its measurement replaced by the stand-in
        greet(self)
        self.pair.draft_choice = STAND_IN

    monkeypatch.setattr(ui_pair.PairLoader, "_greet_worker", choose)
    ui_pair._loader.clear()
    yield
    loader = ui_pair._loader("tiny", "float32", ())
    if loader.pair is not None:
        loader.pair.draft_choice = None
    ui_pair._loader.clear()


def test_the_live_page_starts_with_the_picked_draft_and_says_why(picked):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    assert not at.exception, at.exception
    assert at.toggle(key="draft_int8").value is True
    assert at.selectbox(key="draft_vocab").value == 0
    said = " ".join(c.value for c in at.caption)
    assert "Picked for this machine: the int8 draft, c = 0.18 against 0.42 for the full draft" in said
    # the user's own choice stays: the pick seeds the session once
    at.toggle(key="draft_int8").set_value(False).run()
    at.run()
    assert at.toggle(key="draft_int8").value is False


def test_a_share_link_wins_over_the_pick(picked):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["draft_int8"] = "0"
    at.run()
    assert not at.exception, at.exception
    assert at.toggle(key="draft_int8").value is False


def test_the_note_names_what_was_picked_in_chinese():
    class Pair:
        draft_choice = STAND_IN

    from specviz.record.i18n import gettext_for

    text = ui_state.draft_choice_note(Pair(), gettext_for("zh_CN"))
    assert "为本机选定" in text and "int8" in text and "0.18" in text and "0.42" in text
    Pair.draft_choice = Choice(FULL, 0.84, 0.84, (Cost(FULL, 84.0, 100.0),))
    assert "c = 0.84" in ui_state.draft_choice_note(Pair())
    Pair.draft_choice = None
    assert ui_state.draft_choice_note(Pair()) is None


# --- the early-stop mark -------------------------------------------------------------------------------


def _confident_live_run(app_tiny_only) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.select_slider(key="speed").set_value("Instant")
    at.slider(key="gamma").set_value(8)
    at.toggle(key="draft_stop").set_value(True)
    at.run()
    at.slider(key="confidence").set_value(0.5)
    at.number_input(key="max_new_tokens").set_value(40)
    at.run()
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    assert at.session_state["live"].sd_done
    return at


def test_the_timeline_marks_where_the_draft_stopped_early(app_tiny_only):
    at = _confident_live_run(app_tiny_only)
    trace = at.session_state["live"].trace
    assert trace.config.policy == "confidence" and trace.config.confidence == 0.5
    stopped = [r for r in trace.rounds if r.draft_stop]
    assert stopped, "no round stopped early: the test would prove nothing"
    marks = []
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        marks += [t for t in spec.get("data", []) if t.get("name") == "Draft stops early (unsure)"]
    assert marks, "the timeline has no early-stop mark"
    shown = {tip.split("</b>")[0] for m in marks for tip in m["hovertext"]}
    assert {f"<b>round {r.index + 1}" for r in stopped} <= shown
    assert all("below its confidence threshold" in tip for m in marks for tip in m["hovertext"])


def test_inspect_says_why_a_round_stopped_early(app_tiny_only):
    at = _confident_live_run(app_tiny_only)
    trace = at.session_state["live"].trace
    at.switch_page("pages/inspect_round.py").run()
    assert not at.exception, at.exception
    for rnd in trace.rounds:
        if not rnd.proposed:
            continue
        at.selectbox(key="inspect_round").set_value(rnd.index).run()
        text = " ".join(m.value for m in at.markdown)
        said = "below the confidence threshold τ = 0.50" in text
        assert said == bool(rnd.draft_stop), rnd.index
