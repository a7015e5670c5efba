"""Figures and token-strip HTML: pure functions of a Trace (or its Rounds).

No Streamlit, no model calls: the live page, the replay page, the tests and a notebook
all draw with the same functions. Callers use ``from specviz import figures as F``; the
names live in small modules:

* ``strip``     the token strip, the legend and the round caption (HTML)
* ``timeline``  the timeline of forward passes and the race against the target alone
* ``charts``    per-position acceptance and the run history's chart
* ``history``   the run-history rows and the table as shown
* ``palette``   the colours

Model and file text (tokens, prompts, model names) is HTML-escaped before it goes into
plotly, which draws a subset of HTML in hover text, labels and titles.

The numbers are formatted by ``specviz.analysis.metrics`` (re-exported here: fmt_ms, fmt_pct,
fmt_num, live_summary); the marks come from ``specviz.analysis.marks``.
"""

from specviz.analysis.marks import target_label
from specviz.analysis.metrics import fmt_ms, fmt_num, fmt_pct, live_summary
from specviz.figures.charts import acceptance_figure, history_figure
from specviz.figures.history import (
    HISTORY_COLUMNS,
    TABLE_COLUMNS,
    history_row,
    history_table,
)
from specviz.figures.schedules import measured_vs_simulated_figure, round_trip_figure, schedules_figure
from specviz.figures.strip import (
    legend_html,
    output_height,
    round_caption,
    round_html,
    token_strip_html,
    visible,
)
from specviz.figures.timeline import (
    add_timeline,
    busy_intervals,
    esc,
    export_title,
    idle_intervals,
    race_figure,
    timeline_export_figure,
    timeline_figure,
)

__all__ = [
    "HISTORY_COLUMNS",
    "TABLE_COLUMNS",
    "acceptance_figure",
    "add_timeline",
    "busy_intervals",
    "esc",
    "export_title",
    "fmt_ms",
    "fmt_num",
    "fmt_pct",
    "history_figure",
    "history_row",
    "history_table",
    "idle_intervals",
    "legend_html",
    "live_summary",
    "output_height",
    "race_figure",
    "round_caption",
    "round_trip_figure",
    "round_html",
    "measured_vs_simulated_figure",
    "schedules_figure",
    "target_label",
    "timeline_export_figure",
    "timeline_figure",
    "token_strip_html",
    "visible",
]
