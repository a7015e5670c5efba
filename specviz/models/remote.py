"""A target on a vLLM server (its OpenAI-compatible API): one verify round is one request.

For a prefix ``ids`` (length L) and drafted tokens x_1..x_g the request is

    POST /v1/completions  {prompt: ids + [x_1..x_g], max_tokens: 1, temperature: 0,
                           prompt_logprobs: 2, logprobs: 2, return_tokens_as_token_ids: true}

vLLM's ``prompt_logprobs`` extension scores every prompt position j with the target's
distribution given tokens [0, j): its top 2 and the prompt token itself. Row i of the
verdict (i = 0..g-1) is position L + i, the target's view of x_{i+1} given the prefix and
x_1..x_i; row g is the generated token's own top 2 (the bonus when every x is accepted).
So one request gives what one local verify pass gives for greedy decoding: the target's
argmax at every drafted position, and the probability of each drafted token.

A server returns top-k log-probabilities, not whole distributions, so a remote target is
greedy only (speculative sampling needs all of p). vLLM skips its prefix cache for a
request that asks for prompt logprobs (``skip_reading_prefix_cache`` in
vllm/sampling_params.py), so each verify recomputes the whole context on the server.

Where the server's own timing is readable (its ``/metrics``: the histogram
``vllm:request_inference_time_seconds``, from scheduled to last token), a verify is split
into server compute and the rest of the request (network, HTTP, queue): read right after
the request, and only trusted when exactly one request finished meanwhile (ours).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import requests
import torch

from specviz.models.kv import common_prefix
from specviz.models.prometheus import Scrape, scrape
from specviz.record.errors import BadInput, RemoteError
from specviz.record.run_trace import Event

PROBES = (  # tokenize round trips at connect time: code, prose, Chinese, chat markup, emoji
    "def is_prime(n):\n    return n > 1",
    "A rainy afternoon in a small seaside town.",
    "用三句话介绍长城的历史。",
    "<|im_start|>user\nhello<|im_end|>",
    "naïve café 🙂",
)
INFERENCE = "vllm:request_inference_time_seconds"
TOP = 2  # top-k log-probs asked at every position: top-1 decides, top-2 gives the margin


def normalise_url(url: str) -> str:
    """The server's base URL (scheme://host:port[/path]) without a trailing ``/v1``;
    BadInput for anything that is not an http(s) URL."""
    if not isinstance(url, str) or not url.strip():
        raise BadInput("the server address is empty: give it as a URL, e.g. http://127.0.0.1:8000",
                       "target_url")
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BadInput(f"the server address must start with http:// or https:// and name a host; got {url!r}",
                       "target_url")
    if parts.query or parts.fragment:
        raise BadInput(f"the server address must not carry a query or fragment; got {url!r}", "target_url")
    return url[: -len("/v1")] if url.endswith("/v1") else url


@dataclass
class Verified:
    """One verify request's answer: log-prob rows [g+1, V] (-inf where the server said
    nothing), its start and end on the clock (ms) and the server's compute time (ms,
    None when its metrics could not tell)."""

    rows: torch.Tensor
    start_ms: float
    end_ms: float
    server_ms: float | None


@dataclass
class RemoteTarget:
    """A model served by vLLM at ``url``. ``connect()`` checks it before any run."""

    url: str
    model: str | None = None
    timeout_s: float = 120.0
    max_model_len: int = 0
    vocab_size: int = 0
    metrics: bool = True  # read the server's compute time from /metrics
    _session: requests.Session = field(default_factory=requests.Session, repr=False)
    _metrics_misses: int = field(default=0, repr=False)
    _last: Scrape | None = field(default=None, repr=False)  # the latest read of /metrics

    def __post_init__(self) -> None:
        self.url = normalise_url(self.url)

    # --- HTTP ------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kw) -> requests.Response:
        where = f"{self.url}{path}"
        try:
            r = self._session.request(method, where, timeout=self.timeout_s, **kw)
        except requests.exceptions.ConnectionError as e:
            raise RemoteError(f"cannot connect to the remote target at {self.url}: is the server running? "
                              f"({type(e).__name__})") from None
        except requests.exceptions.Timeout:
            raise RemoteError(f"the remote target at {self.url} did not answer {path} within "
                              f"{self.timeout_s:g} s") from None
        except requests.exceptions.RequestException as e:
            raise RemoteError(f"the request to the remote target at {self.url} failed: {e}") from None
        if r.status_code >= 400:
            raise RemoteError(f"the remote target at {self.url} answered {path} with HTTP {r.status_code}: "
                              f"{_error_text(r)}")
        return r

    def _json(self, method: str, path: str, **kw) -> dict:
        r = self._request(method, path, **kw)
        try:
            body = r.json()
        except ValueError:
            raise RemoteError(f"the remote target at {self.url} answered {path} with something that is not JSON "
                              f"(is it an OpenAI-compatible server?)") from None
        if not isinstance(body, dict):
            raise RemoteError(f"the remote target at {self.url} answered {path} with {type(body).__name__}, "
                              "not a JSON object")
        return body

    # --- connect ---------------------------------------------------------------------

    def reachable(self) -> None:
        """The server answers and serves ``model`` (or exactly one model when none was
        named: then that one): checked before a minute of loading the draft."""
        served = [m.get("id") for m in self._json("GET", "/v1/models").get("data", []) if isinstance(m, dict)]
        if self.model is None:
            if len(served) != 1:
                raise RemoteError(f"the remote target at {self.url} serves {len(served)} models "
                                  f"({', '.join(map(str, served)) or 'none'}): name one with --target-model")
            self.model = served[0]
        elif self.model not in served:
            raise RemoteError(f"the remote target at {self.url} does not serve a model named {self.model!r}; "
                              f"it serves: {', '.join(map(str, served)) or 'none'}")

    def connect(self, tokenizer, vocab_size: int) -> None:
        """Check the server before any run: it serves the model (``reachable``), it
        tokenizes the probes as the local ``tokenizer`` does, and it returns log-probs.
        ``vocab_size`` is the width of the rows (the draft's head)."""
        self.reachable()
        for probe in PROBES:
            body = self._json("POST", "/tokenize", json={"model": self.model, "prompt": probe,
                                                        "add_special_tokens": False})
            theirs, ours = body.get("tokens"), tokenizer.encode(probe, add_special_tokens=False)
            if theirs != ours:
                raise RemoteError(
                    f"the draft and the remote target at {self.url} tokenize differently, so the draft's tokens "
                    f"mean nothing to the target: {probe!r} is {_short(ours)} here and {_short(theirs)} there")
            self.max_model_len = int(body.get("max_model_len") or 0)
        self.vocab_size = vocab_size
        rows = self.verify([tokenizer.encode("Hello", add_special_tokens=False)[0]], [], clock=None).rows
        if not torch.isfinite(rows).any():
            raise RemoteError(f"the remote target at {self.url} returned no log-probabilities")

    # --- one verify ------------------------------------------------------------------

    def verify(self, ids: list[int], drafted: list[int], clock) -> Verified:
        """The target's top-2 log-probs after ``ids`` and after each drafted token, as rows
        [g+1, V]; the drafted tokens' own log-probs are filled in too. ``clock`` (a
        ``kv.Clock`` or None) times the request; the metrics read is off the clock."""
        prompt = list(ids) + list(drafted)
        payload = {"model": self.model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0,
                   "logprobs": TOP, "return_tokens_as_token_ids": True}
        if drafted:
            payload["prompt_logprobs"] = TOP
        before = None
        if clock is not None and self.metrics:
            with clock.off():  # the previous request's last read, when there is one
                before = self._last or self._inference()
        start = clock.now() if clock is not None else 0.0
        body = self._json("POST", "/v1/completions", json=payload)
        end = clock.now() if clock is not None else 0.0
        rows = self._rows(body, len(ids), drafted)
        server_ms = None
        if before is not None:
            with clock.off():
                server_ms = self._server_ms(before)
        return Verified(rows, start, end, server_ms)

    def _rows(self, body: dict, at: int, drafted: list[int]) -> torch.Tensor:
        try:
            choice = body["choices"][0]
            scored = []
            if drafted:
                plp = choice.get("prompt_logprobs")
                if plp is None or len(plp) < at + len(drafted):
                    raise RemoteError(f"the remote target at {self.url} returned no prompt logprobs: is it vLLM "
                                      "(the prompt_logprobs extension)?")
                scored = [{int(t): float(v["logprob"]) for t, v in plp[at + i].items()} for i in range(len(drafted))]
            top = choice["logprobs"]["top_logprobs"][0]
            scored.append({_token_id(t): float(v) for t, v in top.items()})
        except RemoteError:
            raise
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise RemoteError(f"the remote target at {self.url} answered /v1/completions in an unexpected shape "
                              f"({type(e).__name__}: {e})") from None
        rows = torch.full((len(scored), self.vocab_size), -math.inf)
        for i, entries in enumerate(scored):
            for t, lp in entries.items():
                if 0 <= t < self.vocab_size:
                    rows[i, t] = lp
        return rows

    # --- the server's own timing -------------------------------------------------------

    def _inference(self) -> Scrape | None:
        if not self.metrics:
            return None
        try:
            got = scrape(self.url, timeout_s=5.0, session=self._session)
        except RemoteError:
            self._metrics_misses += 1
            self.metrics = self._metrics_misses < 3  # no /metrics: draw each request as one from now on
            return None
        self._metrics_misses = 0
        return got

    def _server_ms(self, before: Scrape) -> float | None:
        """Our request's inference time: the histogram's sum grew by it, and its count by
        one, unless another client's request finished meanwhile (then None). The server
        records a request's stats just after answering it: a few short retries."""
        for wait in (0.0, 0.005, 0.02, 0.05):
            time.sleep(wait)
            after = self._last = self._inference()
            if after is None:
                return None
            n = after.count(INFERENCE) - before.count(INFERENCE)
            if n == 1:
                return (after.sum(INFERENCE) - before.sum(INFERENCE)) * 1000.0
            if n > 1:
                return None
        return None


def _token_id(key: str) -> int:
    """A generated token's key with return_tokens_as_token_ids: ``token_id:123``."""
    if not key.startswith("token_id:"):
        raise ValueError(f"token key {key!r} is not token_id:N (return_tokens_as_token_ids unsupported?)")
    return int(key.removeprefix("token_id:"))


def _short(tokens) -> str:
    if not isinstance(tokens, list):
        return repr(tokens)
    return str(tokens[:8])[:-1] + (", …]" if len(tokens) > 8 else "]")


def _error_text(r: requests.Response) -> str:
    """The server's own message (OpenAI-style ``{"error": {"message": …}}``), short."""
    try:
        body = r.json()
        msg = body.get("error", {}).get("message") if isinstance(body.get("error"), dict) else body.get("message")
        if not msg:
            msg = body.get("detail") or body
    except ValueError:
        msg = r.text
    return str(msg).strip()[:300] or r.reason


class RemoteKV:
    """The remote target as the engine drives a local one (kv.KVModel's interface).

    ``tokens`` is the sequence the last request scored. Rolling back costs nothing here
    (the server keeps no state of ours between requests), so ``rollback`` reports 0 and
    no rollback event is drawn. ``timed_forward`` returns log-prob rows (``logprob_rows``:
    the engine takes p = exp(row), not a softmax) and leaves the request's time outside
    the server's compute in ``take_waits()``."""

    logprob_rows = True

    def __init__(self, remote: RemoteTarget):
        self.remote = remote
        self.tokens: list[int] = []
        self._waits: list = []

    def common_prefix(self, seq: list[int]) -> int:
        return common_prefix(self.tokens, seq)

    def rollback(self, length: int) -> int:
        del self.tokens[length:]
        return 0

    def timed_forward(self, new: list[int], keep: int, clock) -> tuple[torch.Tensor, float, float]:
        """Score ``tokens + new``: the last ``keep - 1`` are the drafted tokens. Returns
        (rows [keep, V], start, end) where start is when the server's compute began as far
        as its metrics tell (the request's start when they cannot)."""
        full = self.tokens + list(new)
        cut = len(full) - (keep - 1)
        got = self.remote.verify(full[:cut], full[cut:], clock)
        self.tokens = full
        start = got.start_ms
        if got.server_ms is not None and 0 < got.server_ms < got.end_ms - got.start_ms:
            start = got.end_ms - got.server_ms
            self._waits = [Event("target", "network", got.start_ms, start)]
        return got.rows, start, got.end_ms

    def take_waits(self) -> list:
        """The last request's network, HTTP and queue span (an Event), once."""
        waits, self._waits = self._waits, []
        return waits
