"""Command line: ``python -m specviz generate|compare ...``.

Exit codes: 0 ok, 2 bad input (any SpecvizError, or a bad flag), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from specviz.errors import BadInput, SpecvizError
from specviz.trace import Round, RunConfig, Trace

SUMMARY_ROWS = [
    ("new_tokens", "new tokens", "{:d}"),
    ("rounds", "rounds", "{:d}"),
    ("wall_ms", "wall time (ms)", "{:.0f}"),
    ("tokens_per_second", "tokens / s", "{:.2f}"),
    ("ttft_ms", "time to first token (ms)", "{:.0f}"),
    ("acceptance_rate", "acceptance rate", "{:.1%}"),
    ("mean_acceptance_length", "mean acceptance length", "{:.2f}"),
    ("draft_forward_ms_median", "draft forward, median (ms)", "{:.1f}"),
    ("target_forward_ms_median", "target forward, median (ms)", "{:.1f}"),
    ("cost_ratio_c", "cost ratio c", "{:.3f}"),
    ("draft_idle_fraction", "draft idle", "{:.1%}"),
    ("target_idle_fraction", "target idle", "{:.1%}"),
    ("overhead_ms", "overhead (ms)", "{:.1f}"),
]


class Style:
    """ANSI styles; with colour off only the marks remain (colour is never the only signal)."""

    def __init__(self, color: bool):
        self.color = color

    def _sgr(self, text: str, codes: str) -> str:
        return f"\x1b[{codes}m{text}\x1b[0m" if self.color else text

    def accepted(self, s: str) -> str:
        return self._sgr(s, "32;4")  # green, underlined

    def rejected(self, s: str) -> str:
        return self._sgr(f"~{s}~", "31;9")  # red, struck through, between tildes

    def correction(self, s: str, bonus: bool) -> str:
        return self._sgr(f"[{'+' if bonus else ''}{s}]", "34;1")  # blue, boxed in brackets

    def dim(self, s: str) -> str:
        return self._sgr(s, "2")


def visible(piece: str) -> str:
    """A token's text with newlines and tabs shown, so blocks stay on one line."""
    return piece.replace("\n", "⏎").replace("\t", "⇥")


def format_round(rnd: Round, style: Style) -> str:
    """One line: round number, gamma, then accepted / rejected / [correction] / [+bonus]."""
    k = rnd.accepted
    parts = [style.accepted(visible(t)) for t in rnd.proposed_text[:k]]
    parts += [style.rejected(visible(t)) for t in rnd.proposed_text[k:]]
    parts.append(style.correction(visible(rnd.correction_text), rnd.bonus))
    head = style.dim(f"round {rnd.index + 1:>3}  γ={rnd.gamma:<2} {k}/{len(rnd.proposed)} ok ")
    return head + " ".join(parts)


def format_summary(summary: dict, title: str = "") -> str:
    lines = [title] if title else []
    for key, label, fmt in SUMMARY_ROWS:
        value = summary.get(key)
        text = "n/a" if value is None else fmt.format(value)
        lines.append(f"  {label:<30} {text:>10}")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specviz", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in [
        ("generate", "run speculative decoding and print every round"),
        ("compare", "run autoregressive and speculative decoding on the same prompt"),
    ]:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--prompt", required=True)
        p.add_argument("--raw", action="store_true", help="use the prompt as is, without the chat template")
        p.add_argument("--gamma", type=int, default=4, help="draft length, 1..32")
        p.add_argument("--policy", default="constant", choices=["constant", "heuristic"])
        p.add_argument("--drafter", default="model", choices=["model", "ngram"])
        p.add_argument("--max-new-tokens", type=int, default=64)
        p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
        p.add_argument("--top-p", type=float, default=1.0)
        p.add_argument("--top-k", type=int, default=0)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
        p.add_argument("--pair", choices=["default", "tiny"], help="a named pair (default: default)")
        p.add_argument("--draft", help="draft model: HF id, local folder or .gguf file")
        p.add_argument("--target", help="target model: HF id, local folder or .gguf file")
        p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
        p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
        p.add_argument("--json", type=Path, help="write the trace(s) as JSON to this file")
        p.add_argument("--quiet", action="store_true", help="print no rounds, only the summary")
    return parser


def _config(args: argparse.Namespace) -> RunConfig:
    return RunConfig(
        prompt=args.prompt,
        chat=not args.raw,
        gamma=args.gamma,
        policy=args.policy,
        drafter=args.drafter,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        stop=list(args.stop),
    )


def _write_json(path: Path, payload: dict) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(payload, ensure_ascii=False, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def _stream(decoding, style: Style, quiet: bool) -> Trace:
    for rnd in decoding:
        if not quiet:
            print(format_round(rnd, style), flush=True)
    return decoding.trace


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    style = Style(color=sys.stdout.isatty() and "NO_COLOR" not in os.environ)
    from specviz.compare import compare
    from specviz.engine import autoregressive, speculative, validate
    from specviz.models import load_pair

    try:
        config = _config(args)
        validate(config)  # fail on bad settings before a minute of model loading
        if args.json is not None and not args.json.parent.is_dir():
            raise BadInput(f"--json: folder {args.json.parent} does not exist")
        progress, bar = _progress_printer()
        try:
            pair = load_pair(args.pair, args.draft, args.target, args.device, args.dtype, progress)
        finally:
            if bar is not None:
                bar.close()
        print(style.dim(f"{pair.draft_name} → {pair.target_name} · {pair.dtype} on {pair.device} · "
                        f"loaded in {pair.load_ms / 1000:.1f} s"), file=sys.stderr)
        if args.command == "generate":
            sd = _stream(speculative(pair, config), style, args.quiet)
            print("\n" + sd.output_text)
            print("\n" + format_summary(sd.summary, "speculative decoding"))
            if args.json:
                _write_json(args.json, sd.to_dict())
            return 0
        ar_config = RunConfig(**{**config.__dict__, "stop": list(config.stop)})
        ar = _stream(autoregressive(pair, ar_config), style, quiet=True)
        sd = _stream(speculative(pair, config), style, args.quiet)
        result = compare(ar, sd, pair.tokenizer)
        print("\n" + sd.output_text)
        print("\n" + format_summary(ar.summary, "autoregressive (target alone)"))
        print(format_summary(sd.summary, f"speculative (gamma {config.gamma})"))
        speedup = "n/a" if result.speedup is None else f"{result.speedup:.2f}x"
        print(f"\n  {'speedup':<30} {speedup:>10}")
        print(f"  {'identical':<30} {str(result.identical):>10}")
        if not result.identical:
            print("  " + result.explanation)
        if args.json:
            _write_json(args.json, {
                "autoregressive": ar.to_dict(),
                "speculative": sd.to_dict(),
                "identical": result.identical,
                "speedup": result.speedup,
                "first_difference": result.first_difference,
                "explanation": result.explanation,
            })
        return 0
    except SpecvizError as exc:
        print(f"specviz: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specviz: interrupted", file=sys.stderr)
        return 130
