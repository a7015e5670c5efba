"""The p/q inspector and the walkthrough of one round (pages/inspect_round.py).

* the record: sampling runs keep each judged draw u and the top-10 rows of q and p (and the
  residual at a rejection); greedy runs keep the rows and no draws; the seeded output is the
  same as before the draws were recorded (the rule below is the old one, verbatim);
* the recorded u decides exactly as min(1, p/q) says;
* specviz.analysis.round_story reads a round (and a trace recorded before these fields) for the page;
* the figures; the page through AppTest on the tiny pair: Next steps through all six steps
  of a real round, naming its tokens and milliseconds; the p/q chart for a sampling run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from helpers import run_sd
from streamlit.testing.v1 import AppTest

import specviz.engine.decode
from specviz import Trace
from specviz.analysis import round_story as inspect
from specviz.analysis.marks import printable
from specviz.analysis.metrics import fmt_ms
from specviz.engine.acceptance import Acceptance, sampling_accept, top_tokens
from specviz.engine.decode import TOP_K
from specviz.figures import round_story as FI
from specviz.ui.markdown import code_span, token_span

pytestmark = pytest.mark.usefixtures("single_thread")

ROOT = Path(__file__).resolve().parent.parent


def _config(path: Path) -> dict:
    """The recorded config of a shipped trace, read from its JSON."""
    return json.loads(path.read_text(encoding="utf-8"))["config"]


# the shipped speculative runs: a target-alone run ("autoregressive") drafts nothing to inspect
TRACES = [p for p in sorted((ROOT / "assets" / "traces").glob("*.json")) if _config(p)["mode"] == "speculative"]
GREEDY = [p for p in TRACES if _config(p)["temperature"] == 0]
APP = str(ROOT / "app.py")
PAGE = "pages/inspect_round.py"
TIMEOUT = 90
SAMPLING = dict(temperature=0.9, top_p=1.0, gamma=4, max_new_tokens=40)


def old_sampling_accept(p, q, draft, gen):
    """sampling_accept as it was before it returned its draws: the reference for the
    random stream (same draws, same order)."""
    p = p.cpu()
    g = len(draft)
    if g:
        q = q.cpu()
        rows = torch.arange(g)
        tok = torch.tensor(draft)
        ratio = p[rows, tok] / q[rows, tok].clamp_min(1e-30)
        u = torch.rand(g, generator=gen)
        rejected = (u >= ratio).nonzero()
        if len(rejected):
            k = int(rejected[0])
            residual = (p[k] - q[k]).clamp_min(0)
            total = residual.sum()
            row = residual / total if total > 0 else p[k]
            return k, int(torch.multinomial(row, 1, generator=gen))
    return g, int(torch.multinomial(p[g], 1, generator=gen))


def decides(u: float, p: float, q: float) -> bool:
    """Speculative sampling's test: keep the token iff u < p/q (so with probability min(1, p/q))."""
    return u < p / max(q, 1e-30)


def sig4(x: float) -> bool:
    return x == float(f"{x:.4g}")


# --- the acceptance rule: same stream, now with its draws ---------------------------------------


def test_sampling_accept_keeps_its_random_stream():
    """On random rows the new rule decides exactly as the old one and leaves the generator
    in the same state; it unpacks as (k, token) and holds the judged draws."""
    torch.manual_seed(0)
    for trial in range(200):
        g = trial % 5
        p = torch.rand(g + 1, 12).softmax(-1)
        q = torch.rand(g, 12).pow(3).softmax(-1) if g else None
        draft = [int(torch.multinomial(q[i], 1)) for i in range(g)]
        a, b = torch.Generator().manual_seed(trial), torch.Generator().manual_seed(trial)
        new, old = sampling_accept(p, q, draft, a), old_sampling_accept(p, q, draft, b)
        assert isinstance(new, Acceptance) and tuple(new) == old
        k, tok = new
        assert torch.equal(torch.rand(3, generator=a), torch.rand(3, generator=b))
        assert len(new.u) == min(k + 1, g)


def test_the_seeded_output_is_unchanged(tiny_pair, monkeypatch):
    """A sampling run with the rule that returns its draws emits exactly what the old rule
    emitted, round for round, for fixed seeds and both drafters."""
    for drafter in ("model", "ngram"):
        for seed in (0, 3):
            new = run_sd(tiny_pair, seed=seed, drafter=drafter, **SAMPLING)
            with monkeypatch.context() as m:
                m.setattr(specviz.engine.decode, "sampling_accept", lambda *a: Acceptance(*old_sampling_accept(*a)))
                old = run_sd(tiny_pair, seed=seed, drafter=drafter, **SAMPLING)
            assert new.output_ids == old.output_ids, (drafter, seed)
            assert [r.accepted for r in new.rounds] == [r.accepted for r in old.rounds]
            assert not any(r.draws for r in old.rounds) and any(r.draws for r in new.rounds)


