"""Helpers shared by several test modules (plain functions and constants; the fixtures are in
conftest.py). Test modules import from here, never from one another.

* runs on a pair: ``make_config``, ``run_sd``, ``run_ar``; the KV caches they create:
  ``recording_kv``;
* servers the tests start: ``free_port``, ``stop_process``, ``app_server_running``;
* a hand-made ``Round`` for figures and marks: ``make_round``;
* the chi-square machinery of the sampling tests: ``P_MIN``, ``chi2_fit``, ``exact_first_two``,
  ``sample_first_two``;
* busy programs beside a run: ``busy_loops``, ``other_share_now``, ``needs_fork``;
* the app in Chromium: ``CHROMIUM``, ``VIEWPORT``, ``open_session``, ``wait_for_run`` and the rest
  (Playwright is imported only when a browser helper is used).
"""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import math
import multiprocessing
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

import specviz.engine.decode
import specviz.engine.drafters
import specviz.models.pair
from specviz.models.kv import KVModel

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"


# --- runs on a pair -------------------------------------------------------------------------------


def make_config(**overrides):
    """A fresh RunConfig (Decoding mutates the one it gets) with greedy defaults."""
    from specviz import RunConfig

    base = dict(
        prompt="Hello world", gamma=4, max_new_tokens=32, temperature=0.0, top_k=0,
        top_p=1.0, seed=0, chat=True, stop=[], drafter="model", policy="constant",
    )
    base.update(overrides)
    return RunConfig(**base)


def app_engine(name: str = "tiny"):
    """The engine worker's client the app started in this process (an AppTest's) for pair
    ``name``: st.cache_resource keeps the app's loaders, out of reach outside a script run."""
    from specviz.worker.client import _clients
    from specviz.worker.protocol import Spec

    app = Spec(name, "float32")  # as specviz.ui.pair starts it (tests/test_worker.py's own say device="cpu")
    found = [c for c in list(_clients) if c.spec == app and c.alive]
    assert len(found) == 1, f"{len(found)} running engine workers for the {name} pair"
    return found[0]


def drop_app_engines() -> None:
    """Forget the app's loaded pairs (st.cache_resource) and stop their engine workers, so the
    next AppTest loads its pair, and starts its worker, in the environment of its own test."""
    import streamlit as st

    from specviz.worker.client import _clients

    st.cache_resource.clear()
    for client in list(_clients):
        if client.spec.device == "auto":  # the app's (tests/test_worker.py's own say "cpu")
            client.stop()


def int8_needs_cpu(pair, quant: str = "int8") -> None:
    """Skip a test that runs the int8 draft where the pair is not on the CPU (SPECVIZ_TEST_DEVICE):
    the int8 draft is CPU only (PyTorch's dynamic int8 kernels, specviz/models/int8.py)."""
    if quant == "int8" and pair.device.type != "cpu":
        pytest.skip(f"the int8 draft runs on the CPU only; the pair is on {pair.device}")


def run_sd(pair, **overrides):
    from specviz import speculative

    return speculative(pair, make_config(**overrides)).run()


def run_ar(pair, **overrides):
    from specviz import autoregressive

    return autoregressive(pair, make_config(**overrides)).run()


# --- the KV-cached models a run creates ----------------------------------------------------------------


class KVRecorder:
    """Every KVModel the engine creates, plus the longest record each ever held."""

    def __init__(self) -> None:
        self.instances: list[KVModel] = []
        self.peak: dict[int, int] = {}
        self.start = 0

    def mark(self) -> None:
        """Forget the KVModels of earlier runs: only later ones count from now on."""
        self.start = len(self.instances)

    @property
    def current(self) -> list[KVModel]:
        return self.instances[self.start:]

    def of(self, model) -> list[KVModel]:
        return [kv for kv in self.current if kv.model is model]

    def target(self, pair) -> KVModel:
        (kv,) = self.of(pair.target)
        return kv

    def draft(self, pair) -> KVModel | None:
        found = self.of(pair.draft)
        assert len(found) <= 1
        return found[0] if found else None


