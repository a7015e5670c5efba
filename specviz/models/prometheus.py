"""A server's Prometheus metrics: one scrape of ``/metrics``, parsed by the official
client library's parser, and the speculative-decoding numbers vLLM exports.

vLLM counts, for its own speculative decoding (a draft model, n-gram, EAGLE, …):
``vllm:spec_decode_num_drafts`` (rounds), ``…_num_draft_tokens`` (tokens proposed),
``…_num_accepted_tokens`` and ``…_num_accepted_tokens_per_pos`` (label ``position``).
Between two scrapes, with Δ the growth of each counter, the names of our own traces:

    acceptance_rate          = Δaccepted / Δdraft_tokens
    mean_acceptance_length   = 1 + Δaccepted / Δdrafts   (tokens per target pass)
    per_position_acceptance  = Δaccepted_per_pos[i] / Δdrafts

(the last assumes every round drafts the full γ, as vLLM's proposers do).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import requests
from prometheus_client.parser import text_string_to_metric_families

from specviz.record.errors import RemoteError

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
MAX_BYTES = 8 << 20  # a /metrics page larger than this is not a vLLM server's


@dataclass
class Scrape:
    """Every sample of one scrape: name -> [(labels, value)], and when it was taken."""

    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    at_s: float = 0.0

    def total(self, name: str, **labels: str) -> float:
        """Sum of the samples called ``name`` whose labels include ``labels``."""
        return sum(v for lab, v in self.samples.get(name, []) if all(lab.get(k) == x for k, x in labels.items()))

    def count(self, histogram: str) -> float:
        return self.total(f"{histogram}_count")

    def sum(self, histogram: str) -> float:
        return self.total(f"{histogram}_sum")

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """Samples of ``name`` summed per value of ``label`` (e.g. per position)."""
        out: dict[str, float] = {}
        for lab, v in self.samples.get(name, []):
            if label in lab:
                out[lab[label]] = out.get(lab[label], 0.0) + v
        return out

    @property
    def has_spec_decode(self) -> bool:
        return DRAFTS in self.samples


def parse(text: str, at_s: float = 0.0) -> Scrape:
    """Parse Prometheus text exposition; ValueError on text that is not."""
    out = Scrape(at_s=at_s)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.samples.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def scrape(url: str, timeout_s: float = 5.0, session: requests.Session | None = None) -> Scrape:
    """GET ``{url}/metrics`` (``url`` may already end in /metrics) and parse it; a
    ``RemoteError`` naming the URL when it cannot be read or is not Prometheus text."""
    where = url.rstrip("/")
    if not where.endswith("/metrics"):
        where += "/metrics"
    try:
        r = (session or requests).get(where, timeout=timeout_s)
    except requests.exceptions.RequestException as e:
        raise RemoteError(f"cannot read {where}: {type(e).__name__}") from None
    if r.status_code != 200:
        raise RemoteError(f"{where} answered HTTP {r.status_code}")
    if len(r.content) > MAX_BYTES:
        raise RemoteError(f"{where} is {len(r.content) >> 20} MiB, more than a server's metrics")
    try:
        return parse(r.text, time.time())
    except ValueError as e:
        raise RemoteError(f"{where} is not Prometheus metrics text ({e})") from None


@dataclass(frozen=True)
class SpecDecodeRates:
    """Speculative decoding between two scrapes, with our traces' names (module doc)."""

    seconds: float
    drafts: float
    draft_tokens: float
    accepted: float
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position_acceptance: list[float]


def spec_decode_rates(before: Scrape, after: Scrape) -> SpecDecodeRates:
    """What the server's speculative decoding did between ``before`` and ``after``."""
    drafts = after.total(DRAFTS) - before.total(DRAFTS)
    tokens = after.total(DRAFT_TOKENS) - before.total(DRAFT_TOKENS)
    accepted = after.total(ACCEPTED) - before.total(ACCEPTED)
    a, b = after.by_label(PER_POS, "position"), before.by_label(PER_POS, "position")
    per_pos = [(a[k] - b.get(k, 0.0)) / drafts if drafts > 0 else 0.0 for k in sorted(a, key=int)]
    return SpecDecodeRates(
        seconds=after.at_s - before.at_s, drafts=drafts, draft_tokens=tokens, accepted=accepted,
        acceptance_rate=accepted / tokens if tokens > 0 else None,
        mean_acceptance_length=1.0 + accepted / drafts if drafts > 0 else None,
        per_position_acceptance=per_pos,
    )
