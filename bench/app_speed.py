"""The app as fast as the engine: tok/s of a Live run in the browser against the CLI's.

Serves the app headless on the default pair, opens the Live page in Debian's Chromium
(Playwright, /usr/bin/chromium; never a downloaded browser), and times a prompt of our own (not
one of the page's examples: --prompt to change it) at the app's settings (its γ or --gamma;
--tree for a token tree; the draft variant and stop policy the page starts with), greedy: the
speculative run's tok/s and the race's speedup from the trace and history the page offers for
download, against ``specviz generate`` (and ``specviz race``'s speedup) with the settings the
app's own run recorded, in a fresh process. The app's engine runs in its worker process
(specviz.worker). Interleaved (CLI, app, CLI, app, ...), median of --repeats; the browser stays
open on the page throughout, glancing at it every 3 s, as in a classroom.

    python bench/app_speed.py                 # about 4 minutes once the pair is cached
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

from specviz.ui.chrome import DEFAULTS

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


PROSE = ("Explain to a friend who has never cooked why bread dough needs time to rise, and what "
         "happens if you bake it too early.")


def cli_flags(cfg) -> list[str]:
    """``specviz generate`` flags for the settings of an app run (its trace's config)."""
    flags = ["--prompt", cfg.prompt, "--gamma", str(cfg.gamma), "--max-new-tokens", str(cfg.max_new_tokens),
             "--policy", cfg.policy, "--confidence", str(cfg.confidence), "--draft-quant", cfg.draft_quant,
             "--dtype", cfg.dtype, "--temperature", str(cfg.temperature), "--seed", str(cfg.seed)]
    if cfg.draft_vocab:
        flags += ["--draft-vocab", str(cfg.draft_vocab)]
    if cfg.tree_nodes:
        flags += ["--tree", str(cfg.tree_nodes), "--tree-width", str(cfg.tree_width), "--tree-depth",
                  str(cfg.tree_depth)]
    if not cfg.chat:
        flags.append("--raw")
    for stop in cfg.stop:
        flags += ["--stop", stop]
    return flags


def cli_json(command: str, flags: list[str], keep: Path | None = None) -> dict:
    """``specviz <command>`` (generate or compare) in a fresh process: the JSON it writes."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "trace.json"
        subprocess.run([sys.executable, "-m", "specviz", command, *flags, "--quiet", "--json", str(out)],
                       check=True, capture_output=True, cwd=ROOT)
        text = out.read_text()
        if keep is not None:
            keep.write_text(text)
        return json.loads(text)


def app_run(page, expect):
    """Press Run, wait for the run and its race to end, and read the run's trace (tok/s, the
    settings) and its race's speedup from what the page offers for download (the metrics on the
    page are rounded)."""
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

    trace = Trace.from_dict(json.loads(Path(download.value.path()).read_text()))
    with page.expect_download() as download:
        page.locator(".st-key-dl_history button").first.click()
    rows = history_rows(Path(download.value.path()))
    speedup = rows[-1].get("speedup")
    assert isinstance(speedup, float), f"the run's history row has no race speedup: {rows[-1]}"
    return trace, speedup


def cpu_by_program() -> dict[str, float]:
    """CPU seconds used so far by each program on the machine (by process name, or a Python's
    ``-m`` module, summed over its processes), to say who took the CPU while the app ran."""
    import psutil

    used: dict[str, float] = {}
    for proc in psutil.process_iter(["name", "cmdline", "cpu_times"]):
        name, argv, times = proc.info["name"] or "?", proc.info["cmdline"] or [], proc.info["cpu_times"]
        if times is None:  # gone, or not ours to read
            continue
        if name.startswith("python") and "-m" in argv[:-1]:
            name = argv[argv.index("-m") + 1]
        used[name] = used.get(name, 0.0) + times.user + times.system
    return used


def cpu_note(before: dict[str, float], after: dict[str, float], top: int = 5) -> str:
    """The programs that used the most CPU between two ``cpu_by_program`` readings."""
    spent = sorted(((after[k] - before.get(k, 0.0), k) for k in after), reverse=True)[:top]
    return ", ".join(f"{name} {seconds:.1f} s" for seconds, name in spent if seconds >= 0.05)


def history_rows(path: Path) -> list[dict]:
    """The history download (CSV or JSON) as rows."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith(("[", "{")):
        data = json.loads(text)
        return data if isinstance(data, list) else data.get("runs", [])
    import csv
    import io

    return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(io.StringIO(text))]


def _number(value: str):
    try:
        return float(value.strip("×⚠ "))
    except ValueError:
        return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt", default=PROSE, help="default: a prose prompt of our own, not a page example")
    ap.add_argument("--gamma", type=int, default=DEFAULTS["gamma"], help="γ (a tree's depth)")
    ap.add_argument("--tree", metavar="NODES:WIDTH", help="a dynamic token tree, as the Live page's sliders set it")
    ap.add_argument("--keep", type=Path, metavar="DIR", help="write each run's trace there (cli-N.json, app-N.json)")
    args = ap.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    from urllib.parse import quote

    query = f"?gamma={args.gamma}&prompt={quote(args.prompt)}"
    if args.tree:
        nodes, width = args.tree.split(":")
        query += f"&draft_shape=tree&tree_nodes={nodes}&tree_width={width}"
    from playwright.sync_api import expect, sync_playwright

    with serve("default") as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.goto(url + query)
        expect(page.locator(".st-key-run button").filter(visible=True)).to_be_visible(timeout=300_000)
        first, _ = app_run(page, expect)  # warm-up: first run pays one-time set-up; its settings are the CLI's
        flags = cli_flags(first.config)
        rows = []
        for i in range(args.repeats):
            from specviz.record.run_trace import Trace

            keep = args.keep / f"cli-{i + 1}.json" if args.keep else None
            cli = Trace.from_dict(cli_json("generate", flags, keep)).summary["tokens_per_second"]
            cli_speedup = cli_json("compare", flags)["speedup"]
            before = cpu_by_program()
            trace, app_speedup = app_run(page, expect)
            print(f"  CPU during the app's run and race: {cpu_note(before, cpu_by_program())}", flush=True)
            if args.keep:
                (args.keep / f"app-{i + 1}.json").write_text(json.dumps(trace.to_dict()))
            rows.append((cli, trace.summary["tokens_per_second"], cli_speedup, app_speedup))
            print(f"repeat {i + 1}: CLI {rows[-1][0]:.2f} tok/s, app {rows[-1][1]:.2f} tok/s; race speedup CLI "
                  f"×{cli_speedup:.2f}, app ×{app_speedup:.2f}", flush=True)
        browser.close()
    med = [statistics.median(col) for col in zip(*rows, strict=True)]
    cfg = first.config
    shape = f", tree {args.tree} (nodes:width)" if args.tree else ""
    print(f"\n{args.prompt[:40]!r}…, γ {cfg.gamma}{shape}, {cfg.policy}, draft {cfg.draft_quant}, {cfg.max_new_tokens} "
          f"new tokens, {cfg.dtype}, greedy, median of {args.repeats}")
    print(f"{'':<6} {'tok/s':>7} {'race speedup':>13}")
    print(f"{'CLI':<6} {med[0]:7.2f} {med[2]:13.2f}")
    print(f"{'app':<6} {med[1]:7.2f} {med[3]:13.2f}")
    print(f"app / CLI tok/s = {med[1] / med[0]:.2f} (goal >= 0.95); race speedup app / CLI = {med[3] / med[2]:.2f} "
          f"(goal within 5%)")


if __name__ == "__main__":
    main()