@contextlib.contextmanager
def recording_kv():
    """Patch the engine's KVModel with a subclass that registers its instances and
    tracks the peak cache length (the engine itself runs unchanged). Usable inside
    hypothesis tests, where function-scoped fixtures are not."""
    rec = KVRecorder()

    class Recorded(KVModel):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            rec.instances.append(self)
            rec.peak[id(self)] = 0

        def forward(self, new, keep, **tree):
            out = super().forward(new, keep, **tree)
            rec.peak[id(self)] = max(rec.peak[id(self)], len(self.tokens), self.cache_len)
            return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(specviz.engine.decode, "KVModel", Recorded)
        mp.setattr(specviz.models.pair, "KVModel", Recorded)  # ModelPair.target_kv
        mp.setattr(specviz.engine.drafters, "KVModel", Recorded)
        yield rec


# --- servers the tests start ------------------------------------------------------------------------


def free_port() -> int:
    """A port nothing listens on now (on loopback)."""
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """A real HTTP server's handler for the tests' stand-in servers: ``send`` answers with JSON,
    ``body`` reads a JSON request; nothing is logged."""

    def body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def stop_process(proc, grace_s: float) -> None:
    """End a server the tests started: terminate, wait ``grace_s``, then kill."""
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


# --- a hand-made round ------------------------------------------------------------------------------


def make_round(proposed="abc", accepted=1, correction="X", emitted=None, bonus=None, index=0):
    """A Round over one-character tokens (id = ord): ``proposed`` drafted, ``accepted`` of them
    kept, then ``correction``; with a draft pass per token and one verify pass, 10 ms apart per
    round index."""
    from specviz.record.run_trace import Event, Round

    n = len(proposed)
    bonus = accepted == n and n > 0 if bonus is None else bonus
    ids = [ord(c) for c in proposed]
    kept = emitted if emitted is not None else ids[:accepted] + [ord(correction[0])]
    text = proposed[: min(accepted, len(kept))] + (correction if len(kept) > accepted else "")
    return Round(
        index=index, gamma=n, proposed=ids, proposed_text=list(proposed), draft_probs=[0.5] * n, target_probs=[0.25] * n,
        accepted=accepted, rejected=ids[accepted:], correction=ord(correction[0]), correction_text=correction,
        bonus=bonus, emitted=kept, emitted_text=text,
        events=[Event("draft", "draft_forward", 10.0 * index + i, 10.0 * index + i + 1, []) for i in range(n)]
        + [Event("target", "verify_forward", 10.0 * index + n, 10.0 * index + n + 4, [0] * (n + 1))],
    )


# --- chi-square against the target's exact probabilities ---------------------------------------------

P_MIN = 1e-3  # every statistical test passes at p-value > P_MIN (seeds are fixed: it cannot flake)


def chi2_fit(observed: Counter, expected_probs: dict, n: int, min_expected: float = 5.0) -> float:
    """Goodness-of-fit p-value; cells with expected count < min_expected are pooled.
    A draw outside the support (probability 0) fails outright."""
    from scipy import stats

    outside = {k: v for k, v in observed.items() if expected_probs.get(k, 0.0) <= 0.0}
    assert not outside, f"draws outside the support: {outside}"
    big = [k for k, pr in expected_probs.items() if pr * n >= min_expected]
    small = [k for k, pr in expected_probs.items() if 0 < pr * n < min_expected]
    obs = [observed.get(k, 0) for k in big]
    exp = [expected_probs[k] * n for k in big]
    if small:
        obs.append(sum(observed.get(k, 0) for k in small))
        exp.append(sum(expected_probs[k] for k in small) * n)
    exp = [e * sum(obs) / sum(exp) for e in exp]  # remove float drift from the total
    assert len(obs) >= 2
    return float(stats.chisquare(obs, exp).pvalue)


_EXACT: dict = {}


