"""The Server page: a vLLM server's own speculative decoding, live from its Prometheus metrics
(``/metrics``), with the names and definitions of our own traces, beside the user's last Live run.

``server_state`` reads the page's session state into a ``ServerState`` (the address, checked;
how often to read; whether to watch; the window of reads); the pure functions decide what is
shown (``metrics_address``, ``local_summary``, ``metric_cells``), and the ``render_*`` functions
draw, ``render_watch`` reading the server every few seconds while it is watched.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from specviz.analysis.metrics import fmt_pct
from specviz.figures import server as FS
from specviz.models.prometheus import scrape, spec_decode_rates
from specviz.models.remote import RemoteError, normalise_url
from specviz.record.i18n import N_, Translator
from specviz.ui import server_mode
from specviz.ui.lang import _

KEEP = 720  # scrapes kept: an hour at the default 5 s
DEFAULT_URL = os.environ.get("SPECVIZ_METRICS_URL", "http://127.0.0.1:8000/metrics")


@dataclass
class ServerState:
    """The Server page: the metrics address (``url`` once checked, else ``error``), how often it
    is read, whether it is watched, and the window of reads kept for it."""

    address: str
    every: int = 5
    watching: bool = False
    url: str | None = None
    error: str | None = None
    scrapes: list = field(default_factory=list)


def metrics_address(server_on: bool, typed: str | None) -> str:
    """The address to read: in server mode always SPECVIZ_METRICS_URL's (a public server must not
    fetch addresses its users type: SSRF), else the one typed."""
    return DEFAULT_URL if server_on or typed is None else typed


def sidebar() -> None:
    """The address (or, in server mode, where it is set), the refresh period, the Watch switch."""
    with st.sidebar:
        if server_mode.current().on:
            st.caption(_("Server mode: the metrics address is set by SPECVIZ_METRICS_URL: {url}").format(
                url=DEFAULT_URL))
        else:
            st.text_input(_("Metrics address"), value=DEFAULT_URL, key="server_url",
                          help=_("A vLLM server's /metrics (the OpenAI-compatible server exports it)."))
        st.select_slider(_("Refresh every"), [2, 5, 10, 30], value=5, key="server_every",
                         format_func=lambda s: _("{s} s").format(s=s))
        st.toggle(_("Watch"), value=False, key="server_watch")


def server_state() -> ServerState:
    """The page's state, the sidebar drawn; a new window of reads when the address changed."""
    ss = st.session_state
    state = ServerState(address=metrics_address(server_mode.current().on, ss.get("server_url")),
                        every=ss["server_every"], watching=bool(ss["server_watch"]))
    try:
        state.url = normalise_url(state.address)
    except Exception as exc:  # BadInput: shown, never a traceback
        state.error = str(exc)
        return state
    if ss.get("server_scrapes_url") != state.url:  # another server: start a new window
        ss["server_scrapes"], ss["server_scrapes_url"] = [], state.url
    state.scrapes = ss["server_scrapes"]
    return state


# --- what is shown: pure ------------------------------------------------------------------------

def local_summary(live: Any) -> dict | None:
    """The user's last Live run's summary, if it has one."""
    return live.trace.summary if live is not None and live.trace is not None and live.trace.summary else None


def metric_cells(window: Any, local: dict | None, tr: Translator = _) -> list[tuple[str, str, str | None]]:
    """The four metrics over the window (label, value, the user's run beside it or None)."""
    mal = window.mean_acceptance_length
    return [
        (tr(N_("Rounds (drafts)")), f"{window.drafts:,.0f}", None),
        (tr(N_("Drafted tokens")), f"{window.draft_tokens:,.0f}", None),
        (tr(N_("Acceptance rate")), fmt_pct(window.acceptance_rate),
         None if local is None or local.get("acceptance_rate") is None else
         tr(N_("your run: {v}")).format(v=fmt_pct(local["acceptance_rate"]))),
        (tr(N_("Mean acceptance length")), "–" if mal is None else f"{mal:.2f}",
         None if local is None else tr(N_("your run: {v:.2f}")).format(v=local["mean_acceptance_length"])),
    ]


# --- drawing -----------------------------------------------------------------------------------

def render_intro() -> None:
    st.markdown("## " + _("A server's own speculative decoding"))
    st.markdown(_(
        "vLLM can run speculative decoding itself (a draft model, n-gram lookup, EAGLE, …) and counts what it "
        "does: rounds (`vllm:spec_decode_num_drafts`), drafted tokens (`…_num_draft_tokens`), accepted tokens "
        "(`…_num_accepted_tokens`) and accepted tokens per draft position (`…_num_accepted_tokens_per_pos`). "
        "Between two reads of those counters this page computes what our own traces show, with the same "
        "definitions: **acceptance rate** = accepted ÷ drafted, **mean acceptance length** = 1 + accepted ÷ "
        "rounds (tokens per target pass), **per-position acceptance** = rounds that accepted position i ÷ rounds."))


def render_watch(state: ServerState) -> None:
    """The metrics, read every ``state.every`` seconds while watched; what to do before."""
    if state.error is not None:
        st.error(state.error, icon=":material/error:")
        return
    if state.watching or state.scrapes:
        st.fragment(run_every=state.every if state.watching else None)(watch)(state.url)
    else:
        st.info(_("Turn on **Watch** in the sidebar to read the server's metrics every few seconds."),
                icon=":material/visibility:")


def watch(url: str) -> None:
    """One read of the server (a fragment: it reruns alone), and the window's rates drawn."""
    scrapes = st.session_state["server_scrapes"]
    try:
        scrapes.append(scrape(url))
    except RemoteError as exc:
        st.error(str(exc), icon=":material/cloud_off:")
        st.caption(_("Start one with `python -m specviz.models.vllm_local serve --speculate 4` (README: Bigger models)."))
        return
    del scrapes[:-KEEP]
    last = scrapes[-1]
    if not last.has_spec_decode:
        st.info(_("{url} answers, but exports no speculative decoding counters: this server does not run "
                  "speculative decoding. Start vLLM with `--speculative-config` (README: Bigger models).").format(
            url=url), icon=":material/info:")
        return
    window = spec_decode_rates(scrapes[0], last)
    local = local_summary(st.session_state.get("live"))
    for col, (label, value, delta) in zip(st.columns(4), metric_cells(window, local)):
        col.metric(label, value, delta=delta, delta_color="off")
    if len(scrapes) < 2 or window.drafts == 0:
        st.caption(_("Watching since {n} read(s) ago. Send the server some requests: the numbers count what it "
                     "does from now on.").format(n=len(scrapes)))
        return
    st.plotly_chart(FS.rates_figure(scrapes, tr=_), width="stretch", key="server_rates")
    per_pos = local.get("per_position_acceptance") if local else None
    st.plotly_chart(FS.per_position_figure(window.per_position_acceptance, per_pos, tr=_), width="stretch",
                    key="server_per_pos")
    st.caption(_("Over the last {s:.0f} s ({n} reads of {url}). The per-position shares assume every round "
                 "drafts the server's full draft length, as vLLM's proposers do.").format(
        s=window.seconds, n=len(scrapes), url=url))
