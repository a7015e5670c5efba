"""Speculative speculative decoding (SSD, Saguaro; Kumar, Dao and May 2026) run for real:
greedy, the draft and the target in two pinned threads (``specviz.measure.two_threads``,
shared with PEARL run for real), or the draft here and the target on a vLLM server.

``specviz.replay.schedules.ssd`` replays a recorded run under SSD with a latency model; this
module runs the same rules on the pair itself, so the two can be compared. Followed from the
reference code, github.com/tanishqkumar/ssd at commit 6ed3022:

* the key of a prepared block is the verification outcome (k accepted, the target's token):
  ``SpeculatorAsync._speculation_request`` (``ssd/engine/speculator_async.py``) sends
  (seq_id, accepted - 1, recovery token), one sequence here, so (k, token);
* while the target verifies a block x_1..x_g, the draft runs one "glue" pass over the last
  verified token and the block (g + 1 tokens: its rows at positions p..p+g) and forks F_k
  branches per outcome k = 0..g: the draft's top F_k tokens at p+k, without the drafted token
  x_{k+1} for k < g (that one would have been accepted), the bonus position as it is for k = g
  (``DraftRunner._build_tree_batch`` with ``get_forked_recovery_tokens_from_logits`` in
  ``ssd/utils/async_helpers/async_spec_helpers.py``); then every branch is drafted gamma
  tokens deep, one batched forward of B = sum F_k sequences per step (``_decode_tree``):
  each branch reads the shared cache up to its own fork point (an attention mask hides the
  block's tokens past it) at its own positions, as the reference's tree mask and
  ``rope_positions`` do;
* F_k comes from the simulation's own allocation (``specviz.replay.schedules.fan_out``:
  uniform, the reference's ``fan_out_list = [async_fan_out] * (K + 1)`` of ``ssd/config.py``,
  or the paper's capped geometric), capped at ``max_branches``;
* when the verify returns (``DraftRunner.hit_cache_and_respond``): a hit, the outcome among
  the branches, takes its prepared block at once; a miss drafts the block after the verify,
  one pass per token, while the target waits (the reference's ``jit_speculate``, its
  default ``--backup jit``). The first round is a miss.

A round takes the longer of the verify and the branch work: as in the reference (its draft
serves the next request only after its tree decode) and the replay. The last round is the
exception: once its verify shows that the run is over, the branches are stopped at their
next step and the run ends there (the replay prepares none in its last round; a real run
cannot know in advance). Rollback and stopping follow the engine (EOS kept and nothing
after it, max_new_tokens, the context; stop strings refused).

The fan-out budget. On a hit, SSD saves a round's drafting; on a miss it pays the drafting
after the verify, as serial does, plus whatever of the branch work outlasted the verify. So a
round costs at most serial's when the branch work fits inside the verify: ``fit_budget``
picks the largest B with glue + gamma * draft(B) <= verify (network included), from measured
costs, as the paper sizes its budget to the verify. B = 0 (nothing fits) is plain
speculative decoding. A user's fan-out overrides it (to see the loss).

Output: greedy, so the target's own tokens; in float32 those of the serial run token for
token (in bf16 a verify over other tokens can round a near-tie differently).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from specviz.engine.acceptance import Sampling, greedy_accept
from specviz.engine.decode import verify
from specviz.engine.drafters import ModelDrafter, Proposal
from specviz.measure import two_threads
from specviz.measure.forward_costs import batch_cache
from specviz.measure.two_threads import OverlapRun
from specviz.models import busy
from specviz.models.kv import Clock, KVModel
from specviz.models.pair import ModelPair
from specviz.record import stopping
from specviz.record.errors import BadInput
from specviz.record.limits import MAX_BRANCHES
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Event, Round, Trace
from specviz.replay.latency import LatencyModel
from specviz.replay.schedules import FANOUT_MODES, Settings, fan_out

SCHEDULE = "ssd"
DEFAULT_FANOUT = 2  # branches per outcome when no budget is fitted (the reference's default is 3)


# --- the budget ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Budget:
    """SSD's branch budget for one gamma: B branches a round (``fanout`` per outcome, capped at
    ``branches``), and what it was fitted to: the verify (network included) and the branch
    work it predicts (glue + gamma batched passes). ``fitted``: chosen by ``fit_budget``;
    else a user's fan-out."""

    gamma: int
    fanout: int  # per outcome (uniform), and fanout * (gamma + 1) the budget before the cap
    branches: int  # the cap: B at most (0: no branches, plain speculative decoding)
    verify_ms: float
    tree_ms: float
    fitted: bool

    @property
    def wanted(self) -> int:
        """fanout * (gamma + 1): the branches the fan-out asks for before the cap."""
        return self.fanout * (self.gamma + 1)

    @property
    def dropped(self) -> int:
        """Branches the cap takes off a full block's outcomes."""
        return max(0, self.wanted - self.branches)

    def settings(self, max_new_tokens: int, eos_ids, fanout_mode: str = "uniform",
                 alpha: float | None = None) -> Settings:
        """The replay's settings with this budget (B >= 1)."""
        return Settings(gamma=self.gamma, max_new_tokens=max_new_tokens, eos_ids=frozenset(eos_ids),
                        fanout=max(1, self.fanout), fanout_mode=fanout_mode,
                        max_branches=max(1, self.branches), alpha=alpha)

    def to_dict(self) -> dict:
        return {"gamma": self.gamma, "fanout": self.fanout, "branches": self.branches, "wanted": self.wanted,
                "dropped_by_cap": self.dropped, "verify_ms": self.verify_ms, "tree_ms": self.tree_ms,
                "fitted": self.fitted}


