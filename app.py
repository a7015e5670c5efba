"""specviz: watch speculative decoding run, round by round.

    streamlit run app.py                    # the embedded Qwen2.5-Coder pair
    SPECVIZ_PAIR=tiny streamlit run app.py  # the tiny random pair: instant, for tests

Each page sets up its own chrome (page config, stylesheet, logo, the pair card):
see specviz.ui.page_chrome for why.
"""

import streamlit as st

page = st.navigation(
    [
        st.Page("pages/live.py", title="Live", icon=":material/play_circle:", default=True),
        st.Page("pages/replay.py", title="Replay", icon=":material/replay:"),
        st.Page("pages/parallel.py", title="Parallel", icon=":material/view_week:"),
        st.Page("pages/about.py", title="How it works", icon=":material/school:"),
    ],
    position="top",
)
page.run()
