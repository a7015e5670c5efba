"""Replaying a greedy run under another schedule: serial, PEARL and SSD.

At temperature 0 every lossless schedule emits the same tokens; schedules differ only in
what is drafted, when, and how long each step takes. So a recorded greedy run replays
under another schedule from, for every output position j:

* ``tokens[j]``: the target's token there;
* ``ranks[j]``: its rank in the draft's distribution given the correct prefix (0 = the
  draft's top choice). A greedy draft proposes ``candidates[j][0]``, and the target
  accepts position j exactly when ``ranks[j] == 0``;
* ``candidates[j]``: the draft's top candidates there, best first.

A draft token is known on a correct prefix, and where the run itself drafted it:
``chains[s]`` is the block the run's draft proposed from output position s (its greedy
chain from the correct prefix there), so the draft's tokens after a wrong one are known
for a block that starts where a recorded one did (or where a recorded one passed through
the target's tokens). Otherwise they are unknown (``UNKNOWN``), as are tokens past the end
of the run. Every schedule stops a block right after the draft proposes an EOS (a known
one: a run's draft often proposes EOS after a wrong token near the end), and every model's
first pass reads the prompt (event kind ``prefill``: ``draft_prefill_ms``,
``target_prefill_ms``); a later draft pass for B sequences costs ``costs.draft(B)``, one
over k tokens of one sequence ``costs.draft_read(k)``, a target pass reading k new tokens
``costs.verify(k)``, after ``costs.network_ms`` of network, HTTP and queue when the target is
a remote server (a ``network`` event); each round ends with
``costs.overhead_ms`` of bookkeeping (a ``sample`` event on the target lane), then
zero-length ``rollback`` events where a model throws tokens away.

**Serial** (``serial``): the engine's own schedule (``Decoding._rounds`` in ``specviz/engine/decode.py``). Per round,
left = max_new_tokens - produced, g = min(policy gamma, left - 1); the draft proposes g
tokens, one pass each, then the target verifies them in one pass over g + 1 tokens; it keeps
the k leading tokens of rank 0 and adds its own token (a correction, or a bonus when k == g).
The first draft pass of a round after a bonus reads two tokens (the last drafted one, never
fed to the draft, and the bonus). Every step waits for the one before it. The policy is ``specviz.record.policies.POLICIES``'s;
under the confidence policy a block stops right after a token whose draft probability is below
τ: on the correct prefix that is the draft's top-1 probability there (``top_q``, recorded with
the ranks), past a wrong token the run's own q of it where a recorded block passed (``chain_probs``);
a probability the run cannot know counts as unsure (the block stops).

**PEARL** (Liu et al., ICLR 2025), followed from the reference code:
github.com/smart-lty/ParallelSpeculativeDecoding, ``src/engine.py``,
``Decoding.parallel_speculative_decoding`` (commit 5a6f369). The draft (own device) and the
target run at once; every round both start together, and it ends when both are done: it
takes max(g draft passes, one target pass). The draft always drafts the next g = gamma tokens
(fewer only at the token budget or after an EOS); the draft length adapts through the modes:

* pre-verify (the first round too): the target reads the last verified token and checks the
  draft's first token x1. Rejected: the target's token is emitted, the block is thrown away,
  stay in pre-verify. Accepted: x1 is emitted, x2..xg stay pending, go to post-verify.
* post-verify: while the draft drafts the next block y1..yg, the target reads the last
  verified token and the pending tokens (gamma tokens, ``generate(input_ids, 1)`` over the
  cached prefix), so its rows check the pending tokens AND y1. All accepted: they are
  emitted with no token of the target's own, y2..yg become pending, stay in post-verify. A
  rejection: the accepted prefix and the target's token are emitted, both models roll back,
  the new block is thrown away, back to pre-verify.

Where the reference code differs from the short account of PEARL this replay was asked for
("verifies the rest of the previous block", no bonus) we follow the code: the post-verify
pass also checks the new block's first token y1; its last row is spent on y1 instead of a
bonus token. The reference keeps a
fixed gamma and stops once its prefix, unverified tokens included, reaches the budget; the
replay drafts only up to the budget and emits verified tokens only.

**SSD, speculative speculative decoding / Saguaro** (Kumar, Dao and May 2026), followed from
github.com/tanishqkumar/ssd (commit 6ed3022): ``ssd/engine/draft_runner.py``
(``DraftRunner.hit_cache_and_respond``, ``jit_speculate``, ``_build_tree_batch``,
``_decode_tree``, ``_populate_tree_cache``), ``ssd/utils/async_helpers/async_spec_helpers.py``
(``get_forked_recovery_tokens_from_logits``), ``ssd/engine/speculator_async.py``
(``SpeculatorAsync._speculation_request``: the key) and ``ssd/config.py`` (``fan_out_list``).
The draft has its own device. A verification outcome is keyed by (k accepted tokens, the
target's token). Each round, while the target verifies the block, the draft runs one pass
over the block (the reference's "glue" decode, g + 1 tokens: ``costs.draft_read(g + 1)``)
for its rows at positions p..p+g, forks F_k branches per outcome k = 0..g (the draft's top F_k
tokens at p+k, without the drafted token when k < g: that one would have been accepted), and
drafts gamma tokens on every branch, one batched pass of B = sum F_k sequences per step
(gamma * ``costs.draft(B)``). The round ends when both the verify and the branches are done.

* Hit: the outcome is among the branches, i.e. the target's token at p+k has rank
  1..F_k (k < g) or 0..F_g - 1 (k == g). The next block, the draft's greedy continuation
  after that (correct) token, is ready: the next verify starts at once.
* Miss (the first round always): the draft drafts the block after the verify, one pass per
  token, as plain speculative decoding (the reference's ``jit_speculate`` backup, the
  default ``--backup jit``), and the target waits for it.

Fan-out: "uniform", F_k = ``fanout`` (the reference's default ``[async_fan_out] * (K + 1)``),
or "geometric", the paper's capped geometric allocation of the same budget
B = fanout * (g + 1): the accepted length is geometric with per-token acceptance α, capped at
g (P(k) = α^k (1 - α) for k < g, P(g) = α^g), and a miss rate falling as F^-r; minimising
Σ P(k) F_k^-r under Σ F_k = B gives F_k ∝ P(k)^(1 / (1 + r)), i.e.
F_k = F_0 α^(k / (1 + r)) for k < g and F_g = F_0 (α^g / (1 - α))^(1 / (1 + r)), rounded to
whole branches by largest remainder. ``max_branches`` caps B (uniform: the last outcomes
lose branches first). The reference's separate ``fan_out_list_miss`` is taken equal to the
hit list (its default). Wasted draft time: of each round's branch passes, the share of the
B - 1 branches not taken on a hit, all of it on a miss. The final round prepares no
branches: the run is over when its verify returns.

Like the references, PEARL and SSD draft with a constant gamma (``Settings.policy`` applies
to the serial schedule only).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from specviz.record import stopping
from specviz.record.errors import BadInput
from specviz.record.limits import DEFAULT_CONFIDENCE, MAX_GAMMA
from specviz.record.limits import UNKNOWN_TOKEN as UNKNOWN
from specviz.record.policies import POLICIES, make_policy, never
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Event, Round, Trace
from specviz.replay.latency import LatencyModel

FANOUT_MODES = ("uniform", "geometric")


@dataclass(frozen=True)
class Settings:
    """What to replay: the draft length and its policy, the budget, EOS, and SSD's fan-out."""

    gamma: int
    policy: str = "constant"  # serial only: "constant" | "heuristic" | "confidence" (specviz.record.policies.POLICIES)
    confidence: float = DEFAULT_CONFIDENCE  # the confidence policy's τ
    max_new_tokens: int = 64  # the budget the recorded run had
    eos_ids: frozenset[int] = frozenset()  # the draft stops proposing after proposing one of these
    fanout: int = 2  # SSD: branches per outcome (uniform), and the budget fanout * (g + 1)
    fanout_mode: str = "uniform"  # SSD: "uniform" | "geometric"
    max_branches: int = 32  # SSD: cap on the branch batch B
    alpha: float | None = None  # SSD geometric: per-token acceptance; None: the run's share of rank 0
    miss_exponent: float = 1.0  # SSD geometric: r, the miss rate falling as F^-r

    def __post_init__(self) -> None:
        checks = {
            "gamma": 1 <= self.gamma <= MAX_GAMMA,
            "policy": self.policy in POLICIES,
            "confidence": 0.0 <= self.confidence <= 1.0,
            "max_new_tokens": self.max_new_tokens >= 1,
            "fanout": self.fanout >= 1,
            "fanout_mode": self.fanout_mode in FANOUT_MODES,
            "max_branches": self.max_branches >= 1,
            "alpha": self.alpha is None or 0.0 <= self.alpha <= 1.0,
            "miss_exponent": self.miss_exponent > 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise BadInput(f"schedule setting {name}={getattr(self, name)!r} is out of range", name)


@dataclass(frozen=True)
class ScheduleResult:
    """One schedule's replay: its trace (rounds and timed events on one ms axis from 0)
    and its totals; the SSD fields are None for the other schedules."""

    name: str  # "serial" | "pearl" | "ssd"
    trace: Trace
    wall_ms: float
    tokens_per_second: float
    draft_idle_fraction: float
    target_idle_fraction: float
    rounds: int
    hits: int | None = None
    misses: int | None = None
    hit_rate: float | None = None
    branches_per_round: float | None = None  # mean B over the rounds that prepared branches
    wasted_draft_ms: float | None = None  # draft time spent on branches not taken


@dataclass(frozen=True)
class ReplayInput:
    """A recorded greedy run, as a replay reads it (module docstring): per output position
    the target's token, the draft's rank of it and the draft's top candidates there; the
    prompt; ``chains``, the blocks the run's draft proposed, by output position; and the
    run's settings (``config``: the replay's trace keeps them, at the schedule's gamma,
    policy and budget). ``specviz.replay.what_if.replay_input`` builds one from a trace."""

    ranks: Sequence[int]
    candidates: Sequence[Sequence[int]]
    tokens: Sequence[int]
    prompt_ids: Sequence[int] = ()
    chains: Mapping[int, Sequence[int]] | None = None
    config: RunConfig | None = None
    top_q: Sequence[float] = ()  # the draft's top-1 probability per output position (the confidence policy)
    chain_probs: Mapping[int, Sequence[float]] | None = None  # each recorded block's q of its tokens


@dataclass
class _Replay:
    """The recorded run, the costs, and which models have made their first pass."""

    tokens: list[int]
    ranks: list[int]
    candidates: list[list[int]]
    costs: LatencyModel
    settings: Settings
    prompt_ids: list[int]
    config: RunConfig | None = None
    chains: dict[int, list[int]] = field(default_factory=dict)
    top_q: list[float] = field(default_factory=list)
    chain_probs: dict[int, list[float]] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, recorded: ReplayInput, costs: LatencyModel, settings: Settings) -> _Replay:
        ranks, candidates, tokens = recorded.ranks, recorded.candidates, recorded.tokens
        n = len(tokens)
        if len(ranks) != n or len(candidates) != n:
            raise BadInput(f"need one rank and one candidate list per token: {n} tokens, "
                           f"{len(ranks)} ranks, {len(candidates)} candidate lists", "ranks")
        if any(not c for c in candidates):
            raise BadInput("every position needs at least the draft's top candidate", "candidates")
        if n > settings.max_new_tokens:
            raise BadInput(f"{n} tokens exceed max_new_tokens={settings.max_new_tokens}", "max_new_tokens")
        chains = {int(at): list(chain) for at, chain in (recorded.chains or {}).items() if chain}
        if any(not 0 <= at < n for at in chains):
            raise BadInput(f"a draft chain starts outside the {n} output positions", "chains")
        top_q = list(recorded.top_q)
        if settings.policy == "confidence" and len(top_q) != n:
            raise BadInput("the confidence policy replays from the draft's top-1 probability at every position: "
                           "this run did not record it (record it again with this version of specviz)", "top_q")
        chain_probs = {int(at): list(q) for at, q in (recorded.chain_probs or {}).items() if int(at) in chains}
        return cls(list(tokens), list(ranks), [list(c) for c in candidates], costs, settings,
                   list(recorded.prompt_ids), recorded.config, chains, top_q, chain_probs)

    @property
    def n(self) -> int:
        return len(self.tokens)

    def draft(self, anchor: int, start: int, g: int, stop_after=never) -> list[int]:
        """The draft's greedy tokens at positions start..start+g-1 when the verified prefix
        ends at ``anchor`` (``token_at``); stops right after an EOS, or after a token whose
        probability (``q_at``) the policy's ``stop_after`` calls too unsure."""
        block: list[int] = []
        for j in range(start, start + g):
            block.append(self.token_at(anchor, j))
            if block[-1] in self.settings.eos_ids:
                break
            if j < start + g - 1 and stop_after(self.q_at(anchor, j)):
                break
        return block

    def q_at(self, anchor: int, j: int) -> float:
        """The draft's probability of its greedy token at position j (as ``token_at`` finds the
        token): its top-1 probability while the prefix is the target's; else a recorded block's
        q of it; else 0.0, unknown (a rule that asks stops there)."""
        if j < self.n and j < len(self.top_q) and all(r == 0 for r in self.ranks[anchor:j]):
            return self.top_q[j]
        for s in range(anchor, -1, -1):
            chain, probs = self.chains.get(s), self.chain_probs.get(s)
            if chain is not None and probs is not None and j - s < min(len(chain), len(probs)) \
                    and chain[: anchor - s] == self.tokens[s:anchor]:
                return probs[j - s]
        return 0.0

    def token_at(self, anchor: int, j: int) -> int:
        """The draft's greedy token at position j, its own tokens filling anchor..j-1: its top
        candidate while those are all the target's; else a recorded chain's, from a start s <=
        anchor whose tokens up to anchor are the target's (greedy: from there on it is the
        chain from anchor); else UNKNOWN."""
        if j < self.n and all(r == 0 for r in self.ranks[anchor:j]):
            return self.candidates[j][0]
        for s in range(anchor, -1, -1):
            chain = self.chains.get(s)
            if chain is not None and j - s < len(chain) and chain[: anchor - s] == self.tokens[s:anchor]:
                return chain[j - s]
        return UNKNOWN

    def accepted(self, start: int, block: list[int]) -> int:
        """How many leading tokens of ``block`` (at start, start+1, ...) the target accepts."""
        k = 0
        while k < len(block) and start + k < self.n and self.ranks[start + k] == 0:
            k += 1
        return k

    def draft_passes(self, t: float, count: int, batch: int = 1, reads: int = 1) -> list[Event]:
        """``count`` draft passes for ``batch`` sequences from time t, back to back; the first
        reads ``reads`` tokens of one sequence (batch 1), the others one token per sequence."""
        events = []
        for i in range(count):
            if "draft" in self.started:
                ms = self.costs.draft_read(reads) if i == 0 and reads > 1 else self.costs.draft(batch)
                kind, fed = "draft_forward", []
            else:
                kind, ms, fed = "prefill", self.costs.draft_prefill_ms, list(self.prompt_ids)
                self.started.add("draft")
            events.append(Event("draft", kind, t, t + ms, fed))
            t += ms
        return events

    def target_pass(self, t: float, p: int, unverified: list[int]) -> list[Event]:
        """The target's pass from time t over the last verified token (the prompt, the first
        time) and ``unverified``: ``verify(1 + len(unverified))`` ms; for a remote target it
        is a request, ``network_ms`` of network, HTTP and queue first. The pass is last."""
        net = [Event("target", "network", t, t + self.costs.network_ms)] if self.costs.network_ms > 0 else []
        t += self.costs.network_ms
        if "target" in self.started:
            fed = [self.tokens[p - 1], *unverified]
            return [*net, Event("target", "verify_forward", t, t + self.costs.verify(len(fed)), fed)]
        self.started.add("target")
        return [*net, Event("target", "prefill", t, t + self.costs.target_prefill_ms, [*self.prompt_ids, *unverified])]

    def record(self, index: int, g: int, checked: list[int], k: int, p: int, own: bool) -> Round:
        """The Round for a verdict at position p: the target checked ``checked`` and kept k;
        ``own``: it adds its own token (correction, or bonus when all were kept)."""
        end = min(p + k + own, self.n)
        return Round(index=index, gamma=g, proposed=list(checked), accepted=k, rejected=list(checked[k:]),
                     correction=self.tokens[p + k] if own and p + k < self.n else None,
                     bonus=own and bool(checked) and k == len(checked), emitted=self.tokens[p:end])

    def bookkeeping(self, t: float, dropped: dict[str, list[int]]) -> tuple[list[Event], float]:
        """The round's sampling and bookkeeping, then a rollback on each lane that drops tokens."""
        end = t + self.costs.overhead_ms
        events = [Event("target", "sample", t, end)]
        events += [Event(lane, "rollback", end, end, list(toks)) for lane, toks in dropped.items() if toks]
        return events, end


