"""The app in a real browser: Debian's Chromium driven by Playwright, on the tiny pair.

The server runs `streamlit run app.py` headless on a free port. Every wait is for a
condition, never a fixed time: for the app to finish its script run (as Streamlit's own
end-to-end tests do: `data-test-script-state="notRunning"`, no stale elements) and for
the content a step should produce (Playwright's `expect`, which retries until it holds).
Screenshots at 1280×720 go to artifacts/ (git-ignored). Never downloads a browser: it
uses /usr/bin/chromium.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import (
    ROOT,
    RUN_TIMEOUT_MS,
    button,
    choose,
    compared_with_run_1,
    expect,
    no_exceptions,
    open_session,
    rgb,
    run_to_done,
    shot,
    status,
    timeline,
    timeline_drawn,
    wait_for_run,
)

from specviz.record.limits import DEFAULT_GAMMA

pytestmark = pytest.mark.browser


# --- Live -------------------------------------------------------------------------------

def test_run_shows_marks_and_timeline(app_server, browser):
    ctx, page = open_session(browser, app_server, "light")
    try:
        shot(page, "browser-light-start.png")
        expect(page.locator(".sv-hint")).not_to_have_count(0)  # empty strip, waiting for a run
        gamma = page.locator(".st-key-gamma").get_by_role("slider")
        expect(page.locator(".st-key-gamma [data-testid='stSliderThumbValue']")).to_have_text(f"γ = {DEFAULT_GAMMA}")
        expect(page.get_by_text("γ · draft length", exact=True)).to_be_visible()  # a label a class can read

        # Step with its keyboard shortcut: exactly one round appears
        gamma.blur()
        page.locator("body").press("s")
        expect(status(page)).to_contain_text("Round 1", timeout=60_000)
        wait_for_run(page)
        expect(page.locator(".sv-strip .sv-round")).to_have_count(1)
        expect(page.locator(".sv-tok").first).to_be_visible()

        # Run to the end (a new run: the stepped one is replaced)
        run_to_done(page)
        timeline_drawn(page)
        shot(page, "browser-light-run.png")

        expect(page.locator(".sv-strip .sv-tok.sv-acc").first).to_be_attached()
        expect(page.locator(".sv-strip .sv-tok.sv-rej").first).to_be_attached()
        expect(page.locator(".sv-strip .sv-tok.sv-fix").first).to_be_attached()
        expect(page.locator(".sv-legend")).to_have_count(1)

        charts = page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot')
        expect(charts.nth(2)).to_be_attached()  # timeline, per-position acceptance, race (+ history)
        ticks = " ".join(timeline(page).locator(".ytick text").all_text_contents())
        assert "Draft" in ticks and "Target" in ticks and "idle" in ticks
        assert "ms" in " ".join(timeline(page).locator(".xtick text").all_text_contents())

        expect(page.get_by_text("Speedup").first).to_be_visible()
        expect(page.locator('[data-testid="stDataFrame"]')).to_have_count(1)  # run history
        no_exceptions(page)

        page.locator('[data-testid="stPlotlyChart"]').first.scroll_into_view_if_needed()
        expect(page.locator('[data-testid="stPlotlyChart"]').first).to_be_in_viewport()
        shot(page, "browser-light-timeline.png")
    finally:
        ctx.close()


def test_gamma_label_keeps_the_toolbar_aligned(app_server, browser):
    """The γ slider's visible label sits above it; the slider's track stays level with the buttons."""
    ctx, page = open_session(browser, app_server, "light")
    try:
        label = page.locator(".st-key-gamma [data-testid='stWidgetLabel']")
        expect(label).to_contain_text("γ · draft length")
        track = page.locator(".st-key-gamma [data-testid='stSliderThumbValue']").locator("xpath=..").bounding_box()
        run = button(page, "run").bounding_box()
        lab = label.bounding_box()
        assert lab["y"] + lab["height"] <= track["y"], "the label overlaps the slider"
        thumb_mid = track["y"] + track["height"] / 2
        run_mid = run["y"] + run["height"] / 2
        assert abs(thumb_mid - run_mid) <= run["height"] / 2, (thumb_mid, run_mid)
        assert lab["y"] >= 60  # below the top navigation, not under it
    finally:
        ctx.close()


def test_status_reads_starting_right_after_run(app_server, browser):
    """Right after Run the status says "Starting", before the first round lands.

    On the tiny pair a run takes a second or two, so a poll could miss a short-lived
    status; a MutationObserver installed before the click records every status the page
    ever shows, with the number of rounds on screen at that moment."""
    ctx, page = open_session(browser, app_server, "light")
    try:
        before = page.evaluate("() => document.querySelector('.sv-status').textContent")  # as the log records it
        assert "Starting" not in before
        page.evaluate("""() => {
            window.__svLog = [];
            const record = () => {
                const s = document.querySelector('.sv-status');
                window.__svLog.push({status: s ? s.textContent : '',
                                     rounds: document.querySelectorAll('.sv-strip .sv-round').length});
            };
            new MutationObserver(record).observe(document.body,
                {subtree: true, childList: true, characterData: true});
        }""")
        button(page, "run").click()
        page.wait_for_function("() => window.__svLog.some(e => e.status.includes('Starting'))",
                               timeout=30_000)
        expect(page.locator(".sv-badge.sv-finished")).to_be_visible(timeout=RUN_TIMEOUT_MS)
        wait_for_run(page)
        log = page.evaluate("window.__svLog")
        shown = [e for e in log if e["status"] and e["status"] != before]
        assert shown, "the status never changed after Run"
        assert "Starting" in shown[0]["status"], f"the first status after Run was {shown[0]['status']!r}"
        assert shown[0]["rounds"] == 0, "Starting appeared only after a round was on screen"
        first_round = next(i for i, e in enumerate(log) if e["rounds"] > 0)
        assert any("Starting" in e["status"] for e in log[:first_round])
        no_exceptions(page)
    finally:
        ctx.close()


def test_full_output_is_visible_after_a_run(app_server, browser):
    """After a run the whole output sits in one plain-text box (with a copy button),
    tall enough to show it all: the old box showed two lines."""
    ctx, page = open_session(browser, app_server, "light")
    try:
        # A short prompt and room for 256 new tokens: on the tiny pair (one character per
        # token, a 256-token context) that is over 200 characters, three lines or more.
        prompt = page.locator(".st-key-prompt textarea")
        prompt.fill("Hi")
        prompt.press("Control+Enter")
        expect(prompt).to_have_value("Hi")
        wait_for_run(page)
        page.get_by_text("Sampling and length").click()
        max_new = page.locator(".st-key-max_new_tokens input")
        max_new.fill("256")
        max_new.press("Enter")
        expect(max_new).to_have_value("256")
        wait_for_run(page)
        max_new.blur()
        race = page.locator(".st-key-race input")
        page.locator(".st-key-race label").click()  # no race: this test is about the output alone
        expect(race).not_to_be_checked()
        wait_for_run(page)

        run_to_done(page)
        with page.expect_download() as dl:
            button(page, "dl_trace").click()
        trace = json.loads(Path(dl.value.path()).read_text(encoding="utf-8"))
        text = trace["output_text"]
        assert len(text) > 200, len(text)

        box = page.locator(".st-key-sv-output")
        code = box.locator('[data-testid="stCode"] code')
        expect(box).to_be_visible()
        expect(code).to_be_visible()
        assert code.text_content().rstrip("\n") == text.rstrip("\n"), "the box does not hold the whole output"
        expect(box.get_by_role("button", name="Copy to clipboard")).to_be_attached()  # Streamlit's copy button
        box.scroll_into_view_if_needed()
        m = code.evaluate("""c => {
            const pre = c.closest('pre');
            return {line: parseFloat(getComputedStyle(c).lineHeight), box: pre.getBoundingClientRect().height,
                    scroll: pre.scrollHeight, client: pre.clientHeight,
                    scrollW: pre.scrollWidth, clientW: pre.clientWidth};
        }""")
        assert m["box"] > 2 * m["line"], f"the box is {m['box']:.0f} px high, two lines {2 * m['line']:.0f} px"
        assert m["scroll"] <= m["client"] + 1, f"the output is cut off: {m}"
        assert m["scrollW"] <= m["clientW"] + 1, f"the output runs off to the side: {m}"
        shot(page, "browser-output.png")
        no_exceptions(page)
    finally:
        ctx.close()


def test_second_run_measures_its_own_baseline(app_server, browser):
    """Two Runs in a row with the race on: the second times the target alone afresh
    (a reused baseline says "reused from run N"; by default none is reused)."""
    ctx, page = open_session(browser, app_server, "light")
    try:
        race_toggle = page.locator(".st-key-race input")
        expect(race_toggle).to_be_checked()
        race = page.locator('[data-testid="stColumn"]').filter(has_text="Race: speculative vs the target").last
        run_to_done(page)
        expect(race).to_contain_text("Speedup")
        expect(page.locator('.sv-badge.sv-finished[data-run="1"]')).to_be_visible()
        button(page, "run").click()
        # the second run's own "done" (run 1's has the same text and settings), and then the
        # numbers compare it with run 1; on a busy machine (other processes took the cores: a
        # shared CI box) they say so instead
        expect(page.locator('.sv-badge.sv-finished[data-run="2"]')).to_be_visible(timeout=RUN_TIMEOUT_MS)
        expect(compared_with_run_1(page)).to_be_visible(timeout=RUN_TIMEOUT_MS)
        wait_for_run(page)
        expect(race).to_contain_text("Speedup")
        expect(race).not_to_contain_text("reused")
        no_exceptions(page)
    finally:
        ctx.close()


def test_dark_theme_is_legible(app_server, browser):
    ctx, page = open_session(browser, app_server, "dark")
    try:
        bg = page.evaluate(
            "getComputedStyle(document.querySelector('[data-testid=\"stApp\"]')).backgroundColor")
        assert sum(rgb(bg)) < 3 * 80, f"the app did not follow the dark colour scheme: {bg}"
        page.locator("body").press("g")  # Run's keyboard shortcut
        expect(page.locator(".sv-badge.sv-finished")).to_be_visible(timeout=RUN_TIMEOUT_MS)
        wait_for_run(page)
        timeline_drawn(page)
        color = page.evaluate("getComputedStyle(document.querySelector('.sv-strip-in')).color")
        assert sum(rgb(color)) > 3 * 170, f"token text is not light on the dark theme: {color}"
        expect(page.locator(".sv-strip .sv-tok.sv-acc").first).to_be_attached()
        shot(page, "browser-dark-run.png")
        no_exceptions(page)
    finally:
        ctx.close()


def test_autoplay_is_slowed_and_stop_halts_it(app_server, browser):
    ctx, page = open_session(browser, app_server, "light")
    try:
        page.locator("body").press("a")  # Autoplay's shortcut
        expect(page.locator(".sv-badge", has_text="slow motion")).to_be_visible(timeout=30_000)
        expect(status(page)).to_contain_text("real")  # says its timings are the real ones
        expect(page.locator(".sv-tok.sv-pend").first).to_be_visible(timeout=30_000)  # the draft's tokens, pending
        stop = button(page, "stop")
        expect(stop).to_be_enabled()
        page.locator("body").press("x")  # Stop's shortcut
        expect(status(page)).to_contain_text("Stopped after round", timeout=10_000)
        wait_for_run(page)
        expect(stop).to_be_disabled()  # nothing plays any more
        rounds = page.locator(".sv-strip .sv-round").count()
        assert rounds >= 1
        expect(status(page)).to_contain_text(f"Stopped after round {rounds}.")
        # It stayed where it stopped: one Step adds exactly one round to the same run.
        page.locator("body").press("s")
        expect(status(page)).to_contain_text(f"Round {rounds + 1}", timeout=60_000)
        wait_for_run(page)
        expect(page.locator(".sv-strip .sv-round")).to_have_count(rounds + 1)
        no_exceptions(page)
    finally:
        ctx.close()


# --- How it works -----------------------------------------------------------------------

def test_how_it_works_formulas_fit(app_server, browser):
    """At 1280×720 every formula shows whole: no hidden horizontal scroll."""
    ctx, page = open_session(browser, app_server, "light", path="about")
    try:
        expect(page.get_by_role("heading", name="How speculative decoding works")).to_be_visible(timeout=60_000)
        wait_for_run(page)
        displays = page.locator(".katex-display")
        expect(displays.nth(1)).to_be_attached()  # tokens per round, and the speedup
        for el in displays.all() + page.locator(".katex-display .katex").all():
            m = el.evaluate("e => ({sw: e.scrollWidth, cw: e.clientWidth})")
            assert m["sw"] <= m["cw"] + 1, f"a formula is cut off: {m}"
        main = page.locator('[data-testid="stMain"]')
        expect(main).to_contain_text("Speculation can only pay off when α > c")
        expect(main).not_to_contain_text("acceptance beats c")
        shot(page, "browser-about.png")
        displays.last.scroll_into_view_if_needed()
        expect(displays.last).to_be_in_viewport()
        shot(page, "browser-about-formulas.png")
        no_exceptions(page)
    finally:
        ctx.close()


# --- Replay -----------------------------------------------------------------------------

def test_replay_slider_follows_play(app_server, browser):
    """Play moves the "Show up to round" slider with the round on screen; Step and the slider work."""
    ctx, page = open_session(browser, app_server, "light", path="replay")
    try:
        side = page.locator('[data-testid="stSidebar"]')
        trace = ROOT / "assets" / "traces" / "code-gamma4-greedy.json"
        n = len(json.loads(trace.read_text(encoding="utf-8"))["rounds"])
        assert n > 2  # Play is watched for two rounds before the end
        choose(page, "replay_source", f"Recorded: {trace.stem}")
        expect(status(page)).to_contain_text(f"Replay: all {n} rounds")
        wait_for_run(page)
        rounds = side.get_by_role("slider", name="Show up to round")
        expect(rounds).to_have_value(str(n))

        speed = page.locator(".st-key-replay_speed").get_by_role("slider")
        speed.focus()
        speed.press("ArrowLeft")  # Normal -> Fast
        expect(speed).to_have_attribute("aria-valuetext", "Fast")
        wait_for_run(page)

        button(page, "replay_restart").click()
        expect(rounds).to_have_value("0")
        expect(status(page)).to_contain_text(f"round 0 of {n}")
        wait_for_run(page)

        button(page, "replay_play").click()
        expect(rounds).to_have_value("1", timeout=30_000)
        expect(rounds).to_have_value("2", timeout=30_000)  # it follows the play, round by round
        expect(page.locator(".sv-badge", has_text="slow motion")).to_be_visible()
        expect(button(page, "replay_stop")).to_be_enabled()
        shot(page, "browser-replay-playing.png")

        speed.focus()
        speed.press("ArrowLeft")  # Fast -> Instant: the play goes on, without slow motion
        expect(rounds).to_have_value(str(n), timeout=60_000)
        expect(status(page)).to_contain_text(f"Replay: all {n} rounds")
        wait_for_run(page)
        expect(button(page, "replay_stop")).to_be_disabled()
        timeline_drawn(page)
        shot(page, "browser-replay-end.png")

        # Step from the end starts again at round 1; the slider's keys move it by one round
        button(page, "replay_step").click()
        expect(rounds).to_have_value("1")
        wait_for_run(page)
        rounds.focus()
        rounds.press("ArrowRight")
        expect(rounds).to_have_value("2")
        expect(status(page)).to_contain_text("Round 2")
        wait_for_run(page)
        no_exceptions(page)
    finally:
        ctx.close()
