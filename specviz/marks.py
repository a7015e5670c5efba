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

from specviz.trace import Round

PHASES = ("draft", "verify", "done")
KINDS = ("accepted", "rejected", "cut", "fix", "bonus", "target", "pending")
TARGET_KINDS = frozenset({"fix", "bonus", "target"})
EMITTED_KINDS = frozenset({"accepted"}) | TARGET_KINDS

WHITESPACE_MARKS = {" ": "·", "\n": "↵", "\t": "→"}
EMPTY_MARK = "∅"
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
SPECIAL_PREFIXES = ("<|", "<eos", "</s", "<s>", "<unk", "<pad")

DRAFT_VERDICT = {"accepted": "accepted", "rejected": "rejected", "cut": "accepted, but past the stop"}
WHY_TARGET = {
    "bonus": "every draft token was accepted, so the verify pass yields one more token for free",
    "fix": "the target's own token where the draft was wrong",
    "target": "the target's own token (no draft this round)",
}


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


def _prob_tip(rnd: Round, i: int) -> str:
    parts = []
    if i < len(rnd.draft_probs):
        parts.append(f"draft q={rnd.draft_probs[i]:.3f}")
    if i < len(rnd.target_probs):
        parts.append(f"target p={rnd.target_probs[i]:.3f}")
    return (" · " + ", ".join(parts)) if parts else ""


def _pending_spans(rnd: Round, phase: str, shown: int | None) -> list[Span]:
    n = len(rnd.proposed_text)
    count = n if phase == "verify" or shown is None else max(0, min(shown, n))
    where = f"round {rnd.index + 1}"
    return [Span("pending", rnd.proposed_text[i], "", f"{where} · draft token {i + 1} · proposed, not yet checked")
            for i in range(count)]


def _draft_kind(rnd: Round, i: int) -> str:
    if i >= rnd.accepted:
        return "rejected"
    return "accepted" if i < len(rnd.emitted) else "cut"


def round_spans(rnd: Round, phase: str = "done", shown: int | None = None) -> list[Span]:
    """The round's tokens as marked spans, in reading order.

    ``phase``: "draft" (the first ``shown`` proposals, pending), "verify" (every proposal
    pending, the target checking) or "done" (the verdicts)."""
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}; got {phase!r}")
    if phase != "done":
        return _pending_spans(rnd, phase, shown)
    where = f"round {rnd.index + 1}"
    spans = []
    for i, text in enumerate(rnd.proposed_text):
        kind = _draft_kind(rnd, i)
        spans.append(Span(kind, text, "", f"{where} · draft token {i + 1} · {DRAFT_VERDICT[kind]}{_prob_tip(rnd, i)}"))
    if len(rnd.emitted) > rnd.accepted:  # the target's own token made it into the output
        label = target_label(rnd)
        spans.append(Span(label, rnd.correction_text, label, f"{where} · {label}: {WHY_TARGET[label]}"))
    return spans


LEGEND = (  # each kind: its key text, and the longer story on hover
    ("pending", "pending", "drafted, not yet checked by the target"),
    ("accepted", "accepted", "the target agreed: part of the output"),
    ("rejected", "rejected", "the target disagreed: thrown away"),
    ("cut", "past the stop", "accepted, but past a stop string, EOS or the token budget: not part of the output"),
    ("fix", "target's fix", WHY_TARGET["fix"]),
    ("bonus", "all accepted", WHY_TARGET["bonus"]),
    ("target", "no draft", WHY_TARGET["target"]),
)
