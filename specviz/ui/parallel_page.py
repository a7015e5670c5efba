"""The Parallel page (pages/what_if.py): the user's own greedy run, replayed under the
serial, PEARL and SSD schedules.

A run times only the passes it made. What a replay needs beyond them (SSD's batched
branch passes, a verify of another length, the target's one-token pass) is measured when
the page opens, in seconds, in a background thread that waits its turn for the engine
(``branch_costs.QuickCosts``); until it is known, the page shows no number that depends on it.

``ParallelState`` (one session_state key) holds the run shown and the last PEARL run for
real. Here: the state, the decisions, the runs to pick from and the picker;
specviz.ui.parallel_replay works out the replay (its costs, what is missing, what is being
measured) into a ``Replay``, which the parts in specviz.ui.parallel_parts draw.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

from specviz.measure import branch_costs
from specviz.record.errors import BadInput
from specviz.record.i18n import N_, Translator
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Trace
from specviz.replay import what_if
from specviz.ui import chrome
from specviz.ui.chrome import FEATURED_TRACE
from specviz.ui.lang import _
from specviz.ui.pair import engine_client, sidebar_pair
from specviz.ui.replay import load_trace_file
from specviz.ui.sources import MATCHED, load_source, recorded_baseline, replay_sources

KEY = "parallel_page"  # the one session_state key of the page's own state
POLL_S = 0.5  # how often the page looks whether a background measurement has finished
MAX_GAMMA = 16  # the γ slider's end
NOT_REPLAYABLE = {  # what_if.why_not_replayable's reasons, shown as tr(reason)
    "autoregressive": N_("it is a target-alone run."),
    "sampling": N_("it is a sampling run. At temperature above 0 each schedule would draw different random "
                   "numbers, so the same run cannot be replayed token for token: these schedules are shown "
                   "for greedy runs only."),
    "ngram": N_("its drafter is the n-gram lookup, which has no draft model to overlap."),
    "no_ranks": N_("it holds no draft ranks: record it again with this version of specviz."),
    "too_short": N_("it is too short: past reading the prompt the draft or the target made no pass, so "
                    "nothing times a replay's passes. Generate a few more tokens."),
}
FANOUT_LABELS = {"uniform": N_("uniform"), "geometric": N_("geometric"), "constant": N_("constant"),
                 "heuristic": N_("heuristic (+2 / −1)"), "confidence": N_("confidence (stop where unsure)")}
# shown as tr(label)


@dataclass
class ParallelState:
    """The run shown (``run_key``), the last PEARL run for real: (``real_key``, its ``OverlapRun``),
    and the last SSD run for real: (``parallel_real.ssd_key``, its ``RealVsSim``)."""

    run: tuple | None = None
    real: tuple | None = None
    ssd: tuple | None = None

    def opens(self, key: tuple, seeded: bool) -> bool:
        """Another run than last time (or the widgets not seeded yet): it opens at its own γ and policy."""
        return self.run != key or not seeded


def parallel_state() -> ParallelState:
    ss = st.session_state
    if KEY not in ss:
        ss[KEY] = ParallelState()
    return ss[KEY]


# --- the decisions --------------------------------------------------------------------------------

def run_key(source: Any, trace: Trace) -> tuple:
    return source, trace.config.prompt, trace.wall_ms, len(trace.output_ids)


def real_key(trace: Trace, gamma: int) -> tuple:
    """A PEARL run for real's key: stable across reruns."""
    cfg = trace.config
    return cfg.prompt, cfg.target_url, tuple(trace.output_ids), gamma


def points_text(points, tr: Translator = N_) -> str:
    """The passes in ``points`` in words: the draft's batches, its multi-token reads, the target's."""
    batches = sorted(b for m, b, _k in points if m == "draft" and b > 1)
    reads = sorted(k for m, b, k in points if m == "draft" and b == 1)
    verifies = sorted(k for m, _b, k in points if m == "target")
    listed = lambda xs: ", ".join(map(str, xs))  # noqa: E731
    parts = []
    if batches:
        parts.append(tr(N_("the draft for B sequences at once (B = {list})")).format(list=listed(batches)))
    if reads:
        parts.append(tr(N_("the draft over k tokens of one sequence (k = {list})")).format(list=listed(reads)))
    if verifies:
        parts.append(tr(N_("the target over k new tokens (k = {list})")).format(list=listed(verifies)))
    return "; ".join(parts)


