"""In Chromium, on the tiny pair: a run timed beside busy programs says so beside its numbers,
and a run with only the browser itself beside it does not (specviz.models.busy.BUSY_CORES sits
above what Chromium showing the Live page costs)."""

from __future__ import annotations

import pytest
from test_browser import (  # noqa: F401  (server and browser are fixtures)
    _no_exceptions,
    _open,
    _run_to_done,
    _shot,
    browser,
    expect,
    server,
)
from test_busy import busy_loops, needs_fork, quiet_machine  # noqa: F401  (quiet_machine is a fixture)

pytestmark = [pytest.mark.browser, needs_fork]
BUSY_NOTE = "Timed on a busy machine"


def _stats_note(page):
    return page.locator(".st-key-sv-stats [data-testid='stAlert']")


def test_a_run_beside_busy_programs_is_marked_beside_its_numbers(server, browser):
    ctx, page = _open(browser, server, "light")
    try:
        with busy_loops(2):  # pinned to this process's CPUs, which the server inherited
            _run_to_done(page)
        expect(_stats_note(page)).to_contain_text(BUSY_NOTE)
        expect(_stats_note(page)).to_contain_text("other programs (")
        expect(page.locator("[data-testid='stDataFrame']")).to_have_count(1)
        _no_exceptions(page)
        _shot(page, "browser-busy-run.png")
    finally:
        ctx.close()


def test_a_run_with_only_the_browser_beside_it_is_not_marked(server, browser, quiet_machine):
    ctx, page = _open(browser, server, "light")
    try:
        _run_to_done(page)
        expect(page.get_by_text("Speedup").first).to_be_visible()
        expect(page.get_by_text(BUSY_NOTE)).to_have_count(0)
        expect(page.get_by_text("not a fair ratio")).to_have_count(0)
        _no_exceptions(page)
    finally:
        ctx.close()
