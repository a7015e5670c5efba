"""Many users, one server, by hand: N browser sessions run at once on one specviz server.

Serves the app headless (the default pair unless --pair tiny), opens N sessions
(Playwright contexts in Debian's Chromium, /usr/bin/chromium) through share links with
different examples, and turns "Race the target alone" off so each Run is the
speculative run only. Each session first runs alone, one after the other (its
single-user time and output), then all press Run at once. Prints, per session: the
time from Run to done alone and under load, the wait it added, whether the output
under load equals its single-user output, and the run's own tok/s (engine clock: the
time spent waiting for the model is not in it).

    python bench/sessions.py --sessions 4               # about 4 minutes on 2 cores
    python bench/sessions.py --sessions 8 --pair tiny
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from app_speed import CHROMIUM, serve

EXAMPLES = ("code", "json", "prose", "chinese")
DONE = ".sv-badge.sv-finished"  # the finished run's badge, in any language


def wait_done(page, timeout_s: float = 600) -> None:
    """Glance at the page every second until the run is done (no fast polling: it takes CPU)."""
    deadline = time.monotonic() + timeout_s
    while not page.locator(DONE).count():
        assert time.monotonic() < deadline, f"no 'done' after {timeout_s:.0f} s"
        time.sleep(1)
    app = page.locator('[data-testid="stApp"]')
    while app.get_attribute("data-test-script-state") != "notRunning" or page.locator('[data-stale="true"]').count():
        time.sleep(0.5)


def press_run(page) -> None:
    done = page.locator(DONE)
    page.locator(".st-key-run button").filter(visible=True).click()
    deadline = time.monotonic() + 60
    while done.count():  # the last run's badge goes as this one starts
        assert time.monotonic() < deadline, "Run did not start"
        time.sleep(0.1)


def result(page) -> tuple[str, float]:
    """The output text and the run's tok/s, from the trace the page offers for download."""
    with page.expect_download() as download:
        page.locator(".st-key-dl_trace button").first.click()
    data = json.loads(Path(download.value.path()).read_text())
    from specviz.record.run_trace import Trace

    trace = Trace.from_dict(data)
    return trace.output_text, trace.summary["tokens_per_second"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--pair", default="default", choices=["default", "tiny"])
    ap.add_argument("--max-new-tokens", type=int, default=32)
    args = ap.parse_args()
    from playwright.sync_api import expect, sync_playwright

    with serve(args.pair) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        pages, plan = [], [EXAMPLES[i % len(EXAMPLES)] for i in range(args.sessions)]
        for example in plan:
            page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
            page.goto(f"{url}/?example={example}&max_new_tokens={args.max_new_tokens}")
            expect(page.locator(".st-key-run button").filter(visible=True)).to_be_visible(timeout=600_000)
            page.locator(".st-key-race label").first.click()  # Race the target alone: off
            expect(page.locator(".st-key-race input")).not_to_be_checked()
            pages.append(page)
        alone, outputs = [], []
        for page in pages:
            press_run(page)
            t0 = time.monotonic()
            wait_done(page)
            alone.append(time.monotonic() - t0)
            outputs.append(result(page))
        starts = []
        for page in pages:
            press_run(page)
            starts.append(time.monotonic())
        took: list[float | None] = [None] * len(pages)
        while None in took:
            for i, page in enumerate(pages):
                if took[i] is None and page.locator(DONE).count():
                    took[i] = time.monotonic() - starts[i]
            time.sleep(1)
        for page in pages:
            wait_done(page)
        loaded = [result(page) for page in pages]
        browser.close()
    print(f"\n{args.sessions} sessions at once, {args.pair} pair, {args.max_new_tokens} new tokens, greedy, γ 4")
    print(f"{'session':<8} {'example':<8} | {'alone s':>7} {'load s':>7} {'wait s':>7} | "
          f"{'tok/s alone':>11} {'tok/s load':>10} | same output")
    for i, example in enumerate(plan):
        same = loaded[i][0] == outputs[i][0]
        print(f"{i + 1:<8} {example:<8} | {alone[i]:7.1f} {took[i]:7.1f} {took[i] - alone[i]:+7.1f} | "
              f"{outputs[i][1]:11.2f} {loaded[i][1]:10.2f} | {'yes' if same else 'NO'}")
    print(f"longest Run-to-done under load {max(took):.1f} s; all runs alone, one after the other: "
          f"{sum(alone):.1f} s; median tok/s alone {statistics.median(o[1] for o in outputs):.2f}, "
          f"under load {statistics.median(r[1] for r in loaded):.2f}")


if __name__ == "__main__":
    main()
