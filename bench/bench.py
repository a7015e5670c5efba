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

With ``--draft-heads`` it prints the draft-head table instead (FR-Spec, docs/token-ranks.md):
for each head (0 = the full vocabulary, or the N most frequent ids) the cost ratio c, the
acceptance rate and our tok/s at every gamma, its best gamma and speedup over the target
alone, beside HF assisted generation (full draft head) at every gamma. All cells of a
prompt are interleaved: for each repeat, for each gamma, every head and HF run in turn.

  python bench/bench.py --draft-heads 0 8192 16384 32768 65536 --prompts code
  python bench/bench.py --draft-heads 0 32768 --draft-quants none int8   # each head bf16 and int8 (specviz/models/int8.py)

With ``--trees`` it prints the token-tree table (specviz/engine/tree.py): for each prompt and
draft variant, every chain (``--gammas``) and every tree (``--tree-settings``, NODES:DEPTH:WIDTH
for a dynamic tree or W1,W2,.. for a static shape) interleaved, then chain against tree at
each side's best setting: tokens per round, verify and draft ms per round, tok/s, speedup
over the target alone and over HF assisted generation at its best γ. The harder prompts
(``code-hard``, ``code-class``) are where the draft is unsure and a tree's second guesses pay.

  python bench/bench.py --trees --prompts code code-hard json prose --draft-quants none int8

With ``--defaults`` it prints the defaults table (issue 29's goals), on prompts that are not the
app's examples (``DEFAULTS_PROMPTS``: a harder code task, JSON, prose, Chinese): per prompt, the
target alone, the app's defaults (the draft this machine's measurement picks, the confidence
policy, γ up to ``limits.DEFAULT_GAMMA``), the old defaults (full draft, constant γ 4), a few
others (``--also``), and HF assisted generation at each ``--hf-gammas``; speedups over the
target alone and over HF at its best γ, with the c and acceptance that explain each row.

  python bench/bench.py --defaults                       # the goals table, median of 3, interleaved

Our runs skip what only the app's p/q inspector reads (``inspect=False``: top-10 rows,
draft ranks), since HF records nothing of the kind; ``--inspect`` puts it back.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from specviz.analysis.theory import alpha_from_mean_length, expected_speedup
from specviz.engine.decode import autoregressive, speculative
from specviz.models.pair import load_pair
from specviz.record.limits import QUANTS
from specviz.record.run_config import RunConfig
from specviz.record.validate import encode_prompt

PROMPTS = {
    "code": "Write a Python function that checks whether a number is prime, with a docstring.",
    "json": "Return a JSON object describing a book with keys title, author, year and tags.",
    "prose": "Explain in three sentences why the sky is blue.",
    # harder code: the draft is unsure more often (names, structure choices), where trees pay
    "code-hard": "Write a Python class LRUCache with get and put methods backed by a dict and a doubly linked "
                 "list, with type hints and no imports.",
    "code-class": "Implement a thread-safe token bucket rate limiter in Python, with a short example of its use.",
}
# Prompts of our own for the defaults table, none of them the app's examples (specviz/ui/chrome.py)
PROMPTS.update({
    "code-parse": "Write a Python function parse_duration(s) that turns strings like '1h30m15s' or '45s' into "
                  "seconds and raises ValueError on anything else.",
    "json-staff": "Give a JSON array of three fictional employees, each with name, role, start_date and a list of "
                  "skills.",
    "prose-trees": "Why do cities plant trees along their streets? Answer in one short paragraph.",
    "chinese-leaves": "请用两三句话解释为什么秋天的树叶会变色。",
})
DEFAULT_PROMPTS = ["code", "json", "prose"]
DEFAULTS_PROMPTS = ["code-parse", "json-staff", "prose-trees", "chinese-leaves"]
# --also: other settings in the defaults table, as NAME=FIELD:VALUE,FIELD:VALUE
ALSO = ["int8 γ6=draft_quant:int8,gamma:6", "int8 γ8=draft_quant:int8,gamma:8"]
TREE_SETTINGS = ["16:5:3", "12:6:2", "24:6:4"]


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


INSPECT = False  # --inspect: also record what only the p/q inspector reads


def timed(pair, config: RunConfig, alone: bool = False):
    """Seconds (wall clock around the whole call) and the trace of one run of ``config``."""
    t0 = time.perf_counter()
    trace = (autoregressive if alone else speculative)(pair, config, inspect=INSPECT).run()
    return time.perf_counter() - t0, trace


