"""Record the runs shipped in assets/traces/ for the Replay, Parallel and Inspect pages.

    python tools/record_traces.py                 # every run below, default pair, auto dtype (bf16: about 8 minutes)
    python tools/record_traces.py --only code     # one prompt's runs
    python tools/record_traces.py --out DIR       # somewhere else (your own recordings)

For each prompt (code, JSON, prose, Chinese) and each decoding (greedy; sampled at
temperature 0.8, top-p 0.95, seed 0): the target alone (``{prompt}-autoregressive-{mode}``)
and speculative runs at γ 2, 4 and 8 (``{prompt}-gamma{γ}-{mode}``), 64 new tokens each.
The Replay page pairs each speculative run with the target-alone run of the same prompt
and settings for its race. Greedy speculative runs carry the draft's view of every output
position, so they replay with no model loaded under every schedule (Parallel page).

Run it on a quiet machine: the timings recorded are the ones every replay shows. It
refuses to save a run timed under contention (another heavy job in this process, or other
processes taking enough of its cores: specviz.record.contention).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from specviz import autoregressive, load_pair, speculative
from specviz.record.run_config import RunConfig

OUT = Path(__file__).resolve().parent.parent / "assets" / "traces"
PROMPTS = {
    "code": "Write a Python function is_prime(n) that returns True when n is a prime number.",
    "json": "Return a JSON object for a book with the keys title, author, year and tags (three tags).",
    "prose": "Describe a rainy afternoon in a small seaside town in three sentences.",
    "chinese": "用三句话介绍长城的历史。",
}
GAMMAS = (2, 4, 8)
MODES = {"greedy": dict(temperature=0.0), "sampled": dict(temperature=0.8, top_p=0.95, seed=0)}
MAX_NEW_TOKENS = 64


def runs(prompts: list[str]) -> list[tuple[str, RunConfig]]:
    """(file stem, config) of every run to record, the target alone first for each setting."""
    out = []
    for name in prompts:
        for mode, sampling in MODES.items():
            base = RunConfig(prompt=PROMPTS[name], max_new_tokens=MAX_NEW_TOKENS, **sampling)
            out.append((f"{name}-autoregressive-{mode}", replace(base, mode="autoregressive")))
            out += [(f"{name}-gamma{g}-{mode}", replace(base, gamma=g)) for g in GAMMAS]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=list(PROMPTS), help="record just these prompts' runs")
    ap.add_argument("--dtype", default="auto", help="auto: bf16 on a CPU with native bf16 or a GPU, else fp32")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    pair = load_pair("default", dtype=args.dtype)
    args.out.mkdir(parents=True, exist_ok=True)
    for stem, config in runs(args.only or list(PROMPTS)):
        run = autoregressive if config.mode == "autoregressive" else speculative
        trace = run(pair, config).run()
        if trace.contention:
            jobs = "; ".join(c.text() for c in trace.contention)
            raise SystemExit(f"{stem}: timed under contention ({jobs}); not saved")
        trace.save(args.out / f"{stem}.json")
        s = trace.summary
        acc = f", acceptance {s['acceptance_rate']:.2f}" if config.mode == "speculative" else ""
        print(f"{stem}: {s['new_tokens']} tokens, {s['tokens_per_second']:.2f} tok/s{acc}", flush=True)


if __name__ == "__main__":
    main()
