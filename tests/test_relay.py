"""The delay relay (specviz.models.relay): a real HTTP server behind it, requests timed through it."""

from __future__ import annotations

import http.server
import threading
import time

import pytest
import requests
from helpers import JsonHandler, free_port

from specviz.models import relay
from specviz.record.errors import BadInput


class _Echo(JsonHandler):
    """Answers a POST with its path and JSON body, a GET of /missing with 404."""

    def do_POST(self):  # noqa: N802
        self.send(200, {"path": self.path, "got": self.body()})

    def do_GET(self):  # noqa: N802
        self.send(404 if self.path == "/missing" else 200, {"path": self.path})


@pytest.fixture
def upstream():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()


def _timed(method: str, url: str, **kw) -> tuple[requests.Response, float]:
    start = time.perf_counter()
    r = requests.request(method, url, timeout=30, **kw)
    return r, (time.perf_counter() - start) * 1000


def test_a_request_through_the_relay_arrives_as_sent_and_takes_the_delay_longer(upstream):
    direct = min(_timed("POST", f"{upstream}/v1/completions", json={"a": 1})[1] for _ in range(3))
    with relay.relaying(upstream, 250) as url:
        r, ms = _timed("POST", f"{url}/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 1})
        assert r.status_code == 200 and r.json() == {"path": "/v1/completions",
                                                     "got": {"prompt": [1, 2, 3], "max_tokens": 1}}
        assert 250 <= ms < 250 + direct + 1000
        missing, _ = _timed("GET", f"{url}/missing")
        assert missing.status_code == 404 and missing.json() == {"path": "/missing"}


def test_a_relay_without_delay_adds_little(upstream):
    with relay.relaying(upstream, 0) as url:
        times = sorted(_timed("GET", f"{url}/v1/models")[1] for _ in range(5))
    assert times[2] < 100  # median, loopback: the relay itself is a hop of about a millisecond


def test_an_upstream_that_is_gone_is_a_502_naming_it():
    gone = f"http://127.0.0.1:{free_port()}"
    with relay.relaying(gone, 0) as url:
        r = requests.get(f"{url}/v1/models", timeout=30)
    assert r.status_code == 502 and gone in r.text


def test_a_negative_delay_is_refused(upstream):
    with pytest.raises(BadInput, match="delay must be >= 0"):
        relay.start(upstream, -5)


def test_the_command_line_refuses_a_port_in_use(upstream, capsys):
    busy = relay.start(upstream, 0)
    try:
        assert relay.main(["--to", upstream, "--delay-ms", "1", "--port", str(busy.server_port)]) == 2
    finally:
        busy.shutdown()
        busy.server_close()
    assert "relay:" in capsys.readouterr().err
