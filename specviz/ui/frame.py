"""The frame every page draws first: page config, stylesheet, logo, and the guided tour's step
bar while the tour runs (``specviz.ui.tour``)."""

from __future__ import annotations

import sys

import streamlit as st

from specviz.models import busy
from specviz.ui.chrome import ASSETS, calling_page
from specviz.ui.lang import _
from specviz.ui.page_threads import page_threads
from specviz.ui.tour import render_bar


def page_chrome() -> None:
    """What every page shares: page config, stylesheet, logo and, while the guided tour runs,
    its step bar (specviz.ui.tour). Each page calls it first.

    (Pages do it themselves rather than app.py: with a folder named ``pages/``, Streamlit
    runs a page file on its own when a server's first session opens on that page, and
    AppTest does so on every rerun.)

    It also names the page's threads to the busy meter, so that a run timed while the app drew its
    pages says so (``specviz.ui.page_threads``)."""
    busy.count_app_threads(page_threads)
    st.set_page_config(
        page_title=_("specviz · speculative decoding, live"),
        page_icon=str(ASSETS / "icon.svg"),
        layout="wide",
        initial_sidebar_state=340,  # a width in px: a readable prompt box
        menu_items={"About": _("specviz: a small draft model proposes, a large target verifies. "
                               "Watch what is accepted, what is thrown away, and who waits for whom.")},
    )
    st.html(f"<style>{(ASSETS / 'specviz.css').read_text(encoding='utf-8')}</style>")
    st.logo(str(ASSETS / "logo.svg"), icon_image=str(ASSETS / "icon.svg"), size="large")
    render_bar(calling_page(sys._getframe(1).f_code.co_filename))
