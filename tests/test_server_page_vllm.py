"""The Server page on a real vLLM server's metrics: a tiny pair served by vLLM's CPU build with
vLLM's own speculative decoding on (conftest's vllm_speculating_server), and an address where
nothing answers. The page's numbers are checked against the server's own counters, read here
from the raw Prometheus text (not through specviz.models.prometheus)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import requests
from helpers import free_port

pytestmark = pytest.mark.vllm
SERVER_PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "server.py")
COUNTERS = {"drafts": "vllm:spec_decode_num_drafts_total", "tokens": "vllm:spec_decode_num_draft_tokens_total",
            "accepted": "vllm:spec_decode_num_accepted_tokens_total"}


def counters(url: str) -> dict[str, float]:
    """The three spec-decode counters, summed over their label sets, from /metrics as served."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    return {key: sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))
            for key, name in COUNTERS.items()}


def test_the_server_page_shows_the_servers_own_speculative_decoding(vllm_speculating_server, app_tiny_only):
    from streamlit.testing.v1 import AppTest

    url = vllm_speculating_server
    at = AppTest.from_file(SERVER_PAGE, default_timeout=120)
    at.run()
    at.sidebar.text_input(key="server_url").set_value(f"{url}/metrics")
    at.sidebar.toggle(key="server_watch").set_value(True)
    at.run()  # the window's first read
    assert not at.exception and not at.error
    before = counters(url)
    requests.post(f"{url}/v1/completions", timeout=120, json={
        "model": "tiny", "prompt": "def fibonacci(n):", "max_tokens": 48, "temperature": 0.0}).raise_for_status()
    time.sleep(0.5)
    after = counters(url)
    at.run()  # the second read: the window is the completion
    assert not at.exception and not at.error
    d = {key: after[key] - before[key] for key in COUNTERS}
    assert d["drafts"] > 0 and 0 < d["accepted"] < d["tokens"]  # a random tiny pair: some drafts rejected
    shown = {m.label: m.value for m in at.metric}
    assert shown["Rounds (drafts)"] == f"{d['drafts']:,.0f}"
    assert shown["Drafted tokens"] == f"{d['tokens']:,.0f}"
    assert shown["Acceptance rate"] == f"{round(100 * d['accepted'] / d['tokens'])}%"
    assert shown["Mean acceptance length"] == f"{1 + d['accepted'] / d['drafts']:.2f}"
    assert len(at.get("plotly_chart")) == 2


def test_the_server_page_names_an_unreachable_address(app_tiny_only):
    from streamlit.testing.v1 import AppTest

    url = f"http://127.0.0.1:{free_port()}/metrics"
    at = AppTest.from_file(SERVER_PAGE, default_timeout=60)
    at.run()
    at.sidebar.text_input(key="server_url").set_value(url)
    at.sidebar.toggle(key="server_watch").set_value(True)
    at.run()
    assert not at.exception
    assert any(url in e.value for e in at.error)
