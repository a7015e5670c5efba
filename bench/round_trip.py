"""Benchmark: the Parallel page's round-trip slider checked for real ("speculation at a distance").

The slider adds network time d to every verify of the replayed serial, PEARL and SSD schedules
of a remote run (``specviz.replay.latency.with_rtt``). Here, per prompt and gamma:

1. direct: a serial run against the vLLM server, and its replays with d added to every request
   (the slider at d), from that run's own costs (``specviz.measure.real_vs_sim.costs_for``: the
   SSD branch passes the run did not make measured beside it): the prediction;
2. through a delay relay (``specviz.models.relay``: the same server, d added to every request)
   a serial run, PEARL for real and SSD for real (the same fan-out as the replay): the measurement.

Printed: wall ms predicted and measured per schedule, their ratio, and each schedule's speedup
over serial both ways, with the load average. The draft runs on this machine, its thread pinned
off the core the server's worker is bound to (``two_threads.default_cores``).

  python -m specviz.models.vllm_local serve --port 8000        # in another shell (float32)
  python bench/round_trip.py --target-url http://127.0.0.1:8000 --delays-ms 0 300 --gammas 4
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.overlap import PROMPTS  # noqa: E402  (the same two prompts as the SSD table)
from specviz import RunConfig, load_pair  # noqa: E402
from specviz.measure.pearl_real import pearl_run  # noqa: E402
from specviz.measure.real_vs_sim import costs_for, run_alpha, serial_run  # noqa: E402
from specviz.measure.ssd_real import ssd_run, user_budget  # noqa: E402
from specviz.models import relay  # noqa: E402
from specviz.replay import what_if  # noqa: E402
from specviz.replay.latency import with_rtt  # noqa: E402

SCHEDULES = ("serial", "pearl", "ssd")


def predicted(pair, config: RunConfig, fanout: int, delays: list[float]) -> tuple[dict, object]:
    """A serial run straight to the server and its replays at each delay: {d: {schedule: wall ms}}."""
    serial = serial_run(pair, config)
    settings = dataclasses.replace(what_if.settings_for(serial, gamma=config.gamma, policy="constant",
                                                        fanout=fanout, fanout_mode="uniform"),
                                   alpha=run_alpha(serial))
    costs, _ = costs_for(pair, serial, settings, fit=False)
    out = {}
    for d in delays:
        res = what_if.replay(serial, with_rtt(costs, d), settings)
        out[d] = {s: res[s].wall_ms for s in SCHEDULES}
    return out, serial


def measured(pair, config: RunConfig, fanout: int, alpha: float) -> dict:
    """Serial, PEARL and SSD run for real against ``pair``'s target (through the relay)."""
    s = serial_run(pair, config)
    p = pearl_run(pair, config)
    q = ssd_run(pair, config, user_budget(None, config.gamma, fanout), "uniform", alpha)
    same = p.trace.output_ids == s.output_ids == q.trace.output_ids
    net = statistics.fmean(e.duration_ms for e in s.events if e.kind == "network") if s.events else float("nan")
    return {"serial": s.wall_ms, "pearl": p.trace.wall_ms, "ssd": q.trace.wall_ms, "same": same,
            "hit": q.hit_rate, "network_ms": net}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target-url", required=True)
    ap.add_argument("--draft", default="default-draft")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--delays-ms", type=float, nargs="+", default=[0.0, 300.0])
    ap.add_argument("--gammas", type=int, nargs="+", default=[4])
    ap.add_argument("--prompts", nargs="+", default=["code"], choices=list(PROMPTS))
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--fanout", type=int, default=2)
    args = ap.parse_args()

    pair = load_pair(draft=args.draft, target_url=args.target_url, dtype=args.dtype)
    direct = pair.remote.url
    warm = RunConfig(prompt=PROMPTS["code"], gamma=2, max_new_tokens=8)
    serial_run(pair, warm), pearl_run(pair, warm), ssd_run(pair, warm, user_budget(None, 2, 1))
    print(f"draft {pair.draft_name} ({pair.dtype}) here, target {pair.target_name} on {direct}; "
          f"{args.max_new_tokens} new tokens; SSD fan-out {args.fanout} (uniform); load {os.getloadavg()[0]:.2f}")
    head = (f"{'prompt':<6} {'γ':>2} {'d ms':>5} | " + " | ".join(f"{s:<6} {'pred':>7} {'meas':>7} {'m/p':>5}"
                                                          for s in SCHEDULES)
            + f" | {'PEARL/serial p/m':>16} {'SSD/serial p/m':>15} | {'net ms':>7} {'hit':>5} {'same':>4} {'load':>5}")
    rows = []
    for name in args.prompts:
        for g in args.gammas:
            config = RunConfig(prompt=PROMPTS[name], gamma=g, max_new_tokens=args.max_new_tokens)
            pred, serial = predicted(pair, config, args.fanout, args.delays_ms)
            for d in args.delays_ms:
                with relay.relaying(direct, d) as url:
                    pair.remote.url = url
                    try:
                        m = measured(pair, config, args.fanout, run_alpha(serial))
                    finally:
                        pair.remote.url = direct
                p = pred[d]
                cells = " | ".join(f"{s:<6} {p[s]:7.0f} {m[s]:7.0f} {m[s] / p[s]:5.2f}" for s in SCHEDULES)
                gains = (f"{p['serial'] / p['pearl']:7.2f}/{m['serial'] / m['pearl']:<8.2f} "
                         f"{p['serial'] / p['ssd']:6.2f}/{m['serial'] / m['ssd']:<8.2f}")
                rows.append(f"{name:<6} {g:>2} {d:5.0f} | {cells} | {gains} | {m['network_ms']:7.0f} "
                            f"{m['hit'] if m['hit'] is not None else float('nan'):5.2f} "
                            f"{'yes' if m['same'] else 'NO':>4} {os.getloadavg()[0]:5.2f}")
                print("  " + rows[-1], flush=True)
    print("\nwall ms: pred = the slider (replay of the direct run + d per request), meas = through the relay; "
          "m/p = measured / predicted")
    print(head)
    print("-" * len(head))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
