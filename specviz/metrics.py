"""One table of the numbers a run is measured by, each defined once.

A ``Metric`` has its key (the summary key, as the serving engines name it), a short
label, a help text, the history-table column it fills, and the one formatter that turns
its value into text. The CLI summary, the Live stats and the run history all read this
table, and every number shown anywhere is formatted here: the same stored value always
reads the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from specviz.trace import Trace, summarize

DASH = "–"


# --- formatters --------------------------------------------------------------------------


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt_ms(ms: float | None) -> str:
    """Milliseconds for people: 0.8 ms, 12 ms, 1.24 s, 83 s."""
    if _missing(ms):
        return DASH
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 10_000:
        return f"{ms / 1000:.2f} s"
    return f"{ms / 1000:.0f} s"


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


def _delta_num(digits: int) -> Callable[[float, float], str]:
    return lambda now, before: f"{round(now, digits) - round(before, digits):+.{digits}f}"


def _delta_pct(now: float, before: float) -> str:
    return f"{percent(now) - percent(before):+d} pts"


# --- the table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """One number a run is measured by."""

    key: str  # summary key (or row key for the race's numbers)
    label: str  # short label: Live stats, CLI summary, history table header
    column: str  # history row / CSV column
    help: str
    fmt: Callable[[Any], str]
    delta_fmt: Callable[[float, float], str] | None = None

    def text(self, value: Any) -> str:
        """The value as shown everywhere ("–" when missing)."""
        return DASH if _missing(value) else self.fmt(value)

    def delta(self, now: Any, before: Any) -> str | None:
        """The change between two runs, of the values as shown (None when not defined)."""
        if self.delta_fmt is None or _missing(now) or _missing(before):
            return None
        return self.delta_fmt(now, before)


ALPHA_VS_C = ("Speculation can only pay off when α > c, where α is the per-token acceptance probability "
              "(not the acceptance rate) and c the cost ratio.")

_TABLE = (
    Metric("new_tokens", "New tokens", "new tokens", "Tokens the run added to the output.", fmt_int),
    Metric("rounds", "Rounds", "rounds", "Target verify passes (one per round).", fmt_int),
    Metric("wall_ms", "Wall time", "wall ms",
           "Engine time from the start to the last token, on the engine's own clock (animation excluded).", fmt_ms),
    Metric("tokens_per_second", "Tokens / s", "tok/s",
           "New tokens ÷ wall time, on the engine's own clock (animation excluded).",
           lambda x: fmt_num(x, 1), _delta_num(1)),
    Metric("ttft_ms", "Time to first token", "ttft ms",
           "Engine time until the first new token: reading the prompt plus the first round.", fmt_ms),
    Metric("acceptance_rate", "Acceptance", "acceptance",
           "Acceptance rate: accepted draft tokens ÷ drafted tokens. Not the per-token α of the formulas: "
           "a round stops at its first rejection.", fmt_pct, _delta_pct),
    Metric("mean_acceptance_length", "Tokens / round", "mean acceptance length",
           "Mean acceptance length = 1 + accepted ÷ rounds: tokens won per target pass.",
           lambda x: fmt_num(x, 2)),
    Metric("draft_forward_ms_median", "Draft pass (median)", "draft forward ms",
           "Median time of one draft forward pass (the prompt-reading first pass left out).", fmt_ms),
    Metric("target_forward_ms_median", "Target pass (median)", "target forward ms",
           "Median time of one target forward pass (the prompt-reading first pass left out).", fmt_ms),
    Metric("cost_ratio_c", "Cost ratio c", "cost ratio c",
           "Median draft pass ÷ median target pass. " + ALPHA_VS_C, lambda x: fmt_num(x, 2)),
    Metric("draft_idle_fraction", "Draft idle", "draft idle",
           "Share of wall time the draft runs no forward pass: it waits while the target verifies.", fmt_pct),
    Metric("target_idle_fraction", "Target idle", "target idle",
           "Share of wall time the target runs no forward pass: it waits while the draft guesses.", fmt_pct),
    Metric("overhead_ms", "Overhead", "overhead ms",
           "Wall time inside no forward pass: sampling, cache rollback, Python.", fmt_ms),
    Metric("speedup", "Speedup", "speedup",
           "Speculative tok/s ÷ target-alone tok/s (real engine timings).", fmt_speedup),
    Metric("ar_tokens_per_second", "Target alone", "AR tok/s",
           "Tokens / s of the target decoding alone on the same prompt and settings.", lambda x: fmt_num(x, 1)),
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
HISTORY_METRICS = (
    "new_tokens", "rounds", "tokens_per_second", "acceptance_rate", "mean_acceptance_length", "cost_ratio_c",
    "draft_idle_fraction", "target_idle_fraction", "ar_tokens_per_second", "speedup",
)


def metric(key: str) -> Metric:
    """The metric named ``key`` (KeyError for an unknown one)."""
    return METRICS[key]


def text(key: str, value: Any) -> str:
    """``value`` of metric ``key``, as shown everywhere."""
    return METRICS[key].text(value)


def live_summary(trace: Trace) -> dict[str, Any]:
    """The trace's summary when the run has ended, else one computed from the rounds so far."""
    return trace.summary if trace.summary else summarize(trace)
