"""The record of one decoding run: Events inside Rounds inside a Trace.

Everything is plain data (dataclasses), serialisable to JSON and back, so a
run can be recorded once and replayed with no model loaded.

Timings are wall clock in milliseconds relative to the run start. A *forward*
event is a model forward pass; everything else on the clock is overhead.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from specviz.record import schema
from specviz.record.contention import Contention
from specviz.record.run_config import FORWARD_KINDS, SCHEMA_VERSION, RunConfig


@dataclass
class Event:
    """One timed step on one lane: a forward pass, a sampling step, a rollback."""

    lane: str
    kind: str
    start_ms: float
    end_ms: float
    tokens: list[int] = field(default_factory=list)

    @property
    def duration_ms(self) -> float:
        return self.end_ms - self.start_ms

    @property
    def is_forward(self) -> bool:
        return self.kind in FORWARD_KINDS


@dataclass
class TreeNode:
    """One node of a round's draft tree (specviz/engine/tree.py). The root is the last verified
    token and is not a node; nodes come parents first. ``q`` is the draft's probability of the
    token under its parent's row, ``p`` the target's (both warped as the rule saw them; at
    temperature 1 in a greedy run); ``step`` is the draft pass that proposed it (1 = the
    first), ``accepted`` whether it lies on the accepted path."""

    token: int
    parent: int  # index of the parent node in Round.tree; -1: a child of the root
    q: float = 0.0
    p: float = 0.0
    accepted: bool = False
    text: str = ""
    step: int = 1


def tree_depths(nodes: list[TreeNode]) -> list[int]:
    """Each node's depth (1 = a child of the root)."""
    depth: list[int] = []
    for n in nodes:
        depth.append(1 if n.parent < 0 else depth[n.parent] + 1)
    return depth


@dataclass
class Round:
    """One draft-then-verify round (or one plain target step when gamma == 0).

    ``proposed`` holds the draft's tokens, ``draft_probs``/``target_probs`` the draft's
    (q) and target's (p) probability of each. The first ``accepted`` are kept, ``rejected`` holds the
    rest, and ``correction`` is the target's own token: a correction after a
    rejection, a *bonus* when every proposed token was accepted. ``emitted`` is
    what the round added to the output (cut at EOS, stop strings or the token
    budget) and ``emitted_text`` the text that added. ``margin`` is the target's top-1 minus top-2 probability at each
    verified position up to the emitted token: a small margin is a near-tie.

    For the p/q inspector, one entry per verified position i (each proposal's, then the
    target's own token's when it follows them all, as in a round with no draft):
    ``candidates[i]`` are token ids (the top 10 under the draft's q_i, the top 10 under
    the target's p_i, the proposed token and, at a sampling rejection, the top 10 of the
    residual), most probable under p first; ``candidate_q[i]`` (empty where the draft
    has no row), ``candidate_p[i]`` and ``candidate_text[i]`` are each one's q, p (both
    warped as the rule saw them; at temperature 1 in a greedy run) and text; probabilities
    to 4 significant digits. In sampling mode ``draws`` holds the uniform draw u_i of each
    judged proposal (x_i kept iff u_i < p_i(x_i) / q_i(x_i): ``target_probs[i] /
    draft_probs[i]``), and after a rejection at position k ``residual_probs`` is
    norm(max(0, p_k - q_k)), the row the correction was drawn from, over ``candidates[k]``.
    Traces recorded before these fields existed load with them empty.

    A tree round (``tree`` not empty) drafted a token tree and verified it in one pass:
    ``proposed`` is then the path the verification walked (the accepted nodes) followed by
    the draft's most probable line below the last of them, so ``accepted``, ``rejected`` and
    the strip read as for a chain; ``tree`` holds every node.

    ``draft_stop`` says why a round proposed fewer than ``gamma`` tokens when a policy made it
    (an EOS or the token budget say so themselves): "confidence", the draft's q of its last
    proposal (``draft_probs[-1]``) fell below the confidence policy's τ.
    """

    index: int
    gamma: int
    proposed: list[int] = field(default_factory=list)
    proposed_text: list[str] = field(default_factory=list)
    draft_probs: list[float] = field(default_factory=list)
    target_probs: list[float] = field(default_factory=list)
    accepted: int = 0
    rejected: list[int] = field(default_factory=list)
    correction: int | None = None
    correction_text: str = ""
    bonus: bool = False
    emitted: list[int] = field(default_factory=list)
    emitted_text: str = ""
    margin: list[float] = field(default_factory=list)
    candidates: list[list[int]] = field(default_factory=list)
    candidate_q: list[list[float]] = field(default_factory=list)
    candidate_p: list[list[float]] = field(default_factory=list)
    candidate_text: list[list[str]] = field(default_factory=list)
    draws: list[float] = field(default_factory=list)
    residual_probs: list[float] = field(default_factory=list)
    tree: list[TreeNode] = field(default_factory=list)
    draft_stop: str = ""
    events: list[Event] = field(default_factory=list)

    @property
    def start_ms(self) -> float:
        return min((e.start_ms for e in self.events), default=0.0)

    @property
    def end_ms(self) -> float:
        return max((e.end_ms for e in self.events), default=0.0)