def test_top_tokens_break_ties_as_argmax():
    rows = torch.tensor([[0.1, 0.3, 0.3, 0.0, 0.3], [0.0, 0.0, 1.0, 0.0, 0.0]])
    assert top_tokens(rows, 2) == [[1, 2], [2]]  # lower id first among ties; no zero-probability ids
    assert top_tokens(rows[0], 10) == [[1, 2, 4, 0]]
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):  # rows full of ties, against sorting by (-probability, id)
        vocab, k = int(torch.randint(1, 30, (1,), generator=gen)), int(torch.randint(1, 12, (1,), generator=gen))
        rows = torch.randint(0, 5, (4, vocab), generator=gen).float()
        expected = [sorted((i for i in range(vocab) if row[i] > 0), key=lambda i: (-float(row[i]), i))[:k]
                    for row in rows]
        assert top_tokens(rows, k) == expected


# --- what a run records ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rows_seen(tiny_pair):
    """A sampling run, with the exact p and q rows record_candidates saw for each round."""
    seen = []
    real = specviz.engine.decode.record_candidates

    def spy(rnd, prop, verdict, p, text):
        seen.append((None if prop.q_rows is None else prop.q_rows.clone(), p.clone()))
        return real(rnd, prop, verdict, p, text)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(specviz.engine.decode, "record_candidates", spy)
        trace = run_sd(tiny_pair, seed=1, **SAMPLING)
    return trace, seen


def test_sampling_runs_record_the_draws_and_the_top_rows(rows_seen):
    trace, seen = rows_seen
    assert len(seen) == len(trace.rounds)
    rejections = 0
    for rnd, (q, p) in zip(trace.rounds, seen):
        n, k = len(rnd.proposed), rnd.accepted
        assert len(rnd.candidates) == inspect.n_positions(rnd) == (n + 1 if k == n else n)
        assert len(rnd.draws) == inspect.judged(rnd)
        for i, ids in enumerate(rnd.candidates):
            assert len(ids) == len(set(ids)) == len(rnd.candidate_p[i]) == len(rnd.candidate_text[i])
            assert set(top_tokens(p[i], TOP_K)[0]) <= set(ids)  # the target's top 10
            assert rnd.candidate_p[i] == sorted(rnd.candidate_p[i], reverse=True)
            assert all(sig4(x) for x in rnd.candidate_p[i] + rnd.candidate_q[i])
            if i < n:
                assert set(top_tokens(q[i], TOP_K)[0]) <= set(ids)  # the draft's top 10
                assert rnd.proposed[i] in ids and len(rnd.candidate_q[i]) == len(ids)
                j = ids.index(rnd.proposed[i])
                assert rnd.candidate_q[i][j] == pytest.approx(rnd.draft_probs[i], rel=1e-3)
                assert rnd.candidate_p[i][j] == pytest.approx(rnd.target_probs[i], rel=1e-3)
            else:
                assert rnd.candidate_q[i] == []  # the target's own position: no draft row
        if k < n:
            rejections += 1
            assert len(rnd.residual_probs) == len(rnd.candidates[k])
            assert sum(rnd.residual_probs) <= 1.001
            drawn = rnd.candidates[k].index(rnd.correction)
            assert rnd.residual_probs[drawn] > 0  # the correction came from the residual
            assert rnd.residual_probs[rnd.candidates[k].index(rnd.proposed[k])] == 0  # max(0, p - q) at x: q >= p
        else:
            assert rnd.residual_probs == []
    assert rejections, "the run had a rejection"


def test_the_recorded_draw_decides_as_min_1_p_over_q_says(tiny_pair):
    judged = 0
    for seed in range(4):
        for drafter in ("model", "ngram"):
            trace = run_sd(tiny_pair, seed=seed, drafter=drafter, **SAMPLING)
            for rnd in trace.rounds:
                for i, u in enumerate(rnd.draws):
                    p, q = rnd.target_probs[i], rnd.draft_probs[i]
                    kept = i < rnd.accepted
                    assert decides(u, p, q) == kept == (u < min(1.0, p / q)), (seed, rnd.index, i)
                    pos = inspect.position(rnd, i, greedy=False)
                    assert pos.u == u and pos.ratio == pytest.approx(min(1.0, p / q))
                    assert pos.verdict == ("accepted" if kept else "rejected")
                    judged += 1
    assert judged > 50


