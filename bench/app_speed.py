"""The app as fast as the engine: tok/s of a Live run in the browser against the CLI's.

Serves the app headless on the default pair, opens the Live page in Debian's Chromium
(Playwright, /usr/bin/chromium; never a downloaded browser), and times the code example
at γ 4, 64 new tokens, bf16, greedy: the speculative run's tok/s as the page shows it,
against ``specviz generate`` with the same prompt and settings in a fresh process.
Interleaved (CLI, app, CLI, app, ...), median of --repeats; the browser stays open on
the page throughout, as in a classroom.

    python bench/app_speed.py                 # about 3 minutes once the pair is cached
    python bench/app_speed.py --repeats 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from specviz.ui.chrome import DEFAULTS, EXAMPLES

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"


def free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_tps(prompt: str, gamma: int, max_new: int, dtype: str) -> float:
    """The speculative run's tok/s (engine clock) from ``specviz generate`` in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "trace.json"
        subprocess.run([sys.executable, "-m", "specviz", "generate", "--prompt", prompt, "--gamma", str(gamma),
                        "--max-new-tokens", str(max_new), "--dtype", dtype, "--quiet", "--json", str(out)],
                       check=True, capture_output=True, cwd=ROOT)
        data = json.loads(out.read_text())
    from specviz.trace import Trace

    return Trace.from_dict(data).summary["tokens_per_second"]


def app_tps(page, expect) -> float:
    """Press Run, wait for the run and its race to end, read the tok/s the page shows."""
    page.locator(".st-key-run button").filter(visible=True).click()
    expect(page.locator(".sv-badge", has_text="done")).to_be_visible(timeout=300_000)
    metric = page.locator('[data-testid="stMetric"]').filter(has_text="Tokens / s").first
    value = metric.locator('[data-testid="stMetricValue"]').inner_text()
    return float(value.split()[0].replace(",", ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="bfloat16", help="the CLI's; the app's default (auto) is bf16 on a bf16 CPU")
    args = ap.parse_args()
    prompt, gamma, max_new = EXAMPLES["Code"], DEFAULTS["gamma"], DEFAULTS["max_new_tokens"]
    from playwright.sync_api import expect, sync_playwright

    port = free_port()
    env = dict(os.environ, SPECVIZ_PAIR="default", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                               "--server.port", str(port), "--server.address", "127.0.0.1",
                               "--browser.gatherUsageStats", "false"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                break
            time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.goto(url)
            expect(page.locator(".st-key-run button").filter(visible=True)).to_be_visible(timeout=300_000)
            app_tps(page, expect)  # warm-up: first run pays one-time set-up
            cli, app = [], []
            for i in range(args.repeats):
                cli.append(cli_tps(prompt, gamma, max_new, args.dtype))
                app.append(app_tps(page, expect))
                print(f"repeat {i + 1}: CLI {cli[-1]:.2f} tok/s, app {app[-1]:.2f} tok/s", flush=True)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=20)
    c, a = statistics.median(cli), statistics.median(app)
    print(f"\ncode example, γ {gamma}, {max_new} new tokens, {args.dtype}, greedy, median of {args.repeats}")
    print(f"{'':<6} {'tok/s':>7}")
    print(f"{'CLI':<6} {c:7.2f}")
    print(f"{'app':<6} {a:7.2f}")
    print(f"app / CLI = {a / c:.2f} (goal >= 0.90)")


if __name__ == "__main__":
    main()
