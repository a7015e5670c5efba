"""First run against second run: is a fresh process's first run as fast as the next one?

For each of ``--processes`` rounds, and each draft variant (the full draft, the 32k draft
head of FR-Spec, the int8 draft), a fresh Python process loads the pair and makes the
same speculative run twice (the Live page's defaults: the Code example, γ 4, 64 new
tokens, greedy), and prints each run's tok/s and its median draft and verify pass. Each
variant gets processes of its own: a variant run after another would find the weights
already warm. Every process runs twice over, once per state of the model cache:

* in memory: the cache files are read through first, so they sit in the page cache;
* evicted: ``os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)`` on each cache file first,
  as on the next morning (those files only; the tiny pair is built in code and has none).

Prints one line per process and a table of medians: first and second run tok/s, their
ratio first / second (the goal: >= 0.9), and the draft and verify pass ratios first /
second (1.00: the first run's passes as fast as the second's). A run timed while something
else competed for the cores says so (specviz.record.contention), since its ratio is then no
measure of a cold start.

  python bench/first_run.py                              # the default pair, 3 processes
  python bench/first_run.py --pair tiny --processes 1    # a smoke run
  python bench/first_run.py --processes 1 --max-new-tokens 16
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = {  # name -> (draft_vocab, draft_quant), as RunConfig and the CLI's --draft-vocab / --draft-quant name them
    "full": (0, "none"),
    "32k head": (32768, "none"),
    "int8": (0, "int8"),
}
STATES = ("in memory", "evicted")

CHILD = """
import json, os, sys, time
t0 = time.perf_counter()
from specviz import RunConfig, load_pair, speculative
pair_name, dtype, vocab, quant, max_new = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
prompt, gamma = sys.argv[6], int(sys.argv[7])
pair = load_pair(pair_name, device="cpu", dtype=dtype)
if vocab >= pair.draft_vocab_size:  # the tiny pair's vocabulary is far below 32k: half of it
    vocab = pair.draft_vocab_size // 2
runs = []
for _ in range(2):
    cfg = RunConfig(prompt=prompt, gamma=gamma, max_new_tokens=max_new, draft_vocab=vocab, draft_quant=quant)
    s = (trace := speculative(pair, cfg).run()).summary
    runs.append({"tok_s": s["tokens_per_second"], "draft_ms": s["draft_forward_ms_median"],
                 "verify_ms": s["target_forward_ms_median"], "tokens": s["new_tokens"],
                 "contention": [c.text() for c in trace.contention]})
print(json.dumps({"load_s": pair.load_ms / 1000, "process_s": time.perf_counter() - t0, "draft_vocab": vocab,
                  "dtype": pair.dtype, "runs": runs, "load": os.getloadavg()[0]}))
