"""How far a low-precision dtype moves the target's top-two logit gap between a verify pass and one-token passes.

The near-tie threshold (``specviz.analysis.round_story.near_tie_logit``) says how close the target's top
two candidates must be for rounding to swap them. This measures it: the target decodes
``--tokens`` tokens greedily one token per pass (as the target alone does), then reads the
same tokens again ``--k`` at a time from the same cache (as a verify pass does), and at
every position compares the gap z1 − z2 between the one-token pass's top two tokens, as
each pass computed it. It prints the top logit's magnitude, the gap's change |Δ(z1 − z2)|
(median, 95th percentile, max), how many argmax flips there were and the smallest gap that
flipped, beside the threshold.

    python bench/logit_rounding.py --pair tiny --dtype bfloat16
    python bench/logit_rounding.py --dtype bfloat16 --tokens 48     # the default pair: about a minute
"""

from __future__ import annotations

import argparse
import statistics

from specviz.analysis.round_story import near_tie_logit
from specviz.models.pair import load_pair
from specviz.record.validate import encode_prompt

PROMPTS = ("Write a short story about a lighthouse keeper who finds a message in a bottle.",
           "用三句话介绍长城的历史。",
           "Write a Python function is_prime(n) that returns True when n is a prime number.")


def gaps(pair, prompt: str, tokens: int, k: int) -> list[tuple[float, float, float, bool]]:
    """Per position: (top-1 logit, gap in the one-token pass, gap in the k-token pass, argmax flipped)."""
    ids = encode_prompt(pair.tokenizer, prompt, True)
    one = pair.target_kv()
    logits = one.forward(ids, 1)
    out, rows = [], []
    for _ in range(tokens):
        rows.append(logits[-1])
        nxt = int(logits[-1].argmax())
        out.append(nxt)
        logits = one.forward([nxt], 1)
    many = pair.target_kv()
    many.forward(ids[:-1], 1)
    seq = [ids[-1], *out[:-1]]  # the input at each position: the token before it
    found = []
    for start in range(0, len(seq), k):
        block = seq[start:start + k]
        got = many.forward(block, len(block))
        for j, row in enumerate(got):
            ref = rows[start + j]
            top = ref.topk(2).indices
            a, b = int(top[0]), int(top[1])
            found.append((float(ref[a]), float(ref[a] - ref[b]), float(row[a] - row[b]), int(row.argmax()) != a))
    return found


def report(rows: list[tuple[float, float, float, bool]], dtype: str, k: int) -> None:
    moved = sorted(abs(g1 - gk) for _, g1, gk, _ in rows)
    flips = sorted(g1 for _, g1, _, f in rows if f)
    print(f"{len(rows)} positions, passes of {k} against passes of 1: top logit median "
          f"{statistics.median(abs(z) for z, *_ in rows):.1f}, max {max(abs(z) for z, *_ in rows):.1f}; "
          f"|change of the top-two gap| median {statistics.median(moved):.4f}, 95th percentile "
          f"{moved[int(0.95 * (len(moved) - 1))]:.4f}, max {moved[-1]:.4f}; argmax flips {len(flips)}"
          + (f" (at gaps {', '.join(f'{g:.3f}' for g in flips)})" if flips else "")
          + f"; near-tie threshold for {dtype}: {near_tie_logit(dtype):.4g}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", default="default")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--k", type=int, default=5, help="tokens per verify-style pass (γ + 1)")
    a = ap.parse_args()
    pair = load_pair(a.pair, device="cpu", dtype=a.dtype)
    print(f"{a.pair} pair, {a.dtype}", flush=True)
    rows = []
    for prompt in PROMPTS:  # a line after each prompt: a slow machine still gives numbers
        rows += gaps(pair, prompt, a.tokens, a.k)
        print(f"after {prompt[:24]!r}:", end=" ")
        report(rows, a.dtype, a.k)


if __name__ == "__main__":
    main()
