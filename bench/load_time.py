"""Warm-start load time of the default pair (the safetensors cache already exists).

Each sample is a fresh Python process that imports specviz and calls load_pair,
timed inside the process (load_pair's own clock) and from outside (process
start to pair ready, imports included). Prints a table of medians.

specviz must be installed (``pip install -e .`` from the repository root, as the
README's set-up command does): the child processes import it from anywhere.

  python bench/load_time.py --dtypes float32 bfloat16 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

CHILD = """
import json, sys, time
t0 = time.perf_counter()
from specviz.models import load_pair
t1 = time.perf_counter()
stages = []
pair = load_pair("default", device="cpu", dtype=sys.argv[1], progress=lambda m, f: stages.append(m))
print(json.dumps({"load_s": pair.load_ms / 1000, "import_s": t1 - t0,
                  "converted": any(("Converting" in s or "Saving a" in s) for s in stages)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
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
