"""The serial schedule's replay checked against real runs of the engine.

For each prompt and gamma: ``--repeats`` real greedy speculative runs (3 by default), each
replayed serially (specviz.replay.schedules.serial) with the run's own prefills and bookkeeping
and this machine's forward-pass costs at the run's mean context (branch_costs.replay_context),
taken two ways:

* **beside** (the check): the passes the run made (the target over each k it read, the
  draft over one and two tokens) timed right after each real run, in the same minutes;
  their median over the repeats. This machine's speed drifts by up to 20% over minutes
  (a verify of 5 tokens: 1,204 ms, then 1,002 ms a minute later, same process), so costs
  measured at another time cannot tell a replay's error from the drift;
* **cached**: the whole latency grid measured once per context and cached
  (costs.load_or_measure), as the Parallel page replays with.

The rounds must match exactly in every run (the same proposals, acceptances and emitted
tokens, round by round), and the median wall time of the replays with the costs measured
beside agree with the median of the real runs within 10%. The PEARL and SSD replays of
the first run (cached costs) are printed beside it.

    python bench/schedules_check.py                      # default pair, code and prose, gamma 1..8
    python bench/schedules_check.py --pair tiny --gammas 2 4
"""

from __future__ import annotations

import argparse
import statistics

from specviz.engine.decode import speculative
from specviz.measure import branch_costs
from specviz.measure import forward_costs as C
from specviz.models.pair import load_pair
from specviz.record.contention import Contention, describe
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Trace
from specviz.replay import what_if as parallel

PROMPTS = {
    "code": "Write a Python function that checks whether a number is prime, with a docstring.",
    "json": "Return a JSON object describing a book with keys title, author, year and tags.",
    "prose": "Explain in three sentences why the sky is blue.",
}


def passes_of(trace: Trace) -> list[C.GridPoint]:
    """The forward passes a serial replay of ``trace`` costs: the target over every k the run
    read in a verify, the draft over one token and over two (after a bonus)."""
    ks = sorted({len(e.tokens) for e in trace.events if e.kind == "verify_forward"})
    return [("target", 1, k) for k in ks] + [("draft", 1, 1), ("draft", 1, 2)]


def median_rows(samples: list[dict]) -> list[dict]:
    """Rows of several measurements of the same points: per point, the median of their ``ms``."""
    by: dict[tuple, list[float]] = {}
    for r in samples:
        by.setdefault((r["model"], r["batch"], r["tokens"]), []).append(r["ms"])
    return [{"model": m, "batch": b, "tokens": k, "ms": statistics.median(v)} for (m, b, k), v in by.items()]


def combined(checks: list[parallel.SerialCheck]) -> parallel.SerialCheck:
    """Several runs' checks as one: rounds must match in each; median wall times."""
    return parallel.SerialCheck(checks[0].real_rounds, checks[0].sim_rounds, all(c.rounds_match for c in checks),
                                statistics.median(c.real_wall_ms for c in checks),
                                statistics.median(c.sim_wall_ms for c in checks))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="default")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--gammas", type=int, nargs="+", default=list(range(1, 9)))
    ap.add_argument("--prompts", nargs="+", default=["code", "prose"], choices=list(PROMPTS))
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="real runs per cell (the medians are compared)")
    ap.add_argument("--refresh", action="store_true", help="measure the cached forward-pass costs again")
    args = ap.parse_args()
    repeats = max(1, args.repeats)

    pair = load_pair(args.pair, dtype=args.dtype)
    print(f"pair {pair.draft_name} -> {pair.target_name}, {pair.dtype} on {pair.device}; {repeats} runs a cell; "
          f"costs at each run's mean context, measured beside the runs and cached "
          f"({'measured now' if args.refresh else 'from the cache where there'})\n")
    measured: dict[int, tuple] = {}  # context -> (rows, meta) of the whole grid, at most once per context
    head = (f"{'prompt':<6} {'γ':>2} {'ctx':>4} | {'rounds':>6} {'sim':>4} {'same':>4} | {'real ms':>8} "
            f"{'real range':>11} | {'beside':>8} {'error':>6} | {'cached':>8} {'error':>6} | "
            f"{'serial':>6} {'PEARL':>6} {'SSD':>6} tok/s (sim) | SSD hits")
    print(head)
    print("-" * len(head))
    failures, errors = 0, {"beside": [], "cached": []}
    for name in args.prompts:
        for g in args.gammas:
            traces, samples, points, ctx = [], [], [], 0
            for _ in range(repeats):
                trace = speculative(pair, RunConfig(prompt=PROMPTS[name], gamma=g,
                                                    max_new_tokens=args.max_new_tokens)).run()
                traces.append(trace)
                if not points:
                    ctx, points = branch_costs.replay_context(trace, pair.context_length), passes_of(trace)
                samples += C.measure(pair, context_length=ctx, grid=points, repeats=2)
            if ctx not in measured:
                measured[ctx] = C.load_or_measure(pair, context_length=ctx, refresh=args.refresh)
            beside = (median_rows(samples), {"context_length": ctx})
            check = combined([parallel.check_serial(t, parallel.costs_for(t, beside)) for t in traces])
            cached = combined([parallel.check_serial(t, parallel.costs_for(t, measured[ctx])) for t in traces])
            model = parallel.costs_for(traces[0], measured[ctx])
            res = parallel.replay(traces[0], model, parallel.settings_for(traces[0]))
            failures += not check.ok
            errors["beside"].append(check.wall_error)
            errors["cached"].append(cached.wall_error)
            spread = f"{min(t.wall_ms for t in traces):.0f}-{max(t.wall_ms for t in traces):.0f}"
            print(f"{name:<6} {g:>2} {ctx:>4} | {check.real_rounds:6d} {check.sim_rounds:4d} "
                  f"{'yes' if check.rounds_match else 'NO':>4} | {check.real_wall_ms:8.0f} {spread:>11} | "
                  f"{check.sim_wall_ms:8.0f} {check.wall_error:+6.1%} | {cached.sim_wall_ms:8.0f} "
                  f"{cached.wall_error:+6.1%} | {res['serial'].tokens_per_second:6.2f} "
                  f"{res['pearl'].tokens_per_second:6.2f} {res['ssd'].tokens_per_second:6.2f}             | "
                  f"{res['ssd'].hit_rate:.0%}", flush=True)
    cells = len(args.prompts) * len(args.gammas)
    print(f"\n{failures} of {cells} cells outside the check (rounds must match in every run; the median wall "
          f"time with the costs measured beside the runs within ±{parallel.WALL_TOLERANCE:.0%})")
    for how, errs in errors.items():
        inside = sum(abs(e) <= parallel.WALL_TOLERANCE for e in errs)
        print(f"wall-time error, costs {how}: median {statistics.median(errs):+.1%}, "
              f"from {min(errs):+.1%} to {max(errs):+.1%}; {inside} of {cells} within ±10%")
    for ctx, (_, meta) in sorted(measured.items()):
        busy = (f"; other work meanwhile: {describe(Contention.of(c) for c in meta['contention'])}"
                if meta.get("contention") else "")
        print(f"cached costs at context {ctx}: {'cached' if meta['cached'] else 'measured'} "
              f"{meta['measured_at']}{busy}")


if __name__ == "__main__":
    main()
