"""Chain drafters: each round, up to gamma tokens with their draft probabilities.

The verifier sees only a ``Proposal``: tokens, the draft's warped distribution for
each (rows of q), and the timed events. A draft model (eager, or compiled on a static
cache: ``draft_compiled``) and an n-gram prompt lookup both fit behind it; the draft
length comes from the run's policy (constant, adaptive, or the confidence stop, which
ends a round once the draft's own probability of its next token falls below the
threshold). ``make_drafter`` builds the one a run's config asks for; trees draft in
``specviz.engine.tree``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from specviz.engine.acceptance import Sampling, pick, warp
from specviz.models.kv import Clock, KVModel
from specviz.record.policies import never
from specviz.record.run_trace import Event


@dataclass
class Proposal:
    tokens: list[int] = field(default_factory=list)
    q_rows: torch.Tensor | None = None  # [len(tokens), V] warped draft distributions
    events: list[Event] = field(default_factory=list)
    stopped: str = ""  # "confidence": drafting stopped early, the last token's q below the policy's τ


StopRule = Callable[[float], bool]  # q of the token just proposed -> stop drafting after it (policies.never)


class Drafter(Protocol):
    name: str

    def propose(self, ids: list[int], gamma: int, stop_ids: set[int], stop_after: StopRule = never) -> Proposal: ...

    def sync(self, ids: list[int]) -> list[Event]:
        """Roll any state back to a prefix of ``ids`` after verification."""
        ...


def sync_cache(kv: KVModel, ids: list[int], clock: Clock) -> list[Event]:
    """Crop a draft's cache back to its longest common prefix with ``ids``: one rollback event
    when it dropped anything."""
    t0 = clock.now()
    if not kv.rollback(kv.common_prefix(ids)):
        return []
    return [Event("draft", "rollback", t0, clock.now(), kv.tokens[-1:] if kv.tokens else [])]


class ModelDrafter:
    """A small causal LM drafting one token per forward pass, with its own KV cache.

    With a cut head (``kv.head``, FR-Spec) the draft samples among the kept ids only;
    its q rows are spread back over the whole vocabulary (zero elsewhere), which is
    the distribution it really drafted from, so the acceptance rule stays exact."""

    name = "model"

    def __init__(self, kv: KVModel, sampling: Sampling, gen: torch.Generator, clock: Clock):
        self.kv, self.sampling, self.gen, self.clock = kv, sampling, gen, clock
        self.head = kv.head

    def propose(self, ids: list[int], gamma: int, stop_ids: set[int], stop_after: StopRule = never) -> Proposal:
        """At most gamma forward passes; stops early after proposing an EOS, or a token whose
        q the policy's ``stop_after`` calls too unsure (``Proposal.stopped``)."""
        prop = Proposal()
        rows = []
        seq = list(ids)
        for _ in range(gamma):
            start = min(self.kv.common_prefix(seq), len(seq) - 1)
            self.kv.rollback(start)
            feed = seq[start:]
            kind = "draft_forward" if start else "prefill"  # the first pass also reads the prompt
            logits, t0, t1 = self.kv.timed_forward(feed, 1, self.clock)
            q = warp(logits, self.sampling)
            tok = pick(q[0], self.sampling, self.gen)
            if self.head is not None:
                tok = int(self.head.ids[tok])
                q = self.head.spread(q)
            prop.events.append(Event("draft", kind, t0, t1, feed))
            rows.append(q[0])
            prop.tokens.append(tok)
            seq.append(tok)
            if tok in stop_ids:
                break
            if len(prop.tokens) < gamma and stop_after(float(q[0, tok])):
                prop.stopped = "confidence"
                break
        prop.q_rows = torch.stack(rows) if rows else None
        return prop

    def sync(self, ids: list[int]) -> list[Event]:
        return sync_cache(self.kv, ids, self.clock)


class NgramDrafter:
    """Prompt lookup: find the latest earlier occurrence of the last n tokens
    (n = max_n down to 1) and propose what followed it. q is one-hot."""

    name = "ngram"

    def __init__(self, vocab_size: int, clock: Clock, max_n: int = 3):
        self.vocab_size, self.clock, self.max_n = vocab_size, clock, max_n

    def propose(self, ids: list[int], gamma: int, stop_ids: set[int], stop_after: StopRule = never) -> Proposal:
        """A lookup's q is one-hot: it is never unsure, so ``stop_after`` never stops it."""
        t0 = self.clock.now()
        tokens: list[int] = []
        for n in range(min(self.max_n, len(ids) - 1), 0, -1):
            tail = ids[-n:]
            for start in range(len(ids) - n - 1, -1, -1):
                if ids[start : start + n] == tail:
                    tokens = ids[start + n : start + n + gamma]
                    break
            if tokens:
                break
        for i, tok in enumerate(tokens):
            if tok in stop_ids:
                tokens = tokens[: i + 1]
                break
        q = torch.zeros(len(tokens), self.vocab_size)
        if tokens:
            q[torch.arange(len(tokens)), torch.tensor(tokens)] = 1.0
        return Proposal(tokens, q, [Event("draft", "lookup", t0, self.clock.now(), tokens)])

    def sync(self, ids: list[int]) -> list[Event]:
        return []


DRAFTERS = {"model": ModelDrafter, "ngram": NgramDrafter}


def draft_compiled(config) -> bool:
    """Whether the draft's one-token pass runs compiled: asked for, and the plain draft (int8's
    dynamic kernels and a cut head run eager)."""
    return config.compiled and config.drafter == "model" and config.draft_quant == "none" and not config.draft_vocab


def make_drafter(pair, config, sampling: Sampling, gen: torch.Generator, clock: Clock, length: int = 0) -> Drafter:
    """The drafter ``config.drafter`` names, set up for ``pair``: the draft model with
    its own cache (int8 when ``config.draft_quant`` says so; its head cut to
    ``config.draft_vocab`` ids when that is > 0; static, of ``length`` positions, with a
    compiled step when ``config.compiled``), or the n-gram prompt lookup."""
    cls = DRAFTERS[config.drafter]
    if cls.name == "ngram":
        return cls(pair.vocab_size, clock)
    head = pair.cut_head(config.draft_vocab, config.draft_quant) if config.draft_vocab else None
    kv = pair.kv(pair.draft_model(config.draft_quant), head, compiled=draft_compiled(config), length=length)
    return cls(kv, sampling, gen, clock)
