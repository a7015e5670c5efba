"""The app as fast as the engine: tok/s of a Live run in the browser against the CLI's.

Serves the app headless on the default pair, opens the Live page in Debian's Chromium
(Playwright, /usr/bin/chromium; never a downloaded browser), and times the code example
at the app's γ (or --gamma; --tree for a token tree), 64 new tokens, the app's `auto` dtype,
greedy: the speculative run's tok/s from the trace the page offers for download, against
``specviz generate`` with the same prompt and settings in a fresh process.
Interleaved (CLI, app, CLI, app, ...), median of --repeats; the browser stays open on
the page throughout, as in a classroom.

    python bench/app_speed.py                 # about 3 minutes once the pair is cached
    python bench/app_speed.py --repeats 5
    python bench/app_speed.py --gamma 12 --tree 16:2   # a token tree: 16 nodes, width 2, depth γ
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
from collections.abc import Iterator
from pathlib import Path

from specviz.ui.chrome import DEFAULTS, EXAMPLES

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"


def free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(pair: str) -> Iterator[str]:
    """``streamlit run app.py`` headless on loopback with ``pair``; yields its URL once it
    answers its health check, and always stops it."""
    port = free_port()
    env = dict(os.environ, SPECVIZ_PAIR=pair, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                               "--server.port", str(port), "--server.address", "127.0.0.1",
                               "--browser.gatherUsageStats", "false"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                break
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=20)


def cli_tps(prompt: str, gamma: int, max_new: int, dtype: str, tree: list[str]) -> float:
    """The speculative run's tok/s (engine clock) from ``specviz generate`` in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "trace.json"
        subprocess.run([sys.executable, "-m", "specviz", "generate", "--prompt", prompt, "--gamma", str(gamma),
                        "--max-new-tokens", str(max_new), "--dtype", dtype, "--quiet", "--json", str(out), *tree],
                       check=True, capture_output=True, cwd=ROOT)
        data = json.loads(out.read_text())
    from specviz.record.run_trace import Trace

    return Trace.from_dict(data).summary["tokens_per_second"]


def app_tps(page, expect) -> float:
    """Press Run, wait for the run and its race to end, and read the run's tok/s from the
    trace the page offers for download (the metric on the page is rounded to 0.1)."""
    done = page.locator(".sv-badge.sv-finished")
    page.locator(".st-key-run button").filter(visible=True).click()
    expect(done).to_be_hidden(timeout=60_000)  # the last run's badge goes as this one starts
    # Look every few seconds, as a person glances at the page: Playwright's expect() polls the
    # page many times a second, and that polling would take CPU from the models it times.
    deadline = time.monotonic() + 300
    while not done.count():
        assert time.monotonic() < deadline, "the run did not finish within 300 s"
        time.sleep(3)
    app = page.locator('[data-testid="stApp"]')  # the script run has ended and nothing is stale
    expect(app).to_have_attribute("data-test-script-state", "notRunning", timeout=60_000)
    expect(page.locator('[data-stale="true"]')).to_have_count(0, timeout=60_000)
    with page.expect_download() as download:
        page.locator(".st-key-dl_trace button").first.click()
    from specviz.record.run_trace import Trace

    data = json.loads(Path(download.value.path()).read_text())
    return Trace.from_dict(data).summary["tokens_per_second"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="auto",
                    help="the CLI's: auto, as the app (bf16 on a CPU with native bf16, else fp32)")
    ap.add_argument("--gamma", type=int, default=DEFAULTS["gamma"], help="γ (a tree's depth)")
    ap.add_argument("--tree", metavar="NODES:WIDTH", help="a dynamic token tree, as the Live page's sliders set it")
    args = ap.parse_args()
    prompt, gamma, max_new = EXAMPLES["Code"], args.gamma, DEFAULTS["max_new_tokens"]
    query, tree = f"?gamma={gamma}", []
    if args.tree:
        nodes, width = args.tree.split(":")
        query += f"&draft_shape=tree&tree_nodes={nodes}&tree_width={width}"
        tree = ["--tree", nodes, "--tree-width", width, "--tree-depth", str(gamma)]
    from playwright.sync_api import expect, sync_playwright

    with serve("default") as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.goto(url + query)
        expect(page.locator(".st-key-run button").filter(visible=True)).to_be_visible(timeout=300_000)
        app_tps(page, expect)  # warm-up: first run pays one-time set-up
        cli, app = [], []
        for i in range(args.repeats):
            cli.append(cli_tps(prompt, gamma, max_new, args.dtype, tree))
            app.append(app_tps(page, expect))
            print(f"repeat {i + 1}: CLI {cli[-1]:.2f} tok/s, app {app[-1]:.2f} tok/s", flush=True)
        browser.close()
    c, a = statistics.median(cli), statistics.median(app)
    shape = f", tree {args.tree} (nodes:width)" if args.tree else ""
    print(f"\ncode example, γ {gamma}{shape}, {max_new} new tokens, {args.dtype}, greedy, median of {args.repeats}")
    print(f"{'':<6} {'tok/s':>7}")
    print(f"{'CLI':<6} {c:7.2f}")
    print(f"{'app':<6} {a:7.2f}")
    ratios = [x / y for x, y in zip(app, cli, strict=True)]
    print(f"app / CLI = {a / c:.2f} (ratio of the medians; goal >= 0.90); per repeat "
          f"{', '.join(f'{r:.2f}' for r in ratios)}, median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
