"""SSD run for real (specviz/measure/ssd_real.py) and beside its simulation
(specviz/measure/real_vs_sim.py, ``specviz overlap``), on the tiny fp32 pair (the real default
pair's: tests/test_default_pair.py):

* its output is the target's own greedy output, token for token, at every fan-out, and it
  stops at EOS and at the budget as the engine does;
* its rounds, hits and branches are the ones ``specviz.replay.schedules.ssd`` replays from a
  serial run of the same config: the hit accounting is shared with the simulation;
* the fork, the budget fit and the cap on hand-built cases;
* its events keep to one clock, and the branches run while the target verifies;
* its threads are gone afterwards, also when the target fails mid-run (no finished run is
  returned), and it refuses what it does not do;
* ``specviz overlap`` prints both and writes the issue's JSON.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading

import pytest
import torch
from helpers import make_config, run_ar, run_sd, ssd_simulated

import specviz.measure.ssd_real
from specviz.cli.commands import main
from specviz.measure import real_vs_sim
from specviz.measure.ssd_real import Budget, fit_budget, fork, ssd_run, tree_ms, user_budget
from specviz.record.errors import BadInput
from specviz.record.run_config import FORWARD_KINDS
from specviz.replay import schedules
from specviz.replay.latency import LatencyModel

pytestmark = pytest.mark.usefixtures("single_thread")

PROMPTS = ["Hello world", "def add(a, b):", "1 2 3 4 5 6 7", "The quick brown fox"]


@pytest.mark.parametrize("fanout", [1, 2, 3])
@pytest.mark.parametrize("gamma", [1, 3, 5])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_output_is_the_targets_and_hits_are_the_simulations(tiny_pair, prompt, gamma, fanout):
    budget = user_budget(None, gamma, fanout)
    run = ssd_run(tiny_pair, make_config(prompt=prompt, gamma=gamma, max_new_tokens=32), budget)
    trace = run.trace
    assert trace.output_ids == run_ar(tiny_pair, prompt=prompt, max_new_tokens=32).output_ids
    assert trace.stop_reason == "max_new_tokens" and run.schedule == "ssd" and run.threads == 1
    sim = ssd_simulated(run_sd(tiny_pair, prompt=prompt, gamma=gamma, max_new_tokens=32), budget)
    assert [(r.accepted, r.emitted) for r in trace.rounds] == [(r.accepted, r.emitted) for r in sim.trace.rounds]
    assert run.hits == sim.hits and run.stats()["misses"] == sim.misses and run.hit_rate == pytest.approx(sim.hit_rate)
    assert not run.ssd_rounds[0].hit, "the first round is always a miss"
    assert run.branches_per_round == pytest.approx(sim.branches_per_round)


def test_geometric_fanout_follows_the_simulation(tiny_pair):
    sd = run_sd(tiny_pair, prompt="def add(a, b):", gamma=4, max_new_tokens=40)
    alpha = real_vs_sim.run_alpha(sd)
    budget = user_budget(None, 4, 2, max_branches=7)
    run = ssd_run(tiny_pair, make_config(prompt="def add(a, b):", gamma=4, max_new_tokens=40), budget, "geometric",
                  alpha)
    sim = ssd_simulated(sd, budget, "geometric", alpha)
    assert run.trace.output_ids == sd.output_ids
    assert run.hits == sim.hits
    full = [r for r in run.ssd_rounds if len(r.fan) == 5 and not r.stopped]
    assert full and all(r.fan == schedules.fan_out(4, budget.settings(40, sd.eos_ids, "geometric", alpha), alpha)
                        for r in full)
    assert all(r.batch == 7 for r in full)


def test_fork_takes_the_top_candidates_without_the_drafted_token():
    rows = torch.tensor([[0.0, 5.0, 4.0, 3.0, 1.0],  # position p: drafted 1 (the top), so 2, 3
                         [9.0, 0.0, 1.0, 8.0, 7.0],  # p+1: drafted 3 (second), so 0, 4
                         [0.0, 1.0, 2.0, 3.0, 4.0]])  # the bonus position: 4, 3 (nothing left out)
    assert fork(rows, [1, 3], [2, 2, 2]) == [(0, 2), (0, 3), (1, 0), (1, 4), (2, 4), (2, 3)]
    assert fork(rows, [1, 3], [1, 0, 3]) == [(0, 2), (2, 4), (2, 3), (2, 2)]
    assert fork(rows, [1, 3], [0, 0, 0]) == []


def test_budget_fits_the_branches_inside_the_verify():
    costs = LatencyModel(draft_ms={1: 10.0, 8: 20.0, 32: 60.0}, verify_ms={1: 50.0, 5: 100.0},
                         draft_read_ms={5: 16.0}, network_ms=0.0)
    budget = fit_budget(costs, 4)
    # glue 16 + 4 draft(B) <= 100: draft(B) <= 21, i.e. B <= 8 + 1 * 24/40... B = 8 (draft(9) = 21.67)
    assert budget.branches == 8 and budget.fitted
    assert budget.tree_ms == pytest.approx(16 + 4 * 20.0) and budget.tree_ms <= budget.verify_ms == 100.0
    assert tree_ms(costs, 4, 9) > budget.verify_ms
    assert budget.fanout == math.ceil(8 / 5) and budget.dropped == 2
    remote = dataclasses.replace(costs, network_ms=200.0)
    assert fit_budget(remote, 4).branches == 32, "a network round trip leaves room for the cap"
    slow = dataclasses.replace(costs, verify_ms={1: 10.0, 5: 20.0})
    assert fit_budget(slow, 4).branches == 0, "nothing fits: plain speculative decoding"


def test_the_cap_is_visible_in_the_numbers(tiny_pair):
    # gamma 7, fan-out 5: 40 branches asked, 32 kept: the last outcomes lose theirs (uniform)
    budget = user_budget(None, 7, 5)
    assert (budget.wanted, budget.branches, budget.dropped) == (40, 32, 8)
    assert schedules.fan_out(7, budget.settings(64, []), 0.5) == [5, 5, 5, 5, 5, 5, 2, 0]
    run = ssd_run(tiny_pair, make_config(prompt="Hello world", gamma=7, max_new_tokens=40), budget)
    full = [r for r in run.ssd_rounds if r.batch and len(r.fan) == 8]
    assert full and all(r.capped == 8 and r.batch == 32 for r in full)
    assert run.capped_rounds >= len(full) and run.dropped_branches >= 8 * len(full)
    assert run.stats()["branches_dropped_by_cap"] == run.dropped_branches


def test_round_shape_and_lanes(tiny_pair):
    run = ssd_run(tiny_pair, make_config(prompt="Hello world", gamma=4, max_new_tokens=40), user_budget(None, 4, 2))
    trace = run.trace
    during = 0
    for rnd, info in zip(trace.rounds, run.ssd_rounds):
        targets = [e for e in rnd.events if e.lane == "target" and e.is_forward]
        assert len(targets) == 1, "one target pass per round"
        drafts = [e for e in rnd.events if e.lane == "draft" and e.is_forward]
        assert (info.jit_ms > 0) == (not info.hit), "a miss drafts its block before the verify, a hit does not"
        if info.batch and not info.stopped:
            assert len(drafts) == (0 if info.hit else rnd.gamma) + 1 + 4, "the glue pass, then gamma batched passes"
            during += any(d.start_ms < targets[0].end_ms and targets[0].start_ms < d.end_ms for d in drafts)
    assert during >= 1, "the branches run while the target verifies"
    for lane in ("draft", "target"):
        events = sorted((e for e in trace.events if e.lane == lane), key=lambda e: e.start_ms)
        assert all(a.end_ms <= b.start_ms for a, b in zip(events, events[1:])), f"the {lane} lane overlaps itself"
        assert all(e.kind in FORWARD_KINDS | {"sample", "rollback"} for e in events)
    assert all(e.end_ms <= trace.wall_ms for e in trace.events), "nothing is drawn past the end of the run"
    assert run.ssd_rounds[-1].stopped and run.ssd_rounds[-1].over_verify_ms == 0
    assert trace.output_text == "".join(r.emitted_text for r in trace.rounds)
    assert run.wasted_draft_ms > 0 and run.stats()["misses"] == len(trace.rounds) - run.hits


def test_stops_at_eos_like_the_engine(tiny_pair):
    plain = run_ar(tiny_pair, prompt="Hello world", max_new_tokens=24).output_ids
    for at in (0, 5, 11):
        pair = dataclasses.replace(tiny_pair)
        pair.__dict__["eos_ids"] = [plain[at]]
        first = plain.index(plain[at])
        for gamma in (1, 3, 5):
            trace = ssd_run(pair, make_config(prompt="Hello world", gamma=gamma, max_new_tokens=24),
                            user_budget(None, gamma, 2)).trace
            assert trace.output_ids == plain[: first + 1] and trace.stop_reason == "eos"


@pytest.mark.parametrize("budget", [1, 2, 3])
def test_small_budgets(tiny_pair, budget):
    run = ssd_run(tiny_pair, make_config(prompt="1 2 3", gamma=5, max_new_tokens=budget), user_budget(None, 5, 2))
    assert run.trace.output_ids == run_ar(tiny_pair, prompt="1 2 3", max_new_tokens=budget).output_ids
    assert run.trace.stop_reason == "max_new_tokens"


def test_no_budget_is_plain_speculative_decoding(tiny_pair):
    run = ssd_run(tiny_pair, make_config(prompt="def add(a, b):", gamma=3), Budget(3, 0, 0, 1.0, 0.0, True))
    sd = run_sd(tiny_pair, prompt="def add(a, b):", gamma=3)
    assert run.trace.output_ids == sd.output_ids and run.hits == 0 and run.branches_per_round is None
    assert [(r.accepted, r.emitted) for r in run.trace.rounds] == [(r.accepted, r.emitted) for r in sd.rounds]


def test_threads_are_gone_and_a_failed_target_returns_no_run(tiny_pair, monkeypatch):
    before = set(threading.enumerate())
    ssd_run(tiny_pair, make_config(gamma=3, max_new_tokens=8))
    assert set(threading.enumerate()) == before and torch.get_num_threads() == 1
    calls = []
    real_verify = specviz.measure.ssd_real.verify

    def failing(*args, **kwargs):  # the target fails in its third round, its branches in flight
        calls.append(1)
        if len(calls) == 3:
            raise ConnectionError("the server went away")
        return real_verify(*args, **kwargs)

    monkeypatch.setattr(specviz.measure.ssd_real, "verify", failing)
    torch.set_num_threads(2)
    try:
        with pytest.raises(ConnectionError, match="went away"):
            ssd_run(tiny_pair, make_config(gamma=3, max_new_tokens=16))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)
    assert set(threading.enumerate()) == before


@pytest.mark.parametrize("field, value", [("temperature", 0.7), ("drafter", "ngram"), ("draft_vocab", 64),
                                          ("policy", "heuristic"), ("stop", ["\n"])])
def test_refuses_what_it_does_not_do(tiny_pair, field, value):
    with pytest.raises(BadInput) as err:
        ssd_run(tiny_pair, make_config(**{field: value}))
    assert err.value.field == field


def test_budget_of_another_gamma_is_refused(tiny_pair):
    with pytest.raises(BadInput) as err:
        ssd_run(tiny_pair, make_config(gamma=3), user_budget(None, 4, 2))
    assert err.value.field == "gamma"


def test_real_vs_simulated_on_the_same_serial_run(tiny_pair):
    config = make_config(prompt="def add(a, b):", gamma=4, max_new_tokens=32)
    result = real_vs_sim.real_vs_simulated(tiny_pair, config, "ssd", fanout=2)
    assert result.identical and result.budget.branches == 10 and not result.budget.fitted
    assert result.measured.rounds == result.simulated.rounds == len(result.serial.rounds)
    assert result.measured.hit_rate == pytest.approx(result.simulated.hit_rate)
    assert ("draft", 4, 1) in result.measured_passes, "the batched branch passes were measured, not guessed"
    gap = result.gap()
    assert not gap.rounds_differ
    total = sum(v for k, v in gap.to_dict().items() if k != "rounds_differ")
    assert total == pytest.approx(result.real.trace.wall_ms - result.sim.wall_ms)
    fitted = real_vs_sim.real_vs_simulated(tiny_pair, config, "ssd", serial=result.serial, costs=result.costs)
    assert fitted.budget.fitted and fitted.budget.tree_ms <= fitted.budget.verify_ms
    pearl = real_vs_sim.real_vs_simulated(tiny_pair, config, "pearl", serial=result.serial)
    assert pearl.identical and pearl.measured.hit_rate is None and pearl.measured.rounds == pearl.simulated.rounds


def test_overlap_cli_prints_both_and_writes_the_json(tmp_path, capsys):
    out = tmp_path / "o.json"
    code = main(["overlap", "--schedule", "ssd", "--pair", "tiny", "--dtype", "float32", "--prompt", "def add(a, b):",
                 "--gamma", "3", "--max-new-tokens", "24", "--fanout", "2", "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "measured" in printed and "simulated" in printed and "budget (asked for): B = 8" in printed
    data = json.loads(out.read_text())
    assert data["schedule"] == "ssd" and data["identical"] is True
    for side in ("measured", "simulated"):
        assert set(data[side]) == {"wall_ms", "rounds", "hit_rate", "tokens_per_second"}
    assert data["ssd"]["budget"]["branches"] == 8
    code = main(["overlap", "--schedule", "pearl", "--pair", "tiny", "--dtype", "float32", "--prompt", "Hi",
                 "--gamma", "2", "--max-new-tokens", "8", "--json", str(out)])
    assert code == 0 and json.loads(out.read_text())["measured"]["hit_rate"] is None
    assert main(["overlap", "--schedule", "ssd", "--pair", "tiny", "--prompt", "Hi", "--fanout", "0"]) == 2


# --- the Parallel page's "SSD for real" ---------------------------------------------------------------------

def _parallel_after_a_live_run(lang: str = "en"):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=90)
    at.run()
    at.select_slider(key="speed").set_value("Instant")
    at.slider(key="gamma").set_value(3)
    at.number_input(key="max_new_tokens").set_value(24)
    at.toggle(key="race").set_value(False)
    at.run()
    at.button(key="run").click().run()
    at.switch_page("pages/parallel.py")
    if lang != "en":
        at.query_params["lang"] = lang
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.usefixtures("app_tiny_only")
def test_parallel_page_runs_ssd_for_real_beside_its_simulation():
    at = _parallel_after_a_live_run()
    assert at.toggle(key="parallel_ssd_fit").value is True
    at.toggle(key="parallel_ssd_fit").set_value(False).run()  # the sidebar's fan-out: branches for sure
    at.button(key="parallel_ssd_run").click().run()
    assert not at.exception, at.exception
    result = at.session_state["parallel_page"].ssd[1]
    assert result.identical and result.budget.branches == 2 * 4 and not result.budget.fitted
    labels = [m.label for m in at.metric]
    for label in ("hit rate", "branches / round", "wasted draft time",
                  "measured ÷ simulated", "same tokens as serial"):
        assert label in labels, labels
    assert [m.value for m in at.metric if m.label == "same tokens as serial"] == ["yes"]
    figs = [json.loads(f.proto.spec) for f in at.get("plotly_chart")]
    titles = [a["text"] for f in figs for a in f["layout"].get("annotations", [])]
    assert any(t.startswith("SSD, simulated") for t in titles) and any(t.startswith("SSD, measured") for t in titles)
    text = " ".join(m.value for m in at.markdown)
    assert "Measured minus simulated, by part:" in text and "Cores: here each model runs on one core" in text
    assert "Budget (the sidebar's fan-out): B = 8 branches a round" in " ".join(c.value for c in at.caption)


@pytest.mark.usefixtures("app_tiny_only")
def test_parallel_page_ssd_for_real_in_chinese():
    at = _parallel_after_a_live_run("zh")
    at.button(key="parallel_ssd_run").click().run()
    assert not at.exception, at.exception
    text = " ".join([m.value for m in at.markdown] + [c.value for c in at.caption] + [m.label for m in at.metric])
    assert "真实运行 SSD" in text and "命中率" in text and "预算" in text
    assert "Measured minus" not in text and "Budget" not in text


@pytest.mark.usefixtures("app_tiny_only")
def test_round_trip_slider_on_a_remote_run():
    """A recorded remote run: the added round trip lengthens every replayed verify, and the chart
    marks where PEARL stops paying."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=90)
    at.switch_page("pages/parallel.py").run()
    at.selectbox(key="parallel_source").set_value("Recorded, remote target: code-gamma4-remote-greedy").run()
    assert not at.exception, at.exception
    assert at.slider(key="parallel_rtt").value == 0
    walls = lambda: [float(t) for t in (m.value for m in at.metric if m.label == "tokens / s")]  # noqa: E731
    before = walls()
    spec = json.loads(at.get("plotly_chart")[-1].proto.spec)
    assert spec["layout"]["yaxis"]["title"]["text"] == "speedup over serial"
    pearl = next(d for d in spec["data"] if d["name"] == "PEARL")
    assert pearl["y"][0] > pearl["y"][-1], "the gain over serial shrinks as the round trip grows"
    at.slider(key="parallel_rtt").set_value(1000).run()
    assert not at.exception, at.exception
    after = walls()
    assert all(a < b for a, b in zip(after, before)), "every schedule is slower with a longer round trip"
    assert "Speculation at a distance" in " ".join(m.value for m in at.markdown)
