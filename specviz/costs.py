"""What a forward pass costs on this machine: the latency model the schedules replay with.

A ``LatencyModel`` holds, for one pair on one device in one dtype at one context length:

* ``draft_ms[B]``: one draft forward of 1 new token for each of B sequences at once
  (B = 1 is plain drafting; B > 1 is SSD's batch of branches);
* ``verify_ms[k]``: one target forward over k new tokens (k = gamma + 1 in a verify pass,
  k = 1 for a plain autoregressive step);
* the two prefills (each model's first pass reads the prompt) and the per-round
  bookkeeping (sampling, rollback) that is on no forward pass.

Lookups between measured points interpolate linearly; beyond the last point they
extrapolate from the last two (never below the last measured value).
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass, field
from typing import Any


def _interpolate(points: dict[int, float], x: float) -> float:
    """Piecewise-linear through ``points`` (x -> ms); flat below the first, extrapolated past the last."""
    if not points:
        raise ValueError("no measured points")
    xs = sorted(points)
    if x <= xs[0]:
        return points[xs[0]]
    if x >= xs[-1]:
        if len(xs) == 1:
            return points[xs[-1]]
        a, b = xs[-2], xs[-1]
        slope = (points[b] - points[a]) / (b - a)
        return max(points[b], points[b] + slope * (x - b))
    i = bisect.bisect_right(xs, x)
    a, b = xs[i - 1], xs[i]
    return points[a] + (points[b] - points[a]) * (x - a) / (b - a)


@dataclass
class LatencyModel:
    """Forward-pass costs (ms) of one pair on one device and dtype, at one context length."""

    draft_ms: dict[int, float]  # batch of B sequences, 1 new token each -> ms
    verify_ms: dict[int, float]  # k new tokens in one target pass -> ms
    draft_prefill_ms: float = 0.0
    target_prefill_ms: float = 0.0
    overhead_ms: float = 0.0  # per round, on no forward pass (sampling, rollback)
    context_length: int = 0
    source: str = ""  # "measured" or "from a trace"
    meta: dict[str, Any] = field(default_factory=dict)  # pair, device, dtype, measured_at, ...

    def draft(self, batch: int = 1) -> float:
        """One draft forward for ``batch`` sequences."""
        return _interpolate(self.draft_ms, batch)

    def verify(self, tokens: int) -> float:
        """One target forward over ``tokens`` new tokens."""
        return _interpolate(self.verify_ms, tokens)

    @property
    def c(self) -> float:
        """The cost ratio: one draft pass over one one-token target pass."""
        return self.draft(1) / self.verify(1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "draft_ms": {str(k): v for k, v in sorted(self.draft_ms.items())},
            "verify_ms": {str(k): v for k, v in sorted(self.verify_ms.items())},
            "draft_prefill_ms": self.draft_prefill_ms,
            "target_prefill_ms": self.target_prefill_ms,
            "overhead_ms": self.overhead_ms,
            "context_length": self.context_length,
            "source": self.source,
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LatencyModel":
        return cls(
            draft_ms={int(k): float(v) for k, v in data["draft_ms"].items()},
            verify_ms={int(k): float(v) for k, v in data["verify_ms"].items()},
            draft_prefill_ms=float(data.get("draft_prefill_ms", 0.0)),
            target_prefill_ms=float(data.get("target_prefill_ms", 0.0)),
            overhead_ms=float(data.get("overhead_ms", 0.0)),
            context_length=int(data.get("context_length", 0)),
            source=str(data.get("source", "")),
            meta=dict(data.get("meta", {})),
        )


def from_trace(trace) -> LatencyModel:
    """A latency model read off one real speculative run: its median draft pass, its
    verify passes by the number of tokens they read, its two prefills and its median
    bookkeeping per round. Batched draft costs are unknown from a run; they are
    taken as B times one pass (an upper bound) until measured (``specviz.costs.measure``)."""
    drafts = [e.duration_ms for e in trace.events if e.kind == "draft_forward"]
    by_k: dict[int, list[float]] = {}
    for e in trace.events:
        if e.kind in ("verify_forward", "target_forward"):
            by_k.setdefault(len(e.tokens), []).append(e.duration_ms)
    prefill = {e.lane: e.duration_ms for e in trace.events if e.kind == "prefill"}
    per_round = []
    for r in trace.rounds:
        busy = sum(e.duration_ms for e in r.events if e.is_forward)
        per_round.append(max(0.0, r.end_ms - r.start_ms - busy))
    one = statistics.median(drafts) if drafts else 0.0
    verify = {k: statistics.median(v) for k, v in by_k.items()}
    if not verify:
        raise ValueError("the trace has no target passes to read costs from")
    return LatencyModel(
        draft_ms={1: one, 2: 2 * one},
        verify_ms=verify,
        draft_prefill_ms=prefill.get("draft", 0.0),
        target_prefill_ms=prefill.get("target", 0.0),
        overhead_ms=statistics.median(per_round) if per_round else 0.0,
        context_length=len(trace.prompt_ids) + len(trace.output_ids),
        source="from a trace",
        meta={"pair": f"{trace.config.draft} -> {trace.config.target}", "device": trace.config.device,
              "dtype": trace.config.dtype},
    )
