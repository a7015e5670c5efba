"""A delay relay: a loopback HTTP server that waits ``delay_ms`` before it forwards each request
to a remote target (a vLLM server), so that a target on this machine answers as one across a
network would. Speculation at a distance on one laptop: the Parallel page's round-trip slider
adds network time to every verify of its replays, and a run through a relay checks one point of
that curve for real (bench/round_trip.py).

The wait is spent once per request, before forwarding (a round trip's two halves together):

    relay request time = delay_ms + the server's own request time (+ the relay's ~1 ms)

    python -m specviz.models.relay --to http://127.0.0.1:8000 --delay-ms 100 --port 8100
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import sys
import threading
import time
from collections.abc import Iterator

import requests

from specviz.record.errors import BadInput

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}


class _Forward(http.server.BaseHTTPRequestHandler):
    """Sleep, then pass the request on to ``server.upstream`` and its answer back as it came."""

    protocol_version = "HTTP/1.1"  # keep-alive, as a client session to a real server has it

    def _relay(self, method: str) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        time.sleep(self.server.delay_s)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP | {"host"}}
        try:
            r = self.server.session().request(method, self.server.upstream + self.path, data=body, headers=headers,
                                              timeout=600)
        except requests.RequestException as exc:
            self._answer(502, f"relay: the upstream {self.server.upstream} did not answer ({exc})".encode(),
                         "text/plain")
            return
        self._answer(r.status_code, r.content, r.headers.get("Content-Type", "application/octet-stream"))

    def _answer(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self._relay("GET")

    def do_POST(self):  # noqa: N802
        self._relay("POST")

    def log_message(self, *args) -> None:
        pass


def start(upstream: str, delay_ms: float, port: int = 0) -> http.server.ThreadingHTTPServer:
    """A relay to ``upstream`` serving on 127.0.0.1:``port`` (0: a free one) in a daemon thread;
    ``shutdown()`` it when done. BadInput for a negative delay."""
    if delay_ms < 0:
        raise BadInput(f"the relay's delay must be >= 0 ms, not {delay_ms:g}", "delay_ms")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Forward)
    httpd.upstream, httpd.delay_s = upstream.rstrip("/"), delay_ms / 1000
    local = threading.local()  # a requests.Session per handler thread: one is not safe to share between threads

    def session() -> requests.Session:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        return local.session

    httpd.session = session
    threading.Thread(target=httpd.serve_forever, daemon=True, name="specviz-relay").start()
    return httpd


@contextlib.contextmanager
def relaying(upstream: str, delay_ms: float) -> Iterator[str]:
    """The URL of a relay to ``upstream`` with ``delay_ms`` added to every request, while inside."""
    httpd = start(upstream, delay_ms)
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specviz.models.relay", description=__doc__.split("\n\n")[0])
    ap.add_argument("--to", required=True, help="the server to relay to, e.g. http://127.0.0.1:8000")
    ap.add_argument("--delay-ms", type=float, required=True, help="added to every request before it is forwarded")
    ap.add_argument("--port", type=int, default=8100)
    args = ap.parse_args(argv)
    try:
        httpd = start(args.to, args.delay_ms, args.port)
    except (BadInput, OSError) as exc:
        print(f"relay: {exc}", file=sys.stderr)
        return 2
    print(f"relaying http://127.0.0.1:{httpd.server_port} -> {args.to}, {args.delay_ms:g} ms added to every "
          "request (Ctrl-C ends it)", file=sys.stderr)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        httpd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
