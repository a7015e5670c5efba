"""In Chromium, on the tiny pair: a run timed beside busy programs says so beside its numbers,
and a run with only the browser itself beside it does not (specviz.models.busy.BUSY_CORES sits
above what Chromium showing the Live page costs)."""

from __future__ import annotations

import os

import pytest
from helpers import (
    busy_loops,
    expect,
    needs_fork,
    no_exceptions,
    open_session,
    run_to_done,
    shot,
)

pytestmark = [pytest.mark.browser, needs_fork]
BUSY_NOTE = "Timed on a busy machine"


def _stats_note(page):
    return page.locator(".st-key-sv-stats [data-testid='stAlert']")


def test_a_run_beside_busy_programs_is_marked_beside_its_numbers(app_server, browser):
    ctx, page = open_session(browser, app_server, "light")
    try:
        with busy_loops(2):  # pinned to this process's CPUs, which the server inherited
            run_to_done(page)
        expect(_stats_note(page)).to_contain_text(BUSY_NOTE)
        expect(_stats_note(page)).to_contain_text("other programs (")
        expect(page.locator("[data-testid='stDataFrame']")).to_have_count(1)
        no_exceptions(page)
        shot(page, "browser-busy-run.png")
    finally:
        ctx.close()


def test_a_run_with_only_the_browser_beside_it_is_not_marked(app_server, browser, quiet_machine):
    ctx, page = open_session(browser, app_server, "light")
    try:
        run_to_done(page)
        expect(page.get_by_text("Speedup").first).to_be_visible()
        for note in (BUSY_NOTE, "not a fair ratio"):  # the run has ended: what shows now is final
            shown = page.get_by_text(note)
            assert shown.count() == 0, f"{shown.first.inner_text()!r} (load average {os.getloadavg()})"
        no_exceptions(page)
    finally:
        ctx.close()
