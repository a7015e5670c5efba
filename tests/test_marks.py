"""specviz.analysis.marks: one model of a round's marked tokens, rendered alike as HTML (app) and ANSI (CLI)."""

from __future__ import annotations

import re

import pytest
from helpers import make_round

from specviz import figures as F
from specviz.analysis.marks import (
    KINDS,
    Span,
    printable,
    printable_parts,
    round_spans,
    target_label,
)
from specviz.cli import commands as cli

ROUNDS = {
    "fix": make_round("abcd", 2, "Z"),
    "bonus": make_round("ab", 2, "c"),
    "target": make_round("", 0, "q"),
    "all rejected": make_round("abc", 0, "Z"),
    "stop inside the accepted": make_round("abc", 3, "d", emitted=[ord("a")]),
    "stop at a rejection": make_round("abcd", 2, "Z", emitted=[ord("a"), ord("b")]),
}


def _kinds(rnd, phase="done", shown=None):
    return [s.kind for s in round_spans(rnd, phase, shown)]


# --- the model ---------------------------------------------------------------------------


def test_spans_of_each_kind_of_round():
    assert _kinds(ROUNDS["fix"]) == ["accepted", "accepted", "rejected", "rejected", "fix"]
    assert _kinds(ROUNDS["bonus"]) == ["accepted", "accepted", "bonus"]
    assert _kinds(ROUNDS["target"]) == ["target"]
    assert _kinds(ROUNDS["all rejected"]) == ["rejected"] * 3 + ["fix"]
    assert _kinds(ROUNDS["stop inside the accepted"]) == ["accepted", "cut", "cut"]
    assert _kinds(ROUNDS["stop at a rejection"]) == ["accepted", "accepted", "rejected", "rejected"]
    for rnd in ROUNDS.values():
        spans = round_spans(rnd)
        assert {s.kind for s in spans} <= set(KINDS)
        assert [s.label for s in spans if s.label] == [s.kind for s in spans if s.kind in ("fix", "bonus", "target")]
        assert sum(s.emitted for s in spans) == len(rnd.emitted)  # the marks add up to the output


def test_the_targets_token_is_marked_only_when_emitted():
    for name in ("stop inside the accepted", "stop at a rejection"):
        spans = round_spans(ROUNDS[name])
        assert not [s for s in spans if s.label], name
        assert ROUNDS[name].correction_text not in [s.text for s in spans]
    assert target_label(ROUNDS["stop inside the accepted"]) == "bonus"  # what it would have been


def test_spans_carry_text_and_tooltips():
    spans = round_spans(ROUNDS["fix"])
    assert [s.text for s in spans] == ["a", "b", "c", "d", "Z"]
    assert spans[0].tip == "round 1 · draft token 1 · accepted · draft q=0.500, target p=0.250"
    assert "rejected" in spans[2].tip and spans[-1].tip.startswith("round 1 · fix: ")
    cut = round_spans(ROUNDS["stop inside the accepted"])
    assert "past the stop" in cut[1].tip


def test_pending_phases():
    rnd = ROUNDS["fix"]
    assert _kinds(rnd, "draft", shown=2) == ["pending"] * 2
    assert _kinds(rnd, "draft", shown=99) == ["pending"] * 4
    assert _kinds(rnd, "draft", shown=0) == []
    assert _kinds(rnd, "verify") == ["pending"] * 4
    with pytest.raises(ValueError):
        round_spans(rnd, "later")


def test_printable_makes_whitespace_and_control_characters_visible():
    assert printable("a b\n\tc") == "a·b↵→c"
    assert printable("") == "∅"
    assert printable("\x1b[31m") == "\\x1b[31m"
    assert printable("\x07\x7f\x9b") == "\\x07\\x7f\\x9b"
    assert printable("\u202eabc") == "\\u202eabc"
    assert printable("日本語 ok") == "日本語·ok"
    assert printable_parts("ab c") == [("ab", False), ("·", True), ("c", False)]


# --- the two renderings agree ------------------------------------------------------------

HTML_CLASSES = {"sv-acc": "accepted", "sv-rej": "rejected", "sv-cut": "cut", "sv-pend": "pending"}


def _html_kinds(html: str) -> list[str]:
    """Kinds read back from the HTML alone: the class, or for a boxed token its label."""
    kinds = []
    for cls, lab in re.findall(r'<span class="sv-tok (sv-\w+)[^"]*"[^>]*>(?:<span class="sv-lab">(\w+)</span>)?', html):
        kinds.append(lab if cls == "sv-fix" else HTML_CLASSES[cls])
    return kinds


def _ansi_kinds(line: str) -> list[str]:
    """Kinds read back from the uncoloured CLI line alone: its brackets and tildes."""
    kinds = []
    for tok in line.split(" ok ", 1)[1].split(" "):
        if tok.startswith("[+"):
            kinds.append("bonus")
        elif tok.startswith("[="):
            kinds.append("target")
        elif tok.startswith("["):
            kinds.append("fix")
        elif tok.startswith("~"):
            kinds.append("rejected")
        elif tok.startswith("{"):
            kinds.append("cut")
        else:
            kinds.append("accepted")
    return kinds


@pytest.mark.parametrize("name", list(ROUNDS))
def test_html_and_ansi_show_the_same_kinds_in_the_same_order(name):
    rnd = ROUNDS[name]
    expected = _kinds(rnd)
    assert _html_kinds(F.round_html(rnd)) == expected
    assert _ansi_kinds(cli.format_round(rnd, cli.Style(color=False))) == expected


def test_a_real_run_renders_alike(tiny_pair):
    from specviz import RunConfig, speculative

    trace = speculative(tiny_pair, RunConfig(prompt="Hello", gamma=3, max_new_tokens=20, stop=["}"])).run()
    assert trace.stop_reason == "stop_string" and "cut" in _kinds(trace.rounds[-1])  # the tiny pair's stop
    for rnd in trace.rounds:
        expected = _kinds(rnd)
        assert _html_kinds(F.round_html(rnd)) == expected
        if all(" ok " not in t and not t.startswith(("[", "~", "{")) for t in rnd.proposed_text + [rnd.correction_text]):
            assert _ansi_kinds(cli.format_round(rnd, cli.Style(color=False))) == expected


def test_the_same_text_is_sanitised_alike():
    rnd = make_round("ab", 1, "Z")
    rnd.proposed_text = ["x\n", "\x1b[2J"]
    html = F.round_html(rnd)
    line = cli.format_round(rnd, cli.Style(color=False))
    assert "x↵" in line and "\\x1b[2J" in line
    assert '<span class="sv-ws">↵</span>' in html and '<span class="sv-ws">\\x1b</span>[2J' in html
    assert "\x1b" not in html and "\x1b" not in line


def test_span_is_plain_data():
    s = Span("fix", "x", "fix", "tip")
    assert s.emitted and not Span("cut", "x").emitted and not Span("rejected", "x").emitted
