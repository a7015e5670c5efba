"""Text put into Streamlit's Markdown as written: ``code_span``, and a token as one
(``token_span``: its whitespace made visible). Pure: no Streamlit."""

from __future__ import annotations

import re

from specviz.analysis.marks import printable


def code_span(text: str) -> str:
    """``text`` as a Markdown code span: shown as written, whatever it holds (Markdown links,
    a bare URL, LaTeX between $ signs, HTML, emoji shortcodes): model or file text, or a
    link's text, which is anyone's. The fence is one backtick longer than any run of
    backticks inside; newlines become spaces (a span is one line).
    (Backslash escapes are not enough in Streamlit: its Markdown links a bare URL, and draws
    emoji shortcodes, after the escapes are resolved; a code span is left alone.)"""
    text = " ".join(str(text).splitlines())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def token_span(text: str) -> str:
    """A token's text as a code span, its whitespace made visible (· a space, ↵ a newline)."""
    return code_span(printable(text))
