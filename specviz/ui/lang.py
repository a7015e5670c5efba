"""The page language: from the URL (``?lang=zh`` / ``?lang=en``), else the session's
choice, else the browser's language. A switch in the sidebar changes it and writes it
into the URL, so a shared link opens in the same language. ``_`` translates through
specviz.record.i18n (gettext catalogs managed with Babel)."""

from __future__ import annotations

import streamlit as st

from specviz.record.i18n import LANGUAGES, gettext_for, match

URL_TAGS = {"en": "en", "zh_CN": "zh"}


def current() -> str:
    """The session's language: the URL's, once chosen the session's, else the browser's."""
    ss = st.session_state
    tag = st.query_params.get("lang")
    if tag is not None:
        ss["lang"] = match(tag)
    if "lang" not in ss:
        try:
            browser = st.context.locale
        except Exception:  # no browser context (AppTest, bare mode)
            browser = None
        ss["lang"] = match(browser)
    return ss["lang"]


def _(message: str) -> str:
    """``message`` in the page's language."""
    return gettext_for(current())(message)


def _picked() -> None:
    lang = st.session_state["lang_pick"]
    st.session_state["lang"] = lang
    st.query_params["lang"] = URL_TAGS[lang]


def language_switch() -> None:
    """The language choice at the top of the sidebar."""
    lang = current()
    st.session_state["lang_pick"] = lang
    with st.sidebar:
        st.segmented_control("Language · 语言", list(LANGUAGES), format_func=LANGUAGES.get, key="lang_pick",
                             on_change=_picked, required=True, label_visibility="collapsed")
