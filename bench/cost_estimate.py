"""How close the Cost curve page's estimate is: sweep.measure_seconds against the measurement's own wall time.

Runs Tune's short probe (``specviz.measure.sweep.probe_costs``), estimates the curve measurement from it,
measures the curve (``specviz.measure.forward_costs.measure``, not cached), and estimates again from the rows it
measured; prints the three times and the two ratios. Quiet machine only: the probe and the
measurement must see the same load.

    python bench/cost_estimate.py --pair tiny --dtype float32      # seconds
    python bench/cost_estimate.py --dtype bfloat16                 # the default pair: minutes
"""

from __future__ import annotations

import argparse
import time

from specviz.measure import forward_costs as C
from specviz.measure import sweep as S
from specviz.models.pair import load_pair
from specviz.ui.chrome import EXAMPLES


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", default="default")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--repeats", type=int, default=3, help="timed passes per point, as the page's default")
    a = ap.parse_args()
    pair = load_pair(a.pair, device="cpu", dtype=a.dtype)
    grid = C.SPARSE_CURVE_GRID
    ctx = C.curve_context_length(pair.context_length, grid)
    t0 = time.perf_counter()
    probe = S.probe_costs(pair, EXAMPLES[next(iter(EXAMPLES))])
    probe_s = time.perf_counter() - t0
    from_probe = S.measure_seconds(probe, grid, a.repeats, ctx)
    t0 = time.perf_counter()
    rows = C.measure(pair, context_length=ctx, grid=grid, repeats=a.repeats)
    real = time.perf_counter() - t0
    from_rows = S.measure_seconds(rows, grid, a.repeats, ctx)
    print(f"{a.pair} pair, {a.dtype}, {len(grid)} points × ({a.repeats} + 1) passes at a context of {ctx}")
    print("| estimate from | estimated s | measured s | estimated / measured |")
    print("|---|---|---|---|")
    print(f"| the probe ({probe_s:.1f} s) | {from_probe:.1f} | {real:.1f} | {from_probe / real:.2f} |")
    print(f"| the measured rows | {from_rows:.1f} | {real:.1f} | {from_rows / real:.2f} |")


if __name__ == "__main__":
    main()
