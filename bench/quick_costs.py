"""The Parallel page's default view against the view after a full cost measurement, on real runs.

For each prompt: one real greedy speculative run; then what the page does when it opens,
the few passes the run did not time measured in seconds (``specviz.measure.branch_costs.QuickCosts``' ratios,
scaled to the run's own passes), and what it shows once this machine's whole grid is
measured (``specviz.measure.forward_costs.load_or_measure``, cached: measured here only the first time, about a
minute or two). Printed for each schedule: tokens/s in the default view, after the full
measurement, their ratio (the goal for SSD: within ±15%), and SSD as the page showed it
before, with B single passes for a batched pass of B. The load average before and after
says how busy the machine was: a shared machine's timings are not the pair's own.

    python bench/quick_costs.py                    # default pair, code and prose, γ 4, fan-out 2
    python bench/quick_costs.py --int8 --gamma 4   # an int8 draft (the grid is the plain draft's)
    python bench/quick_costs.py --pair tiny
"""

from __future__ import annotations

import argparse
import os
import time

from specviz.engine.decode import speculative
from specviz.measure import branch_costs
from specviz.measure import forward_costs as C
from specviz.models.pair import load_pair
from specviz.record.run_config import RunConfig
from specviz.replay import what_if as parallel

PROMPTS = {
    "code": "Write a Python function that checks whether a number is prime, with a docstring.",
    "json": "Return a JSON object describing a book with keys title, author, year and tags.",
    "prose": "Explain in three sentences why the sky is blue.",
}


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="default")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--fanout", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--int8", action="store_true", help="draft with the int8 draft (the Live page's toggle)")
    ap.add_argument("--prompts", nargs="+", default=["code", "prose"], choices=list(PROMPTS))
    ap.add_argument("--refresh", action="store_true", help="measure the whole grid again, cached or not")
    args = ap.parse_args()

    pair = load_pair(args.pair, dtype=args.dtype)
    print(f"pair {pair.draft_name} -> {pair.target_name}, {pair.dtype} on {pair.device}; γ {args.gamma}, "
          f"fan-out {args.fanout}, draft {'int8' if args.int8 else 'as loaded'}; {load()}\n")
    head = (f"{'prompt':<6} {'ctx':>4} | {'quick s':>7} {'passes':>6} | {'schedule':<8} {'default':>8} "
            f"{'full':>8} {'ratio':>6} | {'old SSD':>7}")
    print(head)
    print("-" * len(head))
    worst = 0.0
    for name in args.prompts:
        cfg = RunConfig(prompt=PROMPTS[name], gamma=args.gamma, max_new_tokens=args.max_new_tokens,
                        draft_quant="int8" if args.int8 else "none")
        trace = speculative(pair, cfg).run()
        ctx = branch_costs.replay_context(trace, pair.context_length)
        settings = parallel.settings_for(trace, fanout=args.fanout)
        refs = parallel.references(trace)
        need = set().union(*parallel.missing_passes(trace, settings, measured=False).values())
        start = time.perf_counter()
        ratios = branch_costs.measure_ratios(pair, trace.config, ctx, need, refs)
        quick_s = time.perf_counter() - start
        default = parallel.replay(trace, parallel.fill_in(parallel.costs_for(trace, None), trace, ratios), settings)
        grid = C.load_or_measure(pair, context_length=ctx, refresh=args.refresh)
        after = parallel.costs_for(trace, grid)
        if parallel.own_draft(trace):  # the grid is the plain draft's: the page keeps the run's draft passes
            after = parallel.fill_in(after, trace, ratios)
        full = parallel.replay(trace, after, settings)
        old = parallel.replay(trace, parallel.costs_for(trace, None), settings)["ssd"].tokens_per_second
        for i, schedule in enumerate(default):
            d, f = default[schedule].tokens_per_second, full[schedule].tokens_per_second
            lead = (f"{name:<6} {ctx:>4} | {quick_s:7.1f} {len(need):>6}" if i == 0
                    else f"{'':<6} {'':>4} | {'':>7} {'':>6}")
            tail = f"{old:7.2f}" if schedule == "ssd" else ""
            print(f"{lead} | {schedule:<8} {d:8.2f} {f:8.2f} {d / f:6.2f} | {tail}", flush=True)
            if schedule == "ssd":
                worst = max(worst, abs(d / f - 1))
        meta = grid[1]
        print(f"{'':<6} {'':>4} |   grid {'cached' if meta['cached'] else 'measured'} {meta['measured_at']}"
              + (f"; other heavy work meanwhile: {meta['contention']}" if meta.get("contention") else ""))
    print(f"\nSSD, default view against the full measurement: worst {worst:.1%} off (goal: within 15%); {load()}")


if __name__ == "__main__":
    main()
