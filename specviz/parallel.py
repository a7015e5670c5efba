"""A recorded greedy run, replayed under the serial, PEARL and SSD schedules, for the
Parallel page and ``specviz schedules``: the replays, the target-alone time they are
compared with, and the check of the serial replay against the real run.

The check is what makes the what-if numbers worth reading: the serial replay of a run
must give the same rounds as the run itself (same proposals, same accepted counts) and
its wall time within ``WALL_TOLERANCE``; the PEARL and SSD replays use the same
mechanics and the same costs.
"""

from __future__ import annotations

from dataclasses import dataclass

from specviz import costs as C
from specviz import schedules
from specviz.costs import LatencyModel
from specviz.errors import BadInput
from specviz.trace import Trace

WALL_TOLERANCE = 0.10


NOT_REPLAYABLE = {
    "autoregressive": "it is a target-alone run",
    "sampling": ("it is a sampling run: at temperature > 0 each schedule draws different random numbers, "
                 "so the same run cannot be replayed token for token; the schedules are shown for greedy runs"),
    "ngram": "its drafter is the n-gram lookup, which has no draft model to overlap",
    "no_ranks": "it holds no draft ranks (record it again with this version of specviz)",
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
    return None


def settings_for(trace: Trace, gamma: int | None = None, policy: str | None = None,
                 fanout: int = 2, fanout_mode: str = "uniform") -> schedules.Settings:
    cfg = trace.config
    return schedules.Settings(gamma=gamma or cfg.gamma, policy=policy or cfg.policy,
                              max_new_tokens=cfg.max_new_tokens, eos_ids=frozenset(trace.eos_ids),
                              fanout=fanout, fanout_mode=fanout_mode)


def replay(trace: Trace, costs: LatencyModel, settings: schedules.Settings) -> dict[str, schedules.ScheduleResult]:
    """``trace`` under every schedule (BadInput when it cannot be replayed)."""
    if (why := why_not_replayable(trace)) is not None:
        raise BadInput(f"this run cannot be replayed under other schedules: {NOT_REPLAYABLE[why]}", "trace")
    return schedules.simulate_all(trace.draft_ranks, trace.draft_top, trace.output_ids, costs, settings,
                                  config=trace.config, prompt_ids=trace.prompt_ids, chains=draft_chains(trace))


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


def replay_context(trace: Trace, pair_context: int | None = None) -> int:
    """The context (tokens) the forward-pass costs of ``trace``'s replay are measured at."""
    return C.run_context(len(trace.prompt_ids), len(trace.output_ids), pair_context)


def own_draft(trace: Trace) -> bool:
    """Whether the run's draft differs from the pair's plain draft (a cut head, int8 weights):
    then measured draft passes do not apply, and the run's own are used."""
    cfg = trace.config
    return bool(cfg.draft_vocab) or cfg.draft_quant != "none"


def costs_for(trace: Trace, measured: tuple[list, dict] | None) -> LatencyModel:
    """The costs to replay ``trace`` with: the ``measured`` forward passes (rows, meta, from
    ``costs.load_or_measure`` or ``costs.cached`` at ``replay_context``) with the run's own
    prefills and bookkeeping, and the run's own draft pass where its draft is not the plain
    one (``own_draft``); without ``measured``, everything from the run (``costs.from_trace``)."""
    own = C.from_trace(trace)
    if measured is None:
        return own
    rows, meta = measured
    model = C.latency_model(rows, own.draft_prefill_ms, own.target_prefill_ms, own.overhead_ms, meta)
    if own_draft(trace):
        model.draft_ms = dict(own.draft_ms)
    return model


def target_alone_ms(costs: LatencyModel, n: int) -> float:
    """The target alone for n tokens, estimated from the costs: its prefill (which also
    gives the first token), then one one-token pass and the bookkeeping per token."""
    return costs.target_prefill_ms + max(0, n - 1) * (costs.verify(1) + costs.overhead_ms)


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
