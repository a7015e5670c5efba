"""The draft-length policies: pure rules from the last round to the next γ, one copy for the
engine (``specviz.engine.decode``) and the replays (``specviz.replay``).

* constant: γ every round;
* heuristic (Hugging Face's ``num_assistant_tokens_schedule="heuristic"``): γ + 2 after a
  fully accepted block, γ − 1 otherwise, within [1, MAX_GAMMA].
"""

from __future__ import annotations

from specviz.record.limits import MAX_GAMMA
from specviz.record.run_trace import Round


class ConstantGamma:
    """The same draft length every round."""

    name = "constant"

    def __init__(self, gamma: int):
        self.gamma = gamma

    def next(self, last: Round | None) -> int:
        return self.gamma


class HeuristicGamma:
    """Hugging Face's schedule: +2 after a fully accepted block, -1 otherwise (>= 1)."""

    name = "heuristic"

    def __init__(self, gamma: int):
        self.gamma = gamma

    def next(self, last: Round | None) -> int:
        if last is not None and last.proposed:
            full = last.accepted == len(last.proposed)
            self.gamma = min(MAX_GAMMA, self.gamma + 2) if full else max(1, self.gamma - 1)
        return self.gamma


POLICIES = {"constant": ConstantGamma, "heuristic": HeuristicGamma}
