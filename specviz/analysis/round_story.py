"""The p/q inspector and the walkthrough of one round: what a page needs, from a recorded Round.

Pure: reads Rounds and Traces only (no model, no Streamlit, no plotting), so it works on a
live run and on a recorded one alike.

* ``position(rnd, i, greedy)`` one verified position of a round: the proposed token, its
  q and p, the acceptance probability min(1, p/q) and the draw u (sampling), the argmax
  comparison (greedy), the verdict, and the candidates for the p/q bars (with the
  residual at a sampling rejection).
* ``story(trace, index)`` the round's walkthrough numbers: each draft pass with its
  token and time, the verify pass, the verdict, the target's token, the rollbacks, and
  when the next round could start drafting.
* ``top_two(trace, position)`` the target's two most probable tokens where an output
  token was chosen, and ``near_tie`` whether their logits are close enough for the
  dtype's rounding to swap them (the math: ``near_tie_logit``).

Traces recorded before the inspector existed hold no candidates: a position then has
just the proposed token's own q and p (and in a greedy run the argmax comparison, which
the verdict alone decides).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specviz.record.run_trace import Event, Round, Trace, is_draft_step, is_verify_step


@dataclass(frozen=True)
class Candidate:
    """One token under the draft's q and the target's p at a position (None: not known)."""

    id: int
    text: str
    q: float | None
    p: float | None
    residual: float | None = None  # norm(max(0, p - q)) at a sampling rejection


@dataclass(frozen=True)
class Position:
    """One verified position i of a round, as the inspector shows it.

    ``verdict``: "accepted", "rejected" (the first disagreement), "unjudged" (a proposal
    after it: thrown away unchecked), "bonus" (the target's token after every proposal
    was accepted) or "target" (the target's token in a round with no draft)."""

    index: int
    greedy: bool
    verdict: str
    token: int | None  # the proposed token; None at the target's own position
    text: str
    q: float | None  # q_i(x_i): the draft's probability of its token
    p: float | None  # p_i(x_i): the target's probability of it
    u: float | None = None  # sampling: the uniform draw that decided this token
    draft_top: int | None = None  # greedy: the draft's top token (the one it proposed)
    target_top: int | None = None  # greedy: the target's top token here (None: not known)
    target_top_text: str = ""
    target_token: int | None = None  # the target's own token when it lands here (correction / bonus)
    target_token_text: str = ""
    candidates: list[Candidate] = field(default_factory=list)
    residual: bool = False  # the candidates carry the residual the correction was drawn from
    recorded: bool = True  # the round holds the top-10 rows (False: a trace from before them)

    @property
    def ratio(self) -> float | None:
        """min(1, p/q): the probability that speculative sampling keeps this token."""
        if self.p is None or not self.q:
            return None
        return min(1.0, self.p / self.q)

    @property
    def judged(self) -> bool:
        return self.verdict in ("accepted", "rejected")

    @property
    def agree(self) -> bool | None:
        """Greedy: whether the draft's top token is the target's top token."""
        if self.draft_top is None or self.target_top is None:
            return None
        return self.draft_top == self.target_top


def is_greedy(trace: Trace) -> bool:
    return trace.config.temperature == 0


def n_positions(rnd: Round) -> int:
    """Verified positions: each proposal's, and the target's own token's when it follows them all."""
    n = len(rnd.proposed)
    return n + 1 if rnd.accepted == n else n


def judged(rnd: Round) -> int:
    """How many proposals the acceptance rule judged: the accepted ones and the first rejected one."""
    return min(rnd.accepted + 1, len(rnd.proposed))


def verdict_at(rnd: Round, i: int) -> str:
    n, k = len(rnd.proposed), rnd.accepted
    if i >= n:
        return "bonus" if n else "target"
    if i < k:
        return "accepted"
    return "rejected" if i == k else "unjudged"


def _candidates(rnd: Round, i: int) -> list[Candidate]:
    if i >= len(rnd.candidates):
        return []
    ids, ps = rnd.candidates[i], rnd.candidate_p[i]
    qs = rnd.candidate_q[i] if i < len(rnd.candidate_q) else []
    texts = rnd.candidate_text[i] if i < len(rnd.candidate_text) else []
    res = rnd.residual_probs if i == rnd.accepted < len(rnd.proposed) else []
    return [Candidate(t, texts[j] if j < len(texts) else "", qs[j] if j < len(qs) else None, ps[j],
                      res[j] if j < len(res) else None) for j, t in enumerate(ids)]


def position(rnd: Round, i: int, greedy: bool) -> Position:
    """Verified position ``i`` (0-based) of ``rnd``; ``greedy``: the run's temperature was 0."""
    if not 0 <= i < n_positions(rnd):
        raise IndexError(f"round {rnd.index + 1} has {n_positions(rnd)} verified positions; got {i}")
    n, k = len(rnd.proposed), rnd.accepted
    verdict = verdict_at(rnd, i)
    cands = _candidates(rnd, i)
    recorded = bool(cands)
    own = i == k  # the target's own token lands here
    tok = rnd.proposed[i] if i < n else None
    text = rnd.proposed_text[i] if i < len(rnd.proposed_text) else ""
    q = rnd.draft_probs[i] if i < len(rnd.draft_probs) else None
    p = rnd.target_probs[i] if i < len(rnd.target_probs) else None
    if not cands and tok is not None:  # an older trace: the proposed token alone
        cands = [Candidate(tok, text, q, p)]
    target_top = target_top_text = None
    if greedy:
        if verdict == "accepted":
            target_top, target_top_text = tok, text
        elif own:
            target_top, target_top_text = rnd.correction, rnd.correction_text
        elif recorded:  # after the first rejection: the target's top under its row, ties by the lower id
            best = max(cands, key=lambda c: (c.p or 0.0, -c.id))
            target_top, target_top_text = best.id, best.text
    return Position(
        index=i, greedy=greedy, verdict=verdict, token=tok, text=text, q=q, p=p,
        u=rnd.draws[i] if not greedy and i < len(rnd.draws) else None,
        draft_top=tok if greedy else None, target_top=target_top, target_top_text=target_top_text or "",
        target_token=rnd.correction if own else None, target_token_text=rnd.correction_text if own else "",
        candidates=cands, residual=any(c.residual is not None for c in cands), recorded=recorded,
    )


def positions(rnd: Round, greedy: bool) -> list[Position]:
    return [position(rnd, i, greedy) for i in range(n_positions(rnd))]


# --- the walkthrough of one round ---------------------------------------------------------------


@dataclass(frozen=True)
class Pass:
    """A draft step of the round: the token it proposed, and its event."""

    text: str
    event: Event

    @property
    def ms(self) -> float:
        return self.event.duration_ms


@dataclass(frozen=True)
class Story:
    """The numbers the walkthrough of round ``index`` narrates."""

    index: int
    total: int  # rounds in the run
    greedy: bool
    gamma: int
    drafts: list[Pass]  # each draft pass (or the n-gram lookup) and what it proposed
    lookup: bool  # the n-gram drafter: one lookup, no draft model
    verify: Event | None
    sample: Event | None  # the acceptance rule's step
    rollbacks: list[Event]
    positions: list[Position]
    accepted: int
    proposed: int
    target_kind: str  # "fix" | "bonus" | "target"
    target_text: str
    emitted: int
    next_start_ms: float | None  # when the next round's first draft step started (None: the last round)
    stop_reason: str = ""

    @property
    def draft_ms(self) -> float:
        return sum(p.ms for p in self.drafts)

    @property
    def verify_ms(self) -> float:
        return self.verify.duration_ms if self.verify else 0.0

    @property
    def verify_end_ms(self) -> float:
        return self.verify.end_ms if self.verify else 0.0

    @property
    def prefill(self) -> bool:
        """The round's verify pass also read the prompt (the run's first target pass)."""
        return self.verify is not None and self.verify.kind == "prefill"

    def rollback(self, lane: str) -> Event | None:
        return next((e for e in self.rollbacks if e.lane == lane), None)

    @property
    def wait_ms(self) -> float | None:
        """From the end of the verify pass to the next round's first draft step."""
        if self.next_start_ms is None or self.verify is None:
            return None
        return self.next_start_ms - self.verify.end_ms

    @property
    def rejected(self) -> Position | None:
        return next((p for p in self.positions if p.verdict == "rejected"), None)

    @property
    def unjudged(self) -> int:
        return sum(p.verdict == "unjudged" for p in self.positions)


def story(trace: Trace, index: int) -> Story:
    rnd = trace.rounds[index]
    drafts = [e for e in rnd.events if is_draft_step(e)]
    lookup = any(e.kind == "lookup" for e in drafts)
    if lookup:
        passes = [Pass("".join(rnd.proposed_text), e) for e in drafts]
    else:
        passes = [Pass(rnd.proposed_text[i] if i < len(rnd.proposed_text) else "", e) for i, e in enumerate(drafts)]
    verify = next((e for e in rnd.events if is_verify_step(e)), None)
    sample = next((e for e in rnd.events if e.kind == "sample"), None)
    rollbacks = [e for e in rnd.events if e.kind == "rollback"]
    nxt = None
    if index + 1 < len(trace.rounds):
        later = trace.rounds[index + 1].events
        first = next((e for e in later if is_draft_step(e)), None) or next(iter(later), None)
        nxt = first.start_ms if first is not None else None
    n = len(rnd.proposed)
    kind = "bonus" if rnd.bonus else ("fix" if n else "target")
    return Story(
        index=index, total=len(trace.rounds), greedy=is_greedy(trace), gamma=rnd.gamma, drafts=passes,
        lookup=lookup, verify=verify, sample=sample, rollbacks=rollbacks,
        positions=positions(rnd, is_greedy(trace)), accepted=rnd.accepted, proposed=n, target_kind=kind,
        target_text=rnd.correction_text, emitted=len(rnd.emitted), next_start_ms=nxt,
        stop_reason=trace.stop_reason if index == len(trace.rounds) - 1 else "",
    )


def drafted_rounds(trace: Trace) -> list[int]:
    """The rounds worth walking through: those in which the draft proposed something."""
    return [r.index for r in trace.rounds if r.proposed]


def default_round(trace: Trace) -> int | None:
    """A round to open on, after the prompt-reading first one where possible: the first that
    accepted some proposals and rejected one (the instructive case), else the first with a
    rejection, else the first drafted one."""
    rounds = drafted_rounds(trace)
    if not rounds:
        return None
    order = [i for i in rounds if i > 0] + [i for i in rounds if i == 0]
    for test in (lambda r: 0 < r.accepted < len(r.proposed), lambda r: bool(r.rejected)):
        found = next((i for i in order if test(trace.rounds[i])), None)
        if found is not None:
            return found
    return order[0]


# --- near-ties: when rounding can swap the target's top two ------------------------------------

MANTISSA_BITS = {"bfloat16": 7, "float16": 10, "float32": 23}  # stored bits; one more is implicit
LOGIT_SCALE = 32.0  # the logits' magnitude bound the threshold assumes: a causal LM's top logits are ~10 to 30


def spacing(dtype: str, magnitude: float = LOGIT_SCALE) -> float:
    """The gap between neighbouring numbers ``dtype`` can hold just below ``magnitude``:
    2^(e − m) for magnitudes in [2^e, 2^(e+1)), with m stored mantissa bits. bfloat16
    (m = 7): 0.0625 below 16, 0.125 below 32."""
    e = math.frexp(magnitude)[1] - 1  # magnitude in [2^e, 2^(e+1)); just below it, [2^(e-1), 2^e)
    if magnitude == 2.0 ** e:
        e -= 1
    return 2.0 ** (e - MANTISSA_BITS[dtype])


def near_tie_logit(dtype: str) -> float:
    """The logit gap z1 − z2 below which ``dtype``'s rounding can swap the top two tokens.

    A greedy target picks argmax z. The verify pass (γ + 1 tokens at once) and the target
    alone's one-token passes do the same arithmetic in a different order, so each logit
    lands on a different neighbouring value of the dtype's grid: it moves by up to one
    grid step s each way, and the gap z1 − z2 between two logits by up to 2s. With logits
    of magnitude up to 32 (16 to 32: s = 2^(4 − m)), the threshold is

        2 s = 2^(5 − m):  bfloat16 (m = 7) 0.25,  float16 (m = 10) 0.031,  float32 (m = 23) 3.8e-6.

    The gap is the log-ratio of the two probabilities, whatever the other tokens do
    (softmax divides both by the same sum): z1 − z2 = ln(p1 / p2). So two tokens near
    p = 0.30 that are 0.037 apart (0.318 and 0.281) differ by ln(0.318 / 0.281) = 0.12 in
    logit: within bf16's 0.25, a near-tie. A gap of 0.037 between 0.05 and 0.013 is a
    factor of 3.9, ln 3.9 = 1.37: not one. A probability gap alone cannot tell the two
    apart; the log-ratio can.

    Measured (bench/logit_rounding.py: the default pair in bfloat16 on this project's
    2-core CPU, 72 positions of prose, Chinese and code, passes of 5 tokens against passes
    of 1): top logits of median 19 and at most 32; the top two's gap moved by 0 (median),
    0.125 (95th percentile) and 0.19 at most, within 0.25. (The tiny pair, logits near 6,
    grid step 0.031: at most 0.0625, its two steps.)"""
    return 2 * spacing(dtype)


def logit_gap(p1: float, p2: float) -> float:
    """z1 − z2 = ln(p1 / p2): the logit gap of two tokens from their probabilities (at
    temperature 1, as the trace records a greedy run's p)."""
    if not p1 > 0 or not p2 > 0:
        raise ValueError(f"probabilities must be > 0; got {p1!r} and {p2!r}")
    return math.log(p1 / p2)


def least_logit_gap(margin: float) -> float:
    """The smallest logit gap a probability gap p1 − p2 = ``margin`` allows: with p1 + p2 ≤ 1
    the ratio p1 / p2 is least at p1 = (1 + m) / 2, so ln((1 + m) / (1 − m)). (For traces
    that hold only the margin, not the two probabilities.)"""
    if not 0 <= margin < 1:
        raise ValueError(f"a probability gap is in [0, 1); got {margin!r}")
    return math.log((1 + margin) / (1 - margin))


@dataclass(frozen=True)
class TopTwo:
    """The target's two most probable tokens at one output position, as a run recorded them:
    the round and the verified position there (1-based, as the Inspect page counts)."""

    round: int
    position: int
    first: Candidate
    second: Candidate

    @property
    def gap(self) -> float:
        return logit_gap(self.first.p, self.second.p)


def locate(trace: Trace, output_position: int) -> tuple[int, int] | None:
    """(round index, verified position index) where output token ``output_position`` was
    chosen; None past the output."""
    seen = 0
    for rnd in trace.rounds:
        if output_position < seen + len(rnd.emitted):
            return rnd.index, output_position - seen
        seen += len(rnd.emitted)
    return None


def top_two(trace: Trace, output_position: int) -> TopTwo | None:
    """The target's top two candidates (by p) where output token ``output_position`` was
    chosen, from the round's recorded rows; None when the trace holds no rows there."""
    found = locate(trace, output_position)
    if found is None:
        return None
    return top_two_at(trace.rounds[found[0]], found[1])


def top_two_at(rnd: Round, i: int) -> TopTwo | None:
    """The target's top two candidates (by p) at verified position ``i`` of ``rnd``; None when
    the round holds no rows there."""
    cands = [c for c in _candidates(rnd, i) if c.p]
    if len(cands) < 2:
        return None
    return TopTwo(rnd.index + 1, i + 1, cands[0], cands[1])


def near_tie(gap: float, dtype: str) -> bool:
    """Whether a logit gap is within what ``dtype``'s rounding can move (``near_tie_logit``);
    never in a dtype the table does not know."""
    return dtype in MANTISSA_BITS and gap < near_tie_logit(dtype)


# --- why a greedy draft token was rejected ------------------------------------------------------

PLAUSIBLE = 0.5  # the draft's token at least half as likely, to the target, as the target's own: another wording


@dataclass(frozen=True)
class Rejection:
    """A greedy round's rejected proposal: the draft's token and the target's own there, each
    with the target's p (and the draft's q), at round ``round``, position ``position`` (1-based)."""

    round: int
    position: int
    draft: Candidate
    target: Candidate

    @property
    def ratio(self) -> float:
        """p(draft's token) / p(target's token), both under the target: 1 is an exact tie."""
        return self.draft.p / self.target.p

    @property
    def plausible(self) -> bool:
        """The target itself found the draft's token nearly as good as its own (``PLAUSIBLE``):
        another wording, as open text allows, not a wrong guess."""
        return self.ratio >= PLAUSIBLE


def rejection(rnd: Round) -> Rejection | None:
    """The rejected proposal of a greedy round, from its recorded rows (None: every proposal
    was accepted, or the rows were not recorded)."""
    k = rnd.accepted
    if k >= len(rnd.proposed) or rnd.correction is None:
        return None
    cands = {c.id: c for c in _candidates(rnd, k)}
    draft, target = cands.get(rnd.proposed[k]), cands.get(rnd.correction)
    if draft is None or target is None or not draft.p or not target.p:
        return None
    return Rejection(rnd.index + 1, k + 1, draft, target)


def rejections(trace: Trace) -> list[Rejection]:
    """Every rejection of a greedy run with its rows, most plausible first (none when sampling:
    there a draw decides, not the argmax)."""
    if not is_greedy(trace):
        return []
    found = [r for r in map(rejection, trace.rounds) if r is not None]
    return sorted(found, key=lambda r: -r.ratio)
