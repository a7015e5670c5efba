"""Start here: the guided tour of a first run, in eight steps (specviz.ui.tour)."""

from specviz import ui
from specviz.ui import server_mode, tour
from specviz.ui.lang import language_switch
from specviz.ui.pair import env_pair

ui.page_chrome()
language_switch()
tour.render_start(installed=server_mode.pair_installed(env_pair()))
ui.sidebar_pair()  # and the pair starts loading while the tour is read
