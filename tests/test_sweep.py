"""The γ sweep (specviz.measure.sweep) on the tiny pair: rows, medians and spreads, the interleaved
order, settings measured once, Stop, the estimate, the CLI's JSON and exit codes, the
figures, and the Tune page through AppTest."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specviz import BadInput, RunConfig
from specviz.analysis import theory
from specviz.cli import commands as cli
from specviz.figures.sweep import acceptance_vs_gamma_figure, prompt_label, sweep_figure
from specviz.measure import sweep as S
from specviz.replay.latency import LatencyModel

pytestmark = pytest.mark.usefixtures("single_thread")

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
PAGE = "pages/sweep.py"
TINY = ["--pair", "tiny", "--dtype", "float32", "--device", "cpu"]
PROMPTS = ["def add(a, b):", "Count from 1 to 9"]
N = 8  # tokens per run: the tiny pair makes them in a few ms


def small_sweep(pair, **kw):
    args = dict(prompts=PROMPTS, gammas=[1, 2, 3], repeats=2, max_new_tokens=N, warmup=False)
    args.update(kw)
    return S.sweep(pair, **args)


@pytest.fixture
def calls(monkeypatch):
    """Every run the sweep starts, in order: (prompt, γ or 0 for the target alone)."""
    seen: list[tuple[str, int]] = []
    real = S.measure_cell

    def recording(pair, config, repeat, lock=None):
        seen.append((config.prompt, 0 if config.mode == "autoregressive" else config.gamma, repeat))
        return real(pair, config, repeat, lock)

    monkeypatch.setattr(S, "measure_cell", recording)
    return seen


# --- rows ------------------------------------------------------------------------------------


def test_one_row_per_setting_with_consistent_fields(tiny_pair):
    r = small_sweep(tiny_pair)
    assert r.complete and not r.stopped and r.measured == r.total_cells == 2 * 4 * 2
    assert [(row["prompt"], row["gamma"]) for row in r.rows] == [(p, g) for p in PROMPTS for g in (1, 2, 3)]
    for row in r.rows:
        assert tuple(row) == S.ROW_KEYS
        vals = row["tokens_per_second_values"]
        assert row["n"] == len(vals) == 2
        assert row["tokens_per_second"] == statistics.median(vals)
        assert row["tokens_per_second_min"] == min(vals) <= row["tokens_per_second"] <= max(vals)
        assert row["tokens_per_second_max"] == max(vals)
        p, g = row["prompt"], row["gamma"]
        assert row["speedup"] == pytest.approx(row["tokens_per_second"] / r.baseline[p])
        assert row["predicted_speedup"] == pytest.approx(
            theory.expected_speedup(r.alpha[p], g, r.cost_ratio_c[p]))
        assert 0 <= row["acceptance_rate"] <= 1 and 1 <= row["mean_acceptance_length"] <= g + 1
        assert row["alpha"] == pytest.approx(theory.alpha_from_mean_length(row["mean_acceptance_length"], g))
    for p in PROMPTS:
        alone = [c.tokens_per_second for c in r.cells if c.prompt == p and c.gamma == S.AR]
        assert r.baseline[p] == statistics.median(alone) and len(alone) == 2
        rows = r.rows_of(p)
        assert r.best_gamma_measured[p] == max(rows, key=lambda x: x["tokens_per_second"])["gamma"]
        # over a range 1..N the prediction is theory.best_gamma's
        assert r.best_gamma_predicted[p] == theory.best_gamma(r.alpha[p], r.cost_ratio_c[p], max_gamma=3)
        # c as the formula defines it: one draft pass over one target step (the target alone's)
        drafts = [c.draft_ms for c in r.cells if c.prompt == p and c.gamma != S.AR]
        assert r.cost_ratio_c[p] == pytest.approx(statistics.median(drafts) / r.target_step_ms[p])
    data = json.loads(json.dumps(r.to_dict()))  # plain JSON
    assert set(data) >= {"rows", "baseline", "best_gamma_measured", "best_gamma_predicted"}
    assert len(data["cells"]) == r.total_cells


def _cell(prompt, gamma, repeat, tps, length=None, rounds=4, draft=None, target=10.0):
    return S.Cell(prompt=prompt, gamma=gamma, repeat=repeat, tokens_per_second=tps, new_tokens=8, rounds=rounds,
                  wall_ms=1000 * 8 / tps, seconds=0.1, mean_acceptance_length=length,
                  acceptance_rate=None if length is None else (length - 1) / gamma,
                  cost_ratio_c=None if draft is None else draft / target, draft_ms=draft, target_ms=target)


def test_medians_spreads_and_pooling_from_known_cells():
    cells = [
        _cell("p", 0, 0, 10.0, target=20.0), _cell("p", 0, 1, 14.0, target=22.0), _cell("p", 0, 2, 11.0, target=30.0),
        _cell("p", 2, 0, 18.0, 2.5, rounds=4, draft=5.0), _cell("p", 2, 1, 12.0, 2.0, rounds=4, draft=7.0),
        _cell("p", 2, 2, 30.0, 2.5, rounds=4, draft=6.0),
        _cell("p", 4, 0, 16.0, 3.0, rounds=2, draft=6.0),
    ]
    r = S.aggregate(S.SweepResult(prompts=["p"], gammas=[2, 4], repeats=3, max_new_tokens=8, cells=cells))
    assert r.baseline["p"] == 11.0 and (r.baseline_min["p"], r.baseline_max["p"]) == (10.0, 14.0)
    assert r.target_step_ms["p"] == 22.0
    g2, g4 = r.rows
    assert (g2["tokens_per_second"], g2["tokens_per_second_min"], g2["tokens_per_second_max"]) == (18.0, 12.0, 30.0)
    assert g2["tokens_per_second_values"] == [18.0, 12.0, 30.0] and g2["n"] == 3
    assert g2["mean_acceptance_length"] == 2.5 and g2["speedup"] == pytest.approx(18 / 11)
    assert g4["n"] == 1 and g4["tokens_per_second"] == 16.0
    alphas = [theory.alpha_from_mean_length(m, g) for m, g in ((2.5, 2), (2.0, 2), (2.5, 2), (3.0, 4))]
    assert r.alpha["p"] == pytest.approx((4 * alphas[0] + 4 * alphas[1] + 4 * alphas[2] + 2 * alphas[3]) / 14)
    assert r.cost_ratio_c["p"] == pytest.approx(6.0 / 22.0)  # median draft pass / median target-alone step
    assert r.best_gamma_measured["p"] == 2
    assert not r.complete and r.done_cells == 7 and r.total_cells == 9


# --- the order, the cache of measured settings, Stop ----------------------------------------------


def test_the_order_interleaves_gamma_across_repeats(tiny_pair, calls):
    assert S.schedule(["a"], [1, 2, 3], 3) == [
        ("a", 1, 0), ("a", 2, 0), ("a", 3, 0), ("a", 0, 0),
        ("a", 0, 1), ("a", 3, 1), ("a", 2, 1), ("a", 1, 1),
        ("a", 1, 2), ("a", 2, 2), ("a", 3, 2), ("a", 0, 2),
    ]
    small_sweep(tiny_pair, repeats=3)
    assert calls == S.schedule(PROMPTS, [1, 2, 3], 3)


def test_done_skips_settings_already_measured(tiny_pair, calls):
    done: dict = {}
    first = small_sweep(tiny_pair, done=done)
    assert len(done) == len(calls) == first.total_cells
    calls.clear()
    again = small_sweep(tiny_pair, done=done)
    assert calls == [] and again.measured == 0 and again.reused == again.total_cells
    assert again.rows == first.rows
    # a new policy: every speculative run again, the target alone (which ignores it) not
    small_sweep(tiny_pair, done=done, base_config=RunConfig(policy="heuristic"))
    assert calls and all(g != S.AR for _, g, _ in calls) and len(calls) == 2 * 3 * 2
    calls.clear()
    # one more γ and a third repeat: only the runs not yet measured
    small_sweep(tiny_pair, done=done, gammas=[1, 2, 3, 4], repeats=3)
    assert len(calls) == 2 * (2 + 5)  # γ=4 twice and all five of the third repeat, per prompt
    calls.clear()
    small_sweep(tiny_pair, done=done, max_new_tokens=N + 1)  # another token budget: all again
    assert len(calls) == 16
    keys = {S.cell_key(tiny_pair, S.run_config(None, PROMPTS[0], 2, N), 0),
            S.cell_key(tiny_pair, S.run_config(None, PROMPTS[0], 2, N), 1),
            S.cell_key(tiny_pair, S.run_config(None, PROMPTS[0], 3, N), 0),
            S.cell_key(tiny_pair, S.run_config(None, PROMPTS[0], 0, N), 0)}
    assert len(keys) == 4


def test_stop_keeps_what_was_measured_and_a_rerun_resumes(tiny_pair, calls):
    done: dict = {}
    seen: list[tuple[int, int, int]] = []
    r = small_sweep(tiny_pair, done=done, stop=lambda: len(calls) >= 5,
                    progress=lambda d, t, partial: seen.append((d, t, partial.done_cells)))
    assert r.stopped and not r.complete and r.done_cells == 5 == len(done)
    assert seen == [(i, 16, i) for i in range(1, 6)]
    assert [(row["gamma"], row["n"]) for row in r.rows] == [(1, 1), (2, 1), (3, 1)]
    assert [c.gamma for c in r.cells] == [1, 2, 3, S.AR, S.AR]  # repeat 2 began with the target alone
    assert PROMPTS[0] in r.baseline and PROMPTS[1] not in r.baseline
    assert r.rows_of(PROMPTS[1]) == []
    assert S.collect(tiny_pair, PROMPTS, [1, 2, 3], 2, N, done=done).rows == r.rows
    calls.clear()
    rest = small_sweep(tiny_pair, done=done)
    assert len(calls) == 11 and rest.complete and rest.reused == 5
    assert S.pending(tiny_pair, PROMPTS, [1, 2, 3], 2, N, done=done) == []


def test_progress_gets_separate_partial_results(tiny_pair):
    parts = []
    small_sweep(tiny_pair, prompts=PROMPTS[:1], gammas=[2], repeats=2,
                progress=lambda d, t, partial: parts.append(partial))
    assert [p.done_cells for p in parts] == [1, 2, 3, 4]
    assert parts[0].rows[0]["n"] == 1 and parts[0].baseline == {}  # γ=2 first, then the target alone
    assert parts[1].baseline and parts[0].baseline == {}


# --- inputs and the estimate -----------------------------------------------------------------------


def test_gamma_lists_and_ranges_parse():
    assert S.parse_gammas("1-10") == list(range(1, 11))
    assert S.parse_gammas("1,2,4") == [1, 2, 4]
    assert S.parse_gammas(" 4, 1-3 ,2") == [1, 2, 3, 4]
    for bad in ("", "x", "3-1", "0", "1-40", "1,,2", "-3", "2.5"):
        with pytest.raises(BadInput) as err:
            S.parse_gammas(bad)
        assert err.value.field == "gammas"


def test_bad_settings_fail_before_any_run(tiny_pair, calls):
    for kw, field in ((dict(gammas=[]), "gammas"), (dict(gammas=[0, 1]), "gammas"), (dict(prompts=[" "]), "prompt"),
                      (dict(repeats=0), "repeats"), (dict(max_new_tokens=0), "max_new_tokens")):
        with pytest.raises(BadInput) as err:
            small_sweep(tiny_pair, **kw)
        assert err.value.field == field
    assert calls == []


def test_a_token_budget_that_cannot_draft_the_longest_gamma_is_refused(tiny_pair, calls):
    """1 new token drafts nothing (the old page then named a 'best γ' from noise); the least is max γ + 1."""
    assert S.least_new_tokens([1, 2, 3]) == 4 and S.least_new_tokens([10, 2]) == 11
    for n in (1, 3):
        for call in (lambda: small_sweep(tiny_pair, max_new_tokens=n),
                     lambda: S.pending(tiny_pair, PROMPTS, [1, 2, 3], 2, n),
                     lambda: S.estimate_seconds(LatencyModel({1: 1.0}, {1: 1.0}), PROMPTS, [1, 2, 3], 2, n)):
            with pytest.raises(BadInput) as err:
                call()
            assert err.value.field == "max_new_tokens"
            assert "at least 4 to sweep γ up to 3" in str(err.value) and f"got {n}" in str(err.value)
    assert calls == []
    r = small_sweep(tiny_pair, prompts=PROMPTS[:1], max_new_tokens=4, repeats=1)  # the least measures every γ
    assert all(row["acceptance_rate"] is not None and row["alpha"] is not None for row in r.rows)


def test_cli_sweep_refuses_too_few_tokens_before_loading(capsys):
    assert cli.main(["sweep", *TINY, "--prompt", "hi", "--gammas", "1-10", "--max-new-tokens", "1"]) == 2
    err = capsys.readouterr().err
    assert "at least 11 to sweep γ up to 10" in err and "Loading" not in err


def test_estimate_from_a_latency_model_and_from_a_probe(tiny_pair):
    costs = LatencyModel(draft_ms={1: 2.0}, verify_ms={1: 10.0, 3: 12.0}, overhead_ms=1.0,
                         meta={"alpha": 0.5, "off_clock_ms_per_run": 8 / 3, "probe_tokens": 4})
    per_round_2 = 2 * 2.0 + 12.0 + 1.0
    want = (8 / theory.expected_tokens_per_round(0.5, 2) * per_round_2 + 4.0) + (8 * 11.0 + 4.0)
    assert S.estimate_seconds(costs, ["p"], [2], 1, 8, warmup=False) == pytest.approx(want / 1000)
    assert S.estimate_seconds(costs, ["p"], [2], 3, 8, warmup=False) == pytest.approx(3 * want / 1000)
    assert S.estimate_seconds(costs, ["p"], [2], 1, 8, cells=[]) == 0.0
    probed = S.probe_costs(tiny_pair, PROMPTS[0])
    assert probed.verify(1) > 0 and probed.draft(1) > 0 and 0 <= probed.meta["alpha"] <= 1
    assert S.estimate_seconds(tiny_pair, PROMPTS, [1, 2, 3], 2, N) > 0


def test_the_cost_curve_estimate_adds_up_the_passes_measure_makes(tiny_pair):
    """measure_seconds counts what costs.measure does: each model's cache filled once, then a
    warm-up and ``repeats`` passes per point over batch × k tokens. (How close it comes on a
    real machine: bench/cost_estimate.py; it replaced the page's bare "minutes".)"""
    from specviz.measure import forward_costs as C

    probe = LatencyModel(draft_ms={1: 2.0}, verify_ms={1: 10.0, 5: 12.0}, draft_read_ms={2: 3.0},
                         draft_prefill_ms=20.0, target_prefill_ms=60.0, meta={"prompt_tokens": 41})
    curves = S.pass_curves(probe)
    assert curves == {"target": {1: 10.0, 5: 12.0, 41: 60.0}, "draft": {1: 2.0, 2: 3.0, 41: 20.0}}
    assert S.pass_ms({1: 10.0, 11: 30.0}, 21) == 50.0  # extrapolated in proportion past the last point
    grid = [("target", 1, 1), ("target", 4, 8), ("draft", 16, 1)]
    want = (S.pass_ms(curves["target"], 100) + S.pass_ms(curves["draft"], 100)  # the two fills
            + 3 * (10.0 + S.pass_ms(curves["target"], 32) + S.pass_ms(curves["draft"], 16)))
    assert S.measure_seconds(probe, grid, 2, 100) == pytest.approx(want / 1000)
    # from a measured curve: each point at its own median
    ctx = C.curve_context_length(tiny_pair.context_length, C.SPARSE_CURVE_GRID)
    rows = C.measure(tiny_pair, context_length=ctx, grid=C.SPARSE_CURVE_GRID, repeats=1)
    fills = sum(S.pass_ms(S.pass_curves(rows)[m], ctx) for m in ("draft", "target"))
    assert S.measure_seconds(rows, C.SPARSE_CURVE_GRID, 3, ctx) == pytest.approx(
        (fills + 4 * sum(r["ms"] for r in rows)) / 1000)
    with pytest.raises(ValueError, match="no pass times for the draft"):
        S.measure_seconds([{"model": "target", "batch": 1, "tokens": 1, "ms": 1.0}], [("draft", 1, 1)], 1, 8)


# --- figures -------------------------------------------------------------------------------------


def test_figures_draw_full_partial_and_empty_results(tiny_pair):
    full = small_sweep(tiny_pair)
    fig = sweep_figure(full, {PROMPTS[0]: "code"})
    names = [t.name for t in fig.data]
    assert "code" in names and prompt_label(PROMPTS[1]) in names
    symbols = [t.marker.symbol for t in fig.data if t.mode == "markers"]
    assert symbols.count("star") == 3 and symbols.count("diamond-open") == 3  # one each per prompt + the key
    measured = [t for t in fig.data if t.name == "code"][0]
    assert list(measured.y) == [r["tokens_per_second"] for r in full.rows_of(PROMPTS[0])]
    assert measured.error_y.array is not None
    # the refined formula, from the verify passes this sweep measured, drawn beside the simple one
    refined = [t for t in fig.data if t.hovertemplate and "refined formula" in t.hovertemplate]
    assert len(refined) == 2  # one per prompt
    for g, y in zip(refined[0].x, refined[0].y):
        assert y == pytest.approx(full.baseline[PROMPTS[0]] * full.refined_speedup(PROMPTS[0], g))
    assert full.refined_speedup(PROMPTS[0], 99) is None
    acc = acceptance_vs_gamma_figure(full, tr=str.upper)
    assert acc.layout.annotations[0].text == "ACCEPTANCE RATE"
    partial = S.aggregate(S.SweepResult(prompts=PROMPTS, gammas=[1, 2, 3], repeats=2, max_new_tokens=N,
                                        cells=[c for c in full.cells if c.gamma == 1]))
    sweep_figure(partial), acceptance_vs_gamma_figure(partial)  # no target alone, no α pooled across γ
    empty = S.SweepResult(prompts=PROMPTS, gammas=[1, 2, 3], repeats=2, max_new_tokens=N)
    sweep_figure(empty)
    blank = acceptance_vs_gamma_figure(empty)  # the sweep's own γ axis (not plotly's −1..6), and why it is blank
    assert blank.layout.xaxis.range == blank.layout.xaxis2.range == (1 - 0.4, 3 + 0.4)
    assert [a.text for a in blank.layout.annotations][2:] == ["no drafted tokens judged yet"] * 2


# --- the command line ------------------------------------------------------------------------------


def test_cli_sweep_prints_a_table_and_writes_the_json(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    rc = cli.main(["sweep", *TINY, "--prompt", PROMPTS[0], "--prompt", PROMPTS[1], "--gammas", "1,3",
                   "--repeats", "2", "--max-new-tokens", str(N), "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert set(data) >= {"rows", "baseline", "best_gamma_measured", "best_gamma_predicted"}
    assert [(r["prompt"], r["gamma"]) for r in data["rows"]] == [(p, g) for p in PROMPTS for g in (1, 3)]
    keys = {"prompt", "gamma", "tokens_per_second", "tokens_per_second_min", "tokens_per_second_max",
            "acceptance_rate", "mean_acceptance_length", "cost_ratio_c", "predicted_speedup", "speedup", "n"}
    assert all(keys <= set(r) and r["n"] == 2 for r in data["rows"])
    for name in ("baseline", "best_gamma_measured", "best_gamma_predicted"):
        assert set(data[name]) == set(PROMPTS)
    assert all(data["best_gamma_measured"][p] in (1, 3) for p in PROMPTS)
    captured = capsys.readouterr()
    assert "tok/s" in captured.out and "best γ measured" in captured.out
    assert "estimated from a short probe run" in captured.err


@pytest.mark.parametrize("gammas", ["x", "5-2", "0", "1-99"])
def test_cli_sweep_bad_gammas_exit_2(gammas, capsys):
    assert cli.main(["sweep", *TINY, "--prompt", "hi", "--gammas", gammas]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specviz: error:") and ("--gammas" in err or "γ" in err)


def test_cli_sweep_bad_repeats_exit_2(capsys):
    assert cli.main(["sweep", *TINY, "--prompt", "hi", "--repeats", "0"]) == 2
    assert "repeats" in capsys.readouterr().err


# --- the Tune page ---------------------------------------------------------------------------------


@pytest.fixture
def tiny_app(app_tiny_only):
    at = AppTest.from_file(APP, default_timeout=120)
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    at.slider(key="sweep_gamma_range").set_value((1, 3))
    at.number_input(key="sweep_repeats").set_value(2)
    at.number_input(key="sweep_max_new_tokens").set_value(N)
    at.run()
    assert not at.exception, at.exception
    return at


def test_the_page_estimates_runs_and_draws(tiny_app):
    at = tiny_app
    text = " ".join(m.value for m in at.markdown)
    assert "16 runs" in text and "estimated from a short probe run" in text
    assert not at.get("plotly_chart")
    at.button(key="sweep_start").click().run()
    assert not at.exception, at.exception
    assert len(at.get("plotly_chart")) == 2 and len(at.dataframe) == 1
    assert len(at.dataframe[0].value) == 2 * 3
    assert at.success and "Done: 16 runs" in at.success[0].value
    assert len(at.session_state["tune_page"].done) == 16
    assert {b.label for b in at.get("download_button")} == {"Download CSV", "Download JSON"}
    at.run()  # the same settings again: nothing left to measure
    assert "16 of them were measured earlier" in " ".join(m.value for m in at.markdown)


def test_the_page_refuses_too_few_tokens_and_never_shows_none(tiny_app):
    at = tiny_app
    at.number_input(key="sweep_max_new_tokens").set_value(1).run()
    assert not at.exception, at.exception
    assert at.error and "must be at least 4 to sweep γ up to 3" in at.error[0].value
    assert at.button(key="sweep_start").disabled
    at.number_input(key="sweep_max_new_tokens").set_value(N).run()
    assert not at.error and not at.button(key="sweep_start").disabled


def test_unmeasured_cells_show_a_dash(tiny_pair, tiny_app, monkeypatch):
    """Before the target alone has run there is no speedup: the cell reads '–', never 'None'."""
    import streamlit as st

    real = S.measure_cell
    n = {"runs": 0}

    def stop_after_two(*a, **k):
        n["runs"] += 1
        if n["runs"] == 2:
            st.session_state["tune_page"].running = False
        return real(*a, **k)

    monkeypatch.setattr(S, "measure_cell", stop_after_two)
    at = tiny_app
    at.button(key="sweep_start").click().run()
    assert not at.exception, at.exception
    import pyarrow as pa

    shown = pa.ipc.open_stream(at.dataframe[0].proto.arrow_data.styler.display_values).read_all().to_pandas()
    cells = [str(v) for v in shown.to_numpy().ravel()]  # what the browser draws in each cell
    assert "–" in cells and not {"None", "nan", "NaN", "<NA>"} & set(cells), cells
    assert any(c.startswith("×") for c in cells) or "–" in shown["speedup"].tolist()


def test_stop_on_the_page_keeps_the_partial_result(tiny_app, monkeypatch):
    import streamlit as st

    real = S.measure_cell
    n = {"runs": 0}

    def stop_after_three(*a, **k):
        n["runs"] += 1
        if n["runs"] == 3:  # as if Stop had been clicked during the third run
            st.session_state["tune_page"].running = False
        return real(*a, **k)

    monkeypatch.setattr(S, "measure_cell", stop_after_three)
    at = tiny_app
    at.button(key="sweep_start").click().run()
    assert not at.exception, at.exception
    assert n["runs"] == 3 and len(at.session_state["tune_page"].done) == 3
    assert at.warning and "Stopped: 3 of 16 runs measured" in at.warning[0].value
    assert len(at.get("plotly_chart")) == 2 and len(at.dataframe[0].value) == 3


def test_the_page_opens_in_chinese(monkeypatch):
    monkeypatch.setenv("SPECVIZ_PAIR", "tiny")
    at = AppTest.from_file(APP, default_timeout=120)
    at.switch_page(PAGE)
    at.query_params["lang"] = "zh"
    at.run()
    assert not at.exception, at.exception
    assert at.button(key="sweep_start")
