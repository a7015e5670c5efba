"""What needs a real vLLM server but not the real pair, on one tiny server (conftest's
tiny_vllm_server: the tiny pair served by vLLM's CPU build, vLLM's own speculative decoding on;
about 25 s to start, 3 GB): the remote target's protocol (exactness against the server's own
greedy completion, the draft lengths' edges, PEARL and SSD for real), its refusals and faults,
and the Server page's metrics, checked against the server's own counters read from the raw
Prometheus text (not through specviz.models.prometheus). The real default pair against a vLLM
server serving the real target: tests/test_remote.py.

One xdist group: one worker starts the server once for all of them."""

from __future__ import annotations

import http.server
import re
import threading
import time
from pathlib import Path

import pytest
import requests
from helpers import JsonHandler, free_port

from specviz import autoregressive, load_pair, speculative
from specviz.cli.commands import main as cli_main
from specviz.measure.pearl_real import pearl_run
from specviz.measure.ssd_real import ssd_run, user_budget
from specviz.models.remote import RemoteError, RemoteTarget
from specviz.models.tiny_pair import tiny_tokenizer
from specviz.record.errors import BadInput
from specviz.record.run_config import RunConfig

pytestmark = [pytest.mark.vllm, pytest.mark.xdist_group("tiny_vllm")]
SERVER_PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "server.py")
PROMPT = "def fibonacci(n):"
COUNTERS = {"drafts": "vllm:spec_decode_num_drafts_total", "tokens": "vllm:spec_decode_num_draft_tokens_total",
            "accepted": "vllm:spec_decode_num_accepted_tokens_total"}


def counters(url: str) -> dict[str, float]:
    """The three spec-decode counters, summed over their label sets, from /metrics as served."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    return {key: sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))
            for key, name in COUNTERS.items()}


def test_the_server_page_shows_the_servers_own_speculative_decoding(tiny_vllm_server, app_tiny_only):
    from streamlit.testing.v1 import AppTest

    url = tiny_vllm_server.url
    at = AppTest.from_file(SERVER_PAGE, default_timeout=120)
    at.run()
    at.sidebar.text_input(key="server_url").set_value(f"{url}/metrics")
    at.sidebar.toggle(key="server_watch").set_value(True)
    at.run()  # the window's first read
    assert not at.exception and not at.error
    before = counters(url)
    requests.post(f"{url}/v1/completions", timeout=120, json={
        "model": "tiny", "prompt": PROMPT, "max_tokens": 48, "temperature": 0.0}).raise_for_status()
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


# --- the remote target's protocol ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair(tiny_vllm_server):
    """The tiny draft, local, and the tiny target on the server."""
    return load_pair(draft=str(tiny_vllm_server.draft), target_url=tiny_vllm_server.url, dtype="float32")


def config(**kw) -> RunConfig:
    base = dict(prompt=PROMPT, gamma=4, max_new_tokens=24, temperature=0.0)
    base.update(kw)
    return RunConfig(**base)


def server_greedy(pair, prompt_ids: list[int], n: int) -> list[int]:
    """The server's own greedy completion of the same prompt ids."""
    r = requests.post(f"{pair.remote.url}/v1/completions", timeout=120, json={
        "model": pair.remote.model, "prompt": prompt_ids, "max_tokens": n, "temperature": 0.0,
        "return_token_ids": True})
    r.raise_for_status()
    return r.json()["choices"][0]["token_ids"]


def test_target_alone_equals_the_servers_own_greedy_completion(pair):
    trace = autoregressive(pair, config(max_new_tokens=12)).run()
    assert trace.output_ids == server_greedy(pair, trace.prompt_ids, 12)
    assert all(len(r.emitted) == 1 for r in trace.rounds)


@pytest.mark.parametrize("gamma", [1, 8])
def test_draft_lengths_one_and_eight_give_the_servers_own_greedy_completion(pair, gamma):
    trace = speculative(pair, config(gamma=gamma)).run()
    assert trace.output_ids == server_greedy(pair, trace.prompt_ids, len(trace.output_ids))
    assert max(r.gamma for r in trace.rounds) == gamma
    assert 0 < trace.summary["acceptance_rate"] < 1  # a random tiny pair: some drafts rejected, some kept


def test_pearl_runs_for_real_against_the_remote_target(pair):
    """The overlap for real (issue: past one machine): the local draft drafts while the
    server verifies, and the output is still the server's own greedy completion."""
    run = pearl_run(pair, config())
    trace = run.trace
    assert trace.output_ids == server_greedy(pair, trace.prompt_ids, len(trace.output_ids))
    draft = [(e.start_ms, e.end_ms) for e in trace.events if e.lane == "draft" and e.is_forward]
    target = [(e.start_ms, e.end_ms) for e in trace.events if e.lane == "target" and e.kind == "verify_forward"]
    overlap = sum(max(0.0, min(de, te) - max(ds, ts)) for ds, de in draft for ts, te in target)
    assert overlap > 0  # the draft really drafted while the server verified


