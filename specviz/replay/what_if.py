"""A recorded greedy run, replayed under the serial, PEARL and SSD schedules, for the
Parallel page and ``specviz schedules``: the replays, the target-alone time they are
compared with, and the check of the serial replay against the real run.

The check is what makes the what-if numbers worth reading: the serial replay of a run
must give the same rounds as the run itself (same proposals, same accepted counts) and
its wall time within ``WALL_TOLERANCE``; the PEARL and SSD replays use the same
mechanics and the same costs.

A run times only the passes it made; a replay at other settings asks for more
(``missing_passes``): SSD's batched branch pass, its glue pass over a whole block, a verify
of another length, the target's one-token pass. ``specviz.measure.branch_costs`` measures
just those, as ratios to a pass the run did time (``references``), and ``fill_in`` scales
the ratios to the run's own pass.
"""

from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass

from specviz.record.errors import BadInput
from specviz.record.run_trace import Trace
from specviz.replay import latency, schedules
from specviz.replay.latency import GridPoint, LatencyModel

WALL_TOLERANCE = 0.10


NOT_REPLAYABLE = {
    "autoregressive": "it is a target-alone run",
    "sampling": ("it is a sampling run: at temperature > 0 each schedule draws different random numbers, "
                 "so the same run cannot be replayed token for token; the schedules are shown for greedy runs"),
    "ngram": "its drafter is the n-gram lookup, which has no draft model to overlap",
    "no_ranks": "it holds no draft ranks (record it again with this version of specviz)",
    "too_short": ("it is too short: past reading the prompt the draft or the target made no pass, so nothing "
                  "times a replay's passes (generate a few more tokens)"),
}


def why_not_replayable(trace: Trace) -> str | None:
    """None when ``trace`` can be replayed under other schedules; else a key of NOT_REPLAYABLE."""
    cfg = trace.config
    if cfg.mode != "speculative":
        return "autoregressive"
    if cfg.temperature > 0:
        return "sampling"
    if cfg.drafter != "model":
        return "ngram"
    if not trace.draft_ranks or len(trace.draft_ranks) != len(trace.output_ids):
        return "no_ranks"
    if cfg.policy == "confidence" and len(trace.draft_top_q) != len(trace.output_ids):
        return "no_ranks"
    if set(references(trace)) != {"draft", "target"}:
        return "too_short"
    return None


def settings_for(trace: Trace, gamma: int | None = None, policy: str | None = None,
                 fanout: int = 2, fanout_mode: str = "uniform") -> schedules.Settings:
    cfg = trace.config
    return schedules.Settings(gamma=gamma or cfg.gamma, policy=policy or cfg.policy, confidence=cfg.confidence,
                              max_new_tokens=cfg.max_new_tokens, eos_ids=frozenset(trace.eos_ids),
                              fanout=fanout, fanout_mode=fanout_mode)


def replay(trace: Trace, costs: LatencyModel, settings: schedules.Settings) -> dict[str, schedules.ScheduleResult]:
    """``trace`` under every schedule (BadInput when it cannot be replayed)."""
    if (why := why_not_replayable(trace)) is not None:
        raise BadInput(f"this run cannot be replayed under other schedules: {NOT_REPLAYABLE[why]}", "trace")
    return schedules.simulate_all(replay_input(trace), costs, settings)


def replay_input(trace: Trace) -> schedules.ReplayInput:
    """What a replay reads of ``trace``: its tokens, the draft's ranks and top candidates of
    them, its prompt, its draft's blocks (``draft_chains``) and its settings."""
    return schedules.ReplayInput(trace.draft_ranks, trace.draft_top, trace.output_ids, trace.prompt_ids,
                                 draft_chains(trace), trace.config, trace.draft_top_q, draft_chain_probs(trace))


def draft_chains(trace: Trace) -> dict[int, list[int]]:
    """Output position -> the block the run's draft proposed there (its greedy chain from the
    correct prefix, wrong tokens and an early EOS included): what a replay knows of the draft
    past its first wrong token."""
    chains, at = {}, 0
    for rnd in trace.rounds:
        if rnd.proposed and at < len(trace.output_ids):
            chains[at] = list(rnd.proposed)
        at += len(rnd.emitted)
    return chains




def draft_chain_probs(trace: Trace) -> dict[int, list[float]]:
    """Output position -> the draft's q of each token of the block it proposed there (the
    confidence policy's stops past a wrong token)."""
    probs, at = {}, 0
    for rnd in trace.rounds:
        if rnd.proposed and at < len(trace.output_ids):
            probs[at] = list(rnd.draft_probs)
        at += len(rnd.emitted)
    return probs