def test_greedy_runs_record_the_argmax_comparison(tiny_pair):
    trace = run_sd(tiny_pair, gamma=4, max_new_tokens=40)
    assert any(r.rejected for r in trace.rounds) and any(r.accepted for r in trace.rounds)
    for rnd in trace.rounds:
        assert rnd.draws == [] and rnd.residual_probs == []
        assert len(rnd.candidates) == inspect.n_positions(rnd)
        for pos in inspect.positions(rnd, greedy=True):
            if pos.verdict == "accepted":
                assert pos.agree and pos.draft_top == pos.target_top == pos.token
            elif pos.verdict == "rejected":
                assert pos.agree is False and pos.target_top == rnd.correction != pos.token
            if pos.verdict in ("accepted", "rejected", "bonus"):
                best = max(pos.candidates, key=lambda c: (c.p, -c.id))  # the target's argmax, from the record
                assert best.id == (pos.token if pos.verdict == "accepted" else rnd.correction)
            assert pos.u is None


def test_the_record_survives_json(rows_seen):
    trace, _ = rows_seen
    back = Trace.from_json(trace.to_json())
    assert [r.__dict__ for r in back.rounds] == [r.__dict__ for r in trace.rounds]


def test_the_record_stays_off_the_clock(tiny_pair, monkeypatch):
    """Making the record 30 ms slower per round moves no timing: it is display work."""
    import time

    kw = dict(seed=2, **SAMPLING)
    base = run_sd(tiny_pair, **kw)
    real = specviz.engine.decode.record_candidates

    def slow(*a):
        time.sleep(0.03)
        return real(*a)

    monkeypatch.setattr(specviz.engine.decode, "record_candidates", slow)
    slowed = run_sd(tiny_pair, **kw)
    assert slowed.output_ids == base.output_ids
    # on the clock the sleeps would add 30 ms of overhead (time in no forward pass) per round
    per_round = (slowed.summary["overhead_ms"] - base.summary["overhead_ms"]) / len(base.rounds)
    assert per_round < 10, per_round


# --- older traces ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.stem)
def test_shipped_traces_load_and_inspect_with_their_rows(path):
    trace = Trace.load(path)
    assert any(r.candidates for r in trace.rounds), "the shipped traces are recorded with the top-10 rows"
    index = inspect.default_round(trace)
    story = inspect.story(trace, index)
    assert story.drafts and story.verify is not None and story.verify_ms > 0
    assert all(pos.recorded for pos in story.positions if pos.judged)
    FI.pq_figure(story.positions[0])


def _without_rows(trace: Trace) -> Trace:
    """The trace as an older specviz recorded it: no top-10 rows, no draws."""
    for r in trace.rounds:
        r.candidates, r.candidate_q, r.candidate_p, r.candidate_text = [], [], [], []
        r.draws, r.residual_probs = [], []
    return trace


def test_greedy_and_sampling_runs_are_shipped():
    assert GREEDY and set(TRACES) - set(GREEDY)


@pytest.mark.parametrize("path", GREEDY, ids=lambda p: p.stem)
def test_traces_recorded_before_the_rows_still_inspect(path):
    trace = _without_rows(Trace.load(path))
    index = inspect.default_round(trace)
    assert index is not None
    story = inspect.story(trace, index)
    assert story.drafts and story.verify is not None and story.verify_ms > 0
    for pos in story.positions:
        assert not pos.recorded
        if pos.token is not None:
            assert [c.id for c in pos.candidates] == [pos.token]  # the proposed token alone
        if pos.judged:  # greedy: the verdict alone decides the argmax comparison
            assert pos.agree == (pos.verdict == "accepted")
    FI.pq_figure(story.positions[0])


def test_a_version_1_trace_migrates(tmp_path):
    data = json.loads(TRACES[0].read_text(encoding="utf-8"))
    for r in data["rounds"]:
        r["q"], r["p"] = r.pop("draft_probs"), r.pop("target_probs")
        for key in ("candidates", "candidate_q", "candidate_p", "candidate_text", "draws", "residual_probs"):
            r.pop(key, None)  # version 1 had none of these
    data["schema_version"] = 1
    trace = Trace.from_dict(data)
    assert trace.rounds[0].draft_probs and trace.rounds[0].candidates == []


