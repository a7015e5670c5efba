"""Server: a vLLM server's own speculative decoding, live from its Prometheus metrics
(``/metrics``), with the names and definitions of our own traces, beside the user's last
Live run. The page scrapes every few seconds while it is open; nothing runs a model here.
The logic is in specviz.ui.server_page."""

from specviz import ui
from specviz.ui import server_page as page
from specviz.ui.lang import language_switch

ui.page_chrome()
language_switch()
page.sidebar()
ui.sidebar_pair()
state = page.server_state()

page.render_intro()
page.render_watch(state)