def exact_first_two(pair, prompt_ids, sampling) -> dict:
    """P(t1, t2) = p(t1 | prompt) p(t2 | prompt, t1) from plain full forward passes. Remembered
    per (pair, prompt, sampling): the draft variants share the target and so the answer."""
    import torch

    from specviz.engine.acceptance import warp

    key = (id(pair.target), tuple(prompt_ids), sampling)
    if key in _EXACT:
        return dict(_EXACT[key])

    def dist(ids):
        with torch.inference_mode():
            logits = pair.target(torch.tensor([ids], device=pair.device)).logits[0, -1:].float()
        return warp(logits, sampling)[0].double().cpu()

    p1 = dist(prompt_ids)
    joint = {}
    for t1 in p1.nonzero().flatten().tolist():
        p2 = dist(prompt_ids + [t1])
        for t2 in p2.nonzero().flatten().tolist():
            joint[(t1, t2)] = float(p1[t1] * p2[t2])
    assert math.isclose(sum(joint.values()), 1.0, abs_tol=1e-6)
    _EXACT[key] = joint
    return dict(joint)


def exact_first_two_or_eos(pair, prompt_ids, sampling) -> Counter:
    """``exact_first_two`` with a run's end at an EOS: (eos, None) when the first token is one."""
    eos = set(pair.eos_ids)
    expected = Counter()
    for (t1, t2), v in exact_first_two(pair, prompt_ids, sampling).items():
        expected[(t1, None) if t1 in eos else (t1, t2)] += v
    return expected


def first_two_or_eos(dec) -> tuple[int, int | None]:
    """Run rounds until two tokens are out (or the run ended at an EOS after one)."""
    for _ in dec:
        if len(dec.trace.output_ids) >= 2:
            break
    out = dec.trace.output_ids
    if dec.trace.stop_reason == "eos" and len(out) == 1:
        return (out[0], None)
    assert len(out) >= 2, f"the run ended after {out} ({dec.trace.stop_reason})"
    return tuple(out[:2])


def sample_first_two(pair, make, runs: int, **config) -> tuple[Counter, int, int]:
    """The first two tokens (or EOS) of ``runs`` runs of ``make`` (speculative or
    autoregressive) seeded 0..runs-1, with the first rounds' accepted and drafted counts."""
    counts, accepted, drafted = Counter(), 0, 0
    for seed in range(runs):
        dec = make(pair, make_config(max_new_tokens=8, seed=seed, **config))
        counts[first_two_or_eos(dec)] += 1
        accepted += dec.trace.rounds[0].accepted
        drafted += len(dec.trace.rounds[0].proposed)
    return counts, accepted, drafted


# --- busy programs beside a run ------------------------------------------------------------------------

BUSY_S = 60  # a busy loop ends by itself after this long, whatever happens to the test
needs_fork = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux: fork and CPU affinity")


def _spin(until: float, started, cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})
    started.set()
    x = 0
    while time.time() < until:
        x += 1


@contextlib.contextmanager
def busy_loops(n: int = 2, seconds: float = BUSY_S):
    """``n`` processes spinning on this process's CPUs, for at most ``seconds``; killed on exit.
    Each is pinned to one of those CPUs in turn: left to the scheduler, two loops on 2 cores
    sometimes shared one core and left the other to the run, which then took 1.0 core from it
    instead of 1.5 and, on the tiny pair's half-second runs, was not marked (1 run in 10)."""
    ctx = multiprocessing.get_context("fork")
    cpus = sorted(os.sched_getaffinity(0))
    procs, events = [], []
    try:
        for i in range(n):
            started = ctx.Event()
            p = ctx.Process(target=_spin, args=(time.time() + seconds, started, cpus[i % len(cpus)]), daemon=True)
            p.start()
            procs.append(p)
            events.append(started)
        for e in events:
            assert e.wait(10), "a busy loop did not start"
        time.sleep(0.2)
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.join(5)


def other_share_now(seconds: float = 1.0) -> float:
    """Cores other processes take right now, over ``seconds``."""
    from specviz.models.busy import CpuMeter

    meter = CpuMeter()
    meter.start()
    time.sleep(seconds)
    meter.stop()
    return meter.share