def _result(name: str, run: _Replay, rounds: list[Round], wall: float, policy: str, **ssd_stats) -> ScheduleResult:
    """The Trace of the replay (summarised) and its totals."""
    base = run.config or RunConfig()
    cfg = dataclasses.replace(base, mode="speculative", gamma=run.settings.gamma, policy=policy,
                              max_new_tokens=run.settings.max_new_tokens, stop=list(base.stop))
    for rnd in rounds:
        rnd.events.sort(key=lambda e: e.start_ms)
    last = run.tokens[-1:]  # the run stops where its last token does (it knows no context or stop strings)
    _, stop = stopping.cut(last, run.n - len(last), run.settings.max_new_tokens, run.settings.max_new_tokens,
                           run.settings.eos_ids)
    trace = Trace(config=cfg, rounds=rounds, prompt_ids=list(run.prompt_ids),
                  output_ids=[t for r in rounds for t in r.emitted], wall_ms=wall, stop_reason=stop or "").finish()
    s = trace.summary
    return ScheduleResult(name, trace, wall, s["tokens_per_second"], s["draft_idle_fraction"],
                          s["target_idle_fraction"], len(rounds), **ssd_stats)


def serial(recorded: ReplayInput, costs: LatencyModel, settings: Settings) -> ScheduleResult:
    """Draft, then verify, strictly one after the other (the engine's schedule)."""
    run = _Replay.of(recorded, costs, settings)
    policy = make_policy(settings.policy, settings.gamma, settings.confidence)
    rounds: list[Round] = []
    p, t, last = 0, 0.0, None
    while p < run.n:
        g = min(policy.next(last), settings.max_new_tokens - p - 1)
        block = run.draft(p, p, g, policy.stop_after)
        events = run.draft_passes(t, len(block), reads=2 if last is not None and last.bonus else 1)
        target = run.target_pass(events[-1].end_ms if events else t, p, block)
        rnd = run.record(len(rounds), g, block, run.accepted(p, block), p, own=True)
        if len(block) < g and block and block[-1] not in settings.eos_ids and settings.policy == "confidence":
            rnd.draft_stop = "confidence"
        tail, t = run.bookkeeping(target[-1].end_ms, {"target": rnd.rejected})
        rnd.events = [*events, *target, *tail]
        rounds.append(rnd)
        p += len(rnd.emitted)
        last = rnd
    return _result("serial", run, rounds, t, settings.policy)


