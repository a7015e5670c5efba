"""Benchmark: specviz's decoders against Hugging Face generate() on the same pair.

For each prompt, side by side in one process and interleaved (so machine noise
hits both alike), with the same dtype and greedy decoding:

  ours AR   specviz autoregressive()          HF AR   target.generate()
  ours SD   specviz speculative(gamma)        HF SD   target.generate(assistant_model=draft), the draft's
                                                        generation_config set to num_assistant_tokens=gamma,
                                                        constant schedule, assistant_confidence_threshold=0

Each cell is the median over --repeats runs (who goes first alternates) of new tokens / wall seconds (wall
time measured outside both implementations alike, prefill included). Also
printed: our overhead per round (wall time inside no forward pass), its share of
wall time, and the speedup the formula predicts from the measured alpha and c.

specviz must be installed (``pip install -e .`` from the repository root, as the
README's set-up command does); the script imports it like any other package.

  python bench/bench.py                    # default pair, dtype auto, gammas 1..8
  python bench/bench.py --pair tiny --gammas 1 2 --repeats 1   # a smoke run
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specviz.engine import autoregressive, speculative
from specviz.validate import encode_prompt
from specviz.models import load_pair
from specviz.theory import alpha_from_mean_length, expected_speedup
from specviz.trace import RunConfig

PROMPTS = {
    "code": "Write a Python function that checks whether a number is prime, with a docstring.",
    "json": "Return a JSON object describing a book with keys title, author, year and tags.",
    "prose": "Explain in three sentences why the sky is blue.",
}


def hf_generate(pair, ids: list[int], max_new: int, gamma: int | None) -> tuple[float, int]:
    """Seconds and new tokens for one greedy HF generate() call (assisted if gamma)."""
    inputs = torch.tensor([ids], device=pair.device)
    kwargs = dict(
        max_new_tokens=max_new,
        do_sample=False,
        attention_mask=torch.ones_like(inputs),
        pad_token_id=pair.tokenizer.pad_token_id or pair.eos_ids[0],
        eos_token_id=pair.eos_ids,
    )
    if gamma is not None:
        # transformers 5 reads these three from the *assistant's* generation_config and
        # silently ignores them as generate() kwargs (its defaults: 20 tokens, threshold 0.4).
        cfg = pair.draft.generation_config
        cfg.num_assistant_tokens = gamma
        cfg.num_assistant_tokens_schedule = "constant"
        cfg.assistant_confidence_threshold = 0.0
        kwargs.update(assistant_model=pair.draft)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = pair.target.generate(inputs, **kwargs)
    return time.perf_counter() - t0, out.shape[1] - len(ids)


def ours(pair, prompt: str, max_new: int, gamma: int | None):
    config = RunConfig(prompt=prompt, max_new_tokens=max_new, gamma=gamma or 1)
    t0 = time.perf_counter()
    trace = (speculative if gamma else autoregressive)(pair, config).run()
    return time.perf_counter() - t0, trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="default")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--gammas", type=int, nargs="+", default=list(range(1, 9)))
    ap.add_argument("--prompts", nargs="+", default=list(PROMPTS), choices=list(PROMPTS))
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    pair = load_pair(args.pair, device=args.device, dtype=args.dtype)
    print(f"pair {pair.draft_name} -> {pair.target_name}, {pair.dtype} on {pair.device}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{args.max_new_tokens} new tokens, median of {args.repeats}\n")
    n = args.max_new_tokens
    header = (f"{'prompt':<6} {'γ':>2} | {'ours SD':>7} {'HF SD':>7} {'ours/HF':>7} | {'ours AR':>7} {'HF AR':>7} "
              f"| {'speedup':>7} {'theory':>7} {'meas/th':>7} | {'alpha':>5} {'c':>5} {'acc':>5} "
              f"| {'ovh/rd ms':>9} {'ovh %':>5} | same")
    print(header)
    print("-" * len(header))
    rows = []
    for name in args.prompts:
        prompt = PROMPTS[name]
        ids = encode_prompt(pair.tokenizer, prompt, chat=True)
        ours(pair, prompt, 8, 2), hf_generate(pair, ids, 8, 2)  # warm-up both paths
        ar_o, ar_h, ar_trace = [], [], None
        for rep in range(args.repeats):
            for who in (("ours", "hf") if rep % 2 == 0 else ("hf", "ours")):  # alternate who goes first
                if who == "ours":
                    s, ar_trace = ours(pair, prompt, n, None)
                    ar_o.append(len(ar_trace.output_ids) / s)
                else:
                    s, k = hf_generate(pair, ids, n, None)
                    ar_h.append(k / s)
        ours_ar, hf_ar = statistics.median(ar_o), statistics.median(ar_h)
        for g in args.gammas:
            sd_o, sd_h, ovh, ovh_frac, traces = [], [], [], [], []
            for rep in range(args.repeats):
                for who in (("ours", "hf") if rep % 2 == 0 else ("hf", "ours")):
                    if who == "ours":
                        s, tr = ours(pair, prompt, n, g)
                        sd_o.append(len(tr.output_ids) / s)
                        ovh.append(tr.summary["overhead_ms"] / tr.summary["rounds"])
                        ovh_frac.append(tr.summary["overhead_ms"] / (s * 1000))
                        traces.append(tr)
                    else:
                        s, k = hf_generate(pair, ids, n, g)
                        sd_h.append(k / s)
            tr = traces[0]
            alpha = alpha_from_mean_length(tr.summary["mean_acceptance_length"], g)
            c = statistics.median(t.summary["cost_ratio_c"] for t in traces)
            o_sd, h_sd = statistics.median(sd_o), statistics.median(sd_h)
            speedup, theory = o_sd / ours_ar, expected_speedup(alpha, g, c)
            same = tr.output_ids == ar_trace.output_ids
            rows.append((o_sd / h_sd, statistics.median(ovh_frac), speedup / theory))
            print(f"{name:<6} {g:>2} | {o_sd:7.2f} {h_sd:7.2f} {o_sd / h_sd:7.2f} | {ours_ar:7.2f} {hf_ar:7.2f} "
                  f"| {speedup:7.2f} {theory:7.2f} {speedup / theory:7.2f} | {alpha:5.2f} {c:5.3f} "
                  f"{tr.summary['acceptance_rate']:5.2f} | {statistics.median(ovh):9.2f} "
                  f"{100 * statistics.median(ovh_frac):5.1f} | {'yes' if same else 'NO'}", flush=True)
    ratios = [r[0] for r in rows]
    print(f"\nours/HF speculative: median {statistics.median(ratios):.2f}, min {min(ratios):.2f}; "
          f"overhead median {100 * statistics.median(r[1] for r in rows):.1f}% of wall, "
          f"max {100 * max(r[1] for r in rows):.1f}%; measured/theory median "
          f"{statistics.median(r[2] for r in rows):.2f}")


if __name__ == "__main__":
    main()