@dataclass
class Trace:
    """One run: its config, its rounds, its output and its summary statistics."""

    config: RunConfig
    rounds: list[Round] = field(default_factory=list)
    prompt_ids: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    output_text: str = ""
    wall_ms: float = 0.0
    stop_reason: str = ""
    # what competed with the timed work: heavy jobs in other threads (a model load), other processes
    # taking enough of the cores (specviz.record.contention)
    contention: list[Contention] = field(default_factory=list)
    # greedy model-drafter runs: the draft's view of each output position j given the correct
    # prefix: the rank of the emitted token (0 = the draft's top choice) and its top candidates
    draft_ranks: list[int] = field(default_factory=list)
    draft_top: list[list[int]] = field(default_factory=list)
    draft_top_q: list[float] = field(default_factory=list)  # the draft's probability of its top choice there
    eos_ids: list[int] = field(default_factory=list)  # the pair's end-of-sequence ids
    summary: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @property
    def events(self) -> list[Event]:
        """All events in time order."""
        return [e for r in self.rounds for e in r.events]

    def finish(self) -> "Trace":
        """Fill ``summary`` from the rounds; returns self."""
        self.summary = summarize(self)
        return self

    # --- JSON -------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=indent)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(indent=1), encoding="utf-8")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Trace":
        """The trace a JSON value holds, checked against the trace schema (``schema.checked``;
        an older dict is migrated first): BadInput naming the field at fault (``rounds[3].accepted``)
        and its value otherwise. The summary is recomputed from the rounds, never read."""
        d, finished = schema.checked(data)
        trace = cls(
            **{k: v for k, v in d.items() if k not in ("config", "rounds", "contention")},
            config=RunConfig(**d["config"]),
            contention=[Contention(**c) for c in d["contention"]],
            rounds=[Round(**{**r, "events": [Event(**e) for e in r["events"]],
                             "tree": [TreeNode(**n) for n in r["tree"]]}) for r in d["rounds"]],
        )
        return trace.finish() if finished else trace

    @classmethod
    def from_json(cls, text: str) -> "Trace":
        """``from_dict`` of JSON text (BadInput when too big or not JSON)."""
        return cls.from_dict(schema.parse_json(text))

    @classmethod
    def load(cls, path: str | Path) -> "Trace":
        """``from_json`` of a file, its size checked before it is read (BadInput when too big or not
        UTF-8; OSError when it cannot be read)."""
        return cls.from_dict(schema.parse_json(schema.read_file(path)))


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def per_position_acceptance(rounds: list[Round]) -> list[float]:
    """Share of rounds that accepted draft position i, among those that drafted it."""
    longest = max((len(r.proposed) for r in rounds), default=0)
    rates = []
    for i in range(longest):
        drafted = [r for r in rounds if len(r.proposed) > i]
        rates.append(sum(r.accepted > i for r in drafted) / len(drafted))
    return rates


