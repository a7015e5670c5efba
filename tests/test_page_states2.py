"""The pure decisions behind the thin pages (How it works, Cost curve, Theory, Replay, Live,
Server): which words, which numbers, which option, where each error goes. No page is run
here except the Server page once, on an address nothing answers."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path
from types import SimpleNamespace

from specviz import Trace
from specviz.analysis import theory
from specviz.figures import theory as FT
from specviz.record.i18n import N_, gettext_for
from specviz.replay.latency import latency_model
from specviz.ui import about_page, costs_page, live_page, replay_page, server_page, theory_page

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "assets" / "traces"
EN = N_
ZH = gettext_for("zh_CN")


def _recorded(name: str) -> Trace:
    return Trace.from_json((TRACES / f"{name}.json").read_text(encoding="utf-8"))


def _curve(flat: bool = True, meta: dict | None = None):
    """A measured curve: a target pass of 100 ms at k = 1, flat (memory-bound) or rising 40 ms a token."""
    rows = [{"model": "draft", "batch": 1, "tokens": 1, "ms": 20.0}]
    rows += [{"model": "target", "batch": 1, "tokens": k, "ms": 100.0 + (0 if flat else 40.0 * (k - 1))}
             for k in (1, 2, 4, 5, 8, 16, 32)]
    return latency_model(rows, meta=meta or {"dtype": "float32", "measured_at": "today", "device": "cpu"})


# --- Theory ---------------------------------------------------------------------------------------

def test_theory_verdict_names_the_best_gamma_or_the_loss():
    gains = theory_page.verdict_text(0.8, 0.1, 2, EN)
    assert f"**γ = {theory.best_gamma(0.8, 0.1, 32)}**" in gains and "The slider's γ = 2" in gains
    loses = theory_page.verdict_text(0.2, 0.5, 4, EN)
    assert "no draft length gains" in loses and "least bad" in loses
    assert "α = 0.20" in theory_page.verdict_text(0.2, 0.5, 4, ZH) and "no draft" not in \
        theory_page.verdict_text(0.2, 0.5, 4, ZH)


def test_theory_refined_text_gains_on_a_flat_curve_and_loses_on_a_steep_one():
    flat, steep = _curve(True), _curve(False)
    assert "the best draft length is" in theory_page.refined_text(0.8, 0.2, lambda k: flat.verify(k) / 100, EN)
    lost = theory_page.refined_text(0.3, 0.3, lambda k: steep.verify(k) / 100, EN)
    assert "no draft length gains at this α" in lost and "c = 0.30" in lost


def test_theory_state_and_captions():
    state = theory_page.TheoryState(alpha=0.7, c=0.2, gamma=4)
    assert state.verify is None and state.top == max(theory_page.SHOWN_GAMMA, state.best)
    assert "still loading" in theory_page.curve_caption(state, EN)
    assert "No verify-cost curve" in theory_page.curve_caption(dataclasses.replace(state, pair_loaded=True), EN)
    measured = dataclasses.replace(state, curve=_curve(False), pair_loaded=True)
    assert measured.verify(1) == 1.0 and measured.verify(8) > 1.0
    assert "measured on today (cpu, float32" in theory_page.curve_caption(measured, EN)
    assert "dashed line." in theory_page.losing_text(True, EN)
    assert "once the Cost curve page" in theory_page.losing_text(False, EN)


def test_theory_run_text_and_the_sliders_it_sets():
    run = FT.RunPoint(gamma=40, alpha=0.995, c=0.1, tokens_per_round=3.0, speedup=1.5)
    said = theory_page.run_text(run, "heuristic", EN)
    assert "γ = 40" in said and "measured ×1.50" in said and "heuristic policy" in said
    assert "heuristic" not in theory_page.run_text(dataclasses.replace(run, speedup=None), "constant", EN)
    odd = dataclasses.replace(run, alpha=1.2, c=-0.1)  # clamped to the sliders' ranges
    assert theory_page.sliders_for(odd) == {"theory_alpha": 0.99, "theory_c": 0.0,
                                            "theory_gamma": theory_page.SHOWN_GAMMA}


def test_theory_figures_take_a_translator():
    fig = FT.speedup_figure(0.7, 0.2, 4, tr=ZH)
    assert fig.layout.xaxis.title.text == ZH("γ · draft length") != "γ · draft length"
    assert FT.speedup_figure(0.7, 0.2, 4).layout.xaxis.title.text == "γ · draft length"  # N_: English
    rows = [{"model": m, "batch": 1, "tokens": k, "ms": 1.0 + k} for m in ("draft", "target") for k in (1, 2)]
    assert ZH("batch {batch}").format(batch=1) in {t.name for t in FT.cost_curve_figure(rows, tr=ZH).data}


# --- Cost curve -----------------------------------------------------------------------------------

def test_costs_note_names_the_measurement_and_other_work():
    meta = {"measured_at": "2026-01-01", "device": "cpu", "dtype": "bfloat16", "context_length": 64, "repeats": 3}
    note = costs_page.measured_note(meta, "cuda", "float32", 99, EN)
    assert note.startswith("Measured on 2026-01-01 (cpu, bfloat16, a context of 64 tokens, the median of 3")
    assert "pessimistic" not in note
    busy = costs_page.measured_note({**meta, "contention": [{"label": "other programs", "cpu_share": 1.2}]},
                                    "cpu", "float32", 64, EN)
    assert "pessimistic" in busy
    assert "(cuda, float32, a context of 99" in costs_page.measured_note({}, "cuda", "float32", 99, EN)


def test_costs_table_and_texts_follow_the_curve():
    curve = _curve(False)
    rows = costs_page.speedup_rows(curve, 0.7, EN)
    assert [r["γ"] for r in rows] == list(costs_page.TABLE_GAMMAS)
    assert rows[0]["T(γ + 1) ÷ T(1)"] == f"{curve.verify(2) / curve.verify(1):.2f}"
    assert set(rows[0]) == {"γ", "verify pass T(γ + 1)", "T(γ + 1) ÷ T(1)", "speedup, simple", "speedup, refined"}
    assert "α ≤ 0.20 by the" in costs_page.breakeven_text(curve, EN)  # c = 20 / 100
    assert costs_page.best_gamma_text(curve, 0.7, EN).startswith("At α = 0.70: the best γ is")


def test_compute_bound_text_names_the_reference_machine_and_this_one():
    ref = theory.REFERENCE_TARGET_MS
    text = costs_page.compute_bound_text(None, "float32", EN)
    assert "reference machine of docs/design.md (a 2-core AMD EPYC" in text
    assert f"{ref['float32'][5]:.0f} ms for a pass over 5 tokens against {ref['float32'][1]:.0f} ms" in text
    assert "On this machine" not in text
    assert "On this machine (float32, the curve above)" in costs_page.compute_bound_text(_curve(False), "x", EN)


# --- How it works ----------------------------------------------------------------------------------

def test_about_fp32_text_quotes_the_reference_machine_then_this_one():
    text = about_page.fp32_text(None, EN)
    assert "reference machine of docs/design.md" in text and "On this machine" not in text
    here = about_page.fp32_text(_curve(False), EN)
    assert "On this machine (float32, measured on the Cost curve page)" in here
    assert "5 tokens against" in here


def test_about_why_the_text_matters_quotes_the_recorded_runs():
    assert about_page.why_text_paragraphs({}, EN) == []
    runs = {kind: _recorded(f"{kind}-gamma4-greedy") for kind in about_page.KINDS}
    paragraphs = about_page.why_text_paragraphs(runs, EN)
    assert paragraphs[0].startswith("How often the draft writes") and "code " in paragraphs[0]
    assert paragraphs[-1].startswith("The Inspect page")
    whole = about_page.syntax_round(runs["code"])
    assert whole is not None and whole.accepted == len(whole.proposed)
    assert about_page.token_span(" a\n") == "` ·a↵ `"  # the one code span (specviz.ui.markdown)


# --- Replay ----------------------------------------------------------------------------------------

def test_replay_options_and_the_one_it_opens_on():
    R = replay_page
    keys = R.source_keys(False, ["a", R.FEATURED])
    assert keys == [R.UPLOAD, R.RECORDED + "a", R.RECORDED + R.FEATURED]
    assert R.opening_source(keys) == R.RECORDED + R.FEATURED
    assert R.opening_source(R.source_keys(True, ["a"])) == R.LIVE
    assert R.opening_source(R.source_keys(False, ["a"])) == R.RECORDED + "a"
    assert R.opening_source(R.source_keys(False, [])) == R.UPLOAD
    assert R.source_label(R.LIVE, EN) == "This session's last Live run"
    assert R.source_label(R.RECORDED + "x", ZH) == ZH("Recorded: ") + "x"


def test_replay_file_stems_and_positions():
    R = replay_page
    assert R.trace_stem(R.UPLOAD, "my run (1).json") == "my-run-1"
    assert R.trace_stem(R.UPLOAD, "...json") == "trace" and R.trace_stem(R.UPLOAD, None) == "trace"
    assert R.trace_stem(R.LIVE) == "last-live-run" and R.trace_stem(R.RECORDED + "code") == "code"
    assert [R.step_position(p, 3) for p in (0, 2, 3)] == [1, 3, 1]
    assert [R.play_position(p, 3) for p in (1, 3, 4)] == [1, 0, 0]
    assert R.slider_position(1, 3, True) == 2 and R.slider_position(3, 3, True) == 3
    assert R.slider_position(1, 3, False) == 1


def test_replay_header_says_what_was_recorded():
    cfg = _recorded("code-gamma4-greedy").config
    head = replay_page.recorded_caption(cfg, EN)
    assert head.startswith("Recorded with **") and "speculative · γ=4 · temperature 0" in head
    cut = replay_page.recorded_caption(dataclasses.replace(cfg, draft_quant="int8"), EN)
    assert "(int8 weights)" in cut


# --- Live ------------------------------------------------------------------------------------------

def test_live_errors_go_to_their_slots_in_order():
    errors = {"general": "g", "prompt": "p", "gamma": "y", "unknown": "?"}
    assert live_page.error_placement(errors, "long") == [
        ("prompt", "error", "p"), ("gamma", "error", "y"), ("general", "error", "g"),
        ("max_new_tokens", "warning", "long")]
    assert live_page.error_placement({"max_new_tokens": "m"}, "long") == [("max_new_tokens", "error", "m")]
    assert live_page.error_placement({}, None) == []


# --- Server ----------------------------------------------------------------------------------------

def test_server_address_and_metric_cells():
    S = server_page
    assert S.metrics_address(True, "http://elsewhere/metrics") == S.DEFAULT_URL
    assert S.metrics_address(False, "http://elsewhere/metrics") == "http://elsewhere/metrics"
    assert S.metrics_address(False, None) == S.DEFAULT_URL
    assert S.local_summary(None) is None
    assert S.local_summary(SimpleNamespace(trace=None)) is None
    window = SimpleNamespace(drafts=1234, draft_tokens=4936, acceptance_rate=0.5, mean_acceptance_length=None)
    cells = S.metric_cells(window, None, EN)
    assert [c[0] for c in cells] == ["Rounds (drafts)", "Drafted tokens", "Acceptance rate", "Mean acceptance length"]
    assert cells[0][1] == "1,234" and cells[3][1] == "–" and all(c[2] is None for c in cells)
    mine = S.metric_cells(window, {"acceptance_rate": 0.25, "mean_acceptance_length": 2.5}, EN)
    assert mine[2][2].startswith("your run: ") and mine[3][2] == "your run: 2.50"


def test_the_server_page_names_an_unreachable_address(app_tiny_only):
    from streamlit.testing.v1 import AppTest

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/metrics"
    at = AppTest.from_file(str(ROOT / "pages" / "server.py"), default_timeout=60)
    at.run()
    assert any("Turn on **Watch**" in i.value for i in at.info)
    at.sidebar.text_input(key="server_url").set_value(url)
    at.sidebar.toggle(key="server_watch").set_value(True)
    at.run()
    assert not at.exception
    assert any(url in e.value for e in at.error)


def test_replay_lists_the_recorded_remote_runs_and_races_them_with_their_own_target_alone():
    """assets/traces/remote/ is on the Replay page's list; a remote run's race is the remote
    target-alone run (same target URL), and a local run never takes the remote one."""
    from specviz.ui.chrome import TRACES_DIR, recorded_traces
    from specviz.ui.sources import recorded_baseline

    stems = [p.stem for p in recorded_traces(remote=True)]
    assert "code-gamma4-remote-greedy" in stems and "code-gamma4-greedy" in stems
    assert "code-gamma4-remote-greedy" not in [p.stem for p in recorded_traces()]
    remote = Trace.load(TRACES_DIR / "remote" / "code-gamma4-remote-greedy.json")
    alone = recorded_baseline(remote)
    assert alone is not None and alone.config.mode == "autoregressive"
    assert alone.config.target_url == remote.config.target_url != ""
    local = Trace.load(TRACES_DIR / "code-gamma4-greedy.json")
    found = recorded_baseline(local)
    assert found is None or found.config.target_url == ""
