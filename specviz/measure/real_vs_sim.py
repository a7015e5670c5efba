"""An overlapped schedule (PEARL or SSD) run for real beside its simulation, on the same
prompt: the code behind ``specviz overlap`` and the Parallel page's "for real" sections.

1. A greedy serial speculative run (the engine): the baseline, the tokens the real run must
   reproduce (``identical``), and the costs of its passes. It runs with one intra-op thread
   (``SERIAL_THREADS``), as each lane of the real run does, so that the simulation is timed
   with passes of the same kind and the gap shows what running the two at once costs (the
   shared memory bandwidth and caches, the scheduler), not the second core one pass loses
   (docs/design.md, "Run for real: one thread a lane").
2. The passes the simulation needs and the serial run did not time (SSD's batched branch
   passes, its glue pass over a block, a verify of another length), measured now beside a
   pass the run did time (``specviz.measure.branch_costs.measure_ratios``) and scaled to it
   (``specviz.replay.what_if.fill_in``). A remote target's passes cannot be timed here.
3. SSD's budget: fitted to the verify from those costs (``ssd_real.fit_budget``), or a
   user's fan-out.
4. The schedule run for real (``pearl_real.pearl_run``, ``ssd_real.ssd_run``) and simulated
   (``specviz.replay.schedules``) with the same settings; and where the two differ, by how
   much each part of a round did (``Gap``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from specviz.engine.decode import speculative
from specviz.measure import branch_costs
from specviz.measure.forward_costs import DRAFT_BATCHES
from specviz.measure.pearl_real import pearl_run
from specviz.measure.ssd_real import Budget, SsdRun, fit_budget, ssd_run, user_budget
from specviz.measure.two_threads import OverlapRun
from specviz.models.pair import ModelPair
from specviz.record.errors import BadInput
from specviz.record.limits import MAX_BRANCHES
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Trace
from specviz.replay import latency, schedules, what_if
from specviz.replay.latency import GridPoint, LatencyModel

OVERLAPS = ("pearl", "ssd")
SERIAL_THREADS = 1  # intra-op threads of the serial run (two_threads.THREADS: each lane's)


@dataclass(frozen=True)
class Numbers:
    """A schedule's totals, measured or simulated."""

    wall_ms: float
    rounds: int
    hit_rate: float | None
    tokens_per_second: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class RealVsSim:
    """A schedule run for real and simulated, with the serial run they both start from."""

    schedule: str
    real: OverlapRun
    sim: schedules.ScheduleResult
    serial: Trace
    costs: LatencyModel
    settings: schedules.Settings
    budget: Budget | None = None
    measured_passes: list[GridPoint] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        """The real run's tokens are the serial run's."""
        return self.real.trace.output_ids == self.serial.output_ids

    @property
    def measured(self) -> Numbers:
        t = self.real.trace
        return Numbers(t.wall_ms, len(t.rounds), self.real.hit_rate if isinstance(self.real, SsdRun) else None,
                       t.summary["tokens_per_second"])

    @property
    def simulated(self) -> Numbers:
        return Numbers(self.sim.wall_ms, self.sim.rounds, self.sim.hit_rate, self.sim.tokens_per_second)

    @property
    def wall_error(self) -> float:
        """Measured over simulated wall time, minus 1."""
        return self.real.trace.wall_ms / self.sim.wall_ms - 1 if self.sim.wall_ms else 0.0

    def gap(self) -> Gap:
        return gap(self)

    def to_dict(self) -> dict:
        real = self.real
        out = {"schedule": self.schedule, "measured": self.measured.to_dict(), "simulated": self.simulated.to_dict(),
               "identical": self.identical,
               "serial": {"wall_ms": self.serial.wall_ms, "rounds": len(self.serial.rounds),
                          "tokens_per_second": self.serial.summary["tokens_per_second"]},
               "wall_error": self.wall_error, "gamma": self.settings.gamma,
               "threads": {"pinned": real.pinned, "cores": list(real.cores), "note": real.note},
               "target_url": self.serial.config.target_url, "gap_ms": self.gap().to_dict(),
               "costs": self.costs.to_dict()}
        if isinstance(real, SsdRun):
            out["ssd"] = {"budget": self.budget.to_dict() if self.budget else None, "fanout_mode": real.fanout_mode,
                          "alpha": real.alpha, "measured": real.stats(),
                          "simulated": {"hit_rate": self.sim.hit_rate,
                                        "branches_per_round": self.sim.branches_per_round,
                                        "wasted_draft_ms": self.sim.wasted_draft_ms}}
        return out


