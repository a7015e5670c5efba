"""How good the Live page's prefill estimate is: estimated against measured prompt reads.

The Live page says, while a run's first round reads the prompt, how long that should take
here: each model's last measured read (tokens, ms) scaled linearly to the new prompt's
tokens (``specviz.analysis.metrics.prefill_estimate_ms``). This script reads the code example once
(the seed, as a class's first run would), then prompts of growing length, and prints per
length the estimate from the seed, the measured time of the two prefills, and their ratio.
A fresh one-round speculative run per prompt; the runs' own engine clock (prefill events).

    python bench/prefill_estimate.py                       # the default pair, auto dtype
    python bench/prefill_estimate.py --pair tiny --chars 200 400 800
"""

from __future__ import annotations

import argparse

from specviz import RunConfig, load_pair, speculative
from specviz.analysis.metrics import prefill_estimate_ms, prefill_reads
from specviz.ui.chrome import EXAMPLES

FILLER = ("The committee met on Tuesday to review the budget, the schedule and the open questions from the "
          "last meeting; each item was read aloud, discussed and then either settled or sent back. ")


def reads(pair, prompt: str) -> tuple[int, dict[str, tuple[int, float]]]:
    """The prompt's tokens and each model's (tokens, ms) prompt read, in a run of one round
    (γ = 4: a token budget of 5; with 1 the round would draft nothing)."""
    trace = speculative(pair, RunConfig(prompt=prompt, gamma=4, max_new_tokens=5)).run()
    return len(trace.prompt_ids), prefill_reads(trace.rounds[0].events)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="default")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--chars", type=int, nargs="+", default=[2000, 5000, 10000, 20000])
    args = ap.parse_args()
    pair = load_pair(args.pair, dtype=args.dtype)
    reads(pair, EXAMPLES["Code"])  # warm: the first run of a process pays one-time set-up
    _, seed = reads(pair, EXAMPLES["Code"])
    print(f"seed: {', '.join(f'{lane} {n} tokens in {ms:.0f} ms' for lane, (n, ms) in seed.items())}")
    print(f"{'chars':>7} {'tokens':>7} {'estimated s':>12} {'measured s':>11} {'measured/est':>13}")
    for chars in args.chars:
        prompt = (FILLER * (chars // len(FILLER) + 1))[:chars]
        tokens, got = reads(pair, prompt)
        est = sum(prefill_estimate_ms(tokens, seed[lane]) for lane in got)
        real = sum(ms for _, ms in got.values())
        print(f"{chars:>7} {tokens:>7} {est / 1000:>12.1f} {real / 1000:>11.1f} {real / est:>13.2f}")


if __name__ == "__main__":
    main()
