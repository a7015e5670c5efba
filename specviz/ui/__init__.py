"""Streamlit helpers: the one specviz package that imports streamlit.

The pages call everything through ``from specviz import ui`` and ``ui.<name>``; the
names live in small modules: ``chrome`` (page chrome, paths and the shared constants),
``pair`` (the model pair, loaded once per server process in a background thread, and
the sidebar's pair card), ``state`` (the live run's session state and its settings),
``view`` (placeholders a run is drawn into and updated in place, and the slow-motion
round), ``controller`` (Run, Step, Autoplay and Stop, the race and the wrap-up),
``history`` (the run-history table) and ``replay`` (a recorded trace, with no model).
The engine's clock stops while a round is held, so the slow-motion animation between
rounds never touches the timings shown: they are the real ones.
"""

from specviz.record.limits import MAX_GAMMA
from specviz.ui.chrome import (
    EXAMPLES,
    SHORTCUTS,
    SPEEDS,
    keep_choices,
    recorded_traces,
    translator,
)
from specviz.ui.controller import handle_command, play, render_state, step
from specviz.ui.frame import page_chrome
from specviz.ui.history import history_section
from specviz.ui.pair import loaded_pair, require_pair, sidebar_pair
from specviz.ui.replay import load_trace_file, render_replay, replay_play
from specviz.ui.sources import (
    load_source,
    recorded_baseline,
    replay_sources,
    schedule_costs,
)
from specviz.ui.state import (
    LiveState,
    check_inputs,
    context_note,
    draft_head_choices,
    draft_head_label,
    init_controls,
    live_state,
    pick_example,
    read_config,
    set_cmd,
)
from specviz.ui.view import RunView

__all__ = [
    "EXAMPLES",
    "MAX_GAMMA",
    "SHORTCUTS",
    "SPEEDS",
    "LiveState",
    "RunView",
    "check_inputs",
    "context_note",
    "draft_head_choices",
    "draft_head_label",
    "handle_command",
    "history_section",
    "init_controls",
    "keep_choices",
    "live_state",
    "load_source",
    "load_trace_file",
    "page_chrome",
    "pick_example",
    "play",
    "read_config",
    "recorded_traces",
    "render_replay",
    "render_state",
    "replay_play",
    "replay_sources",
    "recorded_baseline",
    "schedule_costs",
    "loaded_pair",
    "require_pair",
    "set_cmd",
    "sidebar_pair",
    "step",
    "translator",
]
