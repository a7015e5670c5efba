"""Benchmark: PEARL run for real (specviz.measure.pearl_real, draft and target in two pinned threads)
against PEARL simulated (specviz.replay.what_if.replay) and the serial schedule that runs today.

For each gamma, interleaved in one process (the order rotates every repeat, so machine
noise hits all alike), on the same pair, prompt and budget, greedy:

  serial      specviz.speculative(), torch's default thread count (every pass on all cores)
  serial 1t   the same with one intra-op thread (one core per pass, nothing beside it)
  PEARL       specviz.measure.pearl_real.pearl_run(): the draft on core 0 and the target on core 1,
              one thread each, both at once

and the PEARL replay of each serial run's ranks with costs read off that run
(``latency.from_trace``): "sim" from the default-thread run, "sim 1t" from the one-thread run,
and, unless --no-measured, "sim meas" from measured forward costs (``specviz.measure.forward_costs.load_or_measure``
on a small grid, cached; measured at the default thread count, context 300 tokens). Each cell is
the median over --repeats runs (tok/s = new tokens / the run's own wall time, prefills in);
the min-max columns show the spread (a busy machine widens it: a pinned thread cannot move
off a core that another process is using), and "others max %" the largest share of the CPUs
that other processes took during one of those runs (from /proc/stat; --wait-quiet waits for a lull).

The second table is the per-pass slowdown: the median draft pass and the median verify pass
(prefills left out) of the PEARL runs over those of the serial runs. Against "serial 1t" it
isolates sharing: the same one-thread pass, but with the other model running on the other
core at the same moment (memory bandwidth, the shared L3, the GIL between Python steps).
Against "serial" it adds the loss of the second core inside each pass. The verify passes do
not read the same number of tokens (serial: gamma + 1; PEARL: 1 in pre-verify, up to gamma in
post-verify), which on a memory-bound CPU pass in bf16 changes little; the table says k.

  python bench/overlap.py                           # default pair, dtype auto, gammas 2 4 6
  python bench/overlap.py --pair tiny --gammas 2 --repeats 1 --no-measured   # a smoke run

With --ssd, another table: for each prompt (--prompts: code, prose) and gamma, per repeat a
serial run (torch's default threads), then PEARL and SSD each run for real and simulated from
that serial run's costs (``specviz.measure.real_vs_sim.real_vs_simulated``, the code of
``specviz overlap`` and the Parallel page); SSD with its budget fitted to the verify
(geometric allocation) and with a fixed fan-out (--fanout, uniform). Medians over the repeats;
``uptime``'s load average with every cell. --target-url runs the target on a vLLM server.

  python bench/overlap.py --ssd --gammas 4 8 --repeats 3
  python bench/overlap.py --ssd --gammas 4 --target-url http://127.0.0.1:8000 --dtype float32
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from specviz import load_pair, speculative
from specviz.measure import forward_costs as costs
from specviz.measure.pearl_real import pearl_run
from specviz.record.contention import Contention, describe, merged
from specviz.record.run_config import RunConfig
from specviz.replay import latency
from specviz.replay.what_if import replay, settings_for

PROMPT = "Write a Python function that checks whether a number is prime, with a docstring."
PROMPTS = {"code": PROMPT, "prose": "Explain in three sentences why the sky is blue."}


def med(xs) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def spread(traces) -> str:
    tps = [t.summary["tokens_per_second"] for t in traces]
    return f"{min(tps):.2f}-{max(tps):.2f}"


def serial(pair, config: RunConfig, threads: int):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return speculative(pair, config).run()
    finally:
        torch.set_num_threads(before)


def passes(trace, kind: str) -> list[float]:
    return [e.duration_ms for e in trace.events if e.kind == kind]


def tokens_read(trace) -> str:
    ks = sorted({len(e.tokens) for e in trace.events if e.kind == "verify_forward"})
    return ",".join(map(str, ks))


def no_pass_ms(trace) -> float:
    """Wall time in which neither model runs a forward pass (the union of the passes left out)."""
    busy, end = 0.0, 0.0
    for e in sorted((e for e in trace.events if e.is_forward), key=lambda e: e.start_ms):
        busy += max(0.0, e.end_ms - max(e.start_ms, end))
        end = max(end, e.end_ms)
    return trace.wall_ms - busy


def sim_pearl(trace, model) -> float:
    return replay(trace, model, settings_for(trace))["pearl"].tokens_per_second


def first_difference(a: list[int], b: list[int]) -> str:
    if a == b:
        return "yes"
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"NO (from token {i})"


def cpu_seconds() -> tuple[float, float] | None:
    """(busy CPU seconds of the whole machine, all processes and VM steal; this process's
    CPU seconds), or None where /proc/stat is not there."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks[:8]
    own = os.times()
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK"), own.user + own.system


