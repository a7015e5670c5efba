"""One table of the numbers a run is measured by, each defined once.

A ``Metric`` has its key (the summary key, as the serving engines name it), a short
label, a help text, the history-table column it fills, and the one formatter that turns
its value into text. The CLI summary, the Live stats and the run history all read this
table, and every number shown anywhere is formatted here: the same stored value always
reads the same. Labels and help texts are English, marked with ``N_``: the app shows
them through its ``_``, the CLI as they are.

Beside the table, the counts behind the rates (``token_counts``, ``position_counts``: per
draft position, drafted, judged and accepted), the theory's α as estimated from a run
(``alpha_estimate``), and a prompt's reading time estimated from an earlier read
(``prefill_estimate_ms``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Callable

from specviz.analysis import theory
from specviz.record.i18n import MILLISECONDS, N_, SECONDS, Translator, in_units
from specviz.record.run_trace import Event, Round, Trace, summarize

DASH = "–"


# --- formatters --------------------------------------------------------------------------


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt_ms(ms: float | None, tr: Translator = N_) -> str:
    """Milliseconds for people: 0.8 ms, 12 ms, 1.24 s, 83 s (``tr``'s unit words: 12 毫秒, 1.24 秒)."""
    if _missing(ms):
        return DASH
    if ms < 10:
        return tr(MILLISECONDS).format(ms=f"{ms:.1f}")
    if ms < 1000:
        return tr(MILLISECONDS).format(ms=f"{ms:.0f}")
    if ms < 10_000:
        return tr(SECONDS).format(s=f"{ms / 1000:.2f}")
    return tr(SECONDS).format(s=f"{ms / 1000:.0f}")


def percent(x: float | None) -> int | None:
    """A fraction as a whole percentage (the one rounding of every percentage shown)."""
    return None if _missing(x) else round(100 * x)


def fmt_pct(x: float | None) -> str:
    """A fraction as a percentage: 0.456 -> 46%."""
    p = percent(x)
    return DASH if p is None else f"{p}%"


def fmt_num(x: float | None, digits: int = 2) -> str:
    """A number with ``digits`` decimals."""
    return DASH if _missing(x) else f"{x:.{digits}f}"


def fmt_int(x: int | None) -> str:
    """A count."""
    return DASH if _missing(x) else f"{round(x):d}"


def fmt_speedup(x: float | None) -> str:
    """A speedup factor: ×1.23."""
    return DASH if _missing(x) else f"×{x:.2f}"


def _delta_num(digits: int) -> Callable[[float, float, Translator], str]:
    return lambda now, before, tr: f"{round(now, digits) - round(before, digits):+.{digits}f}"


def _delta_pct(now: float, before: float, tr: Translator = N_) -> str:
    return tr(N_("{points:+d} pts")).format(points=percent(now) - percent(before))


# --- the table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """One number a run is measured by."""

    key: str  # summary key (or row key for the race's numbers)
    label: str  # short label: Live stats, CLI summary, history table header (English: the app shows tr(label))
    column: str  # history row / CSV column
    help: str  # English, marked for translation like the label
    fmt: Callable[[Any], str]
    delta_fmt: Callable[[float, float, Translator], str] | None = None

    def text(self, value: Any, tr: Translator = N_) -> str:
        """The value as shown everywhere ("–" when missing); ``tr`` gives a duration its unit words."""
        return DASH if _missing(value) else in_units(self.fmt(value), tr)

    def delta(self, now: Any, before: Any, tr: Translator = N_) -> str | None:
        """The change between two runs, of the values as shown (None when not defined);
        ``tr`` translates its unit."""
        if self.delta_fmt is None or _missing(now) or _missing(before):
            return None
        return self.delta_fmt(now, before, tr)


_TABLE = (
    Metric("new_tokens", N_("New tokens"), "new tokens",
           N_("Tokens the run added to the output: the accepted ones plus the target's own token each round "
              "(fewer when the output stops inside a round)."), fmt_int),
    Metric("rounds", N_("Rounds"), "rounds", N_("Target verify passes (one per round)."), fmt_int),
    Metric("wall_ms", N_("Wall time"), "wall ms",
           N_("Engine time from the start to the last token, on the engine's own clock (animation excluded)."),
           fmt_ms),
    Metric("tokens_per_second", N_("Tokens / s"), "tok/s",
           N_("New tokens ÷ wall time, on the engine's own clock (animation excluded)."),
           lambda x: fmt_num(x, 1), _delta_num(1)),
    Metric("ttft_ms", N_("Time to first token"), "ttft ms",
           N_("Engine time until the first new token: reading the prompt plus the first round."), fmt_ms),
    Metric("acceptance_rate", N_("Acceptance"), "acceptance",
           N_("Acceptance rate: accepted draft tokens ÷ drafted tokens. Not the per-token α of the formulas: "
              "a round stops at its first rejection."), fmt_pct, _delta_pct),
    Metric("drafted_tokens", N_("Drafted"), "drafted",
           N_("Tokens the draft proposed, all rounds together (the last round drafts fewer when the token budget "
              "runs out)."), fmt_int),
    Metric("accepted_tokens", N_("Accepted"), "accepted",
           N_("Drafted tokens the target accepted, all rounds together."), fmt_int),
    Metric("mean_acceptance_length", N_("Tokens / round"), "mean acceptance length",
           N_("Mean acceptance length = 1 + accepted ÷ rounds: tokens won per target pass."),
           lambda x: fmt_num(x, 2)),
    Metric("draft_forward_ms_median", N_("Draft pass (median)"), "draft forward ms",
           N_("Median time of one draft forward pass (the prompt-reading first pass left out)."), fmt_ms),
    Metric("target_forward_ms_median", N_("Target pass (median)"), "target forward ms",
           N_("Median time of one target forward pass (the prompt-reading first pass left out)."), fmt_ms),
    Metric("cost_ratio_c", N_("Cost ratio c"), "cost ratio c",
           N_("Median draft pass ÷ median target pass. Speculation can only pay off when α > c, where α is the "
              "per-token acceptance probability (not the acceptance rate) and c the cost ratio."),
           lambda x: fmt_num(x, 2)),
    Metric("draft_idle_fraction", N_("Draft idle"), "draft idle",
           N_("Share of wall time the draft runs no forward pass: it waits while the target verifies."), fmt_pct),
    Metric("target_idle_fraction", N_("Target idle"), "target idle",
           N_("Share of wall time the target runs no forward pass: it waits while the draft guesses."), fmt_pct),
    Metric("overhead_ms", N_("Overhead"), "overhead ms",
           N_("Wall time inside no forward pass: sampling, cache rollback, Python."), fmt_ms),
    Metric("speedup", N_("Speedup"), "speedup",
           N_("Speculative tok/s ÷ target-alone tok/s (real engine timings)."), fmt_speedup),
    Metric("ar_tokens_per_second", N_("Target alone"), "AR tok/s",
           N_("Tokens / s of the target decoding alone on the same prompt and settings."),
           lambda x: fmt_num(x, 1)),
)
METRICS: dict[str, Metric] = {m.key: m for m in _TABLE}

CLI_SUMMARY = (
    "new_tokens", "rounds", "wall_ms", "tokens_per_second", "ttft_ms", "acceptance_rate",
    "mean_acceptance_length", "draft_forward_ms_median", "target_forward_ms_median", "cost_ratio_c",
    "draft_idle_fraction", "target_idle_fraction", "overhead_ms",
)
LIVE_STATS = (  # two by two beside the timeline; the idle shares last, next to the lanes
    "tokens_per_second", "acceptance_rate", "mean_acceptance_length", "cost_ratio_c",
    "rounds", "overhead_ms", "draft_idle_fraction", "target_idle_fraction",
)
LIVE_COUNTS = ("drafted_tokens", "accepted_tokens", "new_tokens")  # the counts behind the rates, in one tile
HISTORY_METRICS = (
    "new_tokens", "rounds", "tokens_per_second", "acceptance_rate", "mean_acceptance_length", "cost_ratio_c",
    "draft_idle_fraction", "target_idle_fraction", "ar_tokens_per_second", "speedup",
)


def metric(key: str) -> Metric:
    """The metric named ``key`` (KeyError for an unknown one)."""
    return METRICS[key]


def text(key: str, value: Any, tr: Translator = N_) -> str:
    """``value`` of metric ``key``, as shown everywhere (``tr``: the page's unit words)."""
    return METRICS[key].text(value, tr)


def live_summary(trace: Trace) -> dict[str, Any]:
    """The trace's summary when the run has ended, else one computed from the rounds so far."""
    return trace.summary if trace.summary else summarize(trace)


def token_counts(trace: Trace) -> dict[str, int]:
    """The counts behind the rates: ``drafted_tokens`` (proposed, all rounds), ``accepted_tokens``
    and ``new_tokens`` (emitted). acceptance_rate = accepted ÷ drafted and
    mean_acceptance_length = 1 + accepted ÷ rounds; emitted = accepted + rounds unless the
    output stopped inside a round. Two runs can share 4.00 tokens per round with 80% and 76%
    acceptance when the last round drafts fewer."""
    return {
        "drafted_tokens": sum(len(r.proposed) for r in trace.rounds),
        "accepted_tokens": sum(r.accepted for r in trace.rounds),
        "new_tokens": len(trace.output_ids),
    }


def model_gamma(trace: Trace) -> int:
    """The one γ the closed form takes for a run: its constant γ (a tree's depth); under a policy
    that varies it from round to round (heuristic, confidence), the mean drafted length, rounded,
    at least 1: the draft passes a round cost on average."""
    if trace.config.policy == "constant" or trace.config.is_tree or not trace.rounds:
        return trace.config.gamma
    return max(1, round(sum(len(r.proposed) for r in trace.rounds) / len(trace.rounds)))


def varying_gamma_note(policy: str, is_tree: bool = False, tr: Translator = N_) -> str:
    """After a sentence that prices a run with one γ (``model_gamma``): where the policy varied it,
    that the mean drafted length stood in for it, with a leading space (empty under a constant γ)."""
    if is_tree or policy == "constant":
        return ""
    if policy == "confidence":
        return " " + tr(N_("(The draft stopped early where it was unsure, so γ changed from round to round: the "
                           "mean is shown, and the formula, which assumes one γ, is only a guide.)"))
    return " " + tr(N_("(γ changed from round to round under the heuristic policy: the mean is shown.)"))


def alpha_estimate(trace: Trace) -> float | None:
    """The per-token α of the closed form (``specviz.analysis.theory``): the probability, the same at
    every draft position and independent of the others, that the target accepts a draft
    token. Estimated as the α whose expected tokens per round (1 − α^(γ+1)) ÷ (1 − α)
    equals the run's measured mean acceptance length, 1 + accepted ÷ rounds
    (``theory.alpha_from_mean_length``), γ the run's ``model_gamma``. Not the acceptance rate, accepted ÷ drafted: a
    round stops at its first rejection, and the rate counts the positions after it as
    drafted and not accepted. None for a run with no rounds or no draft."""
    if trace.config.mode != "speculative" or not trace.rounds or trace.config.gamma < 1:
        return None
    length = live_summary(trace).get("mean_acceptance_length")
    return None if _missing(length) else theory.alpha_from_mean_length(length, model_gamma(trace))


@dataclass(frozen=True)
class PositionCounts:
    """Draft position ``position`` (1-based) over a run's rounds: ``drafted`` rounds proposed
    a token there, the target ``judged`` it in those whose accepted prefix reached it (a
    round stops at its first rejection), and ``accepted`` kept it."""

    position: int
    drafted: int
    judged: int
    accepted: int

    @property
    def rate(self) -> float:
        """vLLM's per-position acceptance: accepted at position i ÷ rounds that drafted position i
        (vLLM: ``num_accepted_tokens_per_pos[i]`` ÷ ``num_drafts``, every draft being γ long).
        A round rejected before i counts as not accepted at i. With every round drafting γ
        the rates cannot rise with i (accepted at i implies accepted at i − 1); a round that
        drafted fewer counts only at the positions it drafted, so then a later rate can be higher."""
        return self.accepted / self.drafted


def position_counts(rounds: list[Round]) -> list[PositionCounts]:
    """One ``PositionCounts`` per draft position up to the longest draft; ``rate`` of each
    is the trace summary's ``per_position_acceptance``."""
    longest = max((len(r.proposed) for r in rounds), default=0)
    return [
        PositionCounts(
            position=i,
            drafted=sum(len(r.proposed) >= i for r in rounds),
            judged=sum(len(r.proposed) >= i and r.accepted >= i - 1 for r in rounds),
            accepted=sum(r.accepted >= i for r in rounds),
        )
        for i in range(1, longest + 1)
    ]


def short_drafts(trace: Trace) -> int:
    """Rounds that drafted fewer than γ tokens (the token budget or the context ran out, or
    the draft proposed an end-of-text token): the ones that can make a later position's
    acceptance higher than an earlier one's."""
    return sum(len(r.proposed) < trace.config.gamma for r in trace.rounds)


# --- reading the prompt: the prefill, timed on this machine ------------------------------


def prefill_reads(events: Iterable[Event]) -> dict[str, tuple[int, float]]:
    """lane -> (tokens, ms) of each model's prompt-reading first pass among ``events`` (a
    trace's, or its first round's: the ``prefill`` events; the draft's reads the prompt, the
    target's the prompt and the first round's drafts)."""
    return {e.lane: (len(e.tokens), e.duration_ms) for e in events if e.kind == "prefill" and e.tokens}


def prefill_estimate_ms(tokens: int, measured: tuple[int, float]) -> float:
    """The time one model takes to read ``tokens`` prompt tokens, from one measured read of
    (tokens, ms) on the same machine: ms × tokens ÷ measured tokens. Linear in the length;
    attention's share grows with it, so a long prompt timed from a short one takes
    somewhat longer than this says (ValueError for a read of no tokens)."""
    n, ms = measured
    if n <= 0 or ms < 0 or tokens < 0:
        raise ValueError(f"a prefill estimate needs a measured read of some tokens; got {measured!r} for {tokens}")
    return ms * tokens / n