def tree_ms(costs: LatencyModel, gamma: int, branches: int) -> float:
    """The branch work of one round: the glue pass over gamma + 1 tokens, then gamma passes of
    ``branches`` sequences."""
    return costs.draft_read(gamma + 1) + gamma * costs.draft(branches) if branches else 0.0


def fit_budget(costs: LatencyModel, gamma: int, max_branches: int = MAX_BRANCHES) -> Budget:
    """The largest B <= max_branches whose branch work fits inside the verify of a block
    (``tree_ms(B) <= network + verify(gamma + 1)``), as a uniform fan-out capped at B."""
    verify_ms = costs.network_ms + costs.verify(gamma + 1)
    fits = [b for b in range(1, max_branches + 1) if tree_ms(costs, gamma, b) <= verify_ms]
    b = max(fits, default=0)
    return Budget(gamma, math.ceil(b / (gamma + 1)), b, verify_ms, tree_ms(costs, gamma, b), True)


def user_budget(costs: LatencyModel | None, gamma: int, fanout: int, max_branches: int = MAX_BRANCHES) -> Budget:
    """A user's fan-out F per outcome: B = min(F (gamma + 1), max_branches)."""
    if fanout < 1 or max_branches < 1:
        raise BadInput(f"the fan-out must be at least 1, got {fanout}", "fanout")
    b = min(fanout * (gamma + 1), max_branches)
    verify_ms = costs.network_ms + costs.verify(gamma + 1) if costs is not None else float("nan")
    return Budget(gamma, fanout, b, verify_ms, tree_ms(costs, gamma, b) if costs is not None else float("nan"),
                  False)


# --- the run -------------------------------------------------------------------------------------