def ours(pair, prompt: str, max_new: int, gamma: int | None, draft_vocab: int = 0, draft_quant: str = "none",
         tree: dict | None = None):
    """Seconds (wall clock around the whole call, as for HF) and the trace of one greedy run
    (``tree``: RunConfig's tree fields)."""
    config = RunConfig(prompt=prompt, max_new_tokens=max_new, gamma=gamma or 1, draft_vocab=draft_vocab,
                       draft_quant=draft_quant, **(tree or {}))
    t0 = time.perf_counter()
    trace = (speculative if gamma else autoregressive)(pair, config, inspect=INSPECT).run()
    return time.perf_counter() - t0, trace


def load(args):
    """The pair to bench: --draft and --target when given, else --pair by name."""
    if args.draft or args.target:
        return load_pair(draft=args.draft, target=args.target, device=args.device, dtype=args.dtype)
    return load_pair(args.pair, device=args.device, dtype=args.dtype)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="default")
    ap.add_argument("--draft", help="a draft of your own (GGUF file, folder or hub id), with --target")
    ap.add_argument("--target", help="a target of your own, with --draft (e.g. the default pair's GGUFs carried "
                                     "to a machine without the part packages: bench/gpu_check.sh)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--gammas", type=int, nargs="+", default=list(range(1, 9)))
    ap.add_argument("--prompts", nargs="+", default=DEFAULT_PROMPTS, choices=list(PROMPTS))
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--draft-heads", type=int, nargs="+", metavar="N",
                    help="print the draft-head table for these heads (0 = full vocabulary)")
    ap.add_argument("--draft-quants", nargs="+", default=["none"], choices=list(QUANTS),
                    help="with --draft-heads: each head with the draft as loaded and/or int8")
    ap.add_argument("--trees", action="store_true", help="print the chain-against-tree table")
    ap.add_argument("--tree-settings", nargs="+", default=TREE_SETTINGS, metavar="N:D:K|W1,W2,..",
                    help="with --trees: dynamic trees (nodes:depth:width) and static shapes (widths per depth)")
    ap.add_argument("--hf-gammas", type=int, nargs="+", default=[4, 6, 8],
                    help="with --trees: HF assisted generation at these γ (its best is the reference)")
    ap.add_argument("--defaults", action="store_true", help="print the defaults table (issue 29's goals)")
    ap.add_argument("--compiled", action="store_true",
                    help="with --defaults: every run of ours with static caches and the compiled step, "
                         "the target alone included (specviz/models/static_kv.py)")
    ap.add_argument("--also", nargs="*", default=ALSO, metavar="NAME=FIELD:VALUE,..",
                    help="with --defaults: other settings to time beside the defaults")
    ap.add_argument("--inspect", action="store_true",
                    help="also record the inspector's top-10 rows and draft ranks (the app does); "
                         "off by default, as HF records nothing of the kind")
    args = ap.parse_args()
    global INSPECT
    INSPECT = args.inspect
    if args.draft_heads:
        return draft_heads(args)
    if args.trees:
        return trees(args)
    if args.defaults:
        return defaults(args)

    pair = load(args)
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


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _head_label(quant: str, n: int) -> str:
    head = "full" if n == 0 else (f"{n // 1024}k" if n % 1024 == 0 else str(n))
    return head if quant == "none" else f"{quant} {head}"


