"""specviz: watch speculative decoding run, round by round.

    streamlit run app.py                    # the embedded Qwen2.5-Coder pair
    SPECVIZ_PAIR=tiny streamlit run app.py  # the tiny random pair: instant, for tests

Each page sets up its own chrome (page config, stylesheet, logo, the pair card):
see specviz.ui.frame.page_chrome for why. This file draws the top navigation, its groups
as specviz.ui.chrome.NAV lists them.
"""

import streamlit as st

from specviz.ui.chrome import NAV, PAGES, URLS
from specviz.ui.lang import _, current
from specviz.ui.pair import env_pair
from specviz.ui.server_mode import pair_installed

current()  # the language (URL, session or browser) before the page titles below are translated
ready = pair_installed(env_pair())  # if not, the app opens on the recorded runs, which need no model
opening = "pages/live.py" if ready else "pages/replay.py"
pages = {path: st.Page(path, title=_(PAGES[path][0]), icon=PAGES[path][1], default=path == opening,
                       url_path=URLS.get(path))
         for path in PAGES}
page = st.navigation({_(group) if group else "": [pages[p] for p in paths] for group, paths in NAV.items()},
                     position="top")
page.run()
