"""Many users, one server: 8 browser sessions (Playwright contexts in one Chromium) run a
generation each on the tiny pair at the same time, on loopback only.

All sessions share one loaded pair in its engine worker, whose requests take turns (specviz.worker.server).
Every run must complete, every output must equal the same run's single-user output, and
the longest wait is measured and printed: each session's time from Run to done under
load, against the same run alone. Bounded in count (8 sessions) and time (the run timeout).
"""

from __future__ import annotations

import time

import pytest
from helpers import (
    RUN_TIMEOUT_MS,
    button,
    expect,
    no_exceptions,
    open_session,
    short_runs,
    wait_for_run,
)

from specviz import RunConfig, speculative
from specviz.models.pair import load_pair
from specviz.ui.chrome import DEFAULTS, EXAMPLES

pytestmark = pytest.mark.browser
SESSIONS = 8
TOKENS = 24  # new tokens a run: each session redraws every round, 8 pages at once on a 2-core machine
DONE = ".sv-badge.sv-finished"  # the finished run's badge, in any language


def _setup(page, example: str, extra_gamma: int) -> None:
    """Pick an example prompt, runs of TOKENS new tokens, and move γ up by ``extra_gamma`` from its default."""
    page.locator(".st-key-example button", has_text=example).click()
    wait_for_run(page)
    short_runs(page, TOKENS)
    thumb = page.locator(".st-key-gamma").get_by_role("slider")
    for _ in range(extra_gamma):
        thumb.press("ArrowRight")
    expect(page.locator(".st-key-gamma [data-testid='stSliderThumbValue']")).to_have_text(
        f"γ = {DEFAULTS['gamma'] + extra_gamma}")
    thumb.blur()
    wait_for_run(page)


def _output(page) -> str:
    return page.locator('[data-testid="stCode"] code').first.inner_text()


def _expected(pair, example: str, gamma: int) -> str:
    cfg = RunConfig(prompt=EXAMPLES[example], gamma=gamma, max_new_tokens=TOKENS)
    return speculative(pair, cfg).run().output_text


def _run_all(pages) -> list[float]:
    """Press Run on every page, then wait for each to be done: seconds from its click."""
    started = []
    for page in pages:
        button(page, "run").click()
        started.append(time.monotonic())
    took: list[float | None] = [None] * len(pages)
    deadline = time.monotonic() + RUN_TIMEOUT_MS / 1000
    while None in took:
        for i, page in enumerate(pages):
            if took[i] is None and page.locator(DONE).count():
                took[i] = time.monotonic() - started[i]
        assert time.monotonic() < deadline, f"sessions still running after {RUN_TIMEOUT_MS / 1000:.0f} s: {took}"
        pages[0].wait_for_timeout(100)  # between polls of all the pages
    return took


def test_eight_sessions_share_the_pair(app_server, browser):
    pair = load_pair("tiny", dtype="float32")  # as the app loads it
    plan = [(list(EXAMPLES)[i % len(EXAMPLES)], i % 3) for i in range(SESSIONS)]
    contexts, pages = [], []
    try:
        for example, extra in plan:
            ctx, page = open_session(browser, app_server)
            contexts.append(ctx)
            pages.append(page)
            _setup(page, example, extra)
        alone = _run_all(pages[:1])[0]  # one session by itself: the single-user time
        for page in pages[:1]:
            wait_for_run(page)
        took = _run_all(pages)
        for page, (example, extra) in zip(pages, plan, strict=True):
            wait_for_run(page)
            no_exceptions(page)
            want = _expected(pair, example, DEFAULTS["gamma"] + extra)
            got = _output(page)
            assert got.strip() == want.strip(), f"{example} γ+{extra}: the output under load differs"
        longest = max(took)
        print(f"\n{SESSIONS} sessions at once on the tiny pair: Run to done in {min(took):.1f}–{longest:.1f} s "
              f"(median {sorted(took)[len(took) // 2]:.1f} s); one session alone {alone:.1f} s; the longest "
              f"wait under load {longest - alone:+.1f} s")
        # Bounded: forward passes take turns (FIFO, a round each), so the engine's share is about
        # SESSIONS × alone; on a 2-core machine the 8 pages' own redraws compete for the same CPU
        # (CI measured 58–68 s against 2.3 s alone), hence the factor of 4 and the fixed margin.
        assert longest < 4 * SESSIONS * alone + 60, (took, alone)
    finally:
        for ctx in contexts:
            ctx.close()
