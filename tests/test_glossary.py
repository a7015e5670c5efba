"""The Chinese catalog says each term in one word: the one docs/glossary.md gives it.

For every glossary entry, each message whose English contains the term (a listed form, whole
word, any case, outside placeholders and `code`) has a translation containing the term's
Chinese word, and no translation uses a forbidden variant. Durations and rates are in
Chinese units (秒 / 毫秒, 词元/秒), and ``in_units`` puts code-formatted durations in them.
Each failure names the term, the msgid and the msgstr, so a new message is quick to fix."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

from specviz.analysis.metrics import fmt_ms
from specviz.record.i18n import (
    MILLISECONDS,
    SECONDS,
    catalog_path,
    gettext_for,
    in_units,
)

GLOSSARY = Path(__file__).resolve().parent.parent / "docs" / "glossary.md"
COLUMNS = ("English", "中文", "Also accepted", "Forbidden", "Not this term", "Note")
UNTRANSLATED = re.compile(r"%?\{[^{}]*\}|`[^`]*`")  # placeholders and code: not text to translate
CODE = re.compile(r"`[^`]*`")
LATIN_UNIT = re.compile(r"(?:\d|\})\s*(?:ms|s|tok/s)(?![A-Za-z])|[(（]\s*(?:ms|s)\s*[)）]")


@dataclass(frozen=True)
class Term:
    english: tuple[str, ...]  # the forms: "round", "rounds"
    chinese: str
    also: tuple[str, ...]  # other accepted words (a verb form, a short label's)
    forbidden: tuple[str, ...]
    not_this_term: tuple[str, ...]  # English phrases where a form means something else

    def pattern(self) -> re.Pattern:
        """Any form as a whole word: no letter, digit or underscore either side."""
        forms = "|".join(re.escape(f) for f in sorted(self.english, key=len, reverse=True))
        return re.compile(rf"(?<!\w)(?:{forms})(?!\w)", re.IGNORECASE)

    def words(self) -> tuple[str, ...]:
        return (self.chinese, *self.also)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _list(cell: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in cell.split(",") if x.strip())


def glossary() -> list[Term]:
    """The rows of docs/glossary.md's table (its header names the columns, in COLUMNS' order)."""
    lines = [ln for ln in GLOSSARY.read_text(encoding="utf-8").splitlines() if ln.startswith("|")]
    assert lines and tuple(_cells(lines[0])) == COLUMNS, f"{GLOSSARY}: the table's header must be {COLUMNS}"
    terms = []
    for line in lines[2:]:  # after the header and its |---| row
        cells = _cells(line)
        assert len(cells) == len(COLUMNS) and cells[0] and cells[1], f"{GLOSSARY}: a bad row: {line}"
        terms.append(Term(_list(cells[0]), cells[1], _list(cells[2]), _list(cells[3]), _list(cells[4])))
    return terms


def catalog() -> list[tuple[str, str]]:
    """(msgid, msgstr) of every message in the Chinese catalog."""
    with catalog_path("zh_CN").open("rb") as f:
        return [(m.id, m.string) for m in read_po(f) if m.id]


TERMS = glossary()


def _english_text(msgid: str, term: Term) -> str:
    for phrase in term.not_this_term:
        msgid = re.sub(re.escape(phrase), " ", msgid, flags=re.IGNORECASE)
    return UNTRANSLATED.sub(" ", msgid)


def contains(term: Term, msgid: str) -> bool:
    """Whether ``msgid``'s English text uses ``term``."""
    return bool(term.pattern().search(_english_text(msgid, term)))


def forbidden_in(term: Term, msgstr: str) -> list[str]:
    """The forbidden variants in ``msgstr``, once the term's own words are taken out of it."""
    text = UNTRANSLATED.sub(" ", msgstr)
    for word in sorted(term.words(), key=len, reverse=True):
        text = text.replace(word, " ")
    return [bad for bad in term.forbidden if bad in text]