def pearl(recorded: ReplayInput, costs: LatencyModel, settings: Settings) -> ScheduleResult:
    """PEARL: pre-verify the first draft token while drafting; post-verify the previous block
    while drafting the next (see the module docstring)."""
    run = _Replay.of(recorded, costs, settings)
    rounds: list[Round] = []
    p, t, pending, post = 0, 0.0, [], False
    while p < run.n:
        start = p + len(pending)  # the first position not yet drafted
        stopped = bool(pending) and pending[-1] in settings.eos_ids
        g = 0 if stopped else min(settings.gamma, settings.max_new_tokens - start)
        new = run.draft(p, start, g)
        checked = pending + new[:1] if post else new[:1]
        events = run.draft_passes(t, len(new))
        target = run.target_pass(t, p, pending)
        end = max(e.end_ms for e in [*events, *target])
        k = run.accepted(p, checked)
        if k < len(checked):  # a rejection: keep the accepted prefix and the target's token
            rnd = run.record(len(rounds), g, checked, k, p, own=True)
            dropped = {"draft": (pending + new)[k:], "target": pending[k:]}
            pending, post = [], False
        else:  # all accepted: no token of the target's own unless there is nothing left to check
            rnd = run.record(len(rounds), g, checked, k, p, own=not new)
            dropped = {}
            pending, post = new[1:], bool(new)
        tail, t = run.bookkeeping(end, dropped)
        rnd.events = [*events, *target, *tail]
        rounds.append(rnd)
        p += len(rnd.emitted)
    return _result("pearl", run, rounds, t, "constant")


