"""Every message the app shows exists in Chinese: the catalog covers what Babel extracts
from the sources (``_()`` in the app, ``N_()`` in the library modules the CLI shares),
with no empty or fuzzy translation, and each translation keeps its placeholders."""

from __future__ import annotations

import re
from pathlib import Path

from babel.messages.extract import extract, extract_from_dir
from babel.messages.pofile import read_po

from specviz.record.i18n import catalog_path, gettext_for, match

ROOT = Path(__file__).resolve().parent.parent
KEYWORDS = {"_": None, "N_": None}  # as in specviz/record/i18n.py's pybabel extract -k _ -k N_


def _extracted() -> set[str]:
    found = set()
    for folder in ("specviz", "pages"):
        for _file, _line, message, _comments, _ctx in extract_from_dir(
            ROOT / folder, method_map=[("**.py", "python")], keywords=KEYWORDS
        ):
            found.add(message if isinstance(message, str) else message[0])
    with (ROOT / "app.py").open("rb") as f:  # the page titles
        for _line, message, _comments, _ctx in extract("python", f, keywords=KEYWORDS):
            found.add(message if isinstance(message, str) else message[0])
    return found


def _placeholders(text: str) -> list[str]:
    """Python's {name} fields and plotly's %{name} ones."""
    return sorted(re.findall(r"%?\{[^{}]*\}", text))


def test_every_message_has_a_chinese_translation():
    with catalog_path("zh_CN").open("rb") as f:
        catalog = read_po(f)
    extracted = _extracted()
    assert len(extracted) > 20, "the extraction found the app's messages"
    missing = [m for m in sorted(extracted) if not (catalog.get(m) and catalog.get(m).string)]
    assert not missing, f"{len(missing)} messages lack a Chinese translation, first: {missing[:3]}"
    fuzzy = [m.id for m in catalog if m.id and m.fuzzy]
    assert not fuzzy, f"fuzzy (unchecked) translations: {fuzzy[:3]}"


def test_translations_keep_their_placeholders():
    with catalog_path("zh_CN").open("rb") as f:
        catalog = read_po(f)
    wrong = [m.id for m in catalog if m.id and m.string and _placeholders(m.id) != _placeholders(m.string)]
    assert not wrong, f"translations that change their placeholders: {wrong[:3]}"


def test_library_text_is_marked_not_translated():
    """N_ marks text for extraction and returns it as it is: the CLI stays English."""
    from specviz.record.i18n import N_

    assert N_("Tokens / s") == "Tokens / s"
    assert "Tokens / s" in _extracted() and "Draft pass" in _extracted() and "Live" in _extracted()


def test_the_compiled_catalog_translates():
    _ = gettext_for("zh_CN")
    assert _("hit rate") == "命中率"
    assert gettext_for("en")("hit rate") == "hit rate"


def test_language_tags_match():
    assert [match(t) for t in ("zh", "zh-CN", "zh-Hans", "zh_TW", "en-US", "fr", None, "")] == [
        "zh_CN", "zh_CN", "zh_CN", "zh_CN", "en", "en", "en", "en"]


def test_no_message_hides_inside_an_f_string():
    """Babel does not look inside f-strings: ``f"{_('idle')}"`` shows English in every
    language. Every literal message must be a plain ``_("…")`` call."""
    pattern = re.compile(r"""\bf["'][^"']*\{\s*N?_\(\s*["']""")
    hidden = [f"{p.relative_to(ROOT)}:{i}" for folder in ("specviz", "pages") for p in sorted((ROOT / folder).rglob("*.py"))
              for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not hidden, hidden
