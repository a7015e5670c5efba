"""The verify-cost curve of the default pair's *shapes*, from random weights.

A forward pass's cost depends on the model's shape (layers, widths, heads, vocabulary), the
device, the dtype and the tokens it reads, not on the weights' values. So on a machine that
cannot hold the default pair's 1.6 GB of GGUF files (the GPU check's machine takes 64 MiB per
call), two randomly initialised Qwen2 models with the default pair's configs give its cost
curve: ms per pass over k new tokens after a 300-token context, draft and target, timed by
``specviz.measure.forward_costs.measure`` exactly as the app's Cost curve page times them.

``--check`` also times the real default pair (from this machine's cache) on the same grid and
prints the ratio random/real per point: the proxy's own test, where the pair is at hand.

``--compiled`` also times each model's one-token pass eager (a dynamic cache, as the engine's
default) against the compiled one over a static cache (``specviz.models.static_kv``: CUDA
graphs on a GPU, Inductor on a CPU), and the c a run would then see: the draft's step over
the target's verify of γ + 1 = 5 tokens (which stays eager).

    python bench/shape_costs.py --device cuda --dtype bfloat16
    python bench/shape_costs.py --device cuda --dtype bfloat16 --compiled
    python bench/shape_costs.py --device cpu --dtype bfloat16 --check
"""

from __future__ import annotations

import argparse
import statistics
from types import SimpleNamespace

import torch

from specviz.measure.forward_costs import measure
from specviz.models.tiny_pair import tiny_tokenizer

# The default pair's configs (Qwen2.5-Coder-0.5B/1.5B-Instruct, as converted from its GGUFs).
COMMON = dict(vocab_size=151936, num_key_value_heads=2, max_position_embeddings=32768,
              rms_norm_eps=1e-6, rope_theta=1_000_000.0, tie_word_embeddings=False)
SHAPES = {
    "draft": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14),
    "target": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12),
}
TOKENS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32)


def random_model(role: str, device: str, dtype: torch.dtype):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**COMMON, **SHAPES[role])
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(dtype)
    return model.eval()


def one_token_ms(model, device: torch.device, compiled: bool, repeats: int, context: int = 300) -> float:
    """Median ms of the one-token pass after ``context`` tokens: eager over a dynamic cache, or
    compiled over a static one (three passes first: the compilation and its warm-up)."""
    import time

    from specviz.models import static_kv
    from specviz.models.kv import KVModel, synchronize

    kv = (static_kv.StaticKV(model, device, static_kv.cache_length(context + 8, 1 << 30), static_kv.compiled(model))
          if compiled else KVModel(model, device))
    kv.forward([(7 * i) % 1000 + 1 for i in range(context)], 1)
    times = []
    for i in range(repeats + 3):
        synchronize(device)
        t0 = time.perf_counter()
        kv.forward([11], 1)
        synchronize(device)
        if i >= 3:
            times.append((time.perf_counter() - t0) * 1000)
        kv.rollback(len(kv.tokens) - 1)
    return statistics.median(times)


def compiled_table(proxy, ms: dict, repeats: int) -> None:
    """The one-token pass eager against compiled, per model, and c either way."""
    print("\none-token pass after 300 tokens, eager (dynamic cache) against compiled (static cache, "
          f"{'CUDA graphs' if proxy.device.type == 'cuda' else 'Inductor'}), median of {repeats}:")
    step = {}
    for role in ("draft", "target"):
        model = getattr(proxy, role)
        step[role] = (one_token_ms(model, proxy.device, False, repeats), one_token_ms(model, proxy.device, True, repeats))
        print(f"  {role:<6} eager {step[role][0]:7.2f} ms   compiled {step[role][1]:7.2f} ms   "
              f"×{step[role][0] / step[role][1]:.2f}")
    verify = ms[("target", 5)]
    print(f"  c = draft step / target verify over 5 tokens ({verify:.2f} ms, eager): eager {step['draft'][0] / verify:.2f}, "
          f"compiled {step['draft'][1] / verify:.2f}")


def table(rows: list[dict]) -> dict[tuple[str, int], float]:
    return {(r["model"], r["tokens"]): r["ms"] for r in rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--check", action="store_true", help="also time the real default pair (cached here)")
    ap.add_argument("--compiled", action="store_true", help="also time the one-token pass compiled (static_kv)")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    grid = [(m, 1, k) for m in ("draft", "target") for k in TOKENS]
    torch.manual_seed(0)
    proxy = SimpleNamespace(draft=random_model("draft", args.device, dtype),
                            target=random_model("target", args.device, dtype),
                            tokenizer=tiny_tokenizer(), device=torch.device(args.device), context_length=32768)
    ms = table(measure(proxy, context_length=300, grid=grid, repeats=args.repeats))
    real = {}
    if args.check:
        from specviz.models.pair import load_pair

        pair = load_pair("default", device=args.device, dtype=args.dtype)
        real = table(measure(pair, context_length=300, grid=grid, repeats=args.repeats))
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    print(f"default pair's shapes, random weights, {args.dtype} on {args.device} ({name}), torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, context 300, median of {args.repeats}\n")
    head = f"{'k':>3} | {'target ms':>9} {'T(k)/T(1)':>9} | {'draft ms':>8} {'D(k)/D(1)':>9} | {'c=D/T':>5}"
    if real:
        head += f" | {'real T':>7} {'rand/real':>9} | {'real D':>7} {'rand/real':>9}"
    print(head)
    print("-" * len(head))
    for k in TOKENS:
        t, d = ms[("target", k)], ms[("draft", k)]
        line = (f"{k:>3} | {t:>9.2f} {t / ms[('target', 1)]:>9.2f} | {d:>8.2f} {d / ms[('draft', 1)]:>9.2f} "
                f"| {d / t:>5.2f}")
        if real:
            rt, rd = real[("target", k)], real[("draft", k)]
            line += f" | {rt:>7.2f} {t / rt:>9.2f} | {rd:>7.2f} {d / rd:>9.2f}"
        print(line)
    if args.compiled:
        compiled_table(proxy, ms, args.repeats)
    if real:
        ratios = [ms[key] / real[key] for key in ms]
        print(f"\nrandom/real, median over the grid: {statistics.median(ratios):.2f} "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})")


if __name__ == "__main__":
    main()
