"""Autoregressive against speculative on the same prompt: speedup and exactness.

Greedy speculative decoding must reproduce the target's own greedy output. In
fp32 it does, token for token. In bf16/fp16 a verify pass over k+1 tokens and
k+1 one-token passes can round differently, so at a near-tie (the target's top two
logits closer than the dtype's rounding can move them: ``specviz.analysis.round_story.near_tie_logit``)
the argmax can flip and the texts part ways. We report where, with the two tokens'
probabilities as the Inspect page draws them, and never hide it.

``explain`` says it in English (the CLI) or, given a ``tr``, in the page's language: one
function, so the two can never say different things.
"""

from __future__ import annotations

from dataclasses import dataclass

from specviz.analysis.round_story import (
    MANTISSA_BITS,
    least_logit_gap,
    near_tie,
    near_tie_logit,
    spacing,
    top_two,
)
from specviz.record.i18n import N_, Translator
from specviz.record.run_trace import Trace


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
    """Speedup (tok/s ratio) and an exactness verdict with its explanation (English)."""
    ar_tps = ar.summary.get("tokens_per_second") or 0.0
    sd_tps = sd.summary.get("tokens_per_second") or 0.0
    speedup = sd_tps / ar_tps if ar_tps else None
    pos = first_difference(ar.output_ids, sd.output_ids)
    return Comparison(pos is None, speedup, pos, explain(ar, sd, tokenizer))


# A trace's stop_reason (specviz.engine.decode's words, English): tr(reason) says it in the page's language.
STOP_REASONS = (N_("eos"), N_("max_new_tokens"), N_("stop_string"), N_("context"))


def stop_reason_text(reason: str, tr: Translator = N_) -> str:
    """Why a run stopped, as its trace says (max_new_tokens, eos, ...), in ``tr``'s language."""
    return tr(reason) if reason in STOP_REASONS else reason


def explain(ar: Trace, sd: Trace, tokenizer=None, tr: Translator = N_) -> str:
    """The exactness verdict in one paragraph: identical, or where the outputs part and why
    (sampling, a stop, or at a greedy flip the target's top two there and whether the
    dtype's rounding can swap them). ``tr`` translates it (default: English)."""
    pos = first_difference(ar.output_ids, sd.output_ids)
    if pos is None:
        return tr(N_("Identical: speculative decoding reproduced the target's own output."))
    if sd.config.temperature > 0:
        return tr(N_("Outputs differ from token {pos}. Sampling is on, so the two runs draw different random "
                     "numbers: the texts may differ, yet both follow the target's distribution exactly.")
                  ).format(pos=pos)
    if pos == min(len(ar.output_ids), len(sd.output_ids)):
        return tr(N_("One output stops at token {pos} ({target} vs {speculative}); the common part is identical.")
                  ).format(pos=pos, target=stop_reason_text(ar.stop_reason, tr),
                           speculative=stop_reason_text(sd.stop_reason, tr))
    if tokenizer is not None:
        where = tr(N_("The outputs differ from token {pos} ({target} from the target alone, {speculative} "
                      "speculative).")).format(pos=pos, target=repr(tokenizer.decode([ar.output_ids[pos]])),
                                               speculative=repr(tokenizer.decode([sd.output_ids[pos]])))
    else:
        where = tr(N_("The outputs differ from token {pos}.")).format(pos=pos)
    return tr(N_("{where} {why}")).format(where=where, why=_why_flipped(ar, sd, pos, tr))


def _why_flipped(ar: Trace, sd: Trace, pos: int, tr: Translator) -> str:
    """Why a greedy run's outputs part at ``pos``: the target alone's top two there (their
    probabilities and logit gap, from its recorded rows; else the least gap its recorded
    margin allows), the verify pass's choice as the Inspect page shows it, and the verdict
    against the dtype's near-tie threshold."""
    dtype = sd.config.dtype
    alone, spec = top_two(ar, pos), top_two(sd, pos)
    gap = exact = None
    if alone is not None:
        gap, exact = alone.gap, True
        facts = tr(N_("There the target alone gave {first} p = {p1:.3g} and {second} p = {p2:.3g}: their logits "
                      "are ln({p1:.3g} / {p2:.3g}) = {gap:.2f} apart.")).format(
            first=repr(alone.first.text), second=repr(alone.second.text), p1=alone.first.p,
            p2=alone.second.p, gap=gap)
        if spec is not None and spec.first.id != alone.first.id:
            facts += " " + tr(N_("The verify pass ranked {first} first ({p1:.3g} against {p2:.3g}): the Inspect "
                                 "page draws these p bars at round {round}, position {position} of the "
                                 "speculative run.")).format(
                first=repr(spec.first.text), p1=spec.first.p, p2=spec.second.p, round=spec.round,
                position=spec.position)
    elif (m := margin_at(ar, pos)) is not None:
        gap, exact = least_logit_gap(m), False
        facts = tr(N_("The target's top two candidates there were {margin:.4f} apart in probability, so their "
                      "logits are at least {gap:.2f} apart (this trace holds no more).")).format(margin=m, gap=gap)
    else:
        facts = tr(N_("No margin was recorded there."))
    if dtype not in MANTISSA_BITS:
        return tr(N_("{facts} Run in float32 for token-exact output.")).format(facts=facts)
    tie = {"tie": f"{near_tie_logit(dtype):.3g}", "dtype": dtype, "step": f"{spacing(dtype):.3g}"}
    if dtype == "float32":
        if gap is not None and exact and near_tie(gap, dtype):
            why = N_("{facts} Even in float32 this can happen at an extreme near-tie: float32 rounding moves a "
                     "logit gap by up to {tie}.")
        else:
            why = N_("{facts} This is not expected in float32: please report it.")
    elif gap is None:
        why = N_("{facts} In {dtype} the verify pass and the one-token passes round differently, and that can "
                 "change the target's choice. Run in float32 for token-exact output.")
    elif near_tie(gap, dtype):
        why = (N_("{facts} A near-tie: {dtype} holds logits of 16 to 32 to steps of {step}, so computing them in "
                  "another order (a verify pass reads several tokens at once, the target alone one) moves a gap "
                  "by up to {tie}, enough to swap these two. Run in float32 for token-exact output.") if exact else
               N_("{facts} That may be a near-tie: {dtype} rounding moves a logit gap by up to {tie}, and a verify "
                  "pass rounds differently from one-token passes. Run in float32 for token-exact output."))
    else:
        why = N_("{facts} More than a near-tie: {dtype} rounding alone moves a logit gap by up to {tie}. The "
                 "verify pass and the one-token passes still computed different logits, and here the difference "
                 "changed the target's choice. Run in float32 for token-exact output.")
    return tr(why).format(facts=facts, **tie)
