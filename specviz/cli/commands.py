"""Command line: ``specviz generate|compare|validate ...`` (or ``python -m specviz ...``).

Exit codes: 0 ok, 2 bad input (any SpecvizError, or a bad flag), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from specviz.analysis import metrics
from specviz.analysis.marks import Span, printable, round_spans
from specviz.record.contention import Contention, describe, merged
from specviz.record.errors import BadInput, SpecvizError
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Round, Trace

SUMMARY_ROWS = metrics.CLI_SUMMARY  # the metrics a run's summary prints, in order (specviz.analysis.metrics)


class Style:
    """ANSI marks of a round's spans (specviz.analysis.marks). With colour off only the marks remain
    (colour is never the only signal): accepted plain, ~rejected~, {cut} (accepted, past
    the stop), [fix], [+bonus], [=target] (no draft this round), pending?."""

    MARKS = {  # kind: (before, after, SGR codes)
        "accepted": ("", "", "32;4"),  # green, underlined
        "rejected": ("~", "~", "31;9"),  # red, struck through
        "cut": ("{", "}", "2"),  # dim
        "fix": ("[", "]", "34;1"),  # blue, boxed in brackets
        "bonus": ("[+", "]", "34;1"),
        "target": ("[=", "]", "34;1"),
        "pending": ("", "?", "2"),
    }

    def __init__(self, color: bool):
        self.color = color

    def _sgr(self, text: str, codes: str) -> str:
        return f"\x1b[{codes}m{text}\x1b[0m" if self.color else text

    def span(self, span: Span) -> str:
        """One marked token; its text made printable first, so no control character reaches the terminal."""
        before, after, codes = self.MARKS[span.kind]
        return self._sgr(f"{before}{printable(span.text)}{after}", codes)

    def dim(self, s: str) -> str:
        return self._sgr(s, "2")


def format_round(rnd: Round, style: Style) -> str:
    """One line: round number, gamma, then the round's marked spans (see Style)."""
    head = style.dim(f"round {rnd.index + 1:>3}  γ={rnd.gamma:<2} {rnd.accepted}/{len(rnd.proposed)} ok ")
    return head + " ".join(style.span(s) for s in round_spans(rnd))


def format_summary(summary: dict, title: str = "", keys: tuple[str, ...] = SUMMARY_ROWS) -> str:
    """The metrics ``keys`` of ``summary``, one a line, each through its one formatter."""
    lines = [title] if title else []
    for key in keys:
        m = metrics.metric(key)
        lines.append(f"  {m.label:<30} {m.text(summary.get(key)):>10}")
    return "\n".join(lines)


def _progress_printer():
    """A tqdm bar on a terminal; plain lines (one per stage) when stderr is a file."""
    from tqdm import tqdm

    if not sys.stderr.isatty():
        seen: set[str] = set()

        def lines(message: str, fraction: float | None) -> None:
            if message not in seen:
                seen.add(message)
                print(message, file=sys.stderr, flush=True)

        return lines, None
    bar = tqdm(total=100, file=sys.stderr, bar_format="{desc:<60} {bar:20} {elapsed}", leave=False)

    def progress(message: str, fraction: float | None) -> None:
        bar.set_description_str(message[:60])
        if fraction is not None:
            bar.n = int(fraction * 100)
        bar.refresh()

    return progress, bar


def _run_flags(p: argparse.ArgumentParser) -> None:
    """How a run drafts, samples and stops: choices from the record layer's names of the engine's
    registries (no torch to load for a command that needs none: validate, --help, a bad flag)."""
    from specviz.record.limits import (
        DEFAULT_CONFIDENCE,
        DRAFT_HEAD_SIZES,
        DRAFTER_NAMES,
        MAX_TREE_NODES,
        POLICY_NAMES,
        QUANTS,
    )

    p.add_argument("--policy", default="constant", choices=list(POLICY_NAMES),
                   help="constant: γ every round; heuristic: HF's +2/-1 schedule; confidence: up to γ, stopping "
                        "after a token the draft gave less than --confidence")
    p.add_argument("--confidence", type=float, default=DEFAULT_CONFIDENCE, metavar="TAU",
                   help=f"the confidence policy's threshold τ (default {DEFAULT_CONFIDENCE})")
    p.add_argument("--drafter", default="model", choices=list(DRAFTER_NAMES))
    p.add_argument("--draft-vocab", type=int, default=0, metavar="N",
                   help="cut the draft's LM head to the N most frequent token ids (FR-Spec), e.g. "
                        f"{', '.join(str(n) for n in DRAFT_HEAD_SIZES)}; 0 = the full head")
    p.add_argument("--draft-quant", default="none", choices=list(QUANTS),
                   help="int8: the draft's Linears in dynamic int8 (CPU), a cheaper pass; none: as loaded")
    p.add_argument("--compiled", action="store_true",
                   help="static KV caches and a compiled one-token pass (CUDA graphs on a GPU; compiled before "
                        "the clock starts, which takes a while the first time)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--tree", type=int, default=0, metavar="N",
                   help=f"draft a token tree of at most N nodes (1..{MAX_TREE_NODES}) and verify it in one pass, "
                        "growing it where the draft is most sure (EAGLE-2); 0 = a chain of gamma tokens")
    p.add_argument("--tree-depth", type=int, default=4, metavar="D", help="the tree's depth (default 4)")
    p.add_argument("--tree-width", type=int, default=2, metavar="K",
                   help="children per expanded node, and nodes expanded per depth (default 2)")
    p.add_argument("--tree-shape", type=_widths, default=[], metavar="W1,W2,..",
                   help="a static tree instead: every node at depth d-1 gets W_d children, e.g. 4,2,2,1 "
                        "(1,1,1,1 is a chain of 4)")


