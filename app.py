"""specviz: watch speculative decoding run, round by round.

    streamlit run app.py                    # the embedded Qwen2.5-Coder pair
    SPECVIZ_PAIR=tiny streamlit run app.py  # the tiny random pair: instant, for tests

Each page sets up its own chrome (page config, stylesheet, logo, the pair card):
see specviz.ui.page_chrome for why.
"""

import streamlit as st

from specviz.server_mode import pair_installed
from specviz.ui.lang import _, current
from specviz.ui.pair import env_pair

current()  # the language (URL, session or browser) before the page titles below are translated
ready = pair_installed(env_pair())  # if not, the app opens on the recorded runs, which need no model
page = st.navigation(
    [
        st.Page("pages/live.py", title=_("Live"), icon=":material/play_circle:", default=ready),
        st.Page("pages/replay.py", title=_("Replay"), icon=":material/replay:", default=not ready),
        st.Page("pages/parallel.py", title=_("Parallel"), icon=":material/view_week:"),
        st.Page("pages/inspect.py", title=_("Inspect a round"), icon=":material/troubleshoot:"),
        st.Page("pages/theory.py", title=_("Theory"), icon=":material/functions:"),
        st.Page("pages/costs.py", title=_("Cost curve"), icon=":material/show_chart:"),
        st.Page("pages/sweep.py", title=_("Tune"), icon=":material/tune:"),
        st.Page("pages/server.py", title=_("Server"), icon=":material/dns:"),
        st.Page("pages/about.py", title=_("How it works"), icon=":material/school:"),
    ],
    position="top",
)
page.run()