def draft_heads(args) -> None:
    """The draft-head table: c, acceptance and tok/s per gamma for each head (and each
    draft quantization), against HF assisted generation with the full draft."""
    pair = load(args)
    n, gammas = args.max_new_tokens, args.gammas
    drafts = [(q, h) for q in args.draft_quants for h in args.draft_heads]
    for q, h in drafts:  # build each draft variant once, before any timing
        pair.draft_model(q)
        if h:
            pair.cut_head(h, q)
    print(f"pair {pair.draft_name} -> {pair.target_name}, {pair.dtype} on {pair.device}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {n} new tokens, median of {args.repeats}, interleaved, "
          f"inspector recording {'on' if INSPECT else 'off'}\n")
    for name in args.prompts:
        prompt = PROMPTS[name]
        ids = encode_prompt(pair.tokenizer, prompt, chat=True)
        ours(pair, prompt, 8, 2), hf_generate(pair, ids, 8, 2)  # warm-up both paths
        for q, h in drafts:
            ours(pair, prompt, 8, 2, h, q)
        ar_o, ar_h = [], []
        tps = {d: {g: [] for g in gammas} for d in drafts}
        hf = {g: [] for g in gammas}
        c = {d: [] for d in drafts}
        acc = {d: [] for d in drafts}
        ar_ids, same = None, {d: True for d in drafts}
        for rep in range(args.repeats):
            s, tr = ours(pair, prompt, n, None)
            ar_o.append(len(tr.output_ids) / s)
            ar_ids = tr.output_ids
            s, k = hf_generate(pair, ids, n, None)
            ar_h.append(k / s)
            for g in gammas:
                order = list(drafts) + ["hf"]
                for who in (order if rep % 2 == 0 else order[::-1]):
                    if who == "hf":
                        s, k = hf_generate(pair, ids, n, g)
                        hf[g].append(k / s)
                        continue
                    s, tr = ours(pair, prompt, n, g, draft_vocab=who[1], draft_quant=who[0])
                    tps[who][g].append(len(tr.output_ids) / s)
                    c[who].append(tr.summary["cost_ratio_c"])
                    acc[who].append(tr.summary["acceptance_rate"])
                    same[who] &= tr.output_ids == ar_ids
        base, hf_ar = _med(ar_o), _med(ar_h)
        hf_med = {g: _med(hf[g]) for g in gammas}
        hf_best = max(gammas, key=hf_med.get)
        print(f"{name}: target alone {base:.2f} tok/s (HF generate {hf_ar:.2f}); HF assisted, full draft head, "
              f"best γ {hf_best}: {hf_med[hf_best]:.2f} tok/s (×{hf_med[hf_best] / base:.2f})")
        cols = " ".join(f"{'γ=' + str(g):>6}" for g in gammas)
        header = f"{'draft':<11} {'c':>5} {'acc':>5} | {cols} | {'best γ':>6} {'speedup':>7} {'vs HF':>6} | same"
        print(header)
        print("-" * len(header))
        hf_cells = " ".join(f"{hf_med[g]:6.2f}" for g in gammas)
        print(f"{'HF assisted':<11} {'':>5} {'':>5} | {hf_cells} | {hf_best:>6} {hf_med[hf_best] / base:7.2f} "
              f"{1.0:6.2f} |")
        for d in drafts:
            med = {g: _med(tps[d][g]) for g in gammas}
            best = max(gammas, key=med.get)
            cells = " ".join(f"{med[g]:6.2f}" for g in gammas)
            print(f"{_head_label(*d):<11} {_med(c[d]):5.3f} {_med(acc[d]):5.2f} | {cells} | {best:>6} "
                  f"{med[best] / base:7.2f} {med[best] / hf_med[hf_best]:6.2f} | {'yes' if same[d] else 'NO'}",
                  flush=True)
        print()


def tree_fields(setting: str) -> dict:
    """``16:5:3`` -> a dynamic tree of 16 nodes, depth 5, width 3; ``4,2,2,1`` -> a static shape."""
    if ":" in setting:
        n, d, k = (int(x) for x in setting.split(":"))
        return dict(tree_nodes=n, tree_depth=d, tree_width=k)
    return dict(tree_shape=[int(x) for x in setting.split(",")])


def _per_round(tr, kinds: tuple[str, ...], lane: str) -> float:
    """Median ms per round of a lane's forward passes of these kinds (rounds that drafted)."""
    per = [sum(e.duration_ms for e in r.events if e.lane == lane and e.kind in kinds) for r in tr.rounds if r.gamma]
    return _med(per)


