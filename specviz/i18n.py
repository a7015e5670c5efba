"""Translations: gettext catalogs managed with Babel.

The app's text is written in English inside ``_()`` (``gettext``) calls. Babel
extracts it (``pybabel extract``, configured in ``babel.cfg``) into
``specviz/locale/specviz.pot``; each language has a ``.po`` catalog next to it
(``specviz/locale/zh_CN/LC_MESSAGES/specviz.po``). The ``.po`` files are the source
of truth: they are compiled in memory at first use (Babel's ``read_po`` and
``write_mo``), so no binary ``.mo`` file is kept in the repository.

    pybabel extract -F babel.cfg -o specviz/locale/specviz.pot .
    pybabel update -i specviz/locale/specviz.pot -d specviz/locale -D specviz

A test fails when a message lacks its Chinese translation (tests/test_i18n.py).
"""

from __future__ import annotations

import gettext
import io
from functools import lru_cache
from pathlib import Path

LOCALE_DIR = Path(__file__).resolve().parent / "locale"
DOMAIN = "specviz"
LANGUAGES = {"en": "English", "zh_CN": "简体中文"}
DEFAULT = "en"


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
