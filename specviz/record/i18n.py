"""Translations: gettext catalogs managed with Babel.

The app's text is written in English inside ``_()`` (``gettext``) calls. Library
modules the English-only CLI also uses (metrics, marks, figures) do not import
Streamlit: they mark their text with ``N_()`` (an identity: the deferred-translation
pattern) and translate it at display time through a ``tr`` function the app passes
in (``specviz.ui.lang._``; the CLI keeps the default, English). Babel extracts both
keywords (``pybabel extract``, configured in ``babel.cfg``) into
``specviz/locale/specviz.pot``; each language has a ``.po`` catalog next to it
(``specviz/locale/zh_CN/LC_MESSAGES/specviz.po``). The ``.po`` files are the source
of truth: they are compiled in memory at first use (Babel's ``read_po`` and
``write_mo``), so no binary ``.mo`` file is kept in the repository.

    pybabel extract -F babel.cfg -k _ -k N_ --no-location --sort-output --omit-header -o specviz/locale/specviz.pot .
    pybabel update -i specviz/locale/specviz.pot -d specviz/locale -D specviz --width 100

A test fails when a message lacks its Chinese translation (tests/test_i18n.py).
"""

from __future__ import annotations

import gettext
import io
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path

LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"
DOMAIN = "specviz"
LANGUAGES = {"en": "English", "zh_CN": "简体中文"}
DEFAULT = "en"

Translator = Callable[[str], str]  # a ``tr``: English text in, the page's language out


def N_(message: str) -> str:
    """Mark ``message`` for extraction without translating it (translated later, where it is
    shown, by a ``tr``). Also the English ``tr``: the identity."""
    return message


@lru_cache(maxsize=256)
def template_pattern(template: str) -> re.Pattern:
    """A regex that matches the text ``template`` formats to, each ``{name}`` a group (a
    name used twice must match the same text twice)."""
    parts, seen, out = re.split(r"\{(\w+)\}", template), set(), []
    for i, part in enumerate(parts):  # literal, name, literal, name, ..., literal
        if i % 2 == 0:
            out.append(re.escape(part))
        else:
            out.append(f"(?P={part})" if part in seen else f"(?P<{part}>.+?)")
            seen.add(part)
    return re.compile("".join(out) + "$")


def translate_known(message: str, templates: Iterable[str], tr: Translator,
                    values: dict[str, Callable[[str], str]] | None = None) -> str:
    """``message`` (English text a library module formatted from one of ``templates``, all
    marked with ``N_``) in ``tr``'s language, its values carried over (``values`` may convert
    some of them); a message that matches no template comes back as it is."""
    for template in templates:
        if m := template_pattern(template).match(message):
            found = {k: (values or {}).get(k, str)(v) for k, v in m.groupdict().items()}
            return tr(template).format(**found)
    return message


MILLISECONDS = N_("{ms} ms")  # a duration's unit words: 毫秒 and 秒 in Chinese (docs/glossary.md)
SECONDS = N_("{s} s")


def in_units(duration: str, tr: Translator = N_) -> str:
    """A duration as ``specviz.analysis.metrics.fmt_ms`` writes it ("0.8 ms", "1.24 s") with ``tr``'s unit
    words ("0.8 毫秒", "1.24 秒"); other text (the dash of a missing value) as it is. A span
    takes a template itself: ``tr(MILLISECONDS).format(ms="3.1–5.2")``."""
    return translate_known(duration, (MILLISECONDS, SECONDS), tr)


def catalog_path(lang: str) -> Path:
    return LOCALE_DIR / lang / "LC_MESSAGES" / f"{DOMAIN}.po"


@lru_cache(maxsize=8)
def translations(lang: str) -> gettext.NullTranslations:
    """The compiled catalog of ``lang`` (English: no catalog, the source text itself)."""
    path = catalog_path(lang)
    if lang == DEFAULT or not path.is_file():
        return gettext.NullTranslations()
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    with path.open("rb") as f:
        catalog = read_po(f, locale=lang, domain=DOMAIN)
    buf = io.BytesIO()
    write_mo(buf, catalog, use_fuzzy=False)
    buf.seek(0)
    return gettext.GNUTranslations(buf)


def match(tag: str | None) -> str:
    """The supported language for a browser or URL language tag: zh, zh-CN, zh-Hans -> zh_CN."""
    if not tag:
        return DEFAULT
    t = tag.replace("-", "_").lower()
    if t.startswith("zh"):
        return "zh_CN"
    return DEFAULT


def gettext_for(lang: str):
    """A ``_`` for ``lang``."""
    return translations(lang).gettext