def own_draft(trace: Trace) -> bool:
    """Whether the run's draft differs from the pair's plain draft (a cut head, int8 weights):
    then measured draft passes do not apply, and the run's own are used."""
    cfg = trace.config
    return bool(cfg.draft_vocab) or cfg.draft_quant != "none"


def costs_for(trace: Trace, measured: tuple[list, dict] | None) -> LatencyModel:
    """The costs to replay ``trace`` with: the ``measured`` forward passes (rows, meta, from
    ``specviz.measure.forward_costs.load_or_measure`` or ``forward_costs.cached`` at
    ``specviz.measure.branch_costs.replay_context``) with the run's own
    prefills and bookkeeping, and the run's own draft pass where its draft is not the plain
    one (``own_draft``); without ``measured``, everything from the run (``latency.from_trace``)."""
    own = latency.from_trace(trace)
    if measured is None:
        return own
    rows, meta = measured
    model = latency.latency_model(rows, own.draft_prefill_ms, own.target_prefill_ms, own.overhead_ms, meta)
    model.network_ms = own.network_ms
    if own_draft(trace):
        model.draft_ms = dict(own.draft_ms)
    return model


def target_alone_ms(costs: LatencyModel, n: int) -> float:
    """The target alone for n tokens, estimated from the costs: its prefill (which also
    gives the first token), then one one-token pass and the bookkeeping per token, each
    pass a request of its own to a remote target (``network_ms``). The one-token pass must
    be known (a run that never verified one token did not time it: ``missing_passes``
    names it); a lookup would take the shortest pass the run made."""
    return (costs.network_ms + costs.target_prefill_ms
            + max(0, n - 1) * (costs.network_ms + costs.verify(1) + costs.overhead_ms))


# --- what a replay needs that the run did not time -----------------------------------------

ALONE = "alone"  # missing_passes' key for the target-alone estimate


class _Asked:
    """Stands in for a LatencyModel and notes every pass a replay asks the cost of (each
    1 ms): which passes a replay makes depends on the run's tokens, never on their cost."""

    draft_prefill_ms = target_prefill_ms = overhead_ms = 1.0
    network_ms = 0.0

    def __init__(self) -> None:
        self.points: set[GridPoint] = set()

    def draft(self, batch: int = 1) -> float:
        self.points.add(("draft", int(batch), 1))
        return 1.0

    def draft_read(self, tokens: int) -> float:
        self.points.add(("draft", 1, max(1, int(tokens))))
        return 1.0

    def verify(self, tokens: int) -> float:
        self.points.add(("target", 1, int(tokens)))
        return 1.0


def asked_passes(trace: Trace, settings: schedules.Settings) -> dict[str, set[GridPoint]]:
    """By schedule name: the (model, batch, new tokens) passes its replay of ``trace`` costs."""
    asked = {}
    recorded = replay_input(trace)
    for name, schedule in schedules.SCHEDULES.items():
        probe = _Asked()
        schedule(recorded, probe, settings)
        asked[name] = probe.points
    return asked


def timed_passes(trace: Trace) -> collections.Counter:
    """The passes a run timed, by (model, batch, new tokens): how many of each."""
    seen: collections.Counter = collections.Counter()
    for e in trace.events:
        if e.kind == "draft_forward":
            seen["draft", 1, max(1, len(e.tokens))] += 1
        elif e.kind in ("verify_forward", "target_forward"):
            seen["target", 1, len(e.tokens)] += 1
    return seen


def references(trace: Trace) -> dict[str, GridPoint]:
    """Per model, the pass the run timed most often (ties: the longer): what a quick
    measurement times beside the passes it adds, and scales them by."""
    refs: dict[str, GridPoint] = {}
    for point, count in sorted(timed_passes(trace).items(), key=lambda pc: (pc[1], pc[0][2])):
        refs[point[0]] = point
    return refs


def with_alone(costs: LatencyModel, trace: Trace, alone: Trace | None) -> LatencyModel:
    """``costs`` with the target's one-token pass taken from ``alone``, the target-alone run
    raced with ``trace`` (its mean one-token pass), where ``trace`` made none itself."""
    if alone is None or ("target", 1, 1) in timed_passes(trace):
        return costs
    ones = [e.duration_ms for e in alone.events if e.kind == "target_forward" and len(e.tokens) == 1]
    if not ones:
        return costs
    return dataclasses.replace(costs, verify_ms={**costs.verify_ms, 1: sum(ones) / len(ones)})


