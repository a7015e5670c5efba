"""Model and file text is text, in a real browser: a trace whose prompt, model name and tokens
hold a <script>, an <img onerror>, a Markdown link and $LaTeX$ is uploaded on the Replay
page; nothing runs, no image or link or formula appears, and the text shows as written (the
caption, the token strip, the output box, the timeline's hover, a sidebar error). Then the
page's downloads: the trace JSON as uploaded, the timeline as an offline HTML page (opened
here too: it draws, and runs nothing from the trace) and as a PNG drawn by Kaleido on the
same Chromium.

Debian's Chromium (/usr/bin/chromium) driven by Playwright, on the tiny pair (the Replay
page needs no model; the Live page loads it first). Screenshots go to artifacts/.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import (
    ARTIFACTS,
    ROOT,
    button,
    choose,
    expect,
    no_exceptions,
    open_session,
    png_size,
    run_to_done,
    shot,
    status,
    wait_for_run,
)

from specviz import Trace
from specviz.figures import exports

pytestmark = pytest.mark.browser

SCRIPT = "<script>window.__xss=1</script>"
IMG = '<img src=x onerror="window.__xss=1">'
LINK = "[click](http://example.com)"
LATEX = "$x^2$"
PAYLOADS = (SCRIPT, IMG, LINK, LATEX)
PROMPT = f"{LINK} {LATEX} {SCRIPT}"  # under 90 characters: the caption shows it whole


def _hostile_trace(path: Path) -> Trace:
    """A shipped trace with the payloads in the prompt, the draft's name, every proposed token,
    and the output."""
    trace = Trace.load(ROOT / "assets" / "traces" / "code-gamma4-greedy.json")
    trace.config.prompt = PROMPT
    trace.config.draft = IMG
    for r in trace.rounds:
        r.proposed_text = [PAYLOADS[(r.index + i) % len(PAYLOADS)] for i in range(len(r.proposed_text))]
    trace.output_text = " ".join(PAYLOADS) + "\n" + trace.output_text
    path.write_text(trace.to_json(indent=1), encoding="utf-8")
    return trace


def _upload(page, path: Path) -> None:
    choose(page, "replay_source", "Upload a trace file…")
    expect(page.get_by_text("Replay a recorded run")).to_be_visible()  # no trace on screen until the upload
    wait_for_run(page)
    uploader = page.locator('[data-testid="stFileUploaderDropzoneInput"]')
    expect(uploader).to_be_attached()
    uploader.set_input_files(str(path))


def _nothing_ran(page) -> None:
    assert page.evaluate("() => window.__xss") is None, "a script from the trace ran"
    expect(page.locator('img[src="x"]')).to_have_count(0)
    expect(page.locator('a[href^="http://example.com"]')).to_have_count(0)
    expect(page.locator(".katex")).to_have_count(0)  # no formula drawn from $x^2$


def test_trace_text_shows_as_written_and_runs_nothing(app_server, browser, tmp_path):
    hostile = tmp_path / "hostile-trace.json"
    trace = _hostile_trace(hostile)
    n = len(trace.rounds)
    ctx, page = open_session(browser, app_server, "light", path="replay")
    try:
        _upload(page, hostile)
        main = page.locator('[data-testid="stMain"]')
        caption = main.locator('[data-testid="stCaptionContainer"]').first
        expect(caption).to_contain_text(f"prompt: '{PROMPT}'", timeout=60_000)  # the whole prompt, every character
        expect(status(page)).to_contain_text(f"Replay: all {n} rounds")
        wait_for_run(page)
        timeline = page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot').first
        expect(timeline.locator(".barlayer .point").nth(10)).to_be_attached()
        _nothing_ran(page)

        expect(caption).to_contain_text(IMG)  # the draft's name
        output = main.locator('[data-testid="stCode"] code').first
        for p in PAYLOADS:
            expect(output).to_contain_text(p)
        strip = main.locator(".sv-strip")
        expect(strip).to_contain_text("<script>window.__xss=1</script>")
        expect(strip).to_contain_text('<img·src=x·onerror="window.__xss=1">')  # spaces shown as ·
        expect(strip.locator("script, img, a")).to_have_count(0)
        caption.scroll_into_view_if_needed()
        shot(page, "browser-replay-escaped.png")

        # the timeline's hover: consecutive draft passes propose each payload, shown as written
        hover = timeline.locator(".hoverlayer .hovertext")
        seen = []
        for i in range(3, 7):  # round 2's four passes: payloads 1, 2, 3, 0
            bar = timeline.locator(".barlayer .trace").first.locator(".point").nth(i)
            bar.scroll_into_view_if_needed()
            box = bar.bounding_box()
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            expect(hover).to_have_count(1)
            expect(hover).to_contain_text("draft pass")
            seen.append(hover.text_content())
            expect(hover.locator("a")).to_have_count(0)
            if SCRIPT in seen[-1]:
                page.screenshot(path=str(ARTIFACTS / "browser-replay-escaped-hover.png"))
            page.mouse.move(5, 5)
            expect(hover).to_have_count(0)
        for p in PAYLOADS:
            assert any(f"proposes '{p}'" in text for text in seen), (p, seen)
        _nothing_ran(page)

        # the downloads: the trace as uploaded, the timeline as an offline page and a PNG
        downloads = page.locator(".st-key-replay_downloads")
        downloads.scroll_into_view_if_needed()
        for key in ("replay_dl_trace", "replay_dl_timeline_html", "replay_dl_timeline_png"):
            expect(button(page, key)).to_be_visible()
        shot(page, "browser-replay-downloads.png")

        with page.expect_download() as dl:
            button(page, "replay_dl_trace").click()
        assert dl.value.suggested_filename == "specviz-hostile-trace.json"
        back = Trace.from_json(Path(dl.value.path()).read_text(encoding="utf-8"))
        assert back.config.prompt == PROMPT and back.to_dict() == trace.to_dict()

        with page.expect_download(timeout=60_000) as dl:
            button(page, "replay_dl_timeline_html").click()
        assert dl.value.suggested_filename == "specviz-hostile-trace-timeline.html"
        html_path = tmp_path / "timeline.html"
        dl.value.save_as(html_path)
        assert SCRIPT not in html_path.read_text(encoding="utf-8")

        with page.expect_download(timeout=120_000) as dl:
            button(page, "replay_dl_timeline_png").click()
        assert dl.value.suggested_filename == "specviz-hostile-trace-timeline.png"
        png = Path(dl.value.path()).read_bytes()
        assert png.startswith(exports.PNG_MAGIC)
        assert png_size(png) == (exports.PNG_WIDTH * exports.PNG_SCALE, 300 * exports.PNG_SCALE)
        (ARTIFACTS / "replay-timeline-export.png").write_bytes(png)
        expect(page.locator('[data-testid="stDownloadButtonError"]')).to_have_count(0)
        _nothing_ran(page)
        no_exceptions(page)

        # the HTML page on its own, with no network: it draws, and nothing from the trace runs
        offline = ctx.new_page()
        offline.route("**/*", lambda route: route.abort() if not route.request.url.startswith("file:")
                      else route.continue_())
        offline.goto(html_path.as_uri())
        expect(offline.locator(".js-plotly-plot .barlayer .point").nth(10)).to_be_attached(timeout=30_000)
        assert offline.evaluate("() => window.__xss") is None
        expect(offline.locator('img[src="x"]')).to_have_count(0)
        offline.close()
    finally:
        ctx.close()


def test_a_bad_file_is_named_as_written(app_server, browser, tmp_path):
    """An error that quotes the file (here its schema_version) shows the quote literally."""
    bad = tmp_path / "bad.json"
    version = f"{LINK} {LATEX} <b>b</b>"
    bad.write_text(json.dumps({"schema_version": version}), encoding="utf-8")
    ctx, page = open_session(browser, app_server, "light", path="replay")
    try:
        _upload(page, bad)
        alert = page.locator('[data-testid="stSidebar"] [data-testid="stAlert"]')
        expect(alert).to_contain_text("That file cannot be replayed", timeout=30_000)
        wait_for_run(page)
        expect(alert).to_contain_text(version)  # quoted in full, as written
        expect(alert.locator("a, b, .katex")).to_have_count(0)
        shot(page, "browser-replay-bad-file.png")
        _nothing_ran(page)
        no_exceptions(page)
    finally:
        ctx.close()


def test_live_offers_the_last_run_as_files(app_server, browser, tmp_path):
    """Under Run history: the history CSV, the last run's JSON, and its timeline as an offline
    page and as a PNG (made when clicked)."""

    ctx, page = open_session(browser, app_server, "light")
    try:
        run_to_done(page)
        for key in ("dl_history", "dl_trace", "dl_timeline_html", "dl_timeline_png"):
            expect(button(page, key)).to_be_visible()
        expect(button(page, "dl_timeline_png")).to_be_enabled()
        button(page, "dl_timeline_html").scroll_into_view_if_needed()
        shot(page, "browser-live-downloads.png")
        with page.expect_download(timeout=60_000) as dl:
            button(page, "dl_timeline_html").click()
        assert re.fullmatch(r"specviz-run-\d+-timeline\.html", dl.value.suggested_filename)
        page_html = Path(dl.value.path()).read_text(encoding="utf-8")
        assert 'class="plotly-graph-div"' in page_html and "<title>Speculative, γ=" in page_html
        expect(page.locator('[data-testid="stDownloadButtonError"]')).to_have_count(0)
        no_exceptions(page)
    finally:
        ctx.close()
