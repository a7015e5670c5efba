"""How specviz.models.remote maps vLLM's ``prompt_logprobs`` rows to draft positions, offline:
a real HTTP server on loopback (http.server in a thread) answers /v1/completions with a
response in vLLM's shape, so no vLLM is needed (tests/test_remote.py checks the same against a
live one).

vLLM's completions answer, for a prompt of n tokens with ``prompt_logprobs: 2`` and
``return_tokens_as_token_ids``: ``prompt_logprobs`` is a list of n entries, None for position 0
(nothing before it), else a dict keyed by the token id as a string, ``{"logprob", "rank",
"decoded_token"}``, holding the top 2 and the prompt token itself; ``logprobs.top_logprobs[0]``
is the generated token's top 2, keyed ``token_id:N``. The answer below is written by hand in
that shape (not captured from a server) for the prompt ``[11, 12, 13, 14, 15]``, with ids and
numbers chosen so that each position is told apart: the target would say 14 after the prefix
[11, 12, 13] (so the first drafted token is kept), 99 after 14 (so the drafted 15 is rejected),
and 7 after the whole prompt.
"""

from __future__ import annotations

import http.server
import math
import threading

import pytest
from helpers import JsonHandler

from specviz.models.remote import RemoteError, RemoteTarget

VOCAB = 128
PREFIX, DRAFTED = [11, 12, 13], [14, 15]


def _entry(logprob: float, rank: int, token: int) -> dict:
    return {"logprob": logprob, "rank": rank, "decoded_token": f"<{token}>"}


RESPONSE = {
    "id": "cmpl-0", "object": "text_completion", "model": "m",
    "choices": [{
        "index": 0, "text": "token_id:7", "finish_reason": "length",
        "logprobs": {"tokens": ["token_id:7"], "token_logprobs": [-0.05],
                     "top_logprobs": [{"token_id:7": -0.05, "token_id:8": -3.2}], "text_offset": [0]},
        "prompt_logprobs": [
            None,  # position 0: nothing before it
            {"12": _entry(-0.3, 1, 12), "40": _entry(-1.9, 2, 40)},  # after [11]: 12
            {"13": _entry(-0.2, 1, 13), "41": _entry(-2.1, 2, 41)},  # after [11, 12]: 13
            {"14": _entry(-0.1, 1, 14), "42": _entry(-2.5, 2, 42)},  # after the prefix: 14 (drafted 14: kept)
            {"99": _entry(-0.4, 1, 99), "43": _entry(-1.5, 2, 43),   # after 14: 99, not the drafted 15
             "15": _entry(-4.0, 6, 15)},
        ],
    }],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}


class _Completions(JsonHandler):
    def do_POST(self):  # noqa: N802
        self.server.requests.append((self.path, self.body()))
        self.send(200, RESPONSE)


@pytest.fixture
def served():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Completions)
    httpd.requests = []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def _remote(httpd) -> RemoteTarget:
    remote = RemoteTarget(f"http://127.0.0.1:{httpd.server_port}", "m")
    remote.vocab_size = VOCAB
    remote.metrics = False  # no /metrics here
    return remote


def test_row_i_is_the_targets_view_after_the_prefix_and_i_drafted_tokens(served):
    verdict = _remote(served).verify(PREFIX, DRAFTED, clock=None)
    (path, sent), = served.requests
    assert path == "/v1/completions"
    assert sent["prompt"] == PREFIX + DRAFTED and sent["max_tokens"] == 1 and sent["temperature"] == 0.0
    assert sent["prompt_logprobs"] == 2 and sent["return_tokens_as_token_ids"] is True
    rows = verdict.rows
    assert rows.shape == (len(DRAFTED) + 1, VOCAB)
    # row 0: position 3 of the prompt (after the prefix), not position 0 or 2
    assert int(rows[0].argmax()) == 14 and rows[0, 14].item() == pytest.approx(-0.1)
    assert rows[0, 42].item() == pytest.approx(-2.5)
    # row 1: position 4 (after the prefix and 14), with the drafted 15's own log-prob
    assert int(rows[1].argmax()) == 99 and rows[1, 15].item() == pytest.approx(-4.0)
    # row 2 (the last): the generated token's top 2, the bonus when every draft is kept
    assert int(rows[2].argmax()) == 7 and rows[2, 8].item() == pytest.approx(-3.2)
    # nothing else: the rest of each row is -inf (the server said nothing about it)
    assert (rows > -math.inf).sum(dim=1).tolist() == [2, 3, 2]


def test_the_greedy_verdict_read_off_the_rows(served):
    """What the engine decides from these rows: 14 kept, 15 rejected, 99 in its place."""
    rows = _remote(served).verify(PREFIX, DRAFTED, clock=None).rows
    argmax = rows.argmax(dim=1).tolist()
    kept = next((i for i, (d, t) in enumerate(zip(DRAFTED, argmax)) if d != t), len(DRAFTED))
    assert kept == 1 and argmax[kept] == 99


def test_a_shorter_prefix_shifts_the_rows(served):
    """The same answer read for a prefix of two and three drafted tokens: row i comes from
    prompt position 2 + i, so an off-by-one in the mapping would not pass both tests."""
    rows = _remote(served).verify(PREFIX[:2], [13, *DRAFTED], clock=None).rows
    assert [int(r.argmax()) for r in rows] == [13, 14, 99, 7]


def test_too_few_prompt_rows_is_refused(served):
    """A prompt longer than the rows the server scored: refused by name, not read out of place."""
    with pytest.raises(RemoteError, match="no prompt logprobs"):
        _remote(served).verify(PREFIX + DRAFTED, [16], clock=None)