def serial_run(pair: ModelPair, config: RunConfig, threads: int | None = SERIAL_THREADS) -> Trace:
    """The greedy serial speculative run at ``config``'s gamma, constant policy: the baseline, with
    ``threads`` intra-op threads (None: torch's current count); the count is restored after."""
    if config.temperature != 0:
        raise BadInput("a schedule run for real is greedy only: set temperature 0", "temperature")
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return speculative(pair, dataclasses.replace(config, policy="constant", stop=[])).run()
    finally:
        torch.set_num_threads(before)


def run_alpha(serial: Trace) -> float:
    """The per-token acceptance the geometric fan-out assumes: the serial run's share of output
    positions where the draft's top token was the target's (as the replay takes it)."""
    ranks = serial.draft_ranks
    return ranks.count(0) / len(ranks) if ranks else 0.5


def branch_points(gamma: int, max_branches: int = MAX_BRANCHES) -> set[GridPoint]:
    """The draft passes a budget fit reads: batches of branches, and the glue pass over gamma + 1."""
    return {("draft", b, 1) for b in DRAFT_BATCHES if b <= max_branches} | {("draft", 1, gamma + 1)}


def costs_for(pair: ModelPair, serial: Trace, settings: schedules.Settings, costs: LatencyModel | None = None,
              fit: bool = True, ratios: dict[GridPoint, float] | None = None
              ) -> tuple[LatencyModel, list[GridPoint]]:
    """``costs`` (default: read off the serial run) with the passes the replays at ``settings``
    need and (``fit``) a budget fit reads, where the run did not time them: measured now, each
    beside the run's own pass of its model (as a ratio to it). ``ratios``: ratios measured
    before for this pair and context (reused; the new ones are added to it). Returns the costs
    and the passes measured or reused."""
    costs = costs if costs is not None else latency.from_trace(serial)
    wanted = set().union(*what_if.missing_passes(serial, settings, False).values()) - {("target", 1, 1)}
    if fit:
        wanted |= branch_points(settings.gamma, settings.max_branches)
    here = sorted(p for p in wanted - set(what_if.timed_passes(serial)) if p[0] == "draft" or pair.target is not None)
    if not here:
        return costs, []
    ratios = ratios if ratios is not None else {}
    if todo := [p for p in here if p not in ratios]:
        ctx = branch_costs.replay_context(serial, pair.context_length)
        before = torch.get_num_threads()
        torch.set_num_threads(SERIAL_THREADS)  # the passes of the serial run they are scaled to
        try:
            ratios.update(branch_costs.measure_ratios(pair, serial.config, ctx, todo, what_if.references(serial)))
        finally:
            torch.set_num_threads(before)
    return what_if.fill_in(costs, serial, {p: ratios[p] for p in here}), here


