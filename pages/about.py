"""How it works: the idea in one page, with the marks the app uses.

For someone who has never heard of speculative decoding: what the draft produces, why one
verify pass can check many tokens, why each model waits, why acceptance depends on the text
(with the recorded runs' own rates and tokens), what α and c are, why γ has a best value,
why the output is the target's own, when it does not help, and what PEARL and SSD change.
The logic is in specviz.ui.about_page."""

from specviz import ui
from specviz.ui import about_page as page
from specviz.ui.lang import language_switch

ui.page_chrome()
language_switch()
ui.sidebar_pair(divider=False)
state = page.about_state()
page.render(state)