def summarize(trace: Trace) -> dict[str, Any]:
    """Summary statistics with the names serving engines use.

    acceptance_rate = accepted / drafted; mean_acceptance_length = 1 + accepted / rounds;
    cost_ratio_c = median draft forward / median target forward (verify pass in a
    speculative run; the prompt-reading first passes are left out of both medians); idle fraction = share of wall time a lane runs no forward pass;
    overhead_ms = wall time inside no forward pass at all.
    """
    rounds = trace.rounds
    wall = trace.wall_ms
    events = trace.events
    drafted = sum(len(r.proposed) for r in rounds)
    accepted = sum(r.accepted for r in rounds)
    new_tokens = len(trace.output_ids)

    draft_fw = [e.duration_ms for e in events if e.kind == "draft_forward"]
    target_fw = [e.duration_ms for e in events if e.kind in ("verify_forward", "target_forward")]
    d_med, t_med = _median(draft_fw), _median(target_fw)

    def busy(lane: str) -> float:
        return sum(e.duration_ms for e in events if e.lane == lane and e.is_forward)

    forward_total = sum(e.duration_ms for e in events if e.is_forward)
    first = next((r for r in rounds if r.emitted), None)
    return {
        "new_tokens": new_tokens,
        "rounds": len(rounds),
        "wall_ms": wall,
        "tokens_per_second": new_tokens / wall * 1000.0 if wall > 0 else 0.0,
        "acceptance_rate": accepted / drafted if drafted else None,
        "mean_acceptance_length": 1.0 + accepted / len(rounds) if rounds else 0.0,
        "per_position_acceptance": per_position_acceptance(rounds),
        "draft_forward_ms_median": d_med,
        "target_forward_ms_median": t_med,
        "cost_ratio_c": d_med / t_med if d_med is not None and t_med else None,
        "draft_idle_fraction": 1.0 - busy("draft") / wall if wall > 0 else 0.0,
        "target_idle_fraction": 1.0 - busy("target") / wall if wall > 0 else 0.0,
        "overhead_ms": max(0.0, wall - forward_total),
        "ttft_ms": first.end_ms if first is not None else None,
    }


# --- slicing: the run as it stood at some moment ------------------------------------


def is_draft_step(e: Event) -> bool:
    """A drafting step: a draft forward (the first one reads the prompt too) or a lookup."""
    return e.lane == "draft" and e.kind in ("draft_forward", "prefill", "lookup")


def is_verify_step(e: Event) -> bool:
    """The target's pass of a round (the first one reads the prompt too)."""
    return e.lane == "target" and e.kind in ("verify_forward", "target_forward", "prefill")


def rounds_text(rounds: Iterable[Round]) -> str:
    """The output text of these rounds: what each added to the decoded output."""
    return "".join(r.emitted_text for r in rounds)


def trace_upto(trace: Trace, n: int) -> Trace:
    """A copy of ``trace`` holding its first ``n`` rounds, as it stood when round n ended.

    The summary is left empty unless all rounds are kept (``summarize`` computes it)."""
    n = max(0, min(n, len(trace.rounds)))
    if n == len(trace.rounds):
        return trace
    rounds = trace.rounds[:n]
    return replace(
        trace,
        rounds=list(rounds),
        output_ids=[t for r in rounds for t in r.emitted],
        output_text=rounds_text(rounds),
        wall_ms=rounds[-1].end_ms if rounds else 0.0,
        stop_reason="",
        summary={},
    )


def trace_at(trace: Trace, index: int, phase: str) -> Trace:
    """The trace as it stood inside round ``index``: after its drafting ("draft") or after
    its verify pass ("verify"). For drawing the timeline in step with an animated round."""
    if phase not in ("draft", "verify"):
        raise ValueError(f"phase must be draft or verify; got {phase!r}")
    rnd = trace.rounds[index]
    keep = [e for e in rnd.events if is_draft_step(e) or (phase == "verify" and is_verify_step(e))]
    partial = replace(rnd, events=keep)
    before = trace_upto(trace, index)
    wall = max((e.end_ms for e in partial.events), default=before.wall_ms)
    return replace(before, rounds=[*before.rounds, partial], wall_ms=max(wall, before.wall_ms), summary={})
