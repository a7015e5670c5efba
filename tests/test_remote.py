"""The real default pair against a real vLLM server (its CPU build, in a virtual environment of
its own: ``python -m specviz.models.vllm_local install``, which tests/run.sh runs) serving the
default target in fp32 on loopback, without speculation of its own: exactness in English and
Chinese, what such a run records and draws, the checks that need the real tokenizer or a real
forward pass's seconds. The protocol, the refusals, the faults and the schedules against a server
are tested on a tiny server instead (tests/test_vllm_server.py): every verify of the real target
here is a fresh prefill of the whole context (vLLM does not read its prefix cache for a request
that asks for prompt log-probs), about 2 s on one core.

The server starts once per session (conftest's vllm_server: about 1.5 to 2 minutes on 2
cores; its start-up time is printed). ``SPECVIZ_TEST_VLLM_URL`` points the tests at a server already running
instead (the same target, started with ``python -m specviz.models.vllm_local serve``).
"""

from __future__ import annotations

import json

import pytest
import requests

from specviz import Trace, load_pair, speculative
from specviz.figures.timeline import timeline_figure
from specviz.models.remote import RemoteError, RemoteTarget
from specviz.models.tiny_pair import tiny_tokenizer
from specviz.record.run_config import RunConfig

pytestmark = [pytest.mark.vllm, pytest.mark.default_pair]

PROMPTS = {
    "code": "Write a Python function is_prime(n) that returns True when n is a prime number.",
    "chinese": "用三句话介绍长城的历史。",
}


@pytest.fixture(scope="module")
def pair(vllm_server, default_bf16_folders):
    """The default draft (its bf16 cache folder, in fp32: no fp32 conversion) and the server's target."""
    return load_pair(draft=str(default_bf16_folders[0]), target_url=vllm_server, dtype="float32")


@pytest.fixture(scope="module")
def runs(pair):
    """One greedy run (γ 4, 24 new tokens) per prompt, made on first use: each test reads the same run."""
    made: dict[str, Trace] = {}

    def run(name: str) -> Trace:
        if name not in made:
            made[name] = speculative(pair, RunConfig(prompt=PROMPTS[name], gamma=4, max_new_tokens=24,
                                                     temperature=0.0)).run()
        return made[name]
    return run


def server_greedy(pair, prompt_ids: list[int], n: int) -> list[int]:
    """The server's own greedy completion of the same prompt ids."""
    r = requests.post(f"{pair.remote.url}/v1/completions", timeout=600, json={
        "model": pair.remote.model, "prompt": prompt_ids, "max_tokens": n, "temperature": 0.0,
        "return_token_ids": True})
    r.raise_for_status()
    return r.json()["choices"][0]["token_ids"]


# --- exactness --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PROMPTS))
def test_speculative_output_equals_the_servers_own_greedy_completion(pair, runs, name):
    trace = runs(name)
    assert trace.output_ids == server_greedy(pair, trace.prompt_ids, len(trace.output_ids))
    assert len(trace.output_ids) == 24 or trace.stop_reason == "eos"
    assert trace.summary["acceptance_rate"] is not None


# --- what a remote run records and draws ----------------------------------------------------------


def test_a_remote_run_is_recorded_and_drawn_as_remote(pair, runs):
    trace = runs("code")
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


# --- refusals and faults, each naming the URL ---------------------------------------------------------


def test_a_tokenizer_that_differs_is_refused(vllm_server):
    remote = RemoteTarget(vllm_server)
    with pytest.raises(RemoteError, match="tokenize differently") as e:
        remote.connect(tiny_tokenizer(), 512)
    assert vllm_server in str(e.value)


def test_a_timeout(pair):
    """A verify that takes the server longer than the timeout: the real target's forward pass
    over 160 tokens (about 7 s on one core here; half a second on a fast one) against 0.1 s."""
    remote = RemoteTarget(pair.remote.url, pair.remote.model, timeout_s=0.1)
    long_prompt = pair.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 16)
    with pytest.raises(RemoteError, match="did not answer /v1/completions within 0.1 s") as e:
        remote.verify(long_prompt, [1, 2, 3], clock=None)
    assert pair.remote.url in str(e.value)