def others_share(before, after, wall_s: float) -> float:
    """The share of the machine's CPU time that other processes (and the hypervisor) took."""
    if before is None or after is None or wall_s <= 0:
        return float("nan")
    return max(0.0, (after[0] - before[0]) - (after[1] - before[1])) / (wall_s * (os.cpu_count() or 1))


def wait_quiet(limit: float, patience_s: float) -> float:
    """Wait (up to ``patience_s``) until other processes take at most ``limit`` of the CPUs
    over one second; returns the last share seen."""
    deadline = time.monotonic() + patience_s
    while True:
        before, t0 = cpu_seconds(), time.monotonic()
        time.sleep(1.0)
        share = others_share(before, cpu_seconds(), time.monotonic() - t0)
        if not share > limit or time.monotonic() > deadline:
            return share


def measured_model(pair, gammas, serial_trace):
    """Measured forward costs (cached) for the gammas asked, with the prefills and the per-round
    bookkeeping of a serial run (a measurement has neither)."""
    grid = [("target", 1, k) for k in range(1, max(gammas) + 2)] + [("draft", 1, 1)]
    context = min(300, pair.context_length - max(gammas) - 1)
    rows, meta = costs.load_or_measure(pair, context_length=context, grid=grid)
    ref = latency.from_trace(serial_trace)
    model = latency.latency_model(rows, ref.draft_prefill_ms, ref.target_prefill_ms, ref.overhead_ms, meta)
    return model, meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="default")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--gammas", type=int, nargs="+", default=[2, 4, 6])
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--cores", type=int, nargs=2, default=[0, 1], metavar=("DRAFT", "TARGET"))
    ap.add_argument("--no-measured", action="store_true", help="skip the replay with measured costs")
    ap.add_argument("--save", metavar="DIR", help="write every timed run's trace there as JSON")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SHARE",
                    help="before each timed run, wait (up to --patience s) until other processes take at most "
                         "this share of the CPUs (0: do not wait)")
    ap.add_argument("--patience", type=float, default=90.0)
    ap.add_argument("--ssd", action="store_true", help="the SSD table (see above) instead")
    ap.add_argument("--prompts", nargs="+", default=list(PROMPTS), choices=list(PROMPTS))
    ap.add_argument("--fanout", type=int, default=2, help="--ssd: the fixed fan-out beside the fitted budget")
    ap.add_argument("--target-url", help="--ssd: the target on this vLLM server")
    args = ap.parse_args()

    pair = load_pair(args.pair, device=args.device, dtype=args.dtype, target_url=args.target_url)
    if args.ssd:
        ssd_table(pair, args)
        return
    threads = torch.get_num_threads()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"pair {pair.draft_name} -> {pair.target_name}, {pair.dtype} on {pair.device}, torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs, default {threads} threads; {args.max_new_tokens} new tokens, "
          f"median of {args.repeats}; load average before: {load}")

    def config(gamma: int, n: int | None = None) -> RunConfig:
        return RunConfig(prompt=args.prompt, gamma=gamma, max_new_tokens=n or args.max_new_tokens)

    warm = pearl_run(pair, config(2, 8), cores=tuple(args.cores))  # warm-up: both paths, both thread counts
    serial(pair, config(2, 8), threads), serial(pair, config(2, 8), 1)
    print(f"PEARL threads: pinned={warm.pinned} {warm.worker_cores} {warm.note}".rstrip() + "\n")

    runs = {g: {"serial": [], "serial 1t": [], "pearl": []} for g in args.gammas}
    others = {g: {"serial": [], "serial 1t": [], "pearl": []} for g in args.gammas}
    for rep in range(args.repeats):
        for g in args.gammas:
            order = ["serial", "serial 1t", "pearl"]
            order = order[rep % 3:] + order[: rep % 3]
            for who in order:
                if args.wait_quiet:
                    wait_quiet(args.wait_quiet, args.patience)
                before, t0 = cpu_seconds(), time.perf_counter()
                if who == "pearl":
                    trace = pearl_run(pair, config(g), cores=tuple(args.cores)).trace
                else:
                    trace = serial(pair, config(g), threads if who == "serial" else 1)
                others[g][who].append(others_share(before, cpu_seconds(), time.perf_counter() - t0))
                print(f"  repeat {rep + 1}, γ={g}, {who:<9}: {trace.summary['tokens_per_second']:5.2f} tok/s, "
                      f"other processes took {100 * others[g][who][-1]:3.0f}% of the CPUs", flush=True)
                runs[g][who].append(trace)
                if args.save:
                    Path(args.save).mkdir(parents=True, exist_ok=True)
                    trace.save(Path(args.save) / f"g{g}-{who.replace(' ', '')}-{rep}.json")

    meas, meta = (None, None)
    if not args.no_measured:
        meas, meta = measured_model(pair, args.gammas, runs[args.gammas[0]]["serial"][0])

    head = (f"{'γ':>2} | {'serial':>6} {'ser 1t':>6} {'PEARL':>6} | {'sim':>6} {'real/sim':>8} | "
            f"{'sim 1t':>6} {'real/sim':>8} | {'sim meas':>8} {'real/sim':>8} | {'PEARL/serial':>12} | "
            f"{'min-max: serial':>15} {'ser 1t':>11} {'PEARL':>11} | {'others max %: ser/1t/PEARL':>26} | "
            "same as serial")
    print("tok/s (median); sim = PEARL replayed on that serial run's ranks with its own costs")
    print(head)
    print("-" * len(head))
    for g in args.gammas:
        r = runs[g]
        tps = {k: med(t.summary["tokens_per_second"] for t in v) for k, v in r.items()}
        sim = med(sim_pearl(t, latency.from_trace(t)) for t in r["serial"])
        sim1 = med(sim_pearl(t, latency.from_trace(t)) for t in r["serial 1t"])
        simm = med(sim_pearl(t, meas) for t in r["serial"]) if meas else float("nan")
        same = first_difference(r["pearl"][0].output_ids, r["serial"][0].output_ids)
        agree = all(t.output_ids == r["pearl"][0].output_ids for t in r["pearl"])
        print(f"{g:>2} | {tps['serial']:6.2f} {tps['serial 1t']:6.2f} {tps['pearl']:6.2f} | "
              f"{sim:6.2f} {tps['pearl'] / sim:8.2f} | {sim1:6.2f} {tps['pearl'] / sim1:8.2f} | "
              f"{simm:8.2f} {tps['pearl'] / simm:8.2f} | {tps['pearl'] / tps['serial']:12.2f} | "
              f"{spread(r['serial']):>15} {spread(r['serial 1t']):>11} {spread(r['pearl']):>11} | "
              f"{'/'.join(f'{100 * max(others[g][k]):.0f}' for k in r):>26} | "
              f"{same}{'' if agree else ' (PEARL runs differ among themselves)'}", flush=True)

    print("\nper pass, median ms (prefills left out); slowdown = PEARL / serial")
    head = (f"{'γ':>2} | {'draft: ser':>10} {'ser 1t':>6} {'PEARL':>6} {'/ser':>5} {'/1t':>5} | "
            f"{'verify: ser':>11} {'ser 1t':>6} {'PEARL':>6} {'/ser':>5} {'/1t':>5} | {'k ser':>5} {'k PEARL':>7} | "
            f"{'idle d/t %':>10} | {'no pass/rd ms':>13}")
    print(head)
    print("-" * len(head))
    for g in args.gammas:
        r = runs[g]
        d = {k: med(x for t in ts for x in passes(t, "draft_forward")) for k, ts in r.items()}
        v = {k: med(x for t in ts for x in passes(t, "verify_forward")) for k, ts in r.items()}
        pearl = r["pearl"]
        idle = [med(t.summary[f"{lane}_idle_fraction"] for t in pearl) for lane in ("draft", "target")]
        ovh = med(no_pass_ms(t) / t.summary["rounds"] for t in pearl)
        print(f"{g:>2} | {d['serial']:10.1f} {d['serial 1t']:6.1f} {d['pearl']:6.1f} {d['pearl'] / d['serial']:5.2f} "
              f"{d['pearl'] / d['serial 1t']:5.2f} | {v['serial']:11.1f} {v['serial 1t']:6.1f} {v['pearl']:6.1f} "
              f"{v['pearl'] / v['serial']:5.2f} {v['pearl'] / v['serial 1t']:5.2f} | "
              f"{tokens_read(r['serial'][0]):>5} {tokens_read(pearl[0]):>7} | "
              f"{100 * idle[0]:4.0f}/{100 * idle[1]:<5.0f} | {ovh:13.2f}")

    rounds = {g: (len(runs[g]["serial"][0].rounds), len(runs[g]["pearl"][0].rounds)) for g in args.gammas}
    print(f"\nrounds (serial, PEARL): {rounds}")
    if meta:
        print(f"measured costs: {'cached' if meta.get('cached') else 'measured now'} ({meta.get('measured_at')}, "
              f"{meta.get('threads')} threads, context {meta.get('context_length')}, contention "
              f"{describe(Contention.of(c) for c in meta.get('contention', [])) or 'none'}): draft(1) {meas.draft(1):.1f} ms, verify(1) "
              f"{meas.verify(1):.1f} ms, verify({max(args.gammas) + 1}) {meas.verify(max(args.gammas) + 1):.1f} ms")
    contended = merged(c for v in runs.values() for ts in v.values() for t in ts for c in t.contention)
    print(f"contention during timed runs: {describe(contended) or 'none'}; "
          f"load average after: {os.getloadavg() if hasattr(os, 'getloadavg') else None} "
          "(other processes: the 'others' column)")


