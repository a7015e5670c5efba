"""The token strip as HTML: a round's marked spans (``specviz.marks``), the legend, the caption.

Marks (colour is never the only signal): accepted = green, solid underline; rejected =
red, struck through; cut (accepted, past the stop) = grey, dotted underline; the
target's own token = blue, boxed, labelled fix, bonus or target; pending = grey, dashed
box. The CSS classes (sv-tok sv-acc|sv-rej|sv-cut|sv-fix|sv-pend, sv-lab, sv-round,
sv-ws) live in assets/specviz.css.
"""

from __future__ import annotations

import html

from specviz.marks import LEGEND, TARGET_KINDS, Span, is_special, printable_parts, round_spans
from specviz.trace import Round

CLASSES = {
    "accepted": "sv-acc",
    "rejected": "sv-rej",
    "cut": "sv-cut",
    "fix": "sv-fix",
    "bonus": "sv-fix",
    "target": "sv-fix",
    "pending": "sv-pend",
}
MAX_BREAKS = 2  # at most one blank line per token: tidy
OUTPUT_MAX_PX = 320  # the plain-text output box scrolls past this height
OUTPUT_LINE_PX, OUTPUT_PAD_PX = 24, 34  # st.code's line (about 24 px) and padding, measured in Chromium
OUTPUT_WRAP_CHARS = 80  # about where a line wraps at 1280 px with the sidebar open


def visible(text: str) -> str:
    """HTML-escaped token text with whitespace and control characters made visible but quiet."""
    return "".join(f'<span class="sv-ws">{html.escape(piece)}</span>' if mark else html.escape(piece)
                   for piece, mark in printable_parts(text))


def span_html(span: Span, verifying: bool = False) -> str:
    """One marked token; an emitted newline also breaks the line."""
    cls = CLASSES[span.kind] + (" sv-verifying" if verifying and span.kind == "pending" else "")
    special = " sv-special" if is_special(span.text) else ""
    label = f'<span class="sv-lab">{html.escape(span.label)}</span>' if span.label else ""
    tip = f' title="{html.escape(span.tip, quote=True)}"' if span.tip else ""
    breaks = "<br>" * min(span.text.count("\n"), MAX_BREAKS) if span.emitted else ""
    return f'<span class="sv-tok {cls}{special}"{tip}>{label}{visible(span.text)}</span>{breaks}'


def round_html(rnd: Round, phase: str = "done", shown: int | None = None) -> str:
    """One round's tokens. ``phase``: "draft" (the first ``shown`` proposals appear,
    pending), "verify" (all proposals pending, the target checking) or "done"."""
    spans = "".join(span_html(s, verifying=phase == "verify") for s in round_spans(rnd, phase, shown))
    where = f"round {rnd.index + 1}"
    if phase == "draft":
        return (f'<span class="sv-round sv-live" title="{where}">{spans}'
                '<span class="sv-caret" title="the draft is proposing">▍</span></span>')
    if phase == "verify":
        return (f'<span class="sv-round sv-live" title="{where}">{spans}'
                '<span class="sv-checking">target checking…</span></span>')
    n = len(rnd.proposed_text)
    return f'<span class="sv-round" title="{where}: {rnd.accepted} of {n} accepted">{spans}</span>'


def token_strip_html(
    rounds: list[Round],
    live: Round | None = None,
    phase: str = "done",
    shown: int | None = None,
    empty_hint: str = "Press Run or Step: the output appears here, token by token.",
) -> str:
    """The output so far, round by round, with the marks.

    ``rounds`` are finished (drawn with their verdicts); ``live`` is the round being
    animated in ``phase``. The plain text is shown apart (the app's output box)."""
    body = "".join(round_html(r) for r in rounds)
    if live is not None:
        body += round_html(live, phase, shown)
    if not body:
        body = f'<span class="sv-hint">{html.escape(empty_hint)}</span>'
    return (
        '<div class="sv-strip-wrap">'
        f'<div class="sv-strip" role="log" aria-label="output tokens"><div class="sv-strip-in">{body}</div></div>'
        "</div>"
    )


def legend_html() -> str:
    """The key to the token marks, with the marks themselves."""
    marks = [(span_html(Span(kind, "ab", kind if kind in TARGET_KINDS else "", tip)), text)
             for kind, text, tip in LEGEND]
    marks += [('<span class="sv-ws">·</span>', "space"), ('<span class="sv-ws">↵</span>', "newline")]
    cells = "".join(f'<span class="sv-key">{mark}<span class="sv-key-t">{text}</span></span>' for mark, text in marks)
    return f'<div class="sv-legend" aria-label="legend">{cells}</div>'


def round_caption(rnd: Round, phase: str = "done", total: int | None = None) -> str:
    """One line saying what happens in this round's phase, for the status bar."""
    n = len(rnd.proposed)
    r = f"Round {rnd.index + 1}" + (f" of {total}" if total else "")
    if phase == "draft":
        return f"{r} · the draft proposes {n} token{'s' if n != 1 else ''}, one forward pass each"
    if phase == "verify":
        return f"{r} · the target verifies all {n} in ONE forward pass ({n + 1} positions); the draft waits"
    if not n:
        return f"{r} · no draft this round: the target produced its own token"
    k, out = rnd.accepted, len(rnd.emitted)
    if out <= k:  # the output ended inside the accepted tokens: no token of the target's
        return f"{r} · {k} of {n} accepted; the output ends here → {out} token{'s' if out != 1 else ''}"
    if rnd.bonus:
        return f"{r} · all {n} accepted, plus a bonus token from the same verify pass → {k + 1} tokens"
    return f"{r} · {k} of {n} accepted; the target corrects position {k + 1} → {k + 1} token{'s' if k else ''}"


def output_height(text: str) -> int:
    """A height in px for the plain-text output box: about the text's own (long lines
    counted as wrapped), at most OUTPUT_MAX_PX; past that the box scrolls."""
    lines = sum(max(1, -(-len(line) // OUTPUT_WRAP_CHARS)) for line in text.split("\n"))
    return min(OUTPUT_PAD_PX + OUTPUT_LINE_PX * lines, OUTPUT_MAX_PX)