def trees(args) -> None:
    """Chains against trees, each draft variant, every setting interleaved in each repeat."""
    pair = load(args)
    n = args.max_new_tokens
    for q in args.draft_quants:
        pair.draft_model(q)
    settings = [(f"chain γ={g}", g, None) for g in args.gammas]
    settings += [(f"tree {s}", 1, tree_fields(s)) for s in args.tree_settings]
    print(f"pair {pair.draft_name} -> {pair.target_name}, {pair.dtype} on {pair.device}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {n} new tokens, median of {args.repeats}, interleaved\n")
    summary = []
    for name in args.prompts:
        prompt = PROMPTS[name]
        ids = encode_prompt(pair.tokenizer, prompt, chat=True)
        ours(pair, prompt, 8, 2), hf_generate(pair, ids, 8, 2)
        for q in args.draft_quants:
            ours(pair, prompt, 8, 2, draft_quant=q, tree=tree_fields("6:2:2"))
        cells = {(q, label): [] for q in args.draft_quants for label, _, _ in settings}
        ar, hf = [], {g: [] for g in args.hf_gammas}
        ar_ids, same = None, {}
        for rep in range(args.repeats):
            s, tr = ours(pair, prompt, n, None)
            ar.append(len(tr.output_ids) / s)
            ar_ids = tr.output_ids
            order = [(q, st) for q in args.draft_quants for st in settings] + [("hf", g) for g in args.hf_gammas]
            for who, what in (order if rep % 2 == 0 else order[::-1]):
                if who == "hf":
                    s, k = hf_generate(pair, ids, n, what)
                    hf[what].append(k / s)
                    continue
                label, gamma, tree = what
                s, tr = ours(pair, prompt, n, gamma, draft_quant=who, tree=tree)
                cells[(who, label)].append((len(tr.output_ids) / s, tr))
                same[(who, label)] = same.get((who, label), True) and tr.output_ids == ar_ids
        base = _med(ar)
        hf_med = {g: _med(v) for g, v in hf.items()}
        hf_best = max(hf_med, key=hf_med.get)
        print(f"{name}: target alone {base:.2f} tok/s; HF assisted best γ {hf_best}: {hf_med[hf_best]:.2f} tok/s "
              f"(×{hf_med[hf_best] / base:.2f})")
        header = (f"{'draft':<5} {'decoder':<16} {'tok/round':>9} {'verify ms':>9} {'draft ms':>8} {'tok/s':>6} "
                  f"{'×alone':>6} {'×HF':>5} | same")
        print(header)
        print("-" * len(header))
        for q in args.draft_quants:
            best = {}
            for label, _, tree in settings:
                runs = cells[(q, label)]
                tps = _med([r[0] for r in runs])
                tr = runs[0][1]
                row = (tps, _med([r[1].summary["mean_acceptance_length"] for r in runs]),
                       _med([_per_round(r[1], ("verify_forward",), "target") for r in runs]),
                       _med([_per_round(r[1], ("draft_forward",), "draft") for r in runs]))
                kind = "tree" if tree else "chain"
                if kind not in best or tps > best[kind][1][0]:
                    best[kind] = (label, row)
                print(f"{q:<5} {label:<16} {row[1]:9.2f} {row[2]:9.0f} {row[3]:8.0f} {tps:6.2f} {tps / base:6.2f} "
                      f"{tps / hf_med[hf_best]:5.2f} | {'yes' if same[(q, label)] else 'NO'}", flush=True)
            chain, tree = best["chain"], best.get("tree")
            if tree is not None:
                ratio = tree[1][0] / chain[1][0]
                print(f"{q:<5} best chain {chain[0]} {chain[1][0]:.2f} tok/s, best tree {tree[0]} {tree[1][0]:.2f} "
                      f"tok/s: tree/chain ×{ratio:.2f}")
                summary.append((name, q, ratio, tree[1][0] / base, max(chain[1][0], tree[1][0]) / hf_med[hf_best]))
        print()
    print(f"{'prompt':<11} {'draft':<5} {'tree/chain':>10} {'tree ×alone':>11} {'best ×HF':>8}")
    for name, q, ratio, alone, vs_hf in summary:
        print(f"{name:<11} {q:<5} {ratio:10.2f} {alone:11.2f} {vs_hf:8.2f}")
    for q in args.draft_quants:
        ratios = [r[2] for r in summary if r[1] == q]
        if ratios:
            print(f"median tree/chain over the prompts, {q} draft: ×{statistics.median(ratios):.2f}")


def _also(spec: str) -> tuple[str, dict]:
    """``int8 γ6=draft_quant:int8,gamma:6`` -> ("int8 γ6", {"draft_quant": "int8", "gamma": 6})."""
    name, _, fields = spec.partition("=")
    out: dict = {}
    for item in fields.split(","):
        key, _, value = item.partition(":")
        out[key] = int(value) if value.lstrip("-").isdigit() else float(value) if "." in value else value
    return name, out