@dataclass
class SsdRound:
    """One round's SSD bookkeeping: its block's length g, whether the block was ready (a hit),
    the branches prepared for the next one (F_k per outcome, B, and the branches the cap took
    off), and the time: the verify (network included), the glue and branch passes, the target's
    wait for them past its verify, and the drafting after a miss."""

    g: int
    hit: bool
    fan: list[int] = field(default_factory=list)
    batch: int = 0
    capped: int = 0
    next_hit: bool = False  # the outcome was among the branches
    stopped: bool = False  # the run ended with this round's verify: its branches were stopped, none was needed
    verify_ms: float = 0.0
    glue_ms: float = 0.0
    branch_ms: float = 0.0  # the gamma batched passes (the cache copy for B rows included)
    over_verify_ms: float = 0.0  # branch work past the verify's end: the round's cost over a plain verify
    jit_ms: float = 0.0  # drafting before the verify (a miss)
    wasted_ms: float = 0.0  # draft time on branches not taken

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SsdRun(OverlapRun):
    """A real SSD run: its trace and threads (``OverlapRun``), the budget it ran with, and its
    rounds' SSD bookkeeping."""

    budget: Budget | None = None
    fanout_mode: str = "uniform"
    alpha: float | None = None
    ssd_rounds: list[SsdRound] = field(default_factory=list)

    @property
    def hits(self) -> int:
        return sum(r.hit for r in self.ssd_rounds)

    @property
    def hit_rate(self) -> float | None:
        return self.hits / len(self.ssd_rounds) if self.ssd_rounds else None

    @property
    def branches_per_round(self) -> float | None:
        batches = [r.batch for r in self.ssd_rounds if r.batch and not r.stopped]
        return sum(batches) / len(batches) if batches else None

    @property
    def wasted_draft_ms(self) -> float:
        return sum(r.wasted_ms for r in self.ssd_rounds)

    @property
    def capped_rounds(self) -> int:
        return sum(r.capped > 0 for r in self.ssd_rounds)

    @property
    def dropped_branches(self) -> int:
        return sum(r.capped for r in self.ssd_rounds)

    def stats(self) -> dict:
        return {"hits": self.hits, "misses": len(self.ssd_rounds) - self.hits, "hit_rate": self.hit_rate,
                "branches_per_round": self.branches_per_round, "wasted_draft_ms": self.wasted_draft_ms,
                "capped_rounds": self.capped_rounds, "branches_dropped_by_cap": self.dropped_branches,
                "over_verify_ms": sum(r.over_verify_ms for r in self.ssd_rounds),
                "branch_ms": sum(r.glue_ms + r.branch_ms for r in self.ssd_rounds),
                "jit_ms": sum(r.jit_ms for r in self.ssd_rounds)}


def ssd_run(pair: ModelPair, config: RunConfig, budget: Budget | None = None, fanout_mode: str = "uniform",
            alpha: float | None = None, cores: tuple[int, int] | None = None) -> SsdRun:
    """Run greedy SSD for real (module docstring). ``budget``: the branches a round (``fit_budget``,
    ``user_budget``; default ``DEFAULT_FANOUT`` per outcome, capped at ``MAX_BRANCHES``);
    ``fanout_mode``: the allocation over the outcomes (``FANOUT_MODES``); ``alpha``: the
    per-token acceptance the geometric allocation assumes (None: the run's own so far,
    accepted over checked positions, 0.5 before the first verdict). ``config`` is copied, not
    changed; its gamma is SSD's constant draft length. Threads are gone and torch's thread
    count restored on return or raise."""
    if fanout_mode not in FANOUT_MODES:
        raise BadInput(f"fan-out mode {fanout_mode!r} is not one of {', '.join(FANOUT_MODES)}", "fanout_mode")
    trace = two_threads.new_trace(pair, config, "SSD")
    if budget is None:
        budget = user_budget(None, trace.config.gamma, DEFAULT_FANOUT)
    if budget.gamma != trace.config.gamma:
        raise BadInput(f"the budget is for γ = {budget.gamma}, the run drafts γ = {trace.config.gamma}", "gamma")
    rounds: list[SsdRound] = []
    with two_threads.lanes(cores or two_threads.default_cores(pair), SCHEDULE) as lanes:
        _Run(pair, trace, lanes.draft, lanes.target, budget, fanout_mode, alpha, rounds).rounds()
    base = lanes.result(two_threads.finish_text(pair, trace), SCHEDULE)
    return SsdRun(**base.__dict__, budget=budget, fanout_mode=fanout_mode, alpha=alpha, ssd_rounds=rounds)


@dataclass
class _Prepared:
    """The branch work of one round: the next block for each outcome (k, token), its events."""

    blocks: dict[tuple[int, int], list[int]]
    fan: list[int]
    events: list[Event]
    glue_ms: float
    branch_ms: float
    stopped: bool  # told to stop before its last pass


