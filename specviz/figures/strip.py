"""The token strip as HTML: a round's marked spans (``specviz.analysis.marks``), the legend, the caption.

Marks (colour is never the only signal): accepted = green, solid underline; rejected =
red, struck through; cut (accepted, past the stop) = grey, dotted underline; the
target's own token = blue, boxed, labelled fix, bonus or target; pending = grey, dashed
box. The CSS classes (sv-tok sv-acc|sv-rej|sv-cut|sv-fix|sv-pend, sv-lab, sv-round,
sv-ws) live in assets/specviz.css.
"""

from __future__ import annotations

import html

from specviz.analysis.marks import (
    LABELS,
    LEGEND,
    TARGET_KINDS,
    Span,
    is_special,
    printable_parts,
    round_spans,
)
from specviz.record.i18n import N_, Translator
from specviz.record.run_trace import Round

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
EMPTY_HINT = N_("Press Run or Step: the output appears here, token by token.")


def visible(text: str) -> str:
    """HTML-escaped token text with whitespace and control characters made visible but quiet."""
    return "".join(f'<span class="sv-ws">{html.escape(piece)}</span>' if mark else html.escape(piece)
                   for piece, mark in printable_parts(text))


def span_html(span: Span, verifying: bool = False, tr: Translator = N_) -> str:
    """One marked token; an emitted newline also breaks the line. ``tr`` translates its label."""
    cls = CLASSES[span.kind] + (" sv-verifying" if verifying and span.kind == "pending" else "")
    special = " sv-special" if is_special(span.text) else ""
    label = f'<span class="sv-lab">{html.escape(tr(LABELS.get(span.label, span.label)))}</span>' if span.label else ""
    tip = f' title="{html.escape(span.tip, quote=True)}"' if span.tip else ""
    breaks = "<br>" * min(span.text.count("\n"), MAX_BREAKS) if span.emitted else ""
    return f'<span class="sv-tok {cls}{special}"{tip}>{label}{visible(span.text)}</span>{breaks}'


def round_html(rnd: Round, phase: str = "done", shown: int | None = None, tr: Translator = N_) -> str:
    """One round's tokens. ``phase``: "draft" (the first ``shown`` proposals appear,
    pending), "verify" (all proposals pending, the target checking) or "done". ``tr``
    translates the labels and tooltips (default: English)."""
    spans = "".join(span_html(s, verifying=phase == "verify", tr=tr) for s in round_spans(rnd, phase, shown, tr))
    where = html.escape(tr(N_("round {n}")).format(n=rnd.index + 1), quote=True)
    if phase == "draft":
        proposing = html.escape(tr(N_("the draft is proposing")), quote=True)
        return (f'<span class="sv-round sv-live" title="{where}">{spans}'
                f'<span class="sv-caret" title="{proposing}">▍</span></span>')
    if phase == "verify":
        checking = html.escape(tr(N_("target checking…")))
        return (f'<span class="sv-round sv-live" title="{where}">{spans}'
                f'<span class="sv-checking">{checking}</span></span>')
    n = len(rnd.proposed_text)
    verdict = html.escape(tr(N_("{k} of {n} accepted")).format(k=rnd.accepted, n=n), quote=True)
    return f'<span class="sv-round" title="{where}: {verdict}">{spans}</span>'


def token_strip_html(
    rounds: list[Round],
    live: Round | None = None,
    phase: str = "done",
    shown: int | None = None,
    empty_hint: str | None = None,
    tr: Translator = N_,
    follow: bool = True,
) -> str:
    """The output so far, round by round, with the marks.

    ``rounds`` are finished (drawn with their verdicts); ``live`` is the round being
    animated in ``phase``. The plain text is shown apart (the app's output box).
    ``empty_hint`` (default: EMPTY_HINT, translated by ``tr``) shows while there is nothing.
    ``follow``: a box longer than its height opens scrolled to the newest tokens (a run
    being written); False opens it at the first line (a whole run to read: class sv-top)."""
    body = "".join(round_html(r, tr=tr) for r in rounds)
    if live is not None:
        body += round_html(live, phase, shown, tr)
    if not body:
        hint = empty_hint if empty_hint is not None else tr(EMPTY_HINT)
        body = f'<span class="sv-hint">{html.escape(hint)}</span>'
    label = html.escape(tr(N_("output tokens")), quote=True)
    return (
        '<div class="sv-strip-wrap">'
        f'<div class="sv-strip{"" if follow else " sv-top"}" role="log" aria-label="{label}">'
        f'<div class="sv-strip-in">{body}</div></div>'
        "</div>"
    )


def legend_html(tr: Translator = N_) -> str:
    """The key to the token marks, with the marks themselves (``tr`` translates the text)."""
    marks = [(span_html(Span(kind, "ab", kind if kind in TARGET_KINDS else "", tr(tip)), tr=tr), tr(text))
             for kind, text, tip in LEGEND]
    marks += [('<span class="sv-ws">·</span>', tr(N_("space"))), ('<span class="sv-ws">↵</span>', tr(N_("newline")))]
    cells = "".join(f'<span class="sv-key">{mark}<span class="sv-key-t">{html.escape(text)}</span></span>'
                    for mark, text in marks)
    label = html.escape(tr(N_("legend")), quote=True)
    return f'<div class="sv-legend" aria-label="{label}">{cells}</div>'


def round_caption(rnd: Round, phase: str = "done", total: int | None = None, tr: Translator = N_) -> str:
    """One line saying what happens in this round's phase, for the status bar (``tr``
    translates it; default: English)."""
    n, i = len(rnd.proposed), rnd.index + 1
    r = tr(N_("Round {n} of {total}")).format(n=i, total=total) if total else tr(N_("Round {n}")).format(n=i)
    if phase == "draft":
        if n == 1:
            return tr(N_("{round} · the draft proposes 1 token, one forward pass")).format(round=r)
        return tr(N_("{round} · the draft proposes {n} tokens, one forward pass each")).format(round=r, n=n)
    if phase == "verify":
        text = N_("{round} · the target verifies all {n} in ONE forward pass ({positions} positions); the draft waits")
        return tr(text).format(round=r, n=n, positions=n + 1)
    if not n:
        return tr(N_("{round} · no draft this round: the target produced its own token")).format(round=r)
    k, out = rnd.accepted, len(rnd.emitted)
    if out <= k:  # the output ended inside the accepted tokens: no token of the target's
        if out == 1:
            text = N_("{round} · {k} of {n} accepted; the output ends here → 1 token")
        else:
            text = N_("{round} · {k} of {n} accepted; the output ends here → {out} tokens")
        return tr(text).format(round=r, k=k, n=n, out=out)
    if rnd.bonus:
        text = N_("{round} · all {n} accepted, plus a bonus token from the same verify pass → {out} tokens")
        return tr(text).format(round=r, n=n, out=k + 1)
    if k == 0:
        return tr(N_("{round} · 0 of {n} accepted; the target corrects position 1 → 1 token")).format(round=r, n=n)
    text = N_("{round} · {k} of {n} accepted; the target corrects position {pos} → {out} tokens")
    return tr(text).format(round=r, k=k, n=n, pos=k + 1, out=k + 1)


def output_height(text: str) -> int:
    """A height in px for the plain-text output box: about the text's own (long lines
    counted as wrapped), at most OUTPUT_MAX_PX; past that the box scrolls."""
    lines = sum(max(1, -(-len(line) // OUTPUT_WRAP_CHARS)) for line in text.split("\n"))
    return min(OUTPUT_PAD_PX + OUTPUT_LINE_PX * lines, OUTPUT_MAX_PX)