def alone_rate(alone_run: Trace | None, waiting: set, costs: Any, n: int) -> float | None:
    """The target alone's tokens per second: the raced or recorded run's, else the costs' estimate
    (None while the costs still miss the target's one-token pass)."""
    if alone_run is not None:
        return alone_run.summary["tokens_per_second"]
    if what_if.ALONE not in waiting:
        return n / what_if.target_alone_ms(costs, n) * 1000
    return None


# --- the runs -------------------------------------------------------------------------------------

@st.cache_resource(show_spinner=False, max_entries=16)
def quick_costs(_pair, pair_id: int, draft_quant: str, draft_vocab: int, ctx: int,
                refs: tuple) -> branch_costs.QuickCosts:
    """One background measurer per loaded pair, run draft, context and reference passes,
    shared by every session and rerun (what it measured stays known)."""
    cfg = RunConfig(draft_quant=draft_quant, draft_vocab=draft_vocab)
    return branch_costs.QuickCosts(_pair, cfg, ctx, {ref[0]: ref for ref in refs}, lock=engine_client())


@functools.lru_cache(maxsize=16)
def read_trace(path: Path, mtime_ns: int):
    return load_trace_file(path.read_bytes())


def remote_runs() -> dict[Path, object]:
    """The recorded runs whose target was a vLLM server (assets/traces/remote/: the draft here,
    the target on a server, each request's network and queue time recorded), by file; a file
    that cannot be read maps to its error."""
    folder = chrome.TRACES_DIR / "remote"
    runs = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            runs[path] = read_trace(path, path.stat().st_mtime_ns)
        except (BadInput, OSError) as exc:
            runs[path] = exc
    return runs


def remote_sources() -> dict:
    """Label -> loader of the recorded remote-target runs that drafted (not the target alone)."""
    def loader(run):
        def load():
            if isinstance(run, Exception):
                raise run
            return run
        return load

    return {_("Recorded, remote target: ") + path.stem: loader(run) for path, run in remote_runs().items()
            if isinstance(run, Exception) or run.config.mode == "speculative"}


def remote_baseline(trace):
    """The recorded remote target-alone run of ``trace``'s prompt and settings, or None."""
    want = {k: getattr(trace.config, k) for k in MATCHED}
    for run in remote_runs().values():
        if not isinstance(run, Exception) and run.config.mode == "autoregressive" and all(
                getattr(run.config, k) == v for k, v in want.items()):
            return run
    return None


def race_of(trace) -> tuple:
    """(the target-alone run raced with ``trace``, the race's speedup, which run it is in
    words): this session's Live race, or the recorded target-alone run of the same prompt
    and settings; (None, None, None) when there is none."""
    live = st.session_state.get("live")
    if live is not None and live.trace is trace and live.comparison is not None and live.ar is not None:
        return live.ar, live.comparison.speedup, _("the target-alone run raced right after it on the Live page")
    ar = recorded_baseline(trace) or remote_baseline(trace)
    if ar is not None and ar.summary.get("tokens_per_second"):
        return ar, trace.summary["tokens_per_second"] / ar.summary["tokens_per_second"], _(
            "the recorded target-alone run of the same prompt and settings")
    return None, None, None


def opening_index(options: list[str], tr: Translator = _) -> int:
    """Where the run picker opens: the session's last Live run (listed first when there is one),
    else the featured recorded run (code, γ 4: a first click shows PEARL and SSD on a run this
    machine can complete), else the first."""
    recorded = tr("Recorded: ")
    if options and not options[0].startswith(recorded) and not options[0].startswith(tr("Recorded, remote target: ")):
        return 0
    return next((i for i, k in enumerate(options) if k == recorded + FEATURED_TRACE), 0)


# --- the page's parts -------------------------------------------------------------------------------

def render_choice() -> Trace | None:
    """The run picker (sidebar) and the title; None (with the reason shown) when there is no
    run, or one that cannot be replayed."""
    sources = {**replay_sources(speculative_only=True), **remote_sources()}
    options = list(sources)
    with st.sidebar:
        st.selectbox(_("Run to replay"), options, index=opening_index(options), key="parallel_source",
                     help=_("A greedy speculative run: this session's last Live run, or a recorded one."))
    trace, problem = load_source(sources, st.session_state.get("parallel_source"))
    sidebar_pair()

    st.markdown("## " + _("Beyond the serial wait: PEARL and SSD on your own run"))
    if trace is None:
        st.info(problem or _("Run a greedy speculative run on the Live page, or pick a recorded run in the "
                             "sidebar."), icon=":material/info:")
        return None
    if (why := what_if.why_not_replayable(trace)) is not None:
        st.warning(_("This run cannot be replayed under other schedules: ") + _(NOT_REPLAYABLE[why]),
                   icon=":material/info:")
        return None
    return trace