class _Run:
    """One run's state: the models bound to their caches, the clock, the executors."""

    def __init__(self, pair, trace: Trace, draft_ex: ThreadPoolExecutor, target_ex: ThreadPoolExecutor,
                 budget: Budget, fanout_mode: str, alpha: float | None, out: list[SsdRound]):
        self.pair, self.trace, self.draft_ex, self.target_ex = pair, trace, draft_ex, target_ex
        self.budget, self.alpha, self.out = budget, alpha, out
        cfg = trace.config
        self.eos = set(pair.eos_ids)
        self.clock = Clock(others=not busy.served_here(cfg.target_url))
        self.target = pair.target_kv()
        self.kv = KVModel(pair.draft, pair.device)
        self.drafter = ModelDrafter(self.kv, Sampling(), torch.Generator(), self.clock)
        self.settings = budget.settings(cfg.max_new_tokens, pair.eos_ids, fanout_mode, alpha) if budget.branches \
            else None
        self.accepted = self.checked = 0  # for the geometric allocation's running alpha

    def fan(self, g: int) -> list[int]:
        alpha = self.alpha if self.alpha is not None else (self.accepted / self.checked if self.checked else 0.5)
        return fan_out(g, self.settings, alpha)

    def rounds(self) -> None:
        cfg, trace, clock = self.trace.config, self.trace, self.clock
        limit = min(cfg.max_new_tokens, self.pair.context_length - len(trace.prompt_ids))
        ids = list(trace.prompt_ids)
        ready: list[int] | None = None  # the next block, prepared by the last round's branches
        while True:
            produced = len(trace.output_ids)
            g = min(cfg.gamma, limit - produced - 1)
            info = SsdRound(g=g, hit=ready is not None)
            events: list[Event] = []
            if ready is not None:
                block = _cut_after_eos(ready[:g], self.eos)
            elif g > 0:  # a miss: draft the block now, the target waits (the reference's jit backup)
                prop = self.draft_ex.submit(self.drafter.propose, ids, g, self.eos).result()
                block, events = prop.tokens, list(prop.events)
                info.jit_ms = sum(e.duration_ms for e in events)
            else:
                block = []
            sent = clock.now()
            verifying = self.target_ex.submit(verify, self.target, ids, Proposal(list(block)), clock,
                                              "verify_forward")
            # every outcome emits a token: branches only when one more round can follow
            stop_branches = threading.Event()
            preparing = (self.draft_ex.submit(self._prepare, ids, block, stop_branches)
                         if self.settings is not None and produced + 1 < limit else None)
            try:
                logits, verify_event = verifying.result()
            except BaseException:
                stop_branches.set()
                raise
            verified = clock.now()
            k, own = greedy_accept(logits, block)
            emitted, stop = stopping.cut(block[:k] + [own], produced, limit, cfg.max_new_tokens, self.eos)
            info.stopped = bool(stop)
            if stop:
                stop_branches.set()  # the run is over: the branches stop at their next step
            prepared = preparing.result() if preparing is not None else None
            s0 = clock.now() if not stop else verified
            sample = Event("target", "sample", s0, max(s0, clock.now()) if not stop else verified, [own])
            waits = self.target.take_waits()
            info.verify_ms = verify_event.end_ms - min([verify_event.start_ms, *(w.start_ms for w in waits)])
            events += [*waits, verify_event, sample]
            if k < len(block):  # the target drops the rejected tokens (the draft's glue pass reads past them)
                r0 = sample.end_ms
                self.target.rollback(min(self.target.common_prefix(ids + emitted), len(ids + emitted) - 1))
                events.append(Event("target", "rollback", r0, max(r0, clock.now()), list(block[k:])))
            ready = None
            if prepared is not None:
                ready = prepared.blocks.get((k, own))
                self._account(info, prepared, verified, sent, ready is not None, stop)
                events += [e for e in prepared.events if not stop or e.end_ms <= verified]
            self.accepted += k
            self.checked += k + (k < len(block))
            events.sort(key=lambda e: e.start_ms)
            trace.rounds.append(Round(index=len(trace.rounds), gamma=g, proposed=list(block), accepted=k,
                                      rejected=list(block[k:]), correction=own, bonus=bool(block) and k == len(block),
                                      emitted=emitted, events=events))
            self.out.append(info)
            ids += emitted
            trace.output_ids += emitted
            trace.wall_ms = verified if stop else clock.now()
            if stop:
                trace.stop_reason = stop
                trace.contention = self.clock.contention()
                return

    def _account(self, info: SsdRound, prepared: _Prepared, verified: float, sent: float, hit: bool,
                 stop: bool) -> None:
        info.fan, info.batch = prepared.fan, sum(prepared.fan)
        info.capped = max(0, self.settings.fanout * len(prepared.fan) - info.batch)  # fan: one entry per outcome
        info.next_hit = hit
        info.glue_ms, info.branch_ms = prepared.glue_ms, prepared.branch_ms
        end = max((e.end_ms for e in prepared.events), default=sent)
        info.over_verify_ms = 0.0 if stop else max(0.0, end - verified)
        share = (info.batch - 1) / info.batch if hit and info.batch else 1.0
        info.wasted_ms = prepared.branch_ms * share

    def _prepare(self, ids: list[int], block: list[int], stop: threading.Event) -> _Prepared:
        """On the draft's thread, while the target verifies ``block``: the glue pass, the fork, and
        gamma batched passes over the branches (module docstring)."""
        clock, kv, gamma = self.clock, self.kv, self.trace.config.gamma
        seq = ids + block
        start = min(kv.common_prefix(seq), len(ids) - 1)
        kv.rollback(start)
        feed = seq[start:]
        rows, t0, t1 = kv.timed_forward(feed, len(block) + 1, clock)
        events = [Event("draft", "draft_forward" if start else "prefill", t0, t1, list(feed))]
        fan = self.fan(len(block))
        branches = fork(rows, block, fan)
        blocks: dict[tuple[int, int], list[int]] = {}
        if not branches:
            return _Prepared(blocks, fan, events, t1 - t0, 0.0, False)
        b0 = clock.now()
        tokens, passes, stopped = self._branches(ids, block, branches, gamma, stop)
        events += passes
        for (k, tok), chain in zip(branches, tokens):
            blocks[(k, tok)] = chain
        return _Prepared(blocks, fan, events, t1 - t0, (passes[-1].end_ms - b0) if passes else 0.0, stopped)

    def _branches(self, ids: list[int], block: list[int], branches: list[tuple[int, int]], gamma: int,
                  stop: threading.Event) -> tuple[list[list[int]], list[Event], bool]:
        """gamma greedy passes over every branch at once: branch (k, token) reads the cache up to
        ids + block[:k], then its own tokens, at positions len(ids) + k onwards."""
        clock, kv, device = self.clock, self.kv, self.pair.device
        n, b = len(ids), len(branches)
        t0 = clock.now()
        with torch.inference_mode():
            cache = batch_cache(kv.cache, b)  # the shared prefix (ids + block), one row per branch
            mask = torch.ones(b, n + len(block), dtype=torch.long, device=device)
            for row, (k, _tok) in enumerate(branches):
                mask[row, n + k:] = 0
            cur = torch.tensor([[tok] for _k, tok in branches], dtype=torch.long, device=device)
            pos = torch.tensor([[n + k] for k, _tok in branches], dtype=torch.long, device=device)
            chains: list[list[int]] = [[] for _ in branches]
            events = []
            for _step in range(gamma):
                if stop.is_set():
                    return chains, events, True
                mask = torch.cat([mask, torch.ones(b, 1, dtype=torch.long, device=device)], dim=1)
                out = self.pair.draft(input_ids=cur, attention_mask=mask, position_ids=pos, cache=cache,
                                      use_cache=True, logits_to_keep=1)
                nxt = out.logits[:, -1].float().argmax(-1).cpu()
                t1 = clock.now()
                events.append(Event("draft", "draft_forward", t0, t1, []))
                for row, tok in enumerate(nxt.tolist()):
                    chains[row].append(int(tok))
                cur, pos, t0 = nxt.view(b, 1).to(device), pos + 1, t1
        return chains, events, False


def fork(rows: torch.Tensor, block: Sequence[int], fan: Sequence[int]) -> list[tuple[int, int]]:
    """The branches (k, token) of a block: for each outcome k = 0..len(block), the top ``fan[k]``
    tokens of the draft's row at position p+k, without the drafted token block[k] when
    k < len(block) (``get_forked_recovery_tokens_from_logits``); best first within an outcome."""
    out = []
    for k, f in enumerate(fan):
        if f <= 0:
            continue
        row = rows[k].clone()
        if k < len(block):
            row[block[k]] = -math.inf
        out += [(k, int(t)) for t in row.topk(min(f, row.shape[-1] - (k < len(block)))).indices.tolist()]
    return out


def _cut_after_eos(block: list[int], eos: set[int]) -> list[int]:
    for i, tok in enumerate(block):
        if tok in eos:
            return block[: i + 1]
    return block