def fan_out(g: int, settings: Settings, alpha: float) -> list[int]:
    """SSD's branches F_k for each outcome k = 0..g of a block of g tokens (module docstring)."""
    budget = min(settings.fanout * (g + 1), settings.max_branches)
    if settings.fanout_mode == "uniform":
        fan = [settings.fanout] * (g + 1)
        excess = sum(fan) - budget
        for k in reversed(range(g + 1)):
            cut = min(excess, fan[k])
            fan[k] -= cut
            excess -= cut
        return fan
    prob = [alpha**k * (1 - alpha) for k in range(g)] + [alpha**g]
    weight = [q ** (1 / (1 + settings.miss_exponent)) for q in prob]
    exact = [budget * w / sum(weight) for w in weight]
    fan = [math.floor(x) for x in exact]
    by_remainder = sorted(range(g + 1), key=lambda k: fan[k] - exact[k])
    for k in by_remainder[: budget - sum(fan)]:
        fan[k] += 1
    return fan


def ssd(recorded: ReplayInput, costs: LatencyModel, settings: Settings) -> ScheduleResult:
    """Speculative speculative decoding: while the target verifies, the draft pre-drafts the
    next block for the likely outcomes; on a hit it is ready at once (module docstring)."""
    run = _Replay.of(recorded, costs, settings)
    alpha = settings.alpha if settings.alpha is not None else run.ranks.count(0) / max(1, run.n)
    rounds: list[Round] = []
    p, t, ready = 0, 0.0, False
    hits, batches, wasted = 0, [], 0.0
    while p < run.n:
        g = min(settings.gamma, settings.max_new_tokens - p - 1)
        block = run.draft(p, p, g)
        hits += ready
        events = [] if ready else run.draft_passes(t, len(block))  # a miss: draft it now
        sent = events[-1].end_ms if events else t
        target = run.target_pass(sent, p, block)
        k = run.accepted(p, block)
        rnd = run.record(len(rounds), g, block, k, p, own=True)
        end = target[-1].end_ms
        if p + len(rnd.emitted) < run.n:  # prepare the next block for the likely outcomes
            fan = fan_out(len(block), settings, alpha)
            batch = sum(fan)
            glue = run.draft_passes(sent, 1, reads=len(block) + 1)
            tree = run.draft_passes(glue[-1].end_ms, settings.gamma, batch=batch)
            events += glue + tree
            end = max(end, tree[-1].end_ms)
            rank = run.ranks[p + k]
            ready = rank < fan[k] if k == len(block) else 1 <= rank <= fan[k]
            tree_ms = tree[-1].end_ms - glue[-1].end_ms
            wasted += tree_ms * ((batch - 1) / batch if ready else 1.0)
            batches.append(batch)
        tail, t = run.bookkeeping(end, {"target": rnd.rejected})
        rnd.events = [*events, *target, *tail]
        rounds.append(rnd)
        p += len(rnd.emitted)
    n = len(rounds)
    return _result("ssd", run, rounds, t, "constant", hits=hits, misses=n - hits,
                   hit_rate=hits / n if n else None,
                   branches_per_round=sum(batches) / len(batches) if batches else None,
                   wasted_draft_ms=wasted)


SCHEDULES: dict[str, Callable[..., ScheduleResult]] = {"serial": serial, "pearl": pearl, "ssd": ssd}


def simulate_all(recorded: ReplayInput, costs: LatencyModel, settings: Settings) -> dict[str, ScheduleResult]:
    """The same greedy run under every schedule, by name."""
    return {name: schedule(recorded, costs, settings) for name, schedule in SCHEDULES.items()}
