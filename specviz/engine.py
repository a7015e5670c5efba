"""Autoregressive and speculative decoding as generators of timed Rounds.

Invariant at the start of every round: ``ids`` is prompt + output; the target's
cache holds ids[:-1] (the last token is fed with the round's pass); the draft's
cache holds a prefix of ids. There is no separate prefill: each model's first
pass reads the whole prompt and does its first job in the same forward (event
kind ``prefill``), as Hugging Face's assisted generation does. One round:

1. the drafter proposes x_1..x_g (g = gamma, cut so the round cannot overshoot
   the token budget), each with its draft row q_i;
2. the target runs ONE forward pass over [ids[-1], x_1..x_g] and gets p_1..p_{g+1};
3. the acceptance rule keeps x_1..x_k and adds the target's own token;
4. both caches roll back to the new ids (crop, no recomputation).

Autoregressive decoding is the same loop with g = 0 and no drafter: one target
pass per token. The clock stops while a caller holds a yielded round.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import torch

from specviz.acceptance import Sampling, greedy_accept, sampling_accept, warp
from specviz.drafters import MAX_GAMMA, POLICIES, ModelDrafter, NgramDrafter, Proposal
from specviz.errors import BadInput
from specviz.kv import Clock, KVModel
from specviz.models import ModelPair
from specviz.trace import Event, Round, RunConfig, Trace

MAX_NEW_TOKENS = 4096
MODES = ("speculative", "autoregressive")
DRAFTERS = ("model", "ngram")


def encode_prompt(tokenizer, prompt: str, chat: bool) -> list[int]:
    """Token ids of the prompt, through the chat template where the model has one."""
    if chat and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        return tokenizer.encode(text, add_special_tokens=False)
    return tokenizer.encode(prompt)


def validate(config: RunConfig) -> None:
    """Raise BadInput for any setting the engine does not accept."""
    if config.mode not in MODES:
        raise BadInput(f"mode must be one of {', '.join(MODES)}; got {config.mode!r}", "mode")
    if not isinstance(config.prompt, str) or not config.prompt.strip():
        raise BadInput("the prompt is empty: type something for the models to continue", "prompt")
    if isinstance(config.gamma, bool) or not isinstance(config.gamma, int) or not 1 <= config.gamma <= MAX_GAMMA:
        raise BadInput(
            f"gamma (draft length) must be a whole number from 1 to {MAX_GAMMA}; got {config.gamma!r}", "gamma"
        )
    if (
        isinstance(config.max_new_tokens, bool)
        or not isinstance(config.max_new_tokens, int)
        or not 1 <= config.max_new_tokens <= MAX_NEW_TOKENS
    ):
        raise BadInput(
            f"max new tokens must be from 1 to {MAX_NEW_TOKENS}; got {config.max_new_tokens!r}", "max_new_tokens"
        )
    Sampling(config.temperature, config.top_k, config.top_p)
    if isinstance(config.seed, bool) or not isinstance(config.seed, int) or config.seed < 0:
        raise BadInput(f"seed must be a whole number >= 0; got {config.seed!r}", "seed")
    if any(not isinstance(s, str) or not s for s in config.stop):
        raise BadInput("stop strings must be non-empty text", "stop")
    if config.drafter not in DRAFTERS:
        raise BadInput(f"drafter must be one of {', '.join(DRAFTERS)}; got {config.drafter!r}", "drafter")
    if config.policy not in POLICIES:
        raise BadInput(
            f"draft-length policy must be one of {', '.join(POLICIES)}; got {config.policy!r}", "policy"
        )


def pieces(tokenizer, context: list[int], tokens: list[int]) -> list[str]:
    """The text each token adds after ``context`` (multi-token characters stay whole)."""
    tail = context[-4:]
    prev = tokenizer.decode(tail, skip_special_tokens=False)
    out = []
    for i in range(len(tokens)):
        cur = tokenizer.decode(tail + tokens[: i + 1], skip_special_tokens=False)
        out.append(cur[len(prev):] if cur.startswith(prev) else tokenizer.decode([tokens[i]]))
        prev = cur
    return out


class Decoding:
    """A run in progress. Iterate it for Rounds; ``trace`` grows as they come and is
    summarised when the run ends. ``run()`` drives it to the end and returns the trace."""

    def __init__(self, pair: ModelPair, config: RunConfig):
        config = dataclasses.replace(config, stop=list(config.stop))  # the caller's stays as it was
        validate(config)
        self.pair = pair
        tok = pair.tokenizer
        prompt_ids = encode_prompt(tok, config.prompt, config.chat)
        if len(prompt_ids) >= pair.context_length:
            raise BadInput(
                f"the prompt is {len(prompt_ids)} tokens, longer than the models' context of "
                f"{pair.context_length} tokens: shorten it",
                "prompt",
            )
        config.draft, config.target = pair.draft_name, pair.target_name
        config.device, config.dtype = str(pair.device), pair.dtype
        self.trace = Trace(config=config, prompt_ids=prompt_ids)
        self.eos = set(pair.eos_ids)
        self.done = False
        self._gen = self._rounds()

    def __iter__(self) -> Iterator[Round]:
        return self

    def __next__(self) -> Round:
        try:
            return next(self._gen)
        except StopIteration:
            self.done = True
            raise

    def run(self) -> Trace:
        for _ in self:
            pass
        return self.trace

    # --- the loop ------------------------------------------------------------------
    def _rounds(self) -> Iterator[Round]:
        cfg, pair, trace = self.trace.config, self.pair, self.trace
        speculative = cfg.mode == "speculative"
        sampling = Sampling(cfg.temperature, cfg.top_k, cfg.top_p)
        gen = torch.Generator().manual_seed(cfg.seed)
        clock = Clock()
        target = KVModel(pair.target, pair.device)
        drafter = None
        if speculative:
            if cfg.drafter == "ngram":
                drafter = NgramDrafter(pair.target.config.vocab_size, clock)
            else:
                drafter = ModelDrafter(KVModel(pair.draft, pair.device), sampling, gen, clock)
        policy = POLICIES[cfg.policy](cfg.gamma)
        ids = list(trace.prompt_ids)

        new: list[int] = []
        last: Round | None = None
        while True:
            left = min(cfg.max_new_tokens - len(new), pair.context_length - len(ids))
            gamma = min(policy.next(last), left - 1) if drafter else 0
            rnd = Round(index=len(trace.rounds), gamma=gamma)
            prop = drafter.propose(ids, gamma, self.eos) if gamma > 0 else Proposal()
            rnd.events.extend(prop.events)

            # Verify: one target pass over the pending token and the proposal.
            target.rollback(min(target.common_prefix(ids), len(ids) - 1))
            kind = "verify_forward" if speculative else "target_forward"
            if not target.tokens:
                kind = "prefill"  # the first pass also reads the prompt
            feed = ids[len(target.tokens):] + prop.tokens
            logits, t0, t1 = target.timed_forward(feed, len(prop.tokens) + 1, clock)
            rnd.events.append(Event("target", kind, t0, t1, list(feed)))

            s0 = clock.now()
            p = warp(logits, sampling)
            if sampling.greedy:
                k, tok = greedy_accept(logits, prop.tokens)
            else:
                k, tok = sampling_accept(p, prop.q_rows, prop.tokens, gen)
            emitted, stop = self._cut(new, prop.tokens[:k] + [tok], left)
            self._fill(rnd, prop, p, k, tok, emitted, ids)
            rnd.events.append(Event("target", "sample", s0, clock.now(), [tok]))
            ids += emitted
            new += emitted

            # Roll both caches back to a prefix of the new sequence.
            r0 = clock.now()
            if target.rollback(len(ids) - 1):
                rnd.events.append(Event("target", "rollback", r0, clock.now(), prop.tokens[k:]))
            if drafter:
                rnd.events.extend(drafter.sync(ids))

            trace.rounds.append(rnd)
            trace.output_ids = list(new)
            text = pair.tokenizer.decode(new, skip_special_tokens=True)
            before = trace.output_text
            rnd.emitted_text = text[len(before):] if text.startswith(before) else text
            trace.output_text = text
            trace.wall_ms = clock.now()
            last = rnd
            if stop:
                trace.stop_reason = stop
                trace.finish()
                self.done = True
                yield rnd
                return
            clock.pause()
            yield rnd
            clock.resume()

    def _cut(self, new: list[int], emitted: list[int], left: int) -> tuple[list[int], str | None]:
        """Apply the stopping rules to a round's tokens: EOS (kept, nothing after it),
        the token budget, the context, stop strings. Returns (tokens, stop reason)."""
        cfg = self.trace.config
        stop = None
        for i, t in enumerate(emitted):
            if t in self.eos:
                emitted, stop = emitted[: i + 1], "eos"
                break
        if cfg.stop:
            emitted, hit = self._cut_at_stop(new, emitted)
            stop = "stop_string" if hit else stop
        if len(emitted) >= left:
            emitted = emitted[:left]
            if stop is None:
                full = len(new) + len(emitted) >= cfg.max_new_tokens
                stop = "max_new_tokens" if full else "context"
        return emitted, stop

    def _fill(self, rnd: Round, prop: Proposal, p: torch.Tensor, k: int, tok: int, emitted: list[int], ids: list[int]) -> None:
        tokenizer = self.pair.tokenizer
        n = len(prop.tokens)
        rnd.proposed = list(prop.tokens)
        rnd.proposed_text = pieces(tokenizer, ids, prop.tokens)
        if n:
            rows = torch.arange(n)
            cols = torch.tensor(prop.tokens)
            rnd.draft_probs = prop.q_rows[rows, cols].tolist()
            rnd.target_probs = p[rows, cols].tolist()
        rnd.accepted = k
        rnd.rejected = list(prop.tokens[k:])
        rnd.correction = tok
        rnd.correction_text = pieces(tokenizer, ids + prop.tokens[:k], [tok])[0]
        rnd.bonus = n > 0 and k == n
        rnd.emitted = list(emitted)
        top2 = p[: k + 1].topk(min(2, p.shape[-1]), dim=-1).values
        rnd.margin = (top2[:, 0] - top2[:, -1]).tolist()

    def _cut_at_stop(self, new: list[int], emitted: list[int]) -> tuple[list[int], bool]:
        """Cut ``emitted`` just after the first token that completes a stop string."""
        decode = self.pair.tokenizer.decode
        stops = self.trace.config.stop
        if not any(s in decode(new + emitted, skip_special_tokens=True) for s in stops):
            return emitted, False
        for m in range(1, len(emitted) + 1):
            if any(s in decode(new + emitted[:m], skip_special_tokens=True) for s in stops):
                return emitted[:m], True
        return emitted, True


def autoregressive(pair: ModelPair, config: RunConfig) -> Decoding:
    """The target alone, one forward pass per token. ``config`` is copied, not changed."""
    return Decoding(pair, dataclasses.replace(config, mode="autoregressive"))


def speculative(pair: ModelPair, config: RunConfig) -> Decoding:
    """Draft gamma tokens, verify them in one target pass, keep the accepted prefix.
    ``config`` is copied, not changed."""
    return Decoding(pair, dataclasses.replace(config, mode="speculative"))