def ssd_table(pair, args) -> None:
    """Serial, PEARL real and simulated, SSD real and simulated (fitted budget, and a fixed
    fan-out), per prompt and gamma, medians over the repeats (module docstring)."""
    from specviz.measure.real_vs_sim import SERIAL_THREADS, real_vs_simulated, serial_run
    from specviz.measure.ssd_real import ssd_run, user_budget

    where = f"target on {args.target_url}" if args.target_url else "local threads"
    print(f"pair {pair.draft_name} -> {pair.target_name}, {pair.dtype} on {pair.device}, {where}, torch "
          f"{torch.__version__}, {os.cpu_count()} CPUs; {args.max_new_tokens} new tokens, median of {args.repeats}; the serial runs (and the costs) with {SERIAL_THREADS} intra-op thread(s), as each "
          "lane of a real run")
    warm = RunConfig(prompt=PROMPTS["code"], gamma=2, max_new_tokens=8)
    serial_run(pair, warm), pearl_run(pair, warm), ssd_run(pair, warm, user_budget(None, 2, 1))  # warm-up
    runs = ("pearl", "ssd fit", f"ssd F={args.fanout}")
    cells: dict = {}
    for rep in range(args.repeats):
        for name in args.prompts:
            for g in args.gammas:
                config = RunConfig(prompt=PROMPTS[name], gamma=g, max_new_tokens=args.max_new_tokens)
                cell = cells.setdefault((name, g), {"serial": [], "load": [], "ratios": {},
                                                    **{r: [] for r in runs}})
                cell["load"].append(os.getloadavg()[0])
                serial = serial_run(pair, config)
                cell["serial"].append(serial)
                for who in runs:
                    fanout = None if who == "ssd fit" else args.fanout
                    result = real_vs_simulated(pair, config, "pearl" if who == "pearl" else "ssd", fanout,
                                               "geometric" if who == "ssd fit" else "uniform", serial=serial,
                                               ratios=cell["ratios"])
                    cell[who].append(result)
                    print(f"  rep {rep + 1} {name} γ={g} {who:<8}: real {result.measured.wall_ms:7.0f} ms, sim "
                          f"{result.simulated.wall_ms:7.0f} ms ({result.wall_error:+.0%}), serial {serial.wall_ms:7.0f} "
                          f"ms, hits {result.measured.hit_rate if result.measured.hit_rate is not None else '-'}"
                          f" vs {result.simulated.hit_rate if result.simulated.hit_rate is not None else '-'}, "
                          f"identical {result.identical}, load {os.getloadavg()[0]:.2f}", flush=True)
    print("\nwall ms (median); real/sim = measured over simulated; hit = SSD hit rate measured/simulated; "
          "B = branches a round")
    head = (f"{'prompt':<6} {'γ':>2} | {'serial':>7} | {'PEARL':>7} {'sim':>7} {'r/s':>5} | "
            + " | ".join(f"{who:<9} {'sim':>7} {'r/s':>5} {'hit':>9} {'B':>5}" for who in runs[1:])
            + f" | {'same':>4} | {'load':>9}")
    print(head)
    print("-" * len(head))
    for (name, g), cell in cells.items():
        row = f"{name:<6} {g:>2} | {med(t.wall_ms for t in cell['serial']):7.0f} | "
        pearl = cell["pearl"]
        row += (f"{med(r.measured.wall_ms for r in pearl):7.0f} {med(r.simulated.wall_ms for r in pearl):7.0f} "
                f"{med(1 + r.wall_error for r in pearl):5.2f} | ")
        parts = []
        for who in runs[1:]:
            rs = cell[who]
            hit = f"{med(r.measured.hit_rate for r in rs):.2f}/{med(r.simulated.hit_rate for r in rs):.2f}"
            parts.append(f"{med(r.measured.wall_ms for r in rs):9.0f} {med(r.simulated.wall_ms for r in rs):7.0f} "
                         f"{med(1 + r.wall_error for r in rs):5.2f} {hit:>9} {med(r.budget.branches for r in rs):5.0f}")
        same = all(r.identical for who in runs for r in cell[who])
        loads = f"{min(cell['load']):.1f}-{max(cell['load']):.1f}"
        print(row + " | ".join(parts) + f" | {'yes' if same else 'NO':>4} | {loads:>9}", flush=True)
    print("\ngap, measured - simulated, ms (median over repeats): verify / network / draft before / draft after / other")
    for (name, g), cell in cells.items():
        for who in runs:
            gaps = [r.gap().to_dict() for r in cell[who]]
            print(f"{name:<6} {g:>2} {who:<9} " + " / ".join(
                f"{med(x[k] for x in gaps):+6.0f}" for k in ("verify", "network", "draft_before", "draft_after", "other")))
    print("\nSSD fitted budgets (last repeat): " + "; ".join(
        f"{name} γ={g}: B={cell['ssd fit'][-1].budget.branches} (tree {cell['ssd fit'][-1].budget.tree_ms:.0f} ms "
        f"vs verify {cell['ssd fit'][-1].budget.verify_ms:.0f} ms)" for (name, g), cell in cells.items()))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
