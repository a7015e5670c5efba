"""One model of a round's marked tokens, rendered as HTML by the app and as ANSI by the CLI.

``round_spans`` turns a Round (in one of its phases) into Spans, in reading order:

* accepted   a draft token the target kept, emitted
* rejected   a draft token the target threw away
* cut        a draft token the target kept, but past a stop string, EOS or the token
             budget: not emitted
* fix        the target's own token after a rejection
* bonus      the target's own token after every draft token was accepted
* target     the target's own token in a round with no draft
* pending    a draft token not yet checked (while drafting or verifying)

The target's token is a span only when the round actually emitted it. ``printable`` is
the one place where a token's whitespace and control characters become visible marks.
"""

from __future__ import annotations

from dataclasses import dataclass

from specviz.record.i18n import N_, Translator
from specviz.record.run_trace import Round

PHASES = ("draft", "verify", "done")
KINDS = ("accepted", "rejected", "cut", "fix", "bonus", "target", "pending")
TARGET_KINDS = frozenset({"fix", "bonus", "target"})
EMITTED_KINDS = frozenset({"accepted"}) | TARGET_KINDS

WHITESPACE_MARKS = {" ": "·", "\n": "↵", "\t": "→"}
EMPTY_MARK = "∅"
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
SPECIAL_PREFIXES = ("<|", "<eos", "</s", "<s>", "<unk", "<pad")

# English text marked with N_ (specviz.record.i18n): the app passes a ``tr`` that translates it where
# it is shown; the CLI keeps the default, English.
DRAFT_VERDICT = {"accepted": N_("accepted"), "rejected": N_("rejected"), "cut": N_("accepted, but past the stop")}
WHY_TARGET = {
    "bonus": N_("every draft token was accepted, so the verify pass yields one more token for free"),
    "fix": N_("the target's own token where the draft was wrong"),
    "target": N_("the target's own token (no draft this round)"),
}
LABELS = {"fix": N_("fix"), "bonus": N_("bonus"), "target": N_("target")}  # a target token's label, as shown


@dataclass(frozen=True)
class Span:
    """One marked token: its kind (see KINDS), raw text, label ("" or fix/bonus/target) and tooltip."""

    kind: str
    text: str
    label: str = ""
    tip: str = ""

    @property
    def emitted(self) -> bool:
        """Whether this token is part of the output."""
        return self.kind in EMITTED_KINDS


def _is_control(ch: str) -> bool:
    o = ord(ch)
    return o < 32 or 127 <= o < 160 or ch in BIDI_CONTROLS


def _code(ch: str) -> str:
    o = ord(ch)
    return f"\\x{o:02x}" if o < 256 else f"\\u{o:04x}"


def printable_parts(text: str) -> list[tuple[str, bool]]:
    """``text`` as (piece, is_mark) pairs: space, newline and tab become quiet marks
    (· ↵ →), any other control character its escape (\\x1b, \\u202e), nothing at all ∅.
    The other pieces are the text itself, unescaped."""
    if text == "":
        return [(EMPTY_MARK, True)]
    parts: list[tuple[str, bool]] = []
    for ch in text:
        if ch in WHITESPACE_MARKS:
            parts.append((WHITESPACE_MARKS[ch], True))
        elif _is_control(ch):
            parts.append((_code(ch), True))
        elif parts and not parts[-1][1]:
            parts[-1] = (parts[-1][0] + ch, False)
        else:
            parts.append((ch, False))
    return parts


def printable(text: str) -> str:
    """``text`` with its whitespace and control characters made visible: safe for a terminal."""
    return "".join(piece for piece, _ in printable_parts(text))


def is_special(text: str) -> bool:
    """A special token's text, such as <|im_end|>."""
    t = text.strip()
    return t.startswith(SPECIAL_PREFIXES) and t.endswith(">")


def target_label(rnd: Round) -> str:
    """What the target's own token is in this round: bonus, fix or (no draft) target."""
    if rnd.bonus:
        return "bonus"
    if rnd.proposed:
        return "fix"
    return "target"


def _prob_tip(rnd: Round, i: int, tr: Translator = N_) -> str:
    parts = []
    if i < len(rnd.draft_probs):
        parts.append(tr(N_("draft q={q:.3f}")).format(q=rnd.draft_probs[i]))
    if i < len(rnd.target_probs):
        parts.append(tr(N_("target p={p:.3f}")).format(p=rnd.target_probs[i]))
    return (" · " + ", ".join(parts)) if parts else ""


def _where(rnd: Round, tr: Translator) -> str:
    return tr(N_("round {n}")).format(n=rnd.index + 1)


def _draft_token(i: int, tr: Translator) -> str:
    return tr(N_("draft token {i}")).format(i=i + 1)


def _pending_spans(rnd: Round, phase: str, shown: int | None, tr: Translator = N_) -> list[Span]:
    n = len(rnd.proposed_text)
    count = n if phase == "verify" or shown is None else max(0, min(shown, n))
    where, pending = _where(rnd, tr), tr(N_("proposed, not yet checked"))
    return [Span("pending", rnd.proposed_text[i], "", f"{where} · {_draft_token(i, tr)} · {pending}")
            for i in range(count)]


def _draft_kind(rnd: Round, i: int) -> str:
    if i >= rnd.accepted:
        return "rejected"
    return "accepted" if i < len(rnd.emitted) else "cut"


def round_spans(rnd: Round, phase: str = "done", shown: int | None = None, tr: Translator = N_) -> list[Span]:
    """The round's tokens as marked spans, in reading order.

    ``phase``: "draft" (the first ``shown`` proposals, pending), "verify" (every proposal
    pending, the target checking) or "done" (the verdicts). ``tr`` translates the
    tooltips (default: English); a span's kind and label stay the English keys."""
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}; got {phase!r}")
    if phase != "done":
        return _pending_spans(rnd, phase, shown, tr)
    where = _where(rnd, tr)
    spans = []
    for i, text in enumerate(rnd.proposed_text):
        kind = _draft_kind(rnd, i)
        tip = f"{where} · {_draft_token(i, tr)} · {tr(DRAFT_VERDICT[kind])}{_prob_tip(rnd, i, tr)}"
        spans.append(Span(kind, text, "", tip))
    if len(rnd.emitted) > rnd.accepted:  # the target's own token made it into the output
        label = target_label(rnd)
        spans.append(Span(label, rnd.correction_text, label,
                          f"{where} · {tr(LABELS[label])}: {tr(WHY_TARGET[label])}"))
    return spans


LEGEND = (  # each kind: its key text, and the longer story on hover (English, marked with N_)
    ("pending", N_("pending"), N_("drafted, not yet checked by the target")),
    ("accepted", N_("accepted"), N_("the target agreed: part of the output")),
    ("rejected", N_("rejected"), N_("the target disagreed: thrown away")),
    ("cut", N_("past the stop"),
     N_("accepted, but past a stop string, EOS or the token budget: not part of the output")),
    ("fix", N_("target's fix"), WHY_TARGET["fix"]),
    ("bonus", N_("all accepted"), WHY_TARGET["bonus"]),
    ("target", N_("no draft"), WHY_TARGET["target"]),
)