# --- specviz.analysis.round_story and the figures ------------------------------------------------------------------


def test_story_names_the_rounds_passes(rows_seen):
    trace, _ = rows_seen
    index = inspect.default_round(trace)
    rnd = trace.rounds[index]
    s = inspect.story(trace, index)
    assert 0 < rnd.accepted < len(rnd.proposed)  # the instructive kind of round, when the run has one
    assert [p.text for p in s.drafts] == rnd.proposed_text
    assert all(p.ms > 0 for p in s.drafts) and s.verify_ms > 0
    assert s.next_start_ms is not None and s.next_start_ms >= s.verify_end_ms
    assert s.rejected is not None and s.rejected.index == rnd.accepted
    assert s.rollback("target") is not None


def test_figures(rows_seen):
    trace, _ = rows_seen
    rnd = next(r for r in trace.rounds if r.rejected)
    pos = inspect.position(rnd, rnd.accepted, greedy=False)
    fig = FI.pq_figure(pos)
    assert [t.name for t in fig.data] == ["q · draft", "p · target"]
    names = list(fig.data[0].x)
    drafted = names.index(printable(pos.text)) if printable(pos.text) in names else None
    assert drafted is not None and fig.data[0].marker.line.width[drafted] == 3
    assert any("drafted" in a.text for a in fig.layout.annotations)
    res = FI.residual_figure(pos)
    assert any("drawn" in a.text for a in res.layout.annotations)
    draw = FI.draw_figure(pos.ratio, pos.u)
    assert draw.data[-1].x[0] == pos.u


# --- the page -----------------------------------------------------------------------------------------


def _live_then_inspect(temperature: float = 0.0) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.select_slider(key="speed").set_value("Instant")
    at.slider(key="gamma").set_value(4)
    at.number_input(key="max_new_tokens").set_value(40)
    if temperature:
        at.slider(key="temperature").set_value(temperature)
    at.run()
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    assert at.session_state["live"].sd_done
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    return at


def _chart_names(at: AppTest) -> list[str]:
    names = []
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        names += [t.get("name", "") for t in spec.get("data", [])]
    return names


def _walk(at: AppTest) -> tuple[list[str], list[list[str]]]:
    """Press Next through the six steps; each step's narration and the chart traces shown."""
    texts, charts = [], []
    for step in range(6):
        assert not at.exception, (step, at.exception)
        body = [m.value for m in at.markdown]
        assert f"### {step + 1} · " in " ".join(body), step
        texts.append(" ".join(body))
        charts.append(_chart_names(at))
        if step < 5:
            at.button(key="inspect_next").click().run()
    assert at.button(key="inspect_next").disabled
    return texts, charts


def test_next_walks_a_real_sampling_round(app_tiny_only):
    at = _live_then_inspect(temperature=0.9)
    assert at.button(key="inspect_next").proto.shortcut.upper() == "N"
    trace = at.session_state["live"].trace
    rnd = trace.rounds[at.session_state["inspect_round"]]
    story = inspect.story(trace, rnd.index)
    texts, charts = _walk(at)
    first = printable(rnd.proposed_text[0])
    assert code_span(first) in texts[0] and dur(story.drafts[0].ms) in texts[0]  # the draft's tokens and pass times
    assert "ONE forward pass" in texts[1] and dur(story.verify_ms) in texts[1]
    assert "min(1, p/q)" in texts[2] and "the draw u = " in texts[2]
    assert "q · draft" in charts[2] and "p · target" in charts[2]  # the p/q chart
    assert token_span(rnd.correction_text) in texts[3]
    assert "roll" in texts[4].lower() and "cache" in texts[4]
    if story.next_start_ms is not None:
        assert f"round {rnd.index + 2} started drafting at {story.next_start_ms:,.1f} ms" in texts[5]
    else:
        assert "last round" in texts[5]
    everything = " ".join(texts)
    for idea in ("What the draft produces", "Why one verify pass checks many tokens", "Why each model sits idle",
                 "Why the output is the target's own"):
        assert idea in everything


def dur(ms: float) -> str:
    """A duration as the page writes it."""
    return f"{ms:.2f} ms" if ms < 1 else fmt_ms(ms)


def test_greedy_round_shows_the_argmax_comparison(app_tiny_only):
    at = _live_then_inspect()
    at.button(key="inspect_next").click().run()
    at.button(key="inspect_next").click().run()
    assert not at.exception, at.exception
    text = " ".join(m.value for m in at.markdown)
    assert "top token" in text and "min(1, p/q) = " not in text
    labels = [m.label for m in at.metric]
    assert "draft's top" in labels and "target's top" in labels


