"""What a forward pass costs on this machine: the latency model the schedules replay with.

A ``LatencyModel`` holds, for one pair on one device in one dtype at one context length:

* ``draft_ms[B]``: one draft forward of 1 new token for each of B sequences at once
  (B = 1 is plain drafting; B > 1 is SSD's batch of branches);
* ``draft_read_ms[k]``: one draft forward over k new tokens of one sequence (k = 2: the
  first pass of a round after a bonus token reads the last drafted token and the bonus;
  SSD's glue pass reads a whole block);
* ``verify_ms[k]``: one target forward over k new tokens (k = gamma + 1 in a verify pass,
  k = 1 for a plain autoregressive step);
* the two prefills (each model's first pass reads the prompt) and the per-round
  bookkeeping (sampling, rollback) that is on no forward pass;
* for a target on a server, ``network_ms``: each request's time outside the server's
  compute (network, HTTP, its queue), before the pass.

Lookups between measured points interpolate linearly; beyond the last point they
extrapolate from the last two (never below the last measured value).

``from_trace`` reads a LatencyModel off one real run; ``latency_model`` builds one from the
rows that ``specviz.measure.forward_costs.measure`` times. Pure: no torch.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable
import dataclasses
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
    draft_read_ms: dict[int, float] = field(default_factory=dict)  # k > 1 new tokens, 1 sequence -> ms
    draft_prefill_ms: float = 0.0
    target_prefill_ms: float = 0.0
    overhead_ms: float = 0.0  # per round, on no forward pass (sampling, rollback)
    network_ms: float = 0.0  # per target request to a server, outside its compute (0: a local target)
    context_length: int = 0
    source: str = ""  # "measured" or "from a trace"
    meta: dict[str, Any] = field(default_factory=dict)  # pair, device, dtype, measured_at, ...

    def draft(self, batch: int = 1) -> float:
        """One draft forward for ``batch`` sequences, one new token each."""
        return _interpolate(self.draft_ms, batch)

    def draft_read(self, tokens: int) -> float:
        """One draft forward over ``tokens`` new tokens of one sequence. Unmeasured (a model
        read off an older file), a batch of as many one-token sequences stands in: the same
        rows through every weight matrix."""
        if tokens <= 1:
            return self.draft(1)
        if not self.draft_read_ms:
            return self.draft(tokens)
        return _interpolate({1: self.draft(1), **self.draft_read_ms}, tokens)

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
            "draft_read_ms": {str(k): v for k, v in sorted(self.draft_read_ms.items())},
            "draft_prefill_ms": self.draft_prefill_ms,
            "target_prefill_ms": self.target_prefill_ms,
            "overhead_ms": self.overhead_ms,
            "network_ms": self.network_ms,
            "context_length": self.context_length,
            "source": self.source,
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LatencyModel":
        return cls(
            draft_ms={int(k): float(v) for k, v in data["draft_ms"].items()},
            verify_ms={int(k): float(v) for k, v in data["verify_ms"].items()},
            draft_read_ms={int(k): float(v) for k, v in data.get("draft_read_ms", {}).items()},
            draft_prefill_ms=float(data.get("draft_prefill_ms", 0.0)),
            target_prefill_ms=float(data.get("target_prefill_ms", 0.0)),
            overhead_ms=float(data.get("overhead_ms", 0.0)),
            network_ms=float(data.get("network_ms", 0.0)),
            context_length=int(data.get("context_length", 0)),
            source=str(data.get("source", "")),
            meta=dict(data.get("meta", {})),
        )


def with_rtt(costs: LatencyModel, rtt_ms: float) -> LatencyModel:
    """``costs`` with ``rtt_ms`` more network before every target request: a server that much
    farther away (the Parallel page's round-trip slider; bench/round_trip.py checks it)."""
    return dataclasses.replace(costs, network_ms=costs.network_ms + rtt_ms) if rtt_ms else costs


def from_trace(trace) -> LatencyModel:
    """A latency model read off one real speculative run: its mean draft pass and its
    mean verify pass, each by the number of tokens read, its two prefills, and its
    bookkeeping per round (the run's clock time on no forward pass and on no remote
    target's request: sampling, rollbacks, the engine's own work between passes and rounds,
    spread evenly), and a remote target's mean ``network`` span per request. Means, not
    medians: a replay adds passes up, and a sum is n times the mean
    (on a busy machine a median drops the slow passes a run really paid for). Batched draft
    costs are unknown from a run; they are taken as B times one pass (an upper bound) until
    measured (``specviz.measure.forward_costs.measure``)."""
    reads: dict[int, list[float]] = {}
    by_k: dict[int, list[float]] = {}
    for e in trace.events:
        if e.kind == "draft_forward":
            reads.setdefault(max(1, len(e.tokens)), []).append(e.duration_ms)
        elif e.kind in ("verify_forward", "target_forward"):
            by_k.setdefault(len(e.tokens), []).append(e.duration_ms)
    drafts = reads.pop(1, [])
    prefill = {e.lane: e.duration_ms for e in trace.events if e.kind == "prefill"}
    network = [e.duration_ms for e in trace.events if e.kind == "network"]
    busy = sum(e.duration_ms for e in trace.events if e.is_forward) + sum(network)
    one = statistics.fmean(drafts) if drafts else 0.0
    verify = {k: statistics.fmean(v) for k, v in by_k.items()}
    if not verify:
        raise ValueError("the trace has no target passes to read costs from")
    return LatencyModel(
        draft_ms={1: one, 2: 2 * one},
        verify_ms=verify,
        draft_read_ms={k: statistics.fmean(v) for k, v in reads.items()},
        draft_prefill_ms=prefill.get("draft", 0.0),
        target_prefill_ms=prefill.get("target", 0.0),
        overhead_ms=max(0.0, trace.wall_ms - busy) / len(trace.rounds) if trace.rounds else 0.0,
        network_ms=statistics.fmean(network) if network else 0.0,
        context_length=len(trace.prompt_ids) + len(trace.output_ids),
        source="from a trace",
        meta={"pair": f"{trace.config.draft} -> {trace.config.target}", "device": trace.config.device,
              "dtype": trace.config.dtype},
    )


GridPoint = tuple[str, int, int]  # (model: "draft" | "target", batch B, new tokens k)


def latency_model(
    rows: Iterable[dict[str, Any]],
    draft_prefill_ms: float = 0.0,
    target_prefill_ms: float = 0.0,
    overhead_ms: float = 0.0,
    meta: dict[str, Any] | None = None,
) -> LatencyModel:
    """A LatencyModel from measured rows: ``draft_ms[B]`` from the draft's k = 1 rows,
    ``draft_read_ms[k]`` from its batch-1 rows of k > 1, ``verify_ms[k]`` from the target's
    batch-1 rows (other rows, e.g. a curve grid's, are ignored). The prefills and the per-round overhead are not forward passes over the fixed
    context, so they come from elsewhere (a trace: ``from_trace``), or stay 0.
    ``meta`` (e.g. the cache file's, from ``load_or_measure``) is kept, and gives the context
    length."""
    rows = list(rows)
    draft = {int(r["batch"]): float(r["ms"]) for r in rows
             if r["model"] == "draft" and int(r["tokens"]) == 1}
    verify = {int(r["tokens"]): float(r["ms"]) for r in rows
              if r["model"] == "target" and int(r["batch"]) == 1}
    reads = {int(r["tokens"]): float(r["ms"]) for r in rows
             if r["model"] == "draft" and int(r["batch"]) == 1 and int(r["tokens"]) > 1}
    if not draft:
        raise ValueError("no draft rows with 1 new token: the draft's cost is unknown")
    if not verify:
        raise ValueError("no target rows at batch 1: the verify cost is unknown")
    meta = dict(meta or {})
    return LatencyModel(
        draft_ms=draft,
        verify_ms=verify,
        draft_read_ms=reads,
        draft_prefill_ms=float(draft_prefill_ms),
        target_prefill_ms=float(target_prefill_ms),
        overhead_ms=float(overhead_ms),
        context_length=int(meta.get("context_length", 0)),
        source="measured",
        meta=meta,
    )


def curve_series(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, int], dict[int, float]]:
    """Measured rows as curves: (model, batch) -> {new tokens k: ms}, both sorted."""
    out: dict[tuple[str, int], dict[int, float]] = {}
    for r in sorted(rows, key=lambda r: (r["model"], int(r["batch"]), int(r["tokens"]))):
        out.setdefault((str(r["model"]), int(r["batch"])), {})[int(r["tokens"])] = float(r["ms"])
    return out