def missing_passes(trace: Trace, settings: schedules.Settings, measured: bool,
                   alone: Trace | None = None) -> dict[str, set[GridPoint]]:
    """By schedule name, and ``ALONE`` for the target-alone estimate (its one-token pass): the
    passes a replay of ``trace`` at ``settings`` costs that are not known. Known: the passes
    the run timed, those between two it timed (a pass over k tokens, between one over fewer
    and one over more: the lookup interpolates), and the target's one-token pass when
    ``alone`` (its raced target-alone run) timed it (``with_alone``); with ``measured`` (this
    machine's whole grid, ``specviz.measure.forward_costs.LATENCY_GRID``, at the run's context) every target pass,
    and every draft pass unless the run's draft is not the plain one (``own_draft``): then
    its batched passes are still unknown. A pass beyond what was timed is never guessed:
    the lookup would take the nearest one (a run's shortest verify for a one-token pass) or
    stretch the last two (B single passes for a batch of B)."""
    run = set(timed_passes(trace)) | ({("target", 1, 1)} & set(timed_passes(alone)) if alone is not None else set())

    def known(point: GridPoint) -> bool:
        model, batch, k = point
        ks = [t for m, b, t in run if (m, b) == (model, batch)]
        between = bool(ks) and min(ks) <= k <= max(ks)
        return between or measured and (model == "target" or not own_draft(trace))

    asked = {**asked_passes(trace, settings), ALONE: set() if alone is not None else {("target", 1, 1)}}
    return {name: {p for p in points if not known(p)} for name, points in asked.items()}


def fill_in(costs: LatencyModel, trace: Trace, ratios: dict[GridPoint, float]) -> LatencyModel:
    """``costs`` with the passes of ``ratios`` (each a pass's time over its model's
    ``references`` pass, measured together) scaled to that reference's cost in ``costs``.
    A batched draft pass filled in replaces the B-single-passes stand-in of ``from_trace``."""
    refs = references(trace)
    out = dataclasses.replace(costs, draft_ms=dict(costs.draft_ms), verify_ms=dict(costs.verify_ms),
                              draft_read_ms=dict(costs.draft_read_ms))
    if any(m == "draft" and b > 1 for m, b, _ in ratios):
        out.draft_ms = {1: costs.draft(1)}
    base = {"draft": costs.draft_read(refs["draft"][2]) if "draft" in refs else None,
            "target": costs.verify(refs["target"][2]) if "target" in refs else None}
    for (model, batch, k), ratio in sorted(ratios.items()):
        ms = base[model] * ratio
        if model == "target":
            out.verify_ms[k] = ms
        elif batch > 1:
            out.draft_ms[batch] = ms
        elif k > 1:
            out.draft_read_ms[k] = ms
        else:
            out.draft_ms[1] = ms
    return out


def overlap_bound(costs: LatencyModel, gamma: int) -> float:
    """The most running the draft and the target at once can gain over serial per round:
    (γ t_draft + T(γ + 1)) / max(γ t_draft, T(γ + 1)), at most 2, when the two are equal
    (T: a remote target's request, its network time included)."""
    block, verify = gamma * costs.draft(1), costs.network_ms + costs.verify(gamma + 1)
    return (block + verify) / max(block, verify)












@dataclass
class SerialCheck:
    """The serial replay of a run against the run itself."""

    real_rounds: int
    sim_rounds: int
    rounds_match: bool  # every round: the same number proposed, accepted and emitted
    real_wall_ms: float
    sim_wall_ms: float

    @property
    def wall_error(self) -> float:
        return self.sim_wall_ms / self.real_wall_ms - 1 if self.real_wall_ms else 0.0

    @property
    def ok(self) -> bool:
        return self.rounds_match and abs(self.wall_error) <= WALL_TOLERANCE

    def to_dict(self) -> dict:
        return {"rounds": self.real_rounds, "wall_ms": self.real_wall_ms, "simulated_rounds": self.sim_rounds,
                "simulated_wall_ms": self.sim_wall_ms, "rounds_match": self.rounds_match,
                "wall_error": self.wall_error}


def check_serial(trace: Trace, costs: LatencyModel) -> SerialCheck:
    """Replay ``trace`` serially with its own gamma and policy and compare round by round."""
    sim = replay(trace, costs, settings_for(trace))["serial"]
    shape = [(len(r.proposed), r.accepted, r.emitted) for r in trace.rounds]
    sim_shape = [(len(r.proposed), r.accepted, r.emitted) for r in sim.trace.rounds]
    return SerialCheck(len(trace.rounds), len(sim.trace.rounds), shape == sim_shape, trace.wall_ms, sim.wall_ms)