def test_ssd_runs_for_real_against_the_remote_target(pair):
    """SSD for real (specviz/measure/ssd_real.py) against the server: the local draft prepares
    its branches while the server verifies; the output is still the server's own greedy
    completion, and some rounds find their block ready."""
    run = ssd_run(pair, config(), user_budget(None, 4, 2))
    trace = run.trace
    assert trace.output_ids == server_greedy(pair, trace.prompt_ids, len(trace.output_ids))
    assert run.hits >= 1 and run.branches_per_round
    assert any(e.kind == "network" for e in trace.events)
    overlap = 0.0
    for r in trace.rounds:  # the glue and branch passes start with the request and run beside it
        sent = min(e.start_ms for e in r.events if e.lane == "target")
        done = max(e.end_ms for e in r.events if e.lane == "target" and e.is_forward)
        overlap += sum(max(0.0, min(e.end_ms, done) - e.start_ms) for e in r.events
                       if e.lane == "draft" and e.is_forward and e.start_ms >= sent)
    assert overlap > 0


# --- refusals and faults, each naming the URL ---------------------------------------------------------


def test_sampling_is_refused(pair):
    with pytest.raises(BadInput, match="greedy only") as e:
        speculative(pair, config(temperature=0.8))
    assert e.value.field == "temperature"


def test_the_cli_refuses_sampling_before_loading(capsys):
    code = cli_main(["generate", "--target-url", "http://127.0.0.1:9", "--prompt", "hi", "--temperature", "0.7"])
    assert code == 2
    assert "greedy only" in capsys.readouterr().err


def test_a_model_the_server_does_not_have(tiny_vllm_server):
    url = tiny_vllm_server.url
    with pytest.raises(RemoteError, match="does not serve a model named 'no-such-model'") as e:
        RemoteTarget(url, "no-such-model").reachable()
    assert url in str(e.value) and "it serves: tiny" in str(e.value)


def test_connection_refused():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RemoteError, match="cannot connect") as e:
        load_pair(target_url=url)
    assert url in str(e.value)


def test_an_http_400_carries_the_servers_message(pair):
    too_long = [pair.tokenizer.encode("x")[0]] * (pair.remote.max_model_len + 10)
    with pytest.raises(RemoteError, match="HTTP 400") as e:
        pair.remote.verify(too_long, [1, 2], clock=None)
    assert pair.remote.url in str(e.value)


def test_a_server_that_stops_mid_run_leaves_the_run_unfinished(pair):
    run = speculative(pair, config())
    next(run)
    url = pair.remote.url
    try:
        pair.remote.url = f"http://127.0.0.1:{free_port()}"  # the server is gone
        with pytest.raises(RemoteError, match="cannot connect"):
            next(run)
    finally:
        pair.remote.url = url
    assert not run.done and run.trace.stop_reason == "" and not run.trace.summary


class _Plain(JsonHandler):
    """A real HTTP server that is not vLLM: 503 for everything, or (``openai``) an
    OpenAI-compatible server without vLLM's prompt_logprobs extension."""

    openai = False

    def do_GET(self):  # noqa: N802
        if not self.openai:
            return self.send(503, {"error": {"message": "no backend available"}})
        self.send(200, {"data": [{"id": "plain"}]})

    def do_POST(self):  # noqa: N802
        body = self.body()
        if not self.openai:
            return self.send(503, {"error": {"message": "no backend available"}})
        if self.path == "/tokenize":
            return self.send(200, {"tokens": self.server.tokenizer.encode(body["prompt"], add_special_tokens=False),
                                    "max_model_len": 4096})
        self.send(200, {"choices": [{"text": "x", "logprobs": {"top_logprobs": [{"token_id:1": -0.1}]}}]})


@pytest.fixture
def plain_server(request):
    handler = type("Handler", (_Plain,), {"openai": request.param})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.tokenizer = tiny_tokenizer()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()


@pytest.mark.parametrize("plain_server", [False], indirect=True)
def test_an_http_5xx_names_the_url(plain_server):
    with pytest.raises(RemoteError, match="HTTP 503: no backend available") as e:
        RemoteTarget(plain_server).reachable()
    assert plain_server in str(e.value)


@pytest.mark.parametrize("plain_server", [True], indirect=True)
def test_a_server_without_prompt_logprobs_is_refused(plain_server):
    remote = RemoteTarget(plain_server)
    tokenizer = tiny_tokenizer()
    remote.connect(tokenizer, len(tokenizer))  # tokenizes alike, returns top log-probs
    with pytest.raises(RemoteError, match="no prompt logprobs") as e:
        remote.verify([1, 2, 3], [4, 5], clock=None)
    assert plain_server in str(e.value)
