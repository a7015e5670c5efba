"""The draft-length policies: pure rules from the last round to the next γ, one copy for the
engine (``specviz.engine.decode``) and the replays (``specviz.replay``).

* constant: γ every round;
* heuristic (Hugging Face's ``num_assistant_tokens_schedule="heuristic"``): γ + 2 after a
  fully accepted block, γ − 1 otherwise, within [1, MAX_GAMMA];
* confidence: γ is a cap, and the draft stops early, right after proposing a token whose own
  probability q(x) is below the threshold τ (Hugging Face's ``assistant_confidence_threshold``,
  whose ``ConfidenceCriteria`` keeps that token too; SpecDec++, Huang et al. 2024, stops on a
  trained head's predicted rejection instead of q itself). Where the draft is sure it drafts
  deep, where it hesitates it hands over at once: one proposal at least, so a round never
  costs more than one draft pass beyond the target's own.

Every policy answers two questions: how many tokens at most this round (``next``), and
whether to stop after a token the draft proposed with probability q (``stop_after``). The
rules only decide how much is proposed, never what is accepted, so every policy keeps the
output exactly the target's.
"""

from __future__ import annotations

from specviz.record.limits import DEFAULT_CONFIDENCE, MAX_GAMMA
from specviz.record.run_trace import Round


class ConstantGamma:
    """The same draft length every round."""

    name = "constant"

    def __init__(self, gamma: int, threshold: float = 0.0):
        self.gamma = gamma

    def next(self, last: Round | None) -> int:
        return self.gamma

    def stop_after(self, q: float) -> bool:
        return False


class HeuristicGamma(ConstantGamma):
    """Hugging Face's schedule: +2 after a fully accepted block, -1 otherwise (>= 1)."""

    name = "heuristic"

    def next(self, last: Round | None) -> int:
        if last is not None and last.proposed:
            full = last.accepted == len(last.proposed)
            self.gamma = min(MAX_GAMMA, self.gamma + 2) if full else max(1, self.gamma - 1)
        return self.gamma


class ConfidenceGamma(ConstantGamma):
    """Up to γ tokens; stop right after one the draft proposed with q(x) < τ."""

    name = "confidence"

    def __init__(self, gamma: int, threshold: float = DEFAULT_CONFIDENCE):
        self.gamma, self.threshold = gamma, threshold

    def stop_after(self, q: float) -> bool:
        return q < self.threshold


def never(q: float) -> bool:
    """The stop rule of the policies that never stop early."""
    return False


POLICIES = {"constant": ConstantGamma, "heuristic": HeuristicGamma, "confidence": ConfidenceGamma}


def make_policy(name: str, gamma: int, threshold: float = DEFAULT_CONFIDENCE) -> ConstantGamma:
    """The policy ``name`` at draft length (or cap) γ and, for confidence, threshold τ."""
    return POLICIES[name](gamma, threshold)