# --- the app in Chromium (Playwright) ---------------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 720}  # a classroom projector
RUN_TIMEOUT_MS = 120_000
needs_chromium = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="needs Debian's Chromium at /usr/bin/chromium")


# How long a browser step or check waits by default. Playwright's own 5 s is short for a page
# that a loaded machine redraws (the browser tests run beside other tests in tests/run.sh's
# parallel phase); a test that waits for a run passes its own, longer timeout.
EXPECT_TIMEOUT_MS = 20_000
ACTION_TIMEOUT_MS = 30_000


def expect(*args, **kwargs):
    """Playwright's ``expect`` (retries until the condition holds, ``EXPECT_TIMEOUT_MS`` unless told)."""
    from playwright.sync_api import expect as _expect

    _expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    return _expect(*args, **kwargs)


def wait_for_pair(page, timeout_ms: int = 90_000) -> None:
    """Wait until the sidebar's pair card says the pair is loaded (specviz.ui.pair.pair_state),
    then for that script run to end. While the pair loads the page's script state can read
    "notRunning" (for a moment, as the page reruns with the pair): only the card tells."""
    expect(page.locator('.sv-card[data-sv-pair="ready"]')).to_be_attached(timeout=timeout_ms)
    wait_for_run(page)


def wait_for_run(page, timeout_ms: int = RUN_TIMEOUT_MS) -> None:
    """Wait until the app is connected, its script run has finished and no element is stale
    (what Streamlit's own e2e tests wait for). Only meaningful after an expect on content
    that the run produces: right after a click the previous run's idle state still shows."""
    app = page.locator('[data-testid="stApp"]')
    expect(app).to_have_attribute("data-test-connection-state", "CONNECTED", timeout=timeout_ms)
    expect(app).to_have_attribute("data-test-script-state", "notRunning", timeout=timeout_ms)
    expect(page.locator('[data-stale="true"]')).to_have_count(0, timeout=timeout_ms)


def short_runs(page, tokens: int = 16) -> None:
    """Live runs of ``tokens`` new tokens (under Sampling and length): quick on a busy machine."""
    page.locator('[data-testid="stExpander"]').filter(has=page.locator(".st-key-max_new_tokens")).locator(
        "summary").click()
    box = page.locator(".st-key-max_new_tokens input")
    box.fill(str(tokens))
    box.press("Enter")
    expect(box).to_have_value(str(tokens))
    box.blur()  # before the wait: a blur after it may start one more script run under the next click
    wait_for_run(page)


def open_session(browser, url: str, scheme: str = "light", path: str = ""):
    """A fresh session (its own browser context) at 1280×720, the pair loaded. With ``path``
    ("about", "replay"), the page is opened by its address in a new session once the pair is
    loaded (a click in the top navigation would do the same, but see
    test_app.py::test_switching_pages_keeps_the_tiny_pair)."""
    ctx = browser.new_context(viewport=VIEWPORT, color_scheme=scheme)
    ctx.set_default_timeout(ACTION_TIMEOUT_MS)
    page = ctx.new_page()
    page.goto(url)
    wait_for_pair(page)
    expect(button(page, "run")).to_be_visible()
    if path:
        page.goto(f"{url}/{path}")
        expect(page.locator('[data-testid="stMain"]')).to_be_visible()
    return ctx, page


def button(page, key: str):
    """A button by its widget key (names can clash: "Run" is also in "Last run JSON")."""
    return page.locator(f".st-key-{key} button").filter(visible=True)  # not Streamlit's hidden sizing copy


