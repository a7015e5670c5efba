"""Record the runs shipped in assets/traces/ for the Replay and Parallel pages.

    python tools/record_traces.py            # every run below, default pair, bf16
    python tools/record_traces.py --only code-gamma4

Each run is a greedy speculative run of the default pair (64 new tokens), saved as a
specviz Trace with the draft's view of every output position (ranks and candidates), so
it replays with no model loaded, under every schedule. Run it on a quiet machine: the
timings recorded are the ones every replay shows.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specviz import load_pair, speculative
from specviz.trace import RunConfig

OUT = Path(__file__).resolve().parent.parent / "assets" / "traces"
RUNS = {
    "code-gamma4": ("Write a Python function is_prime(n) that returns True when n is a prime number.", 4),
    "json-gamma6": ("Return a JSON object for a book with the keys title, author, year and tags (three tags).", 6),
    "prose-gamma4": ("Describe a rainy afternoon in a small seaside town in three sentences.", 4),
    "chinese-gamma3": ("用三句话介绍长城的历史。", 3),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=list(RUNS), help="record just these")
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()
    pair = load_pair("default", dtype=args.dtype)
    for name in args.only or list(RUNS):
        prompt, gamma = RUNS[name]
        trace = speculative(pair, RunConfig(prompt=prompt, gamma=gamma, max_new_tokens=64)).run()
        trace.save(OUT / f"{name}.json")
        s = trace.summary
        print(f"{name}: {s['new_tokens']} tokens, {s['tokens_per_second']:.2f} tok/s, "
              f"acceptance {s['acceptance_rate']:.2f}, contention {trace.contention or 'none'}", flush=True)


if __name__ == "__main__":
    main()
