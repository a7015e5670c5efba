"""First start of the app, as a newcomer meets it: `streamlit run app.py` to a ready Live page
in Chromium at 1280×720 (the Run button shown: the pair has loaded).

Three kinds of start, each from a fresh server process:

- ``cold``: an empty model cache (a new ``SPECVIZ_CACHE_DIR``): the shipped GGUF parts are
  assembled, verified and converted, in the dtype the run uses only (the first start ever);
- ``evicted``: the cache on disk but not in memory (the next morning): each cache file is
  dropped from the page cache with ``posix_fadvise(POSIX_FADV_DONTNEED)``, which evicts
  those files alone;
- ``warm``: the cache on disk and in memory (a restart a minute later).

Prints one row per start and the median per kind. Debian's Chromium and Playwright for
Python must be installed (``bash tests/run.sh`` installs both).

  python bench/first_start.py --kinds cold evicted warm --repeats 1
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run"]


def evict(folder: Path) -> int:
    """Drop every file under ``folder`` from the page cache; bytes evicted."""
    total = 0
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            total += path.stat().st_size
    return total


def _port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_to_ready(env: dict[str, str], timeout_s: float) -> tuple[float, float]:
    """Seconds from launching the server to (its health check answering, the Live page's Run
    button shown in Chromium)."""
    from playwright.sync_api import expect, sync_playwright

    port = _port()
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port",
         str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        while True:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            if proc.poll() is not None or time.monotonic() - t0 > timeout_s:
                raise SystemExit("streamlit did not start")
            time.sleep(0.2)
        served = time.monotonic() - t0
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.goto(url)
            expect(page.locator(".st-key-run button").filter(visible=True)).to_be_visible(
                timeout=timeout_s * 1000)
            ready = time.monotonic() - t0
            browser.close()
        return served, ready
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
        if proc.poll() is None:
            proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", nargs="+", choices=["cold", "evicted", "warm"], default=["cold", "evicted", "warm"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed for one start")
    args = parser.parse_args()

    from specviz.models.pair import cache_dir

    rows: dict[str, list[float]] = {k: [] for k in args.kinds}
    print(f"{'kind':<8} {'served s':>9} {'ready s':>8}  load average (1 min) before")
    for kind in args.kinds:
        for _ in range(args.repeats):
            env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
            with tempfile.TemporaryDirectory(prefix="specviz-cold-") as empty:
                if kind == "cold":
                    env["SPECVIZ_CACHE_DIR"] = empty
                elif kind == "evicted":
                    evict(cache_dir() / "models")
                load = os.getloadavg()[0]
                served, ready = start_to_ready(env, args.timeout)
            rows[kind].append(ready)
            print(f"{kind:<8} {served:>9.1f} {ready:>8.1f}  {load:.2f}", flush=True)
    print()
    print(f"{'kind':<8} {'median ready s':>15} {'starts':>7}")
    for kind, times in rows.items():
        print(f"{kind:<8} {statistics.median(times):>15.1f} {len(times):>7}")


if __name__ == "__main__":
    main()
