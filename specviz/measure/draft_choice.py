"""Which draft pays on this machine: measure each draft variant's cost ratio c once, pick one.

The speedup a round can give is (1 − α^(γ+1)) / ((1 − α)(γc + 1)): at the same α, the
variant with the smallest c wins. On a CPU with native bf16 the int8 draft's pass is about
2.3× cheaper than the full draft's (c 0.18 against 0.42); on a CPU without it, or on a
GPU, it may be the other way round. So the default is measured, not assumed:

* variants: the draft as loaded, its int8 copy (CPU only), and each with its head cut to
  ``CUT_HEAD`` ids (FR-Spec) where the pair has a token ranking;
* c = median draft one-token pass / median target one-token pass over a ``CONTEXT``-token
  cache (``forward_costs.fill_cache``, ``timed_pass``), off any run's clock: seconds;
* ``choose`` (pure) takes the smallest c, except that a cut head must be at least
  ``CUT_HEAD_MARGIN`` cheaper than the best full-vocabulary variant: a cut head cannot
  propose the rare tokens, and on a harder code prompt the 32k head lost more in
  acceptance than it gained in c (×1.30 against ×1.36 for the full head, docs/design.md).

The measurement is cached per machine (pair, device, dtype, torch, threads) beside the
forward-pass costs; one timed beside other work (``busy``) is used but not kept.
"""

from __future__ import annotations

import datetime
import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CONTEXT = 200  # tokens in the cache before each timed pass (a prompt and some output)
REPEATS = 5  # timed passes per variant, after one warm-up
CUT_HEAD = 32768  # the FR-Spec cut the choice considers (its c barely falls further below it)
CUT_HEAD_MARGIN = 0.8  # a cut head is chosen only with c <= 0.8 x the best full-vocabulary c
FORMAT = 1


@dataclass(frozen=True)
class Variant:
    """One way to draft: the quantization and the head (0 = the full vocabulary)."""

    quant: str = "none"
    vocab: int = 0


@dataclass(frozen=True)
class Cost:
    variant: Variant
    draft_ms: float
    target_ms: float

    @property
    def c(self) -> float:
        return self.draft_ms / self.target_ms


@dataclass(frozen=True)
class Choice:
    """The picked variant, its c, the c of the plain draft, and every variant's cost."""

    variant: Variant
    c: float
    plain_c: float
    costs: tuple[Cost, ...]
    cached: bool = False
    contention: bool = False  # other work ran beside the measurement: not kept


def variants(device_type: str, has_ranks: bool, vocab_size: int) -> list[Variant]:
    """The variants worth measuring here: int8 on a CPU only, a cut head where a token ranking
    exists and the vocabulary is larger than the cut."""
    quants = ["none", "int8"] if device_type == "cpu" else ["none"]
    heads = [0, CUT_HEAD] if has_ranks and vocab_size > CUT_HEAD else [0]
    return [Variant(q, h) for h in heads for q in quants]


def choose(costs: list[Cost]) -> Variant:
    """The variant with the smallest c; a cut head only when it beats the best full-vocabulary
    c by ``CUT_HEAD_MARGIN``. Ties go to the simpler variant (the order of ``variants``)."""
    if not costs:
        raise ValueError("no draft variant was measured")
    full = [k for k in costs if not k.variant.vocab] or costs
    best = min(full, key=lambda k: k.c)
    cut = [k for k in costs if k.variant.vocab and k.c <= CUT_HEAD_MARGIN * best.c]
    return min(cut, key=lambda k: k.c).variant if cut else best.variant


def _model_for(pair, v: Variant):
    """The callable ``forward_costs.timed_pass`` times for variant v."""
    from specviz.measure.forward_costs import HeadedDraft

    model = pair.draft_model(v.quant)
    return HeadedDraft(model, pair.cut_head(v.vocab, v.quant)) if v.vocab else model


def _median_pass(model, ids: list[int], device, repeats: int) -> float:
    import torch

    from specviz.measure.forward_costs import fill_cache, timed_pass

    cache = fill_cache(model, ids, device)
    one = torch.tensor([ids[-1:]], dtype=torch.long, device=device)
    timed_pass(model, cache, one, device)  # warm-up
    return statistics.median(timed_pass(model, cache, one, device) for _ in range(repeats))


