"""The figures' colours and font size.

Okabe-Ito (colour-blind safe); each colour has at least 3:1 contrast on both
Streamlit's light and dark backgrounds. The token marks use the same colours in
assets/specviz.css.
"""

ACCEPTED = "#009E73"  # bluish green
REJECTED = "#D55E00"  # vermillion
TARGET = "#0072B2"  # blue: the target's own token, and the target's forward passes
DRAFT = "#E69F00"  # orange: the draft's forward passes
NETWORK = "#56B4E9"  # sky blue: a remote target's request outside the server's compute
PENDING = "#8C8C8C"  # grey
IDLE = "#9A9A9A"  # grey, hatched
SERIES = (ACCEPTED, TARGET, DRAFT, REJECTED, "#CC79A7", "#56B4E9", "#F0E442", PENDING)  # one per category

FONT_SIZE = 15
