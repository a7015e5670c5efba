"""Command line: ``specviz generate|compare ...`` (or ``python -m specviz ...``).

Exit codes: 0 ok, 2 bad input (any SpecvizError, or a bad flag), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from specviz import metrics
from specviz.errors import BadInput, SpecvizError
from specviz.marks import Span, printable, round_spans
from specviz.trace import Round, RunConfig, Trace

SUMMARY_ROWS = metrics.CLI_SUMMARY  # the metrics a run's summary prints, in order (specviz.metrics)


class Style:
    """ANSI marks of a round's spans (specviz.marks). With colour off only the marks remain
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


def build_parser() -> argparse.ArgumentParser:
    """The flags, their choices taken from the registries the engine itself uses."""
    from specviz.draft_head import SIZES
    from specviz.drafters import DRAFTERS, MAX_GAMMA, POLICIES
    from specviz.models import DEVICES, DTYPES, PAIRS

    parser = argparse.ArgumentParser(prog="specviz", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in [
        ("generate", "run speculative decoding and print every round"),
        ("compare", "race speculative decoding against the target alone on the same prompt"),
        ("schedules", "run greedy speculative decoding, then replay the run under serial, PEARL and SSD"),
    ]:
        p = sub.add_parser(name, help=help_text)
        if name == "schedules":
            from specviz.schedules import FANOUT_MODES

            p.add_argument("--fanout", type=int, default=2, help="SSD: branches per verification outcome")
            p.add_argument("--fanout-mode", default="uniform", choices=list(FANOUT_MODES))
            p.add_argument("--costs", default="measured", choices=["measured", "trace"],
                           help="forward-pass costs: measured on this machine (cached), or read off the run")
        p.add_argument("--prompt", required=True)
        p.add_argument("--raw", action="store_true", help="use the prompt as is, without the chat template")
        p.add_argument("--gamma", type=int, default=4, help=f"draft length, 1..{MAX_GAMMA}")
        p.add_argument("--policy", default="constant", choices=list(POLICIES))
        p.add_argument("--drafter", default="model", choices=list(DRAFTERS))
        p.add_argument("--draft-vocab", type=int, default=0, metavar="N",
                       help="cut the draft's LM head to the N most frequent token ids (FR-Spec), e.g. "
                            f"{', '.join(str(n) for n in SIZES)}; 0 = the full head")
        p.add_argument("--max-new-tokens", type=int, default=64)
        p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
        p.add_argument("--top-p", type=float, default=1.0)
        p.add_argument("--top-k", type=int, default=0)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
        p.add_argument("--pair", choices=list(PAIRS), help="a named pair (default: default)")
        p.add_argument("--draft", help="draft model: HF id, local folder or .gguf file")
        p.add_argument("--target", help="target model: HF id, local folder or .gguf file")
        p.add_argument("--device", default="auto", choices=list(DEVICES))
        p.add_argument("--dtype", default="auto", choices=["auto", *DTYPES])
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
        draft_vocab=args.draft_vocab,
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


def _contention_note(*traces: Trace) -> str | None:
    jobs = sorted({job for t in traces for job in t.contention})
    if not jobs:
        return None
    return f"timed under contention ({'; '.join(jobs)} ran at the same time): timings are pessimistic"


def _compare(pair, config: RunConfig, style: Style, args: argparse.Namespace) -> None:
    """Race speculative decoding against the target alone (specviz.race), speculative first."""
    from specviz.race import Race

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
    if args.json:
        _write_json(args.json, {
            "speculative": sd.to_dict(),
            "autoregressive": ar.to_dict(),
            **result.to_dict(),
        })


def _schedules(pair, config: RunConfig, style: Style, args: argparse.Namespace) -> None:
    """A real greedy run, replayed under every schedule (specviz.parallel), with the serial
    replay checked against the run itself."""
    from specviz import costs as C
    from specviz import parallel
    from specviz.engine import speculative

    if config.temperature > 0:
        raise BadInput("schedules replays greedy runs only: use --temperature 0", "temperature")
    trace = _stream(speculative(pair, config), style, args.quiet)
    own = C.from_trace(trace)
    model = own
    if args.costs == "measured":
        progress, bar = _progress_printer()
        try:
            rows, meta = C.load_or_measure(pair, progress=lambda f, m: progress(m, f))
        finally:
            if bar is not None:
                bar.close()
        model = C.latency_model(rows, own.draft_prefill_ms, own.target_prefill_ms, own.overhead_ms, meta)
    settings = parallel.settings_for(trace, fanout=args.fanout, fanout_mode=args.fanout_mode)
    results = parallel.replay(trace, model, settings)
    check = parallel.check_serial(trace, model)
    alone = parallel.target_alone_ms(model, len(trace.output_ids))
    serial_ms = results["serial"].wall_ms
    rows_out = {}
    print(f"\n{'schedule':<8} {'tok/s':>7} {'rounds':>6} {'×alone':>7} {'×serial':>7} {'draft idle':>10} "
          f"{'target idle':>11} {'SSD hits':>8}")
    for name, r in results.items():
        rows_out[name] = {
            "tokens_per_second": r.tokens_per_second, "rounds": r.rounds, "wall_ms": r.wall_ms,
            "speedup_vs_target_alone": alone / r.wall_ms, "speedup_vs_serial": serial_ms / r.wall_ms,
            "draft_idle_fraction": r.draft_idle_fraction, "target_idle_fraction": r.target_idle_fraction,
            "hit_rate": r.hit_rate, "branches_per_round": r.branches_per_round,
            "wasted_draft_ms": r.wasted_draft_ms,
        }
        hits = "" if r.hit_rate is None else f"{r.hit_rate:.0%}"
        print(f"{name:<8} {r.tokens_per_second:7.2f} {r.rounds:6d} {alone / r.wall_ms:7.2f} "
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    style = Style(color=sys.stdout.isatty() and "NO_COLOR" not in os.environ)
    from specviz.engine import speculative
    from specviz.models import load_pair
    from specviz.validate import check_settings

    try:
        config = _config(args)
        check_settings(config)  # fail on bad settings before a minute of model loading
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
    except SpecvizError as exc:
        print(f"specviz: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specviz: interrupted", file=sys.stderr)
        return 130
