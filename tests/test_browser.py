"""The app in a real browser: Debian's Chromium driven by Playwright, on the tiny pair.

The server runs `streamlit run app.py` headless on a free port; the test waits for the
app to be connected and idle, steps with the keyboard shortcut, presses Run, waits for
the run to finish, and checks the marks and the timeline on the page. Screenshots go
to artifacts/ (git-ignored). Never downloads a browser: it uses /usr/bin/chromium.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
IDLE = '[data-testid="stApp"][data-test-connection-state="CONNECTED"][data-test-script-state="notRunning"]'

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="needs Debian's Chromium at /usr/bin/chromium"),
]
sync_api = pytest.importorskip("playwright.sync_api")


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    """`streamlit run app.py` on the tiny pair; always terminated."""
    port = _free_port()
    env = dict(os.environ, SPECVIZ_PAIR="tiny", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "streamlit-server.log", "w")
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
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


def _idle(page, timeout_ms: int = 60_000) -> None:
    page.wait_for_selector(IDLE, timeout=timeout_ms)


def _open(browser, url: str, scheme: str):
    ctx = browser.new_context(viewport={"width": 1280, "height": 720}, color_scheme=scheme)
    page = ctx.new_page()
    page.goto(url)
    page.get_by_role("button", name="Run").first.wait_for(timeout=90_000)  # the pair has loaded
    _idle(page)
    return ctx, page


def _no_exceptions(page) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0
    text = page.locator('[data-testid="stMain"]').inner_text()
    assert "Traceback" not in text and "DuplicateElement" not in text


def test_run_shows_marks_and_timeline(server, browser):
    ctx, page = _open(browser, server, "light")
    try:
        page.screenshot(path=str(ARTIFACTS / "browser-light-start.png"))
        assert page.locator(".sv-hint").count() >= 1  # empty strip, waiting for a run

        # Step with its keyboard shortcut: exactly one round appears
        page.get_by_role("slider").first.blur()
        page.locator("body").press("s")
        page.wait_for_selector(".sv-status:has-text('Round 1')", timeout=60_000)
        _idle(page)
        assert page.locator(".sv-round").count() == 1
        assert page.locator(".sv-tok").count() >= 1

        # Run to the end
        page.get_by_role("button", name="Run").first.click()
        page.wait_for_selector(".sv-badge:has-text('done')", timeout=120_000)
        _idle(page)
        page.wait_for_timeout(500)  # let plotly finish drawing
        page.screenshot(path=str(ARTIFACTS / "browser-light-run.png"))

        assert page.locator(".sv-strip .sv-tok.sv-acc").count() > 0
        assert page.locator(".sv-strip .sv-tok.sv-rej").count() > 0
        assert page.locator(".sv-strip .sv-tok.sv-fix").count() > 0
        assert page.locator(".sv-legend").count() == 1
        plain = page.locator(".sv-plain").inner_text()
        assert plain.strip() and "nothing yet" not in plain

        charts = page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot')
        assert charts.count() >= 3  # timeline, per-position acceptance, race (+ history)
        timeline = charts.first
        assert timeline.locator(".barlayer .point").count() > 10  # forward passes and waits
        ticks = " ".join(timeline.locator(".ytick text").all_text_contents())
        assert "Draft" in ticks and "Target" in ticks and "idle" in ticks
        assert "ms" in " ".join(timeline.locator(".xtick text").all_text_contents())

        assert page.get_by_text("Speedup").count() >= 1
        assert page.locator('[data-testid="stDataFrame"]').count() == 1  # run history
        _no_exceptions(page)

        page.locator('[data-testid="stPlotlyChart"]').first.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        page.screenshot(path=str(ARTIFACTS / "browser-light-timeline.png"))
    finally:
        ctx.close()


def test_dark_theme_is_legible(server, browser):
    ctx, page = _open(browser, server, "dark")
    try:
        bg = page.evaluate(
            "getComputedStyle(document.querySelector('[data-testid=\"stApp\"]')).backgroundColor")
        rgb = [int(x) for x in bg[bg.index("(") + 1: bg.index(")")].split(",")[:3]]
        assert sum(rgb) < 3 * 80, f"the app did not follow the dark colour scheme: {bg}"
        page.locator("body").press("g")  # Run's keyboard shortcut
        page.wait_for_selector(".sv-badge:has-text('done')", timeout=120_000)
        _idle(page)
        page.wait_for_timeout(500)
        color = page.evaluate("getComputedStyle(document.querySelector('.sv-strip-in')).color")
        rgb = [int(x) for x in color[color.index("(") + 1: color.index(")")].split(",")[:3]]
        assert sum(rgb) > 3 * 170, f"token text is not light on the dark theme: {color}"
        assert page.locator(".sv-strip .sv-tok.sv-acc").count() > 0
        page.screenshot(path=str(ARTIFACTS / "browser-dark-run.png"))
        _no_exceptions(page)
    finally:
        ctx.close()


def test_autoplay_is_slowed_and_stop_halts_it(server, browser):
    ctx, page = _open(browser, server, "light")
    try:
        page.locator("body").press("a")  # Autoplay's shortcut
        page.wait_for_selector(".sv-badge:has-text('slow motion')", timeout=30_000)
        assert "real" in page.locator(".sv-status").inner_text()  # says its timings are the real ones
        page.wait_for_selector(".sv-tok.sv-pend", timeout=30_000)  # the draft's tokens appear, pending
        page.wait_for_timeout(2500)
        assert page.get_by_role("button", name="Stop").last.is_enabled()
        page.locator("body").press("x")  # Stop's shortcut
        page.wait_for_selector(".sv-status:has-text('Stopped after round')", timeout=10_000)
        _idle(page)
        rounds = page.locator(".sv-strip .sv-round").count()
        page.wait_for_timeout(2000)
        assert page.locator(".sv-strip .sv-round").count() == rounds >= 1  # it stays stopped
        _no_exceptions(page)
    finally:
        ctx.close()