def _pair_flags(p: argparse.ArgumentParser) -> None:
    """Which pair, on which device, in which dtype: choices from the model registries."""
    from specviz.record.limits import DEVICES, DTYPE_NAMES, PAIRS

    p.add_argument("--pair", choices=list(PAIRS), help="a named pair (default: default)")
    p.add_argument("--draft", help="draft model: HF id, local folder or .gguf file")
    p.add_argument("--target", help="target model: HF id, local folder or .gguf file")
    p.add_argument("--device", default="auto", choices=list(DEVICES))
    p.add_argument("--dtype", default="auto", choices=["auto", *DTYPE_NAMES])
    p.add_argument("--target-url", metavar="URL",
                   help="the target on a vLLM server (OpenAI-compatible), e.g. http://127.0.0.1:8000; "
                        "the draft runs here; greedy only")
    p.add_argument("--target-model", metavar="NAME", help="the served model's name (default: the one it serves)")


def build_parser() -> argparse.ArgumentParser:
    """The flags, their choices taken from the registries the engine itself uses."""
    from specviz.record.limits import MAX_GAMMA

    parser = argparse.ArgumentParser(prog="specviz", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in [
        ("generate", "run speculative decoding and print every round"),
        ("compare", "race speculative decoding against the target alone on the same prompt"),
        ("schedules", "run greedy speculative decoding, then replay the run under serial, PEARL and SSD"),
    ]:
        p = sub.add_parser(name, help=help_text)
        if name == "schedules":
            from specviz.replay.schedules import FANOUT_MODES

            p.add_argument("--fanout", type=int, default=2, help="SSD: branches per verification outcome")
            p.add_argument("--fanout-mode", default="uniform", choices=list(FANOUT_MODES))
            p.add_argument("--costs", default="measured", choices=["measured", "trace"],
                           help="forward-pass costs: measured on this machine (cached), or read off the run")
        p.add_argument("--prompt", required=True)
        p.add_argument("--raw", action="store_true", help="use the prompt as is, without the chat template")
        p.add_argument("--gamma", type=int, default=4, help=f"draft length, 1..{MAX_GAMMA}")
        p.add_argument("--max-new-tokens", type=int, default=64)
        _run_flags(p)
        _pair_flags(p)
        p.add_argument("--json", type=Path, help="write the trace(s) as JSON to this file")
        p.add_argument("--quiet", action="store_true", help="print no rounds, only the summary")
    _cost_curve_parser(sub)
    _sweep_parser(sub)
    _validate_parser(sub)
    _overlap_parser(sub)
    return parser


def _int_list(text: str) -> list[int]:
    """``1,2,4,8`` or ``1-32`` or ``1-8,16,32``: sorted distinct integers >= 1."""
    out: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            a, b = int(lo), int(hi or lo)
            if a < 1 or b < a:
                raise ValueError
            out.update(range(a, b + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give integers >= 1, e.g. 1,2,4,8 or 1-32") from None
    return sorted(out)


def _widths(text: str) -> list[int]:
    """``4,2,2,1``: a tree's widths per depth, each >= 1 (the bounds are checked with the run)."""
    try:
        widths = [int(w) for w in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give widths per depth, e.g. 4,2,2,1") from None
    if any(w < 1 for w in widths):
        raise argparse.ArgumentTypeError(f"{text!r}: every width is at least 1, e.g. 4,2,2,1")
    return widths


def _tree(args: argparse.Namespace) -> dict:
    """The tree settings of the run flags, as RunConfig fields."""
    return dict(tree_nodes=args.tree, tree_depth=args.tree_depth, tree_width=args.tree_width,
                tree_shape=list(args.tree_shape))


def _cost_curve_parser(sub) -> None:
    """``specviz cost-curve``: the verify-cost curve (specviz.measure.forward_costs), measured once and cached."""
    from specviz.measure.forward_costs import (
        CURVE_BATCHES,
        CURVE_CONTEXT,
        SPARSE_CURVE_TOKENS,
    )

    p = sub.add_parser(
        "cost-curve", help="time one forward pass of each model against the tokens it reads, at batch 1, 4, 16",
        description="Time one forward pass of the target and of the draft over k new tokens, for each batch "
                    "size, at a realistic context: the verify-cost curve. Measured once per pair, device, "
                    "dtype, context and grid, then read from the cache.")
    p.add_argument("--json", type=Path, required=True, help="write the curve as JSON to this file")
    p.add_argument("--tokens", type=_int_list, default=list(SPARSE_CURVE_TOKENS),
                   help="new tokens per pass (default 1,2,4,8,16,32: minutes on a CPU; the full 1..32 grid "
                        "is --tokens 1-32, which takes 20 minutes or more)")
    p.add_argument("--batches", type=_int_list, default=list(CURVE_BATCHES), help="batch sizes (default 1,4,16)")
    p.add_argument("--repeats", type=int, default=3, help="timed passes per point, after one warm-up (default 3)")
    p.add_argument("--context-length", type=int, default=CURVE_CONTEXT,
                   help=f"tokens already in the cache before each pass (default {CURVE_CONTEXT})")
    p.add_argument("--refresh", action="store_true", help="measure again even when the cache has the curve")
    _pair_flags(p)


def _config(args: argparse.Namespace) -> RunConfig:
    return RunConfig(
        prompt=args.prompt,
        chat=not args.raw,
        gamma=args.gamma,
        policy=args.policy,
        confidence=args.confidence,
        compiled=args.compiled,
        drafter=args.drafter,
        draft_vocab=args.draft_vocab,
        draft_quant=args.draft_quant,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        stop=list(args.stop),
        **_tree(args),
    )


def _write_json(path: Path, payload: dict) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(payload, ensure_ascii=False, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def _load(args: argparse.Namespace, style: Style):
    """Check that --json can be written, then load the pair with a progress bar and say what loaded."""
    from specviz.models.pair import load_pair

    if getattr(args, "json", None) is not None and not args.json.parent.is_dir():
        raise BadInput(f"--json: folder {args.json.parent} does not exist")
    progress, bar = _progress_printer()
    try:
        pair = load_pair(args.pair, args.draft, args.target, args.device, args.dtype, progress,
                         target_url=args.target_url, target_model=args.target_model)
    finally:
        if bar is not None:
            bar.close()
    print(style.dim(f"{pair.draft_name} → {pair.target_name} · {pair.dtype} on {pair.device} · "
                    f"loaded in {pair.load_ms / 1000:.1f} s"), file=sys.stderr)
    return pair


def _stream(decoding, style: Style, quiet: bool) -> Trace:
    for rnd in decoding:
        if not quiet:
            print(format_round(rnd, style), flush=True)
    return decoding.trace


def _contention_note(*traces: Trace) -> str | None:
    jobs = merged(c for t in traces for c in t.contention)
    if not jobs:
        return None
    return f"timed under contention ({describe(jobs)} ran at the same time): timings are pessimistic"


def _load_text(trace: Trace) -> str:
    return describe(trace.contention) or "none"


def _unfair_note(sd: Trace, ar: Trace) -> str | None:
    """When the race's two runs saw different load (specviz.measure.race.same_load): why its speedup is no fair ratio."""
    from specviz.measure.race import same_load

    if same_load(sd, ar):
        return None
    return (f"the two runs saw different load (speculative: {_load_text(sd)}; target alone: {_load_text(ar)}): "
            "the speedup is not a fair ratio; race again on a quieter machine")


def _compare(pair, config: RunConfig, style: Style, args: argparse.Namespace) -> None:
    """Race speculative decoding against the target alone (specviz.measure.race), speculative first."""
    from specviz.measure.race import Race

    race = Race(pair, config)
    for which, rnd in race:
        if which == "speculative" and not args.quiet:
            print(format_round(rnd, style), flush=True)
    sd, ar, result = race.sd.trace, race.baseline.trace, race.comparison
    print("\n" + sd.output_text)
    print("\n" + format_summary(sd.summary, f"speculative (gamma {config.gamma})"))
    print(format_summary(ar.summary, "autoregressive (target alone)"))
    print(f"\n  {metrics.metric('speedup').label:<30} {metrics.metric('speedup').text(result.speedup):>10}")
    print(f"  {'identical':<30} {str(result.identical):>10}")
    if not result.identical:
        print("  " + result.explanation)
    if note := _contention_note(sd, ar):
        print("  " + style.dim(note))
    if note := _unfair_note(sd, ar):
        print("  " + style.dim(note))
    if args.json:
        _write_json(args.json, {
            "speculative": sd.to_dict(),
            "autoregressive": ar.to_dict(),
            **result.to_dict(),
        })


def _fill_missing(pair, trace: Trace, settings, model, measured: bool):
    """``model`` with the passes the replays need and the run did not time (SSD's batched
    branches, its glue pass, the target's one-token pass for ×alone) measured now, as the
    Parallel page does (specviz.measure.branch_costs): never the nearest pass standing in for
    them. A remote target's passes cannot be timed here: those stay unknown. Returns (the
    costs, the passes measured as text, the passes still unknown)."""
    from specviz.measure import branch_costs
    from specviz.replay import what_if

    missing = set().union(*what_if.missing_passes(trace, settings, measured).values())
    here = {p for p in missing if p[0] == "draft" or pair.target is not None}
    if not here:
        return model, "", missing
    ratios = branch_costs.measure_ratios(pair, trace.config, branch_costs.replay_context(trace, pair.context_length),
                                         here, what_if.references(trace))
    text = ", ".join(f"{m} ×{b} over {k}" for m, b, k in sorted(ratios))
    return what_if.fill_in(model, trace, ratios), text, missing - here


def _schedules(pair, config: RunConfig, style: Style, args: argparse.Namespace) -> None:
    """A real greedy run, replayed under every schedule (specviz.replay.what_if), with the serial
    replay checked against the run itself."""
    from specviz.engine.decode import speculative
    from specviz.measure import branch_costs
    from specviz.measure import forward_costs as C
    from specviz.replay import what_if

    if config.temperature > 0:
        raise BadInput("schedules replays greedy runs only: use --temperature 0", "temperature")
    trace = _stream(speculative(pair, config), style, args.quiet)
    measured = None
    if args.costs == "measured":
        progress, bar = _progress_printer()
        try:
            measured = C.load_or_measure(pair, context_length=branch_costs.replay_context(trace, pair.context_length),
                                         progress=lambda f, m: progress(m, f))
        finally:
            if bar is not None:
                bar.close()
    model = what_if.costs_for(trace, measured)
    settings = what_if.settings_for(trace, fanout=args.fanout, fanout_mode=args.fanout_mode)
    model, filled, unknown = _fill_missing(pair, trace, settings, model, measured is not None)
    if filled:
        print(style.dim(f"measured just now, each beside the run's own pass it is scaled to: {filled} "
                        "(passes the run did not make)"))
    if unknown:
        print(style.dim("a remote target's passes cannot be timed here, and the run did not make "
                        f"{', '.join(f'{m} ×{b} over {k}' for m, b, k in sorted(unknown))}: ×alone is not shown"))
    results = what_if.replay(trace, model, settings)
    check = what_if.check_serial(trace, model)
    # the target alone: from its one-token pass, never from the run's shortest verify standing in
    alone = None if ("target", 1, 1) in unknown else what_if.target_alone_ms(model, len(trace.output_ids))
    serial_ms = results["serial"].wall_ms
    rows_out = {}
    print(f"\n{'schedule':<8} {'tok/s':>7} {'rounds':>6} {'×alone':>7} {'×serial':>7} {'draft idle':>10} "
          f"{'target idle':>11} {'SSD hits':>8}")
    for name, r in results.items():
        rows_out[name] = {
            "tokens_per_second": r.tokens_per_second, "rounds": r.rounds, "wall_ms": r.wall_ms,
            "speedup_vs_target_alone": alone / r.wall_ms if alone else None, "speedup_vs_serial": serial_ms / r.wall_ms,
            "draft_idle_fraction": r.draft_idle_fraction, "target_idle_fraction": r.target_idle_fraction,
            "hit_rate": r.hit_rate, "branches_per_round": r.branches_per_round,
            "wasted_draft_ms": r.wasted_draft_ms,
        }
        hits = "" if r.hit_rate is None else f"{r.hit_rate:.0%}"
        vs_alone = f"{alone / r.wall_ms:7.2f}" if alone else f"{'–':>7}"
        print(f"{name:<8} {r.tokens_per_second:7.2f} {r.rounds:6d} {vs_alone} "
              f"{serial_ms / r.wall_ms:7.2f} {r.draft_idle_fraction:10.0%} {r.target_idle_fraction:11.0%} {hits:>8}")
    verdict = "agrees" if check.ok else "DOES NOT agree"
    print(f"\nserial replay {verdict} with the real run: {check.sim_rounds} rounds vs {check.real_rounds} "
          f"({'same rounds' if check.rounds_match else 'rounds differ'}), {check.sim_wall_ms:.0f} ms vs "
          f"{check.real_wall_ms:.0f} ms ({check.wall_error:+.1%}); costs: {model.source}")
    print(style.dim("PEARL and SSD are simulated from measured costs and assume the draft has its own device."))
    if args.json:
        _write_json(args.json, {
            "schedules": rows_out,
            "measured": {"rounds": check.real_rounds, "wall_ms": check.real_wall_ms},
            "simulated_serial": {"rounds": check.sim_rounds, "wall_ms": check.sim_wall_ms,
                                 "rounds_match": check.rounds_match, "wall_error": check.wall_error},
            "costs": model.to_dict(),
            "trace": trace.to_dict(),
        })


def format_curve(rows: list[dict]) -> str:
    """The curve as a table: one line per k, one column per (model, batch), then c and the
    target's T(k) / T(1) at batch 1."""
    from specviz.replay.latency import curve_series

    series = curve_series(rows)
    keys = sorted(series, key=lambda key: (key[0] != "draft", key[1]))
    ks = sorted({k for curve in series.values() for k in curve})
    heads = [f"{model} B={batch}" for model, batch in keys]
    lines = [f"{'tokens':>6}  " + "  ".join(f"{h:>12}" for h in heads)]
    for k in ks:
        cells = [f"{series[key][k]:9.1f} ms" if k in series[key] else f"{'–':>12}" for key in keys]
        lines.append(f"{k:>6}  " + "  ".join(f"{c:>12}" for c in cells))
    draft, target = series.get(("draft", 1), {}), series.get(("target", 1), {})
    if 1 in draft and target.get(1):
        lines.append(f"\nc = draft pass / target pass (1 token, batch 1) = {draft[1] / target[1]:.2f}")
    if target.get(1):
        ratios = " · ".join(f"k={k}: {ms / target[1]:.2f}" for k, ms in target.items())
        lines.append(f"target, batch 1, T(k) / T(1): {ratios}")
    return "\n".join(lines)


def _cost_curve(args: argparse.Namespace, style: Style) -> int:
    """``specviz cost-curve``: the curve from the cache (the requested grid's file, or the
    full curve's) or measured and cached (specviz.measure.forward_costs.load_or_measure); a table; the JSON."""
    from specviz.measure import forward_costs as C

    if args.json is not None and not args.json.parent.is_dir():
        raise BadInput(f"--json: folder {args.json.parent} does not exist")
    if args.repeats < 1:
        raise BadInput("--repeats must be >= 1", "repeats")
    if args.target_url is not None:
        raise BadInput("the cost curve times the target's forward passes here: it needs a local target, "
                       "not --target-url", "target_url")
    if args.context_length < 1:
        raise BadInput("--context-length must be >= 1", "context_length")
    grid = C.curve_grid(args.tokens, args.batches)
    pair = _load(args, style)
    device = str(pair.device)
    wanted = set(grid)
    found = None
    if not args.refresh:
        found = C.cached_curve(pair.draft_name, pair.target_name, device, pair.dtype, args.context_length,
                               grids=(grid, C.CURVE_GRID, C.SPARSE_CURVE_GRID))
    if found is not None:
        rows = [r for r in found[0] if (r["model"], int(r["batch"]), int(r["tokens"])) in wanted]
        meta = found[1]
        if len(rows) < len(wanted):
            found = None
    if found is None:
        progress, bar = _progress_printer()
        try:
            rows, meta = C.load_or_measure(pair, context_length=args.context_length, grid=grid,
                                           repeats=args.repeats, refresh=args.refresh,
                                           progress=lambda f, m: progress(m, f))
        finally:
            if bar is not None:
                bar.close()
    how = "read from the cache" if meta.get("cached") else "measured"
    print(f"verify-cost curve · context {args.context_length} tokens · median of {meta.get('repeats', '?')} "
          f"passes per point · {how}, {meta.get('measured_at', '?')}")
    print(format_curve(rows))
    if jobs := meta.get("contention"):
        jobs = describe(Contention.of(c) for c in jobs)
        print("  " + style.dim(f"measured under contention ({jobs}): timings are pessimistic"))
    _write_json(args.json, {
        "device": device, "dtype": pair.dtype, "context_length": args.context_length,
        "draft": pair.draft_name, "target": pair.target_name, "repeats": meta.get("repeats"),
        "measured_at": meta.get("measured_at"), "cached": bool(meta.get("cached")),
        "rows": [{k: r[k] for k in ("model", "batch", "tokens", "ms", "min_ms", "max_ms") if k in r} for r in rows],
    })
    return 0


def _sweep_parser(sub) -> None:
    """``specviz sweep``: several prompts and a range of γ, so its own flags (the usual pair,
    device, dtype, draft-head and sampling flags among them)."""
    from specviz.record.limits import MAX_REPEATS

    p = sub.add_parser("sweep", help="measure tok/s against gamma, and the target alone, on each prompt, "
                                     "beside the best gamma the formula predicts")
    p.add_argument("--prompt", action="append", required=True, help="a prompt to sweep (repeatable)")
    p.add_argument("--raw", action="store_true", help="use the prompts as they are, without the chat template")
    p.add_argument("--gammas", default="1-10", help="the draft lengths: a range such as 1-10, a list such as "
                                                    "1,2,4, or both (1-4,8); default 1-10")
    p.add_argument("--repeats", type=int, default=3,
                   help=f"runs per point, interleaved across gamma; the median is shown (1..{MAX_REPEATS})")
    p.add_argument("--max-new-tokens", type=int, default=64)
    _run_flags(p)
    _pair_flags(p)
    p.add_argument("--json", type=Path, help="write the sweep (rows, baselines, best gammas) as JSON to this file")
    p.add_argument("--quiet", action="store_true", help="print no line per run, only the table")


def _short(prompt: str, width: int = 28) -> str:
    flat = "".join(ch if ch.isprintable() else " " for ch in " ".join(prompt.split()))
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def format_sweep(result) -> str:
    """The sweep (specviz.measure.sweep.SweepResult) as a table: one line per (prompt, gamma), the
    measured best marked ★, then each prompt's baseline, pooled alpha and c, and the
    measured and predicted best gamma."""
    fmt_num, fmt_pct, fmt_speedup = metrics.fmt_num, metrics.fmt_pct, metrics.fmt_speedup
    lines = [f"{'prompt':<28} {'γ':>3} {'tok/s':>7} {'min–max':>13} {'speedup':>8} {'formula':>8} "
             f"{'accept':>7} {'tok/round':>9} {'c':>5} {'n':>2}"]
    for prompt in result.prompts:
        best = result.best_gamma_measured.get(prompt)
        for r in result.rows_of(prompt):
            spread = f"{r['tokens_per_second_min']:.1f}–{r['tokens_per_second_max']:.1f}"
            star = " ★" if r["gamma"] == best else ""
            lines.append(f"{_short(prompt):<28} {r['gamma']:>3} {r['tokens_per_second']:>7.1f} {spread:>13} "
                         f"{fmt_speedup(r['speedup']):>8} {fmt_speedup(r['predicted_speedup']):>8} "
                         f"{fmt_pct(r['acceptance_rate']):>7} {fmt_num(r['mean_acceptance_length']):>9} "
                         f"{fmt_num(r['cost_ratio_c']):>5} {r['n']:>2}{star}")
        base = result.baseline.get(prompt)
        alone = (f"{base:.1f} tok/s ({result.baseline_min[prompt]:.1f}–{result.baseline_max[prompt]:.1f})"
                 if base else "not measured")
        lines.append(f"  {_short(prompt, 60)}: target alone {alone}; α {fmt_num(result.alpha.get(prompt))}, "
                     f"c {fmt_num(result.cost_ratio_c.get(prompt))}; best γ measured "
                     f"{result.best_gamma_measured.get(prompt, '–')}, predicted "
                     f"{result.best_gamma_predicted.get(prompt, '–')}")
    return "\n".join(lines)


def _sweep(args: argparse.Namespace, style: Style) -> int:
    """``specviz sweep`` (specviz.measure.sweep): the estimate, one line per run, a table, the JSON.
    Ctrl-C keeps what was measured: the table and the JSON of the runs so far, exit 130."""
    from specviz.measure import sweep
    from specviz.record.validate import check, check_remote, check_settings

    latest: list = []
    bar = None
    try:
        if args.tree_shape:
            raise BadInput("sweep varies γ, which is a dynamic tree's depth (--tree N); a static --tree-shape has "
                           "no depth to vary: run generate or compare with it instead", "tree_shape")
        gammas = sweep.parse_gammas(args.gammas)
        prompts = sweep.check_prompts(args.prompt)
        repeats = sweep.check_repeats(args.repeats)
        sweep.check_max_new_tokens(args.max_new_tokens, gammas)
        base = _config(argparse.Namespace(**{**vars(args), "prompt": prompts[0], "gamma": gammas[-1]}))
        check_settings(base)  # fail on bad settings before a minute of model loading
        if args.target_url is not None:
            check_remote(base)
        pair = _load(args, style)
        for prompt in prompts:  # a prompt too long for the pair fails here, before the probe
            check(pair, sweep.run_config(base, prompt, gammas[-1], args.max_new_tokens))
        costs = sweep.probe_costs(pair, prompts[0], base)
        seconds = sweep.estimate_seconds(costs, prompts, gammas, repeats, args.max_new_tokens, base)
        total = len(sweep.schedule(prompts, gammas, repeats))
        print(f"{total} runs ({len(prompts)} prompt(s) × ({len(gammas)} γ + the target alone) × {repeats}): "
              f"about {metrics.fmt_ms(seconds * 1000)}, estimated from a short probe run", file=sys.stderr)
        progress, bar = _progress_printer() if not args.quiet else (None, None)

        def tell(done: int, total: int, partial) -> None:
            latest[:] = [partial]
            if progress is not None:
                c = partial.cells[-1]
                what = "target alone" if c.gamma == sweep.AR else f"γ={c.gamma}"
                progress(f"[{done}/{total}] {_short(c.prompt, 20)} {what} (repeat {c.repeat + 1}): "
                         f"{c.tokens_per_second:.1f} tok/s", done / total)

        try:
            result = sweep.sweep(pair, prompts, gammas, repeats, args.max_new_tokens, base, progress=tell)
        finally:
            if bar is not None:
                bar.close()
                bar = None
        _sweep_report(result, style, args)
        return 0
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        if not latest:
            raise
        latest[0].stopped = True
        _sweep_report(latest[0], style, args)
        print("specviz: interrupted: the table and the JSON hold the runs measured so far", file=sys.stderr)
        return 130


def _sweep_report(result, style: Style, args: argparse.Namespace) -> None:
    print(format_sweep(result))
    for prompt in result.disagreements():
        print(style.dim(
            f"  {_short(prompt)}: the formula's best γ ({result.best_gamma_predicted[prompt]}) and the measured "
            f"one ({result.best_gamma_measured[prompt]}) differ by more than 1. The formula takes a verify pass "
            "over γ + 1 tokens to cost one target step; on this machine it costs more as γ grows (verify_ms in "
            "the JSON), and run-to-run noise moves a flat optimum."))
    if jobs := result.contended():
        print("  " + style.dim(f"timed under contention ({describe(jobs)} ran at the same time): "
                               "timings are pessimistic"))
    if not result.complete:
        print(style.dim(f"  {result.done_cells} of {result.total_cells} runs measured"))
    if args.json:
        _write_json(args.json, result.to_dict())


def _validate_parser(sub) -> None:
    """``specviz validate FILE...``: trace files checked against the trace schema (specviz.record.schema)."""
    from specviz.record.schema import MAX_TRACE_BYTES

    p = sub.add_parser(
        "validate", help="check trace JSON files against the trace schema",
        description="Check each trace file as the app reads it: its size (at most "
                    f"{MAX_TRACE_BYTES // 1024 // 1024} MB), UTF-8, JSON, every field's type and range, no unknown "
                    "field (assets/trace.schema.json). Exit 0 when every file is a valid trace, 2 otherwise.")
    p.add_argument("files", nargs="+", type=Path, metavar="FILE", help="a trace JSON file (one or more)")


VALIDATE_SHOWN = 20  # problems printed per file; the rest counted


def _validate(args: argparse.Namespace) -> int:
    """``specviz validate``: one line per valid file; for each bad one, the file and every field at fault."""
    from specviz.record.schema import BadTrace

    bad = 0
    for path in args.files:
        try:
            trace = Trace.load(path)
        except BadTrace as exc:
            bad += 1
            problems = [message for _field, message in exc.problems]
            print(f"{path}: invalid: {problems[0]}")
            for message in problems[1:VALIDATE_SHOWN]:
                print(f"  {message}")
            if len(problems) > VALIDATE_SHOWN:
                print(f"  … and {len(problems) - VALIDATE_SHOWN} more")
        except OSError as exc:
            bad += 1
            print(f"{path}: cannot be read: {exc.strerror or exc}")
        else:
            print(f"{path}: ok ({trace.config.mode}, {len(trace.rounds)} rounds, {len(trace.output_ids)} tokens)")
    if bad:
        print(f"specviz: {bad} of {len(args.files)} file(s) are not valid traces", file=sys.stderr)
    return 2 if bad else 0


# --- specviz overlap: a schedule run for real beside its simulation -------------------------------------

def _overlap_parser(sub) -> None:
    """``specviz overlap``: PEARL or SSD run for real (two pinned threads, or against a vLLM server)
    and simulated, side by side (specviz.measure.real_vs_sim, the Parallel page's code)."""
    from specviz.record.limits import MAX_BRANCHES, MAX_GAMMA
    from specviz.replay.schedules import FANOUT_MODES

    p = sub.add_parser(
        "overlap", help="run PEARL or SSD for real and simulated on the same prompt; print both",
        description="Run a greedy serial speculative run (the baseline and the costs), then the chosen schedule "
                    "for real, the draft and the target in two threads pinned to one core each (or the draft "
                    "here and the target on a vLLM server), and simulated from the serial run's costs. Prints "
                    "measured and simulated wall time, rounds, hit rate and tokens per second.")
    p.add_argument("--schedule", required=True, choices=["pearl", "ssd"])
    p.add_argument("--prompt", required=True)
    p.add_argument("--raw", action="store_true", help="use the prompt as is, without the chat template")
    p.add_argument("--gamma", type=int, default=4, help=f"draft length, 1..{MAX_GAMMA}")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--fanout", type=int, default=None,
                   help="SSD: branches per verification outcome; default: the budget fitted to the verify time")
    p.add_argument("--fanout-mode", default="uniform", choices=list(FANOUT_MODES),
                   help="SSD: how the budget is spread over the outcomes")
    p.add_argument("--max-branches", type=int, default=MAX_BRANCHES, help="SSD: cap on the branches per round")
    p.add_argument("--cores", type=int, nargs=2, metavar=("DRAFT", "TARGET"), help="the two threads' cores")
    _pair_flags(p)
    p.add_argument("--json", type=Path, help="write the comparison as JSON to this file")


def _overlap(args: argparse.Namespace, style: Style) -> int:
    from specviz.measure.real_vs_sim import real_vs_simulated
    from specviz.record.validate import check_settings

    config = RunConfig(prompt=args.prompt, chat=not args.raw, gamma=args.gamma, max_new_tokens=args.max_new_tokens)
    check_settings(config)
    if args.fanout is not None and args.fanout < 1:
        raise BadInput("--fanout must be at least 1", "fanout")
    pair = _load(args, style)
    result = real_vs_simulated(pair, config, args.schedule, args.fanout, args.fanout_mode, args.max_branches,
                               cores=tuple(args.cores) if args.cores else None, warm_up=True)
    print(format_overlap(result))
    if args.json:
        _write_json(args.json, result.to_dict())
    return 0


def format_overlap(result) -> str:
    """The measured and simulated totals side by side, SSD's budget and hits, the gap by part."""
    m, s = result.measured, result.simulated
    name = {"pearl": "PEARL", "ssd": "SSD"}[result.schedule]
    rate = lambda x: "–" if x is None else f"{x:.0%}"  # noqa: E731
    lines = [f"{'':<10} {'wall ms':>9} {'rounds':>6} {'hit rate':>8} {'tok/s':>7}",
             f"{'measured':<10} {m.wall_ms:9.0f} {m.rounds:6d} {rate(m.hit_rate):>8} {m.tokens_per_second:7.2f}",
             f"{'simulated':<10} {s.wall_ms:9.0f} {s.rounds:6d} {rate(s.hit_rate):>8} {s.tokens_per_second:7.2f}",
             f"{'serial':<10} {result.serial.wall_ms:9.0f} {len(result.serial.rounds):6d} {'':>8} "
             f"{result.serial.summary['tokens_per_second']:7.2f}",
             f"\n{name} for real: {result.wall_error:+.1%} against its simulation; same tokens as the serial run: "
             f"{'yes' if result.identical else 'NO'}"]
    real = result.real
    if result.schedule == "ssd":
        b = result.budget
        how = "fitted to the verify" if b.fitted else "asked for"
        lines.append(f"budget ({how}): B = {b.branches} branches a round (fan-out {b.fanout} per outcome of "
                     f"{b.gamma + 1}; {b.dropped} dropped by the cap); predicted branch work {b.tree_ms:.0f} ms "
                     f"against a verify of {b.verify_ms:.0f} ms")
        st = real.stats()
        lines.append(f"branches per round: measured {st['branches_per_round'] or 0:.1f}, simulated "
                     f"{result.sim.branches_per_round or 0:.1f}; draft time on branches thrown away: measured "
                     f"{st['wasted_draft_ms']:.0f} ms, simulated {result.sim.wasted_draft_ms or 0:.0f} ms; rounds "
                     f"the cap cut: {st['capped_rounds']} ({st['branches_dropped_by_cap']} branches)")
    g = result.gap()
    lines.append("measured − simulated, ms: " + ", ".join(
        f"{k.replace('_', ' ')} {v:+.0f}" for k, v in g.to_dict().items() if k != "rounds_differ")
        + ("; the rounds differ from the simulation's" if g.rounds_differ else ""))
    if not real.pinned and real.note:
        lines.append(f"not pinned: {real.note}")
    return "\n".join(lines)


def _decode(args: argparse.Namespace, style: Style) -> int:
    """``specviz generate``, ``compare`` and ``schedules``: one run on the pair (a race for
    compare; the replayed schedules for schedules)."""
    from specviz.engine.decode import speculative
    from specviz.record.validate import check_remote, check_settings

    config = _config(args)
    check_settings(config)  # fail on bad settings before a minute of model loading
    if args.target_url is not None:
        check_remote(config)
        if args.command == "schedules" and args.costs == "measured":
            raise BadInput("with a remote target the costs cannot be measured here: use --costs trace", "costs")
    pair = _load(args, style)
    if args.command == "compare":
        _compare(pair, config, style, args)
        return 0
    if args.command == "schedules":
        _schedules(pair, config, style, args)
        return 0
    sd = _stream(speculative(pair, config), style, args.quiet)
    print("\n" + sd.output_text)
    print("\n" + format_summary(sd.summary, "speculative decoding"))
    if note := _contention_note(sd):
        print("  " + style.dim(note))
    if args.json:
        _write_json(args.json, sd.to_dict())
    return 0


COMMANDS = {"sweep": _sweep, "validate": lambda args, style: _validate(args), "overlap": _overlap,
            "cost-curve": _cost_curve}


def main(argv: list[str] | None = None) -> int:
    """The ``specviz`` command. A bad input (SpecvizError) is one line and exit 2, Ctrl-C exit 130,
    for every subcommand alike (sweep first keeps and prints the runs it measured)."""
    args = build_parser().parse_args(argv)
    style = Style(color=sys.stdout.isatty() and "NO_COLOR" not in os.environ)
    try:
        return COMMANDS.get(args.command, _decode)(args, style)
    except SpecvizError as exc:
        print(f"specviz: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specviz: interrupted", file=sys.stderr)
        return 130