def defaults(args) -> None:
    """The defaults table: the app's default settings against the target alone, the old defaults,
    ``--also`` and HF assisted, every cell interleaved in each repeat."""
    from specviz.measure import draft_choice

    pair = load(args)
    n = args.max_new_tokens
    choice = draft_choice.load_or_measure(pair)
    print(f"pair {pair.draft_name} -> {pair.target_name}, {pair.dtype} on {pair.device}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {n} new tokens, median of {args.repeats}, interleaved")
    print("draft variants measured here (c = draft pass / target pass): "
          + ", ".join(f"{_head_label(k.variant.quant, k.variant.vocab)} {k.c:.3f}" for k in choice.costs)
          + f" -> picked {_head_label(choice.variant.quant, choice.variant.vocab)}"
          + (" (from the cache)" if choice.cached else ""))
    prompts = args.prompts if args.prompts != DEFAULT_PROMPTS else DEFAULTS_PROMPTS
    summary = []
    for name in prompts:
        prompt = PROMPTS[name]
        ids = encode_prompt(pair.tokenizer, prompt, chat=True)
        base_cfg = dict(prompt=prompt, max_new_tokens=n)
        cells = {"defaults": draft_choice.default_config(pair, choice, **base_cfg),
                 "old: full γ4": RunConfig(gamma=4, **base_cfg)}
        cells |= {label: RunConfig(**{**base_cfg, **fields}) for label, fields in map(_also, args.also)}
        alone_cfg = RunConfig(**base_cfg, compiled=args.compiled)
        if args.compiled:
            cells = {label: dataclasses.replace(cfg, compiled=True) for label, cfg in cells.items()}
        for cfg in [*cells.values(), alone_cfg]:  # build every draft variant, warm (compile) every path
            timed(pair, dataclasses.replace(cfg, max_new_tokens=8), alone=cfg is alone_cfg)
        hf_generate(pair, ids, 8, 2)
        runs = {k: [] for k in cells}
        ar, hf = [], {g: [] for g in args.hf_gammas}
        ar_ids = None
        for rep in range(args.repeats):
            order = ["alone", *cells, *(("hf", g) for g in args.hf_gammas)]
            for who in (order if rep % 2 == 0 else order[::-1]):
                if who == "alone":
                    s, tr = timed(pair, alone_cfg, alone=True)
                    ar.append(len(tr.output_ids) / s)
                    ar_ids = tr.output_ids
                elif isinstance(who, tuple):
                    s, k = hf_generate(pair, ids, n, who[1])
                    hf[who[1]].append(k / s)
                else:
                    s, tr = timed(pair, cells[who])
                    runs[who].append((len(tr.output_ids) / s, tr))
        base = _med(ar)
        hf_med = {g: _med(v) for g, v in hf.items()}
        hf_best = max(hf_med, key=hf_med.get)
        print(f"\n{name}: target alone {base:.2f} tok/s; HF assisted (full draft) best γ {hf_best}: "
              f"{hf_med[hf_best]:.2f} tok/s (×{hf_med[hf_best] / base:.2f}); HF at "
              + ", ".join(f"γ {g} {v:.2f}" for g, v in hf_med.items()))
        header = (f"{'settings':<14} {'tok/s':>6} {'×alone':>6} {'×HF':>5} | {'c':>5} {'acc':>5} {'tok/rd':>6} "
                  f"{'drafted/rd':>10} {'early stops':>11} | same")
        print(header)
        print("-" * len(header))
        for label, got in runs.items():
            tps = _med([r[0] for r in got])
            trs = [r[1] for r in got]
            drafted = _med([sum(len(r.proposed) for r in t.rounds) / max(1, len(t.rounds)) for t in trs])
            stops = _med([sum(bool(r.draft_stop) for r in t.rounds) / max(1, len(t.rounds)) for t in trs])
            same = all(t.output_ids == ar_ids for t in trs)
            print(f"{label:<14} {tps:6.2f} {tps / base:6.2f} {tps / hf_med[hf_best]:5.2f} | "
                  f"{_med([t.summary['cost_ratio_c'] for t in trs]):5.3f} "
                  f"{_med([t.summary['acceptance_rate'] for t in trs]):5.2f} "
                  f"{_med([t.summary['mean_acceptance_length'] for t in trs]):6.2f} {drafted:10.2f} "
                  f"{100 * stops:10.0f}% | {'yes' if same else 'NO'}", flush=True)
            summary.append((name, label, tps / base, tps / hf_med[hf_best]))
    print(f"\n{'prompt':<15} {'settings':<14} {'×alone':>6} {'×HF best':>8}")
    for name, label, alone, vs_hf in summary:
        print(f"{name:<15} {label:<14} {alone:6.2f} {vs_hf:8.2f}")


if __name__ == "__main__":
    main()
