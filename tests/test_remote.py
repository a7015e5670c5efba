"""A remote target on a real vLLM server (its CPU build, in a virtual environment of its own:
``python -m specviz.models.vllm_local install``, which tests/run.sh runs), serving the default
pair's target in fp32 on loopback, without speculation of its own (the Server page's test has a
speculating server of its own: tests/test_server_page_vllm.py).

The server starts once per session (conftest's vllm_server: about 1.5 to 2 minutes on 2
cores; its start-up time is printed). ``SPECVIZ_TEST_VLLM_URL`` points the tests at a server already running
instead (the same target, started with ``python -m specviz.models.vllm_local serve``).
"""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest
import requests
from helpers import JsonHandler, free_port

from specviz import Trace, autoregressive, load_pair, speculative
from specviz.cli.commands import main as cli_main
from specviz.figures.timeline import timeline_figure
from specviz.measure.pearl_real import pearl_run
from specviz.models.remote import RemoteError, RemoteTarget
from specviz.models.tiny_pair import tiny_tokenizer
from specviz.record.errors import BadInput
from specviz.record.run_config import RunConfig

pytestmark = [pytest.mark.vllm, pytest.mark.default_pair]
SERVER_PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "server.py")

PROMPTS = {
    "code": "Write a Python function is_prime(n) that returns True when n is a prime number.",
    "chinese": "用三句话介绍长城的历史。",
}


@pytest.fixture(scope="module")
def pair(vllm_server, default_bf16_folders):
    """The default draft (its bf16 cache folder, in fp32: no fp32 conversion) and the server's target."""
    return load_pair(draft=str(default_bf16_folders[0]), target_url=vllm_server, dtype="float32")


def config(prompt: str = PROMPTS["code"], **kw) -> RunConfig:
    base = dict(prompt=prompt, gamma=4, max_new_tokens=24, temperature=0.0)
    base.update(kw)
    return RunConfig(**base)


def server_greedy(pair, prompt_ids: list[int], n: int) -> list[int]:
    """The server's own greedy completion of the same prompt ids."""
    r = requests.post(f"{pair.remote.url}/v1/completions", timeout=600, json={
        "model": pair.remote.model, "prompt": prompt_ids, "max_tokens": n, "temperature": 0.0,
        "return_token_ids": True})
    r.raise_for_status()
    return r.json()["choices"][0]["token_ids"]


# --- exactness --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PROMPTS))
def test_speculative_output_equals_the_servers_own_greedy_completion(pair, name):
    trace = speculative(pair, config(PROMPTS[name])).run()
    assert trace.output_ids == server_greedy(pair, trace.prompt_ids, len(trace.output_ids))
    assert len(trace.output_ids) == 24 or trace.stop_reason == "eos"
    assert trace.summary["acceptance_rate"] is not None


def test_target_alone_equals_the_servers_own_greedy_completion(pair):
    trace = autoregressive(pair, config(max_new_tokens=12)).run()
    assert trace.output_ids == server_greedy(pair, trace.prompt_ids, 12)
    assert all(len(r.emitted) == 1 for r in trace.rounds)


def test_a_draft_length_of_one_and_eight_agree(pair):
    runs = [speculative(pair, config(gamma=g, max_new_tokens=16)).run().output_ids for g in (1, 8)]
    assert runs[0] == runs[1]


# --- what a remote run records and draws ----------------------------------------------------------


def test_a_remote_run_is_recorded_and_drawn_as_remote(pair):
    trace = speculative(pair, config(max_new_tokens=12)).run()
    assert trace.config.target_url == pair.remote.url
    assert trace.config.target.endswith("(remote)")
    kinds = {e.kind for e in trace.events if e.lane == "target"}
    assert kinds >= {"prefill", "verify_forward", "network"}, kinds  # the server's metrics split each request
    for rnd in trace.rounds:  # the network span comes first and ends where the server's compute begins
        net = [e for e in rnd.events if e.kind == "network"]
        fw = [e for e in rnd.events if e.lane == "target" and e.is_forward]
        if net:
            assert net[0].end_ms == pytest.approx(fw[0].start_ms) and net[0].duration_ms >= 0
    assert not any(e.kind == "rollback" and e.lane == "target" for e in trace.events)  # nothing to roll back there
    # probabilities are the server's own (not renormalised over the few ids it returned)
    for rnd in trace.rounds:
        assert all(0.0 <= p <= 1.0 for p in rnd.target_probs)
        assert all(0.0 <= m <= 1.0 for m in rnd.margin)
    back = Trace.from_dict(json.loads(json.dumps(trace.to_dict())))  # a valid trace file, target_url and all
    assert back.config.target_url == pair.remote.url
    fig = timeline_figure(trace)
    names = {t.name for t in fig.data}
    assert "Network and queue (remote target)" in names
    assert any("Target (remote)" in t for t in fig.layout.yaxis.ticktext)


