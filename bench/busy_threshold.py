"""What the browser showing the app costs in other-process CPU share: the floor under
``specviz.models.busy.BUSY_CORES``.

Serves the app (``streamlit run app.py`` on ``--port``, the pair from ``--pair``), opens the
Live page in Chromium at 1280×720, and presses Run ``--runs`` times. For each run, from the
click to the page's "done" (the speculative run, the target-alone race and the redraw):

* chromium: the CPU time of Chromium's processes (the browser a teacher has open) during the
  engine's timed spans, in cores: the server logs each span (``CpuMeter.start``/``stop``, on
  the system-wide perf_counter clock) and a sampler reads Chromium's CPU time every 20 ms;
* chromium (all): the same from the click to "done", the final redraw included;
* driver: the CPU time of Playwright's driver (a test's, not a teacher's), in cores;
* others: every other process on this process's CPUs but the app's server (what the app's
  own meter sees, Chromium and the driver included, over the whole interval), in cores;
* load: the 1-minute load average when the run started (os.getloadavg).

On a quiet machine ``others`` is about ``chromium + driver``; the difference is everything
else running meanwhile (other users, other test runs). Prints a table and the spread.

  python bench/busy_threshold.py --pair tiny --runs 5
  python bench/busy_threshold.py --pair default --runs 1 --max-new-tokens 32
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

from specviz.models.busy import CpuMeter

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


def cpu_of(procs: list[psutil.Process]) -> float:
    """User + system CPU seconds of the processes still alive."""
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def family(server: psutil.Process) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """This process's descendants but the app's server: (Chromium's processes, Playwright's driver)."""
    kids = [p for p in psutil.Process().children(recursive=True) if p.pid != server.pid]
    chromium = [p for p in kids if "chrom" in p.name().lower()]
    return chromium, [p for p in kids if p not in chromium]


# The app's server, its CPU meters logging each timed span's (start, end) on perf_counter.
SERVER = """
import sys, time
from specviz.record import contention
log = open(sys.argv[1], "a", buffering=1)
start, stop = contention.CpuMeter.start, contention.CpuMeter.stop
def logged_start(self):
    self._span = time.perf_counter()
    start(self)
def logged_stop(self):
    if self._start is not None:
        log.write(f"{self._span} {time.perf_counter()}\\n")
    stop(self)
contention.CpuMeter.start, contention.CpuMeter.stop = logged_start, logged_stop
from streamlit.web.cli import main
sys.argv = ["streamlit", "run", "app.py", *sys.argv[2:]]
main()
"""


def serve(pair: str, port: int, spans: Path) -> subprocess.Popen:
    env = dict(os.environ, SPECVIZ_PAIR=pair, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(spans), "--server.headless", "true", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("the app did not answer its health check within 120 s")


def settle(page, expect, timeout_ms: int) -> None:
    app = page.locator('[data-testid="stApp"]')
    expect(app).to_have_attribute("data-test-script-state", "notRunning", timeout=timeout_ms)
    expect(page.locator('[data-stale="true"]')).to_have_count(0, timeout=timeout_ms)


class Sampler(threading.Thread):
    """Chromium's CPU time, (perf_counter, seconds), every ``every_s`` until ``done`` is set."""

    def __init__(self, server: psutil.Process, every_s: float = 0.02):
        super().__init__(daemon=True)
        self.server, self.every_s, self.done = server, every_s, threading.Event()
        self.curve: list[tuple[float, float]] = []

    def run(self) -> None:
        procs = family(self.server)[0]
        seen: dict[int, float] = {}  # each process's CPU time as last read (a process that ends keeps it)
        while not self.done.is_set():
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    t = p.cpu_times()
                    seen[p.pid] = t.user + t.system
            self.curve.append((time.perf_counter(), sum(seen.values())))
            time.sleep(self.every_s)


