"""Server: a vLLM server's own speculative decoding, live from its Prometheus metrics
(``/metrics``), with the names and definitions of our own traces, beside the user's last
Live run. The page scrapes every few seconds while it is open; nothing runs a model here."""

import os

import streamlit as st

from specviz import ui
from specviz.analysis.metrics import fmt_pct
from specviz.figures import server as FS
from specviz.models.prometheus import scrape, spec_decode_rates
from specviz.models.remote import RemoteError, normalise_url
from specviz.ui import server_mode
from specviz.ui.lang import _, language_switch

ui.page_chrome()
language_switch()
ss = st.session_state
KEEP = 720  # scrapes kept: an hour at the default 5 s
DEFAULT_URL = os.environ.get("SPECVIZ_METRICS_URL", "http://127.0.0.1:8000/metrics")
server = server_mode.current()

with st.sidebar:
    if server.on:  # a public server must not fetch addresses its users type (SSRF)
        address = DEFAULT_URL
        st.caption(_("Server mode: the metrics address is set by SPECVIZ_METRICS_URL: {url}").format(url=address))
    else:
        address = st.text_input(_("Metrics address"), value=DEFAULT_URL, key="server_url",
                                help=_("A vLLM server's /metrics (the OpenAI-compatible server exports it)."))
    st.select_slider(_("Refresh every"), [2, 5, 10, 30], value=5, key="server_every",
                     format_func=lambda s: _("{s} s").format(s=s))
    watching = st.toggle(_("Watch"), value=False, key="server_watch")
ui.sidebar_pair()

st.markdown("## " + _("A server's own speculative decoding"))
st.markdown(_(
    "vLLM can run speculative decoding itself (a draft model, n-gram lookup, EAGLE, …) and counts what it "
    "does: rounds (`vllm:spec_decode_num_drafts`), drafted tokens (`…_num_draft_tokens`), accepted tokens "
    "(`…_num_accepted_tokens`) and accepted tokens per draft position (`…_num_accepted_tokens_per_pos`). "
    "Between two reads of those counters this page computes what our own traces show, with the same "
    "definitions: **acceptance rate** = accepted ÷ drafted, **mean acceptance length** = 1 + accepted ÷ "
    "rounds (tokens per target pass), **per-position acceptance** = rounds that accepted position i ÷ rounds."))

try:
    url = normalise_url(address)
except Exception as exc:  # BadInput: shown, never a traceback
    st.error(str(exc), icon=":material/error:")
    st.stop()

if ss.get("server_scrapes_url") != url:  # another server: start a new window
    ss["server_scrapes"], ss["server_scrapes_url"] = [], url


@st.fragment(run_every=ss["server_every"] if watching else None)
def watch() -> None:
    scrapes = ss["server_scrapes"]
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
    first = scrapes[0]
    window = spec_decode_rates(first, last)
    live = ss.get("live")
    local = live.trace.summary if live is not None and live.trace is not None and live.trace.summary else None
    cols = st.columns(4)
    cols[0].metric(_("Rounds (drafts)"), f"{window.drafts:,.0f}")
    cols[1].metric(_("Drafted tokens"), f"{window.draft_tokens:,.0f}")
    cols[2].metric(_("Acceptance rate"), fmt_pct(window.acceptance_rate),
                   delta=None if local is None or local.get("acceptance_rate") is None else
                   _("your run: {v}").format(v=fmt_pct(local["acceptance_rate"])), delta_color="off")
    mal = window.mean_acceptance_length
    cols[3].metric(_("Mean acceptance length"), "–" if mal is None else f"{mal:.2f}",
                   delta=None if local is None else _("your run: {v:.2f}").format(v=local["mean_acceptance_length"]),
                   delta_color="off")
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


if watching or ss["server_scrapes"]:
    watch()
else:
    st.info(_("Turn on **Watch** in the sidebar to read the server's metrics every few seconds."),
            icon=":material/visibility:")