def test_pearl_runs_for_real_against_the_remote_target(pair):
    """The overlap for real (issue: past one machine): the local draft drafts while the
    server verifies, and the output is still the server's own greedy completion."""
    run = pearl_run(pair, config(max_new_tokens=16))
    trace = run.trace
    assert trace.output_ids == server_greedy(pair, trace.prompt_ids, len(trace.output_ids))
    draft = [(e.start_ms, e.end_ms) for e in trace.events if e.lane == "draft" and e.is_forward]
    target = [(e.start_ms, e.end_ms) for e in trace.events if e.lane == "target" and e.kind == "verify_forward"]
    overlap = sum(max(0.0, min(de, te) - max(ds, ts)) for ds, de in draft for ts, te in target)
    assert overlap > 0  # the draft really drafted while the server verified


def test_ssd_runs_for_real_against_the_remote_target(pair):
    """SSD for real (specviz/measure/ssd_real.py) against the server: the local draft prepares
    its branches while the server verifies; the output is still the server's own greedy
    completion, and on this code prompt some rounds find their block ready."""
    from specviz.measure.ssd_real import ssd_run, user_budget

    run = ssd_run(pair, config(max_new_tokens=16), user_budget(None, 4, 2))
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


def test_a_tokenizer_that_differs_is_refused(vllm_server):
    remote = RemoteTarget(vllm_server)
    with pytest.raises(RemoteError, match="tokenize differently") as e:
        remote.connect(tiny_tokenizer(), 512)
    assert vllm_server in str(e.value)


def test_a_model_the_server_does_not_have(vllm_server):
    with pytest.raises(RemoteError, match="does not serve a model named 'no-such-model'") as e:
        RemoteTarget(vllm_server, "no-such-model").reachable()
    assert vllm_server in str(e.value) and "it serves:" in str(e.value)


def test_connection_refused():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RemoteError, match="cannot connect") as e:
        load_pair(target_url=url)
    assert url in str(e.value)


def test_a_timeout(pair):
    """A verify that takes the server longer than the timeout (a real forward pass over a
    long prompt, seconds on a CPU, against a 0.2 s limit)."""
    remote = RemoteTarget(pair.remote.url, pair.remote.model, timeout_s=0.2)
    long_prompt = pair.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 60)
    with pytest.raises(RemoteError, match="did not answer /v1/completions within 0.2 s") as e:
        remote.verify(long_prompt, [1, 2, 3], clock=None)
    assert pair.remote.url in str(e.value)


def test_an_http_400_carries_the_servers_message(pair):
    too_long = [pair.tokenizer.encode("x")[0]] * (pair.remote.max_model_len + 10)
    with pytest.raises(RemoteError, match="HTTP 400") as e:
        pair.remote.verify(too_long, [1, 2], clock=None)
    assert pair.remote.url in str(e.value)


def test_a_server_that_stops_mid_run_leaves_the_run_unfinished(pair):
    run = speculative(pair, config(max_new_tokens=24))
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
def plain_server(request, pair):
    handler = type("Handler", (_Plain,), {"openai": request.param})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.tokenizer = pair.tokenizer
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()


@pytest.mark.parametrize("plain_server", [False], indirect=True)
def test_an_http_5xx_names_the_url(plain_server):
    with pytest.raises(RemoteError, match="HTTP 503: no backend available") as e:
        RemoteTarget(plain_server).reachable()
    assert plain_server in str(e.value)


@pytest.mark.parametrize("plain_server", [True], indirect=True)
def test_a_server_without_prompt_logprobs_is_refused(plain_server, pair):
    remote = RemoteTarget(plain_server)
    remote.connect(pair.tokenizer, pair.draft_vocab_size)  # tokenizes alike, returns top log-probs
    with pytest.raises(RemoteError, match="no prompt logprobs") as e:
        remote.verify([1, 2, 3], [4, 5], clock=None)
    assert plain_server in str(e.value)