def measure(pair, context: int = CONTEXT, repeats: int = REPEATS) -> list[Cost]:
    """Each variant's median one-token draft pass against the target's, in ms."""
    from specviz.measure.forward_costs import context_ids

    ids = context_ids(pair.tokenizer, min(context, pair.context_length - 2))
    has_ranks = pair.has_token_ranks()
    target_ms = _median_pass(pair.target, ids, pair.device, repeats)
    out = []
    for v in variants(pair.device.type, has_ranks, pair.draft_vocab_size):
        draft_ms = _median_pass(_model_for(pair, v), ids, pair.device, repeats)
        out.append(Cost(v, draft_ms, target_ms))
    return out


def cache_path(pair) -> Path:
    import torch

    from specviz.measure.forward_costs import safe_name
    from specviz.models.pair import cache_dir

    parts = [pair.draft_name, pair.target_name, str(pair.device), pair.dtype, f"t{torch.get_num_threads()}"]
    return cache_dir() / "costs" / ("draft-choice-" + "-".join(safe_name(p) for p in parts) + ".json")


def _header(pair) -> dict[str, Any]:
    import torch

    return {"format": FORMAT, "draft": pair.draft_name, "target": pair.target_name, "device": str(pair.device),
            "dtype": pair.dtype, "torch": torch.__version__, "threads": torch.get_num_threads()}


def _read(path: Path, header: dict[str, Any]) -> list[Cost] | None:
    try:
        data = json.loads(path.read_text())
        if any(data.get(k) != v for k, v in header.items()):
            return None
        return [Cost(Variant(r["quant"], int(r["vocab"])), float(r["draft_ms"]), float(r["target_ms"]))
                for r in data["costs"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def default_config(pair, choice: Choice | None, **settings):
    """The RunConfig the app runs by default on this pair: the confidence policy (γ its cap,
    ``limits.DEFAULT_GAMMA``; τ ``limits.DEFAULT_CONFIDENCE``) and ``choice``'s draft variant
    (the plain draft without one); ``settings`` (a prompt, a budget, ...) on top."""
    from specviz.record.limits import DEFAULT_CONFIDENCE, DEFAULT_GAMMA, DEFAULT_POLICY
    from specviz.record.run_config import RunConfig

    v = choice.variant if choice is not None else Variant()
    base = dict(gamma=DEFAULT_GAMMA, policy=DEFAULT_POLICY, confidence=DEFAULT_CONFIDENCE, draft_quant=v.quant,
                draft_vocab=v.vocab)
    return RunConfig(**{**base, **settings})


def cached(pair) -> bool:
    """Whether this machine's measurement for the pair is on disk already."""
    return _read(cache_path(pair), _header(pair)) is not None


def load_or_measure(pair, refresh: bool = False) -> Choice:
    """The choice for this pair on this machine: from the cache file, else measured (seconds)
    and saved unless other work overlapped the measurement."""
    import time

    from specviz.measure.forward_costs import _write_atomic
    from specviz.models import busy

    path, header = cache_path(pair), _header(pair)
    costs = None if refresh else _read(path, header)
    cached, contention = costs is not None, False
    if costs is None:
        start = time.perf_counter_ns()
        others = busy.CpuMeter()
        others.start()
        costs = measure(pair)
        others.stop()
        contention = bool(busy.entries(busy.overlapping(start, time.perf_counter_ns()), others))
        if not contention:
            _write_atomic(path, {**header, "measured_at": datetime.datetime.now(datetime.timezone.utc)
                                 .isoformat(timespec="seconds"),
                                 "costs": [{**asdict(k.variant), "draft_ms": k.draft_ms, "target_ms": k.target_ms}
                                           for k in costs]})
    pick = choose(costs)
    by = {k.variant: k for k in costs}
    return Choice(pick, by[pick].c, by[Variant()].c, tuple(costs), cached, contention)