"""


def cache_files(pair: str, dtype: str) -> list[Path]:
    """The files of the pair's converted cache in ``dtype`` (specviz.models.pair' layout); none for the tiny pair."""
    if pair == "tiny":
        return []
    from specviz.models.pair import (
        DRAFT,
        TARGET,
        cache_dir,
        dtype_folder,
        resolve_device,
        resolve_dtype,
    )

    dt = resolve_dtype(dtype, resolve_device("cpu"))
    folders = [dtype_folder(cache_dir() / "models" / f"{s.name}-{s.sha256[:12]}", dt) for s in (DRAFT, TARGET)]
    missing = [f for f in folders if not f.is_dir()]
    if missing:
        raise SystemExit(f"no converted cache at {missing[0]}: load the pair once first (specviz run ...)")
    return [f for folder in folders for f in sorted(folder.iterdir()) if f.is_file()]


def evict(files: list[Path]) -> None:
    """Drop these files (only these) from the page cache."""
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_through(files: list[Path]) -> None:
    """Read these files once, so they sit in the page cache."""
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass


def child(args: argparse.Namespace, variant: str) -> dict:
    vocab, quant = VARIANTS[variant]
    from specviz.ui.chrome import DEFAULTS  # the Live page's prompt and γ

    out = subprocess.run([sys.executable, "-c", CHILD, args.pair, args.dtype, str(vocab), quant,
                          str(args.max_new_tokens), DEFAULTS["prompt"], str(DEFAULTS["gamma"])],
                         capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"the {variant} process failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def fmt(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="default", choices=("default", "tiny"))
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--processes", type=int, default=3, help="fresh processes per variant and cache state")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = ap.parse_args()
    files = cache_files(args.pair, args.dtype)
    size_gb = sum(f.stat().st_size for f in files) / 1e9
    print(f"pair {args.pair} ({args.dtype}), cache {len(files)} files, {size_gb:.1f} GB; {args.processes} fresh "
          f"processes per variant and cache state, {args.max_new_tokens} new tokens; started "
          f"{time.strftime('%H:%M:%S')}, load {os.getloadavg()[0]:.1f}\n")
    print(f"{'cache':<9} {'variant':<8} {'#':>1} | {'load s':>6} | {'1st tok/s':>9} {'2nd tok/s':>9} {'ratio':>5} | "
          f"{'draft ms 1st/2nd':>16} | {'verify ms 1st/2nd':>17} | contention")
    results: dict[tuple[str, str], list[dict]] = {}
    for i in range(args.processes):  # rounds interleaved, so a slow minute of the machine lands on all alike
        for variant in args.variants:
            for state in STATES:
                (evict if state == "evicted" else read_through)(files)
                r = child(args, variant)
                results.setdefault((state, variant), []).append(r)
                a, b = r["runs"]
                busy = "; ".join(sorted({c for run in r["runs"] for c in run["contention"]})) or "none"
                print(f"{state:<9} {variant:<8} {i + 1:>1} | {r['load_s']:6.1f} | {a['tok_s']:9.2f} {b['tok_s']:9.2f} "
                      f"{fmt(ratio(a['tok_s'], b['tok_s'])):>5} | {fmt(a['draft_ms'], 1):>7}/{fmt(b['draft_ms'], 1):<8} | "
                      f"{fmt(a['verify_ms'], 1):>8}/{fmt(b['verify_ms'], 1):<8} | {busy} (load {r['load']:.1f})",
                      flush=True)

    def med(values) -> float | None:
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    print(f"\nmedians over {args.processes} processes (ratios: first run / second run; goal tok/s >= 0.9)")
    print(f"{'cache':<9} {'variant':<8} | {'load s':>6} | {'1st tok/s':>9} | {'2nd tok/s':>9} | {'tok/s ratio':>11} | "
          f"{'draft ratio':>11} | {'verify ratio':>12} | contended")
    for (state, variant), rs in results.items():
        first, second = [r["runs"][0] for r in rs], [r["runs"][1] for r in rs]
        print(f"{state:<9} {variant:<8} | {fmt(med(r['load_s'] for r in rs), 1):>6} | "
              f"{fmt(med(a['tok_s'] for a in first)):>9} | {fmt(med(b['tok_s'] for b in second)):>9} | "
              f"{fmt(med(ratio(a['tok_s'], b['tok_s']) for a, b in zip(first, second))):>11} | "
              f"{fmt(med(ratio(a['draft_ms'], b['draft_ms']) for a, b in zip(first, second))):>11} | "
              f"{fmt(med(ratio(a['verify_ms'], b['verify_ms']) for a, b in zip(first, second))):>12} | "
              f"{sum(bool(run['contention']) for r in rs for run in r['runs'])} of {2 * len(rs)} runs")
    cut = {r["draft_vocab"] for (_, v), rs in results.items() if v == "32k head" for r in rs}
    if cut and cut != {VARIANTS["32k head"][0]}:
        print(f"(the pair's vocabulary is below 32k: its '32k head' keeps {', '.join(map(str, sorted(cut)))} ids, half)")


if __name__ == "__main__":
    main()
