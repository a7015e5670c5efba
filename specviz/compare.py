"""Autoregressive against speculative on the same prompt: speedup and exactness.

Greedy speculative decoding must reproduce the target's own greedy output. In
fp32 it does, token for token. In bf16/fp16 a verify pass over k+1 tokens and
k+1 one-token passes can round differently, so at a near-tie (top-1 and top-2
almost equally likely) the argmax can flip and the texts part ways. We report
where and how close the tie was, never hide it.
"""

from __future__ import annotations

from dataclasses import dataclass

from specviz.trace import Trace

NEAR_TIE = 0.02  # top-1 minus top-2 probability below which two candidates are a near-tie


@dataclass
class Comparison:
    identical: bool
    speedup: float | None
    first_difference: int | None  # index into the output tokens
    explanation: str

    def to_dict(self) -> dict:
        return {
            "identical": self.identical,
            "speedup": self.speedup,
            "first_difference": self.first_difference,
            "explanation": self.explanation,
        }


def first_difference(a: list[int], b: list[int]) -> int | None:
    """First index where two token lists differ (a length difference counts), else None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def margin_at(trace: Trace, position: int) -> float | None:
    """The target's top-1 minus top-2 probability where output token ``position`` was chosen."""
    seen = 0
    for rnd in trace.rounds:
        if position < seen + len(rnd.emitted):
            i = position - seen
            return rnd.margin[i] if i < len(rnd.margin) else None
        seen += len(rnd.emitted)
    return None


def compare(ar: Trace, sd: Trace, tokenizer=None) -> Comparison:
    """Speedup (tok/s ratio) and an exactness verdict with its explanation."""
    ar_tps = ar.summary.get("tokens_per_second") or 0.0
    sd_tps = sd.summary.get("tokens_per_second") or 0.0
    speedup = sd_tps / ar_tps if ar_tps else None
    pos = first_difference(ar.output_ids, sd.output_ids)
    if pos is None:
        return Comparison(True, speedup, None, "Identical: speculative decoding reproduced the target's own output.")
    cfg = sd.config
    if cfg.temperature > 0:
        why = (
            "Sampling is on, so the two runs draw different random numbers: the texts may differ, "
            "yet both follow the target's distribution exactly."
        )
        return Comparison(False, speedup, pos, f"Outputs differ from token {pos}. {why}")
    shorter = min(len(ar.output_ids), len(sd.output_ids))
    if pos == shorter:
        return Comparison(
            False, speedup, pos,
            f"One output stops at token {pos} ({ar.stop_reason} vs {sd.stop_reason}); the common part is identical.",
        )
    m = margin_at(ar, pos)
    a_tok, s_tok = ar.output_ids[pos], sd.output_ids[pos]
    names = ""
    if tokenizer is not None:
        names = f" ({tokenizer.decode([a_tok])!r} from the target alone, {tokenizer.decode([s_tok])!r} speculative)"
    where = f"The outputs differ from token {pos}{names}."
    tie = m is not None and m < NEAR_TIE
    margin = (f"The target's top two candidates there were {m:.4f} apart in probability"
              if m is not None else "No margin was recorded there")
    if cfg.dtype in ("bfloat16", "float16"):
        if tie:
            why = (f"{margin}: a near-tie (below {NEAR_TIE}). In {cfg.dtype} a verify pass over several tokens "
                   "rounds differently from one-token passes, enough to flip a near-tie. Run in float32 for "
                   "token-exact output.")
        else:
            why = (f"{margin}, more than a near-tie (below {NEAR_TIE}). In {cfg.dtype} the verify pass and the "
                   "one-token passes compute different logits, and here the difference changed the target's "
                   "choice. Run in float32 for token-exact output.")
    elif tie:
        why = f"Even in float32 this can happen at an extreme near-tie: {margin[0].lower()}{margin[1:]}."
    else:
        why = f"{margin}. This is not expected in float32: please report it."
    return Comparison(False, speedup, pos, f"{where} {why}")