def test_a_recorded_trace_walks_with_no_model(app_tiny_only):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="inspect_source").value.startswith("Recorded:")
    texts, _ = _walk(at)
    assert "ms" in texts[0] and "top token" in texts[2]
    at.button(key="inspect_restart").click().run()
    assert "### 1 · " in " ".join(m.value for m in at.markdown)


def test_in_chinese_every_step_renders(app_tiny_only):
    """The translated narration keeps its placeholders (whatever the catalog holds)."""
    at = _live_then_inspect(temperature=0.9)
    at.button(key="inspect_next").click().run()
    at.query_params["lang"] = "zh"
    at.run()
    assert "### 2 · " in " ".join(m.value for m in at.markdown)  # the language switch keeps the step
    for _ in range(4):
        assert not at.exception, at.exception
        at.button(key="inspect_next").click().run()
    assert not at.exception, at.exception
    assert "### 6 · " in " ".join(m.value for m in at.markdown)


def test_every_round_walks_to_the_end(app_tiny_only):
    """Rejections, bonus tokens, a cut last round: every drafted round of a run steps through."""
    at = _live_then_inspect(temperature=0.9)
    trace = at.session_state["live"].trace
    kinds = set()
    for index in inspect.drafted_rounds(trace):
        at.selectbox(key="inspect_round").set_value(index).run()
        assert "### 1 · " in " ".join(m.value for m in at.markdown)  # a new round starts at step 1
        for _ in range(5):
            at.button(key="inspect_next").click().run()
            assert not at.exception, (index, at.exception)
        kinds.add(inspect.story(trace, index).target_kind)
    assert kinds == {"fix", "bonus"}, kinds


def test_an_ngram_round_is_one_lookup(tiny_pair):
    trace = run_sd(tiny_pair, drafter="ngram", prompt="1 2 3 1 2 3 1 2 3 1 2", gamma=3, max_new_tokens=24)
    index = inspect.default_round(trace)
    s = inspect.story(trace, index)
    assert s.lookup and len(s.drafts) == 1 and s.rollback("draft") is None
    assert all(p.q in (None, 1.0) for p in s.positions)  # the lookup's q is one-hot


# --- near-ties: the threshold from the dtype's grid --------------------------------------------


def _grid_step(dtype: str, magnitude: float) -> float:
    """The step between neighbouring values torch's ``dtype`` holds just above ``magnitude``."""
    x = torch.tensor([magnitude])
    if dtype == "float32":
        return float(torch.nextafter(x, 2 * x) - x)
    vals = torch.linspace(magnitude, magnitude * 1.02, 20001).to(getattr(torch, dtype)).float().unique()
    return float(vals.diff().min())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("magnitude", [3.0, 10.0, 20.0, 31.0])
def test_the_grid_spacing_is_torchs(dtype, magnitude):
    top = 2.0 ** (math.floor(math.log2(magnitude)) + 1)  # spacing(dtype, top): the grid in [top / 2, top)
    assert inspect.spacing(dtype, top) == _grid_step(dtype, magnitude)


def test_the_near_tie_threshold_is_two_grid_steps_at_the_logits_scale():
    assert inspect.near_tie_logit("bfloat16") == 0.25 == 2 * _grid_step("bfloat16", 20.0)
    assert inspect.near_tie_logit("float16") == 2 * _grid_step("float16", 20.0)
    assert inspect.near_tie_logit("float32") == 2 * _grid_step("float32", 20.0)


def test_one_grid_step_each_way_swaps_a_gap_below_the_threshold_and_none_above():
    """Two logits in [16, 32), each landing on a neighbouring bf16 value (the first down, the
    second up, the worst case): their order can swap (or tie) exactly when the gap is below
    near_tie_logit."""
    s = inspect.spacing("bfloat16")
    for gap in [x / 100 for x in range(1, 60)]:
        can_swap = any(math.floor((z2 + gap) / s) <= math.ceil(z2 / s)
                       for z2 in [20.0 + s * (f + 0.5) / 1000 for f in range(1000)])  # z2 off the grid
        assert can_swap == (gap < inspect.near_tie_logit("bfloat16")), gap