def within(curve: list[tuple[float, float]], spans: list[tuple[float, float]]) -> tuple[float, float]:
    """CPU seconds of a cumulative curve inside the spans (linear between samples), and the spans' wall time."""
    ts, cs = [t for t, _ in curve], [c for _, c in curve]

    def at(t: float) -> float:
        i = bisect.bisect_left(ts, t)
        if i <= 0:
            return cs[0]
        if i >= len(ts):
            return cs[-1]
        f = (t - ts[i - 1]) / (ts[i] - ts[i - 1])
        return cs[i - 1] + f * (cs[i] - cs[i - 1])

    inside = [(a, b) for a, b in spans if a >= ts[0] and b <= ts[-1]]
    return sum(at(b) - at(a) for a, b in inside), sum(b - a for a, b in inside)


def one_run(page, expect, server: psutil.Process, spans: Path, timeout_ms: int) -> dict:
    """Press Run; the shares in cores during the engine's timed spans and from the click to "done"."""
    chromium, driver = family(server)
    meter = CpuMeter()
    load = os.getloadavg()[0]
    c0, d0, s0 = cpu_of(chromium), cpu_of(driver), cpu_of([server])
    logged = len(spans.read_text().splitlines()) if spans.exists() else 0
    sampler = Sampler(server)
    sampler.start()
    meter.start()
    page.locator(".st-key-run button").filter(visible=True).click()
    app = page.locator('[data-testid="stApp"]')
    with contextlib.suppress(AssertionError):
        expect(app).to_have_attribute("data-test-script-state", "running", timeout=5000)
    expect(page.locator(".sv-badge.sv-finished")).to_be_visible(timeout=timeout_ms)
    settle(page, expect, timeout_ms)
    meter.stop()
    sampler.done.set()
    sampler.join()
    chromium_now, _ = family(server)  # a renderer started meanwhile counts from zero
    c1 = cpu_of(chromium_now) + cpu_of([p for p in chromium if p not in chromium_now])
    wall = meter.wall_s
    busy = meter.other_s - (cpu_of([server]) - s0)  # the meter counts the server as "other": it is the app
    warned = page.get_by_text("Timed on a busy machine").count() > 0
    run_spans = [tuple(map(float, line.split())) for line in spans.read_text().splitlines()[logged:]]
    cpu, timed = within(sampler.curve, run_spans)
    return {"wall_s": wall, "timed_s": timed, "chromium": cpu / timed if timed else float("nan"),
            "chromium_all": (c1 - c0) / wall, "driver": (cpu_of(driver) - d0) / wall,
            "others": busy / wall, "load": load, "marked": warned}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="tiny")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--port", type=int, default=8610)
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: the page's")
    args = ap.parse_args()
    from playwright.sync_api import expect, sync_playwright

    spans = Path(tempfile.mkdtemp(prefix="specviz-spans-")) / "spans.txt"
    proc = serve(args.pair, args.port, spans)
    rows = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
            page.goto(f"http://127.0.0.1:{args.port}")
            expect(page.locator(".st-key-run button").filter(visible=True)).to_be_visible(timeout=600_000)
            settle(page, expect, 600_000)
            if args.max_new_tokens:
                page.get_by_text("Sampling and length").click()
                box = page.locator(".st-key-max_new_tokens input")
                box.fill(str(args.max_new_tokens))
                box.press("Enter")
                settle(page, expect, 60_000)
            print(f"{'run':>3} | {'wall s':>6} | {'timed s':>7} | {'chromium':>8} | {'chromium (all)':>14} | "
                  f"{'driver':>6} | {'others':>6} | {'load':>5} | marked")
            for i in range(args.runs):
                r = one_run(page, expect, psutil.Process(proc.pid), spans, 900_000)
                rows.append(r)
                print(f"{i + 1:>3} | {r['wall_s']:6.1f} | {r['timed_s']:7.1f} | {r['chromium']:8.2f} | "
                      f"{r['chromium_all']:14.2f} | {r['driver']:6.2f} | {r['others']:6.2f} | {r['load']:5.1f} | "
                      f"{r['marked']}", flush=True)
            browser.close()
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
        if proc.poll() is None:
            proc.kill()
    for key in ("chromium", "chromium_all", "driver", "others"):
        values = [r[key] for r in rows]
        print(f"{key}: median {statistics.median(values):.2f} cores, min {min(values):.2f}, max {max(values):.2f}")


if __name__ == "__main__":
    main()