def real_vs_simulated(pair: ModelPair, config: RunConfig, schedule: str, fanout: int | None = None,
                      fanout_mode: str = "uniform", max_branches: int = MAX_BRANCHES,
                      serial: Trace | None = None, costs: LatencyModel | None = None,
                      cores: tuple[int, int] | None = None, warm_up: bool = False,
                      ratios: dict[GridPoint, float] | None = None) -> RealVsSim:
    """``schedule`` ("pearl" or "ssd") run for real at ``config``'s gamma and simulated from the
    serial run's costs (module docstring). ``serial``: a serial run of the same prompt and
    settings already made (else one is run now); ``costs``: its costs already filled in (else
    read off it and measured; ``ratios``: ``costs_for``'s, reused). SSD: ``fanout`` per outcome, or None to fit the budget to the
    verify. ``warm_up``: first a short serial run and a short real run (8 tokens), untimed, so
    that neither timed run pays for the process's first passes."""
    if schedule not in OVERLAPS:
        raise BadInput(f"schedule {schedule!r} is not one of {', '.join(OVERLAPS)}", "schedule")
    config = dataclasses.replace(config, policy="constant", stop=[])
    if warm_up:
        short = dataclasses.replace(config, max_new_tokens=min(8, config.max_new_tokens))
        serial_run(pair, short)
        (pearl_run(pair, short, cores) if schedule == "pearl" else
         ssd_run(pair, short, user_budget(None, config.gamma, 2, max_branches), fanout_mode, None, cores))
    serial = serial if serial is not None else serial_run(pair, config)
    gamma = config.gamma
    alpha = run_alpha(serial)
    base = dataclasses.replace(what_if.settings_for(serial, gamma=gamma, policy="constant"),
                               fanout=fanout or 2, fanout_mode=fanout_mode, max_branches=max_branches, alpha=alpha)
    costs, measured = costs_for(pair, serial, base, costs, fit=schedule == "ssd", ratios=ratios)
    if schedule == "pearl":
        real = pearl_run(pair, config, cores)
        sim = what_if.replay(serial, costs, base)["pearl"]
        return RealVsSim("pearl", real, sim, serial, costs, base, None, measured)
    budget = (user_budget(costs, gamma, fanout, max_branches) if fanout else fit_budget(costs, gamma, max_branches))
    real = ssd_run(pair, config, budget, fanout_mode, alpha, cores)
    if budget.branches:
        settings = budget.settings(base.max_new_tokens, base.eos_ids, fanout_mode, alpha)
        sim = what_if.replay(serial, costs, settings)["ssd"]
    else:  # no branch fits: plain speculative decoding, every round a miss
        settings = base
        plain = what_if.replay(serial, costs, base)["serial"]
        sim = dataclasses.replace(plain, name="ssd", hits=0, misses=plain.rounds, hit_rate=0.0,
                                  branches_per_round=None, wasted_draft_ms=0.0)
    return RealVsSim("ssd", real, sim, serial, costs, settings, budget, measured)


# --- the gap, taken apart --------------------------------------------------------------------------

@dataclass(frozen=True)
class Gap:
    """Measured minus simulated wall time (ms), by where it arose, summed over the rounds both
    have (``rounds_differ``: the real run's rounds are not the simulation's; the rest is then
    in ``other``):

    * ``verify``: the target's passes (local: slower on one core beside the draft than the
      serial run's passes on every core; remote: the server's compute);
    * ``network``: a remote target's network, HTTP and queue time;
    * ``draft_before``: the draft's passes before a verify started (SSD: drafting after a miss);
    * ``draft_after``: the draft's passes past the verify's end (SSD: the branch batch's real
      cost beyond what fits in the verify; PEARL: a block that outlasted the verify);
    * ``other``: bookkeeping, the prefills, thread hand-offs."""

    verify: float
    network: float
    draft_before: float
    draft_after: float
    other: float
    rounds_differ: bool

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _round_parts(rnd) -> dict[str, float]:
    """One round's time by part: its verify (or prefill) pass, network, the draft's passes
    before the verify started, and the draft's passes after it ended (the part of the branch
    work, or PEARL's drafting, that outlasted the verify)."""
    target = [e for e in rnd.events if e.lane == "target" and e.is_forward]
    net = sum(e.duration_ms for e in rnd.events if e.kind == "network")
    v0 = min((e.start_ms for e in rnd.events if e.lane == "target" and (e.is_forward or e.kind == "network")),
             default=rnd.start_ms)
    v1 = max((e.end_ms for e in target), default=v0)
    drafts = [e for e in rnd.events if e.lane == "draft" and e.is_forward]
    before = sum(min(e.end_ms, v0) - e.start_ms for e in drafts if e.start_ms < v0)
    after = max([v1, *(e.end_ms for e in drafts)]) - v1
    return {"verify": sum(e.duration_ms for e in target), "network": net, "draft_before": before,
            "draft_after": after}


def gap(result: RealVsSim) -> Gap:
    """Where the measured run's wall time differs from the simulation's (``Gap``)."""
    real, sim = result.real.trace.rounds, result.sim.trace.rounds
    parts = {"verify": 0.0, "network": 0.0, "draft_before": 0.0, "draft_after": 0.0}
    for a, b in zip(real, sim):
        pa, pb = _round_parts(a), _round_parts(b)
        for key in parts:
            parts[key] += pa[key] - pb[key]
    total = result.real.trace.wall_ms - result.sim.wall_ms
    same = [(r.accepted, r.emitted) for r in real] == [(r.accepted, r.emitted) for r in sim]
    return Gap(**parts, other=total - sum(parts.values()), rounds_differ=not same)