def choose(page, key: str, option: str) -> None:
    """Pick ``option`` in the selectbox with widget key ``key`` as a user of a long list does:
    open it, type the option's text to filter the list, click the option. Streamlit draws
    only the options in view, so one far down a long list is not in the page until then."""
    box = page.locator(f".st-key-{key} [data-testid=stSelectbox]")
    expect(box).to_be_visible(timeout=60_000)
    wait_for_run(page)
    box.click()
    page.keyboard.type(option)
    page.get_by_role("option", name=option, exact=True).click()
    combo = box.get_by_role("combobox")
    expect(combo).to_have_value(option)
    # then leave the box, as a user moves on: with the focus still in it, a loaded machine's rerun
    # was seen to open the list again, and an open list hides the rest of the sidebar from the
    # accessibility tree (its sliders were "not found")
    combo.blur()
    expect(page.get_by_role("listbox")).to_have_count(0)


def status(page):
    return page.locator(".sv-status")


def no_exceptions(page) -> None:
    expect(page.locator('[data-testid="stException"]')).to_have_count(0)
    main = page.locator('[data-testid="stMain"]')
    expect(main).not_to_contain_text("Traceback")
    expect(main).not_to_contain_text("DuplicateElement")


def timeline(page):
    return page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot').first


def timeline_drawn(page) -> None:
    """Plotly draws after the script run ends: wait for the timeline's bars (11 or more)."""
    expect(timeline(page).locator(".barlayer .point").nth(10)).to_be_attached()


def shot(page, name: str) -> None:
    """A screenshot to artifacts/ (git-ignored), with no hover tooltip in the picture."""
    page.mouse.move(VIEWPORT["width"] - 5, VIEWPORT["height"] - 5)
    expect(page.locator('[data-testid="stTooltipContent"]')).to_have_count(0)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))


def run_to_done(page) -> None:
    """Press Run on a fresh page (no earlier run) and wait for the run and its race to end."""
    button(page, "run").click()
    expect(page.locator(".sv-badge.sv-finished")).to_be_visible(timeout=RUN_TIMEOUT_MS)
    wait_for_run(page)


def compared_with_run_1(page):
    """After a second Live run, what says how it compares with run 1: the delta "vs #1" under its
    numbers; or, where one of the two was timed on a busy machine (no fair comparison), the run's own
    busy alert, or the history's ⚠ note naming run 1 (run 1 busy, run 2 quiet: no delta, no alert)."""
    compared = page.locator('[data-testid="stMetricDelta"]', has_text="#1").first
    busy = page.locator('[data-testid="stAlert"]', has_text="Timed on a busy machine").first
    first_busy = page.get_by_text(re.compile(r"beside (tok/s|a speedup) \(#1\b")).first
    return compared.or_(busy).or_(first_busy).first  # two of them may show at once


def rgb(css: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", css)[:3]]


@contextlib.contextmanager
def app_server_running(log_name: str = "streamlit-server.log"):
    """`streamlit run app.py` headless on a free loopback port, on the tiny pair; its URL once it
    answers its health check. Always terminated."""
    port = free_port()
    env = dict(os.environ, SPECVIZ_PAIR="tiny", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / log_name, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited with {proc.returncode}; see {log.name}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            if time.monotonic() > deadline:
                pytest.fail("streamlit did not answer its health check within 60 s")
            time.sleep(0.3)  # between health checks only
        yield url
    finally:
        stop_process(proc, 15)
        log.close()


# --- SSD replayed from a serial run ------------------------------------------------------------------------

def ssd_simulated(sd, budget, mode: str = "uniform", alpha: float | None = None):
    """``schedules.ssd`` on the ranks and candidates a serial run ``sd`` recorded, with ``budget``
    (specviz.measure.ssd_real's Budget) and fixed unit costs (hits do not depend on them)."""
    from specviz.replay import schedules
    from specviz.replay.latency import LatencyModel
    from specviz.replay.what_if import replay_input

    costs = LatencyModel(draft_ms={1: 1.0}, verify_ms={1: 3.0}, draft_prefill_ms=2.0, target_prefill_ms=4.0)
    settings = budget.settings(sd.config.max_new_tokens, sd.eos_ids, mode, alpha)
    return schedules.ssd(replay_input(sd), costs, settings)


def png_size(data: bytes) -> tuple[int, int]:
    """A PNG's width and height in pixels (Pillow reads the header)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "PNG", image.format
        return image.size