@pytest.mark.parametrize("term", TERMS, ids=[t.english[0] for t in TERMS])
def test_the_catalog_says_each_term_in_its_one_word(term):
    messages = catalog()
    problems = []
    for msgid, msgstr in messages:
        if msgstr and contains(term, msgid) and not any(w in msgstr for w in term.words()):
            problems.append(f"msgid {msgid!r}\n    msgstr {msgstr!r}\n    lacks {' / '.join(term.words())}")
        if bad := forbidden_in(term, msgstr):
            problems.append(f"msgid {msgid!r}\n    msgstr {msgstr!r}\n    uses {', '.join(bad)} (forbidden)")
    if problems:
        pytest.fail(f"docs/glossary.md: {term.english[0]!r} is {term.chinese!r} in Chinese; {len(problems)} "
                    "translations disagree:\n  " + "\n  ".join(problems), pytrace=False)


def test_every_glossary_term_occurs_in_the_catalog():
    """A form misspelt in the glossary would match nothing and check nothing."""
    messages = catalog()
    unused = [t.english[0] for t in TERMS if not any(contains(t, msgid) for msgid, _ in messages)]
    if unused:
        pytest.fail(f"docs/glossary.md: no message uses {unused}: a misspelt form?", pytrace=False)


def test_the_glossary_matches_whole_words_and_leaves_placeholders_out():
    term = next(t for t in TERMS if "round" in t.english)
    assert contains(term, "Round {n} of {total}") and contains(term, "3 rounds")
    assert not contains(term, "{round} · 2 of 4 accepted")  # a placeholder is no English
    assert not contains(term, "a pass rounds differently")  # Not this term: rounding
    assert not contains(term, "around the prompt")
    target = next(t for t in TERMS if "target" in t.english)
    assert contains(target, "target-alone tok/s") and not contains(target, "`--target-url`")
    overhead = next(t for t in TERMS if "overhead" in t.english)
    assert forbidden_in(overhead, "额外开销") == [] and forbidden_in(overhead, "开销曲线") == ["开销"]


def test_chinese_units_are_chinese():
    """秒 / 毫秒 and 词元/秒 after a number or a placeholder, axis titles included: never s, ms, tok/s."""
    latin = [f"msgid {msgid!r}\n    msgstr {msgstr!r}" for msgid, msgstr in catalog()
             if LATIN_UNIT.search(CODE.sub(" ", msgstr))]
    if latin:
        pytest.fail(f"{len(latin)} translations write a unit in Latin letters (use 秒, 毫秒, 词元/秒):\n  "
                    + "\n  ".join(latin), pytrace=False)


def test_the_unit_check_finds_latin_units():
    found = [s for s in ("耗时 12 s", "{time} ms", "%{y:.1f} tok/s", "一次前向（ms）", "12 秒", "{s} 秒",
                         "`--speculate 4 s`", "PyTorch's dynamic", "2.5 MB") if LATIN_UNIT.search(CODE.sub(" ", s))]
    assert found == ["耗时 12 s", "{time} ms", "%{y:.1f} tok/s", "一次前向（ms）"]


def test_code_formatted_durations_reach_chinese_in_chinese_units():
    zh, en = gettext_for("zh_CN"), gettext_for("en")
    assert [in_units(fmt_ms(ms), zh) for ms in (0.84, 12.0, 1240.0, 83_000.0)] == [
        "0.8 毫秒", "12 毫秒", "1.24 秒", "83 秒"]
    assert [in_units(fmt_ms(ms), en) for ms in (12.0, 1240.0)] == ["12 ms", "1.24 s"]
    assert in_units(fmt_ms(None), zh) == fmt_ms(None)  # the dash of a missing value
    assert zh(MILLISECONDS).format(ms="3.1–5.2") == "3.1–5.2 毫秒" and zh(SECONDS).format(s=5) == "5 秒"
