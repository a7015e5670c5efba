"""The serial schedule's replay checked against real runs of the engine.

For each prompt and gamma: ``--repeats`` real greedy speculative runs (3 by default), each
with its serial replay (specviz.schedules.serial) with this machine's measured forward-pass
costs (specviz.costs.load_or_measure at the run's mean context, parallel.replay_context:
measured once per pair, device, dtype and context, then cached) and the run's own prefills
and bookkeeping. The rounds must match exactly in every run (the same
proposals, acceptances and emitted tokens, round by round) and the median wall time of the
replays agree with the median of the real runs within 10% (one run on a shared machine
varies more than that from one run to the next). The PEARL and SSD replays of the first
run are printed beside it.

    python bench/schedules_check.py                      # default pair, code and prose, gamma 1..8
    python bench/schedules_check.py --pair tiny --gammas 2 4
"""

from __future__ import annotations

import argparse
import statistics

from specviz import costs as C
from specviz import parallel
from specviz.engine import speculative
from specviz.models import load_pair
from specviz.trace import RunConfig

PROMPTS = {
    "code": "Write a Python function that checks whether a number is prime, with a docstring.",
    "json": "Return a JSON object describing a book with keys title, author, year and tags.",
    "prose": "Explain in three sentences why the sky is blue.",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="default")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--gammas", type=int, nargs="+", default=list(range(1, 9)))
    ap.add_argument("--prompts", nargs="+", default=["code", "prose"], choices=list(PROMPTS))
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="real runs per cell (the medians are compared)")
    ap.add_argument("--refresh", action="store_true", help="measure the forward-pass costs again")
    args = ap.parse_args()

    pair = load_pair(args.pair, dtype=args.dtype)
    print(f"pair {pair.draft_name} -> {pair.target_name}, {pair.dtype} on {pair.device}; forward costs at each "
          f"run's mean context ({'measured now' if args.refresh else 'from the cache where there'})\n")
    measured: dict[int, tuple] = {}  # context -> (rows, meta), measured at most once per context here
    head = (f"{'prompt':<6} {'γ':>2} {'ctx':>4} | {'rounds':>6} {'sim':>4} {'same':>4} | {'real ms':>8} "
            f"{'real range':>11} {'sim ms':>8} "
            f"{'error':>6} | {'serial':>6} {'PEARL':>6} {'SSD':>6} tok/s (sim) | SSD hits")
    print(head)
    print("-" * len(head))
    failures = 0
    for name in args.prompts:
        for g in args.gammas:
            checks, res, ctx = [], None, 0
            for _ in range(max(1, args.repeats)):
                trace = speculative(pair, RunConfig(prompt=PROMPTS[name], gamma=g,
                                                    max_new_tokens=args.max_new_tokens)).run()
                ctx = parallel.replay_context(trace, pair.context_length)
                if ctx not in measured:
                    measured[ctx] = C.load_or_measure(pair, context_length=ctx, refresh=args.refresh)
                model = parallel.costs_for(trace, measured[ctx])
                checks.append(parallel.check_serial(trace, model))
                res = res or parallel.replay(trace, model, parallel.settings_for(trace))
            check = parallel.SerialCheck(
                checks[0].real_rounds, checks[0].sim_rounds, all(c.rounds_match for c in checks),
                statistics.median(c.real_wall_ms for c in checks), statistics.median(c.sim_wall_ms for c in checks))
            failures += not check.ok
            spread = f"{min(c.real_wall_ms for c in checks):.0f}-{max(c.real_wall_ms for c in checks):.0f}"
            print(f"{name:<6} {g:>2} {ctx:>4} | {check.real_rounds:6d} {check.sim_rounds:4d} "
                  f"{'yes' if check.rounds_match else 'NO':>4} | {check.real_wall_ms:8.0f} {spread:>11} "
                  f"{check.sim_wall_ms:8.0f} {check.wall_error:+6.1%} | {res['serial'].tokens_per_second:6.2f} "
                  f"{res['pearl'].tokens_per_second:6.2f} {res['ssd'].tokens_per_second:6.2f}             | "
                  f"{res['ssd'].hit_rate:.0%}", flush=True)
    print(f"\n{failures} of {len(args.prompts) * len(args.gammas)} cells outside the check (rounds must match "
          f"in every run; median wall within ±{parallel.WALL_TOLERANCE:.0%}; {args.repeats} runs a cell)")
    for ctx, (_, meta) in sorted(measured.items()):
        busy = f"; other heavy work meanwhile: {meta['contention']}" if meta.get("contention") else ""
        print(f"costs at context {ctx}: {'cached' if meta['cached'] else 'measured'} {meta['measured_at']}{busy}")


if __name__ == "__main__":
    main()