def test_the_logit_gap_is_the_log_ratio_and_the_margin_bounds_it():
    assert inspect.logit_gap(0.318, 0.281) == pytest.approx(0.1237, abs=1e-4)
    assert inspect.near_tie(inspect.logit_gap(0.318, 0.281), "bfloat16")  # 0.037 apart, yet a near-tie
    assert not inspect.near_tie(inspect.logit_gap(0.015, 0.001), "bfloat16")  # 0.014 apart, a factor of 15
    assert not inspect.near_tie(0.1, "int8")  # no grid known: never called one
    for m in (0.0, 0.0373, 0.3, 0.9):  # any p1 - p2 = m with p1 + p2 <= 1 is at least that far apart
        least = inspect.least_logit_gap(m)
        for p2 in (0.001, 0.05, (1 - m) / 2):
            assert m == 0 or inspect.logit_gap(p2 + m, p2) >= least - 1e-12
    with pytest.raises(ValueError):
        inspect.logit_gap(0.3, 0.0)


def test_top_two_reads_the_rows_where_an_output_token_was_chosen(tiny_pair):
    trace = run_sd(tiny_pair, max_new_tokens=12, gamma=3)
    for pos in range(len(trace.output_ids)):
        r, i = inspect.locate(trace, pos)
        two = inspect.top_two(trace, pos)
        rnd = trace.rounds[r]
        assert (two.round, two.position) == (r + 1, i + 1)
        assert two.first.id == rnd.candidates[i][0] == trace.output_ids[pos]  # greedy: the target's argmax
        assert two.first.p >= two.second.p
    assert inspect.locate(trace, len(trace.output_ids)) is None


def _recorded_at_step_3(source: str, traces_dir: Path | None = None, monkeypatch=None) -> AppTest:
    if traces_dir is not None:
        from specviz.ui import chrome

        monkeypatch.setattr(chrome, "TRACES_DIR", traces_dir)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.switch_page(PAGE).run()
    at.selectbox(key="inspect_source").set_value(source).run()
    for _ in range(2):
        at.button(key="inspect_next").click().run()
    assert not at.exception, at.exception
    return at


def test_a_rejected_greedy_token_names_the_draft_and_target_choice(app_tiny_only):
    """Prose: the target found the draft's word nearly as good as its own (another wording)."""
    trace = Trace.load(ROOT / "assets" / "traces" / "prose-gamma4-greedy.json")
    at = _recorded_at_step_3("Recorded: prose-gamma4-greedy")
    rnd = trace.rounds[at.session_state["inspect_round"]]
    rej = inspect.rejection(rnd)
    assert rej is not None and at.session_state["inspect_pos"] == rnd.accepted  # the page opens on it
    (said,) = [i.value for i in at.info if "The draft wrote" in i.value]
    assert f"to the target, {token_span(rej.draft.text)} has p = {rej.draft.p:.3f} against {rej.target.p:.3f}" in said
    assert ("as likely: another wording" in said) == rej.plausible
    assert ("times less likely" in said) == (not rej.plausible)


def test_rejections_are_read_from_the_rows_most_plausible_first():
    trace = Trace.load(ROOT / "assets" / "traces" / "chinese-gamma4-greedy.json")
    found = inspect.rejections(trace)
    assert found and [r.ratio for r in found] == sorted((r.ratio for r in found), reverse=True)
    for r in found:
        rnd = trace.rounds[r.round - 1]
        assert r.draft.id == rnd.proposed[rnd.accepted] and r.target.id == rnd.correction
        assert r.position == rnd.accepted + 1
    assert inspect.rejections(Trace.load(ROOT / "assets" / "traces" / "chinese-gamma4-sampled.json")) == []


def test_a_bf16_near_tie_is_said_in_the_charts_numbers(app_tiny_only, tmp_path, monkeypatch):
    """A bf16 greedy run whose target had two tokens at 0.318 and 0.281 at the rejected position."""
    import dataclasses

    trace = Trace.load(ROOT / "assets" / "traces" / "prose-gamma4-greedy.json")
    trace.config = dataclasses.replace(trace.config, dtype="bfloat16")
    index = inspect.default_round(trace)
    rnd = trace.rounds[index]
    row = rnd.candidate_p[rnd.accepted]
    rnd.candidate_p[rnd.accepted] = [0.318, 0.281, *[min(p, 0.2) for p in row[2:]]]
    (tmp_path / "tie.json").write_text(trace.to_json(), encoding="utf-8")
    at = _recorded_at_step_3("Recorded: tie", tmp_path, monkeypatch)
    texts = " ".join(c.value for c in at.caption)
    assert "A near-tie: the target's top two here" in texts
    assert "ln(0.318 / 0.281) = 0.12 apart in logit, within the 0.25 that bfloat16 rounding can move" in texts
