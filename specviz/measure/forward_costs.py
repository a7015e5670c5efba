"""What a forward pass costs on this machine, timed directly: ``measure`` times passes over a
fixed context, a grid of (model, batch B, new tokens k) points; ``load_or_measure`` measures
once per pair, device, dtype, context length and grid, and caches the rows as JSON under
``specviz.models.pair.cache_dir() / "costs"``; ``specviz.replay.latency.latency_model`` turns the
rows into the LatencyModel the schedules replay with. The grids: ``LATENCY_GRID`` (what a
replay needs), ``CURVE_GRID`` and ``SPARSE_CURVE_GRID`` (the verify-cost curve).
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import os
import re
import secrets
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specviz.models import busy
from specviz.record.errors import BadInput
from specviz.replay.latency import GridPoint

# --- measuring forward passes -----------------------------------------------------

MeasureProgress = Callable[[float, str], None]  # (fraction done 0..1, message)

MODELS = ("draft", "target")
VERIFY_TOKENS = tuple(range(1, 34))  # k = gamma + 1 for gamma = 0..32
DRAFT_BATCHES = (1, 2, 4, 8, 16, 32)  # SSD's batches of branches
DRAFT_READS = (*range(2, 10), 17, 33)  # a draft pass over k tokens: 2 after a bonus, g + 1 in SSD's glue
CURVE_TOKENS = tuple(range(1, 33))
CURVE_BATCHES = (1, 4, 16)

# A fixed, realistic context: code and prose, tokenised by the pair's own tokenizer and
# repeated to the context length. The same ids for every point, every batch row, every run.
CONTEXT_TEXT = '''Write a function that merges two sorted lists into one sorted list.

def merge(a: list[int], b: list[int]) -> list[int]:
    """Merge two sorted lists in linear time."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    out.extend(a[i:])
    out.extend(b[j:])
    return out

The loop compares the heads of both lists and takes the smaller one, so every element is
looked at once. When one list runs out, the rest of the other is already sorted and is
appended as it is. Merge sort splits a list in halves, sorts each half and merges them.
'''


def default_grid(
    tokens: Iterable[int] = VERIFY_TOKENS,
    batches: Iterable[int] = DRAFT_BATCHES,
    models: Iterable[str] = MODELS,
    reads: Iterable[int] = DRAFT_READS,
) -> list[GridPoint]:
    """What a LatencyModel needs: the target's verify curve (batch 1, k new tokens for each
    k in ``tokens``), the draft's batched step (k = 1, batch B for each B in ``batches``)
    and its multi-token reads (batch 1, k new tokens for each k in ``reads``)."""
    models = tuple(models)
    grid: list[GridPoint] = []
    if "target" in models:
        grid += [("target", 1, int(k)) for k in tokens]
    if "draft" in models:
        for b in batches:  # batch 1's reads beside its one-token pass: measured in this order
            grid += [("draft", int(b), 1)] + [("draft", 1, int(k)) for k in reads if int(k) > 1 and b == 1]
    return grid


def curve_grid(
    tokens: Iterable[int] = CURVE_TOKENS,
    batches: Iterable[int] = CURVE_BATCHES,
    models: Iterable[str] = MODELS,
) -> list[GridPoint]:
    """Both models, every k in ``tokens`` at every batch in ``batches``: the verify-cost curve."""
    return [(m, int(b), int(k)) for m in models for b in batches for k in tokens]


LATENCY_GRID: list[GridPoint] = default_grid()
CURVE_GRID: list[GridPoint] = curve_grid()


def _normalize_grid(grid: Iterable[Sequence]) -> list[GridPoint]:
    """Grid points as (str, int, int), duplicates dropped (first kept), each one checked."""
    out: list[GridPoint] = []
    seen: set[GridPoint] = set()
    for point in grid:
        model, batch, tokens = point
        p = (str(model), int(batch), int(tokens))
        if p[0] not in MODELS:
            raise ValueError(f"grid point {point!r}: model must be 'draft' or 'target'")
        if p[1] < 1 or p[2] < 1:
            raise ValueError(f"grid point {point!r}: batch and tokens must be >= 1")
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def grid_name(grid: Iterable[Sequence]) -> str:
    """``latency`` or ``curve`` for the two ready-made grids, else ``grid-<hash>`` of the points."""
    points = _normalize_grid(grid)
    if points == LATENCY_GRID:
        return "latency"
    if points == CURVE_GRID:
        return "curve"
    digest = hashlib.sha256(json.dumps(points).encode()).hexdigest()[:10]
    return f"grid-{digest}"


def context_ids(tokenizer, length: int, text: str = CONTEXT_TEXT) -> list[int]:
    """``length`` token ids: ``text`` tokenised (no special tokens), repeated as often as needed."""
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    if not ids:
        raise ValueError("the context text tokenises to nothing")
    reps = -(-length // len(ids))
    return (ids * reps)[:length]


def fill_cache(model, ids: list[int], device) -> Any:
    """A fresh DynamicCache holding ``ids`` (one row): one prefill pass, logits of the last
    position only (the prefill's full-vocabulary logits would only cost memory)."""
    import torch
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids], dtype=torch.long, device=device), cache=cache,
              use_cache=True, logits_to_keep=1)
    return cache


def batch_cache(cache, batch: int) -> Any:
    """A copy of a one-row cache with ``batch`` identical rows (the prefill is not repeated)."""
    import torch

    with torch.inference_mode():
        out = copy.deepcopy(cache)
        if batch > 1:
            out.batch_repeat_interleave(batch)
    return out


def timed_pass(model, cache, ids, device) -> float:
    """One forward of ``ids`` ([batch, k] new tokens) on ``cache``, timed in ms: it keeps the
    logits of its k last positions (``logits_to_keep=k``: a verify pass needs them all) and
    brings them to the CPU in float32, as the engine's timed passes do, synchronised before
    and after. The cache is cropped back afterwards: it holds what it held before."""
    import torch

    from specviz.models.kv import synchronize

    k = ids.shape[-1]
    before = cache.get_seq_length()
    with torch.inference_mode():
        synchronize(device)
        t0 = time.perf_counter_ns()
        out = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=k)
        out.logits[:, -k:].float().cpu()
        synchronize(device)
        t1 = time.perf_counter_ns()
        del out
        cache.crop(-k)  # transformers 5: a negative count of tokens to drop
    if cache.get_seq_length() != before:
        raise RuntimeError(f"the KV cache holds {cache.get_seq_length()} tokens after a crop, not {before}")
    return (t1 - t0) / 1e6


class HeadedDraft:
    """A draft body with a cut LM head (``specviz.models.draft_head.CutHead``), called as ``measure``
    calls a causal LM: its ``logits`` are the last ``logits_to_keep`` positions' over the kept ids."""

    def __init__(self, model, head):
        self.model, self.head, self.config = model, head, model.config

    def __call__(self, input_ids, cache, use_cache: bool = True, logits_to_keep: int = 1):
        from types import SimpleNamespace

        hidden = self.model.base_model(input_ids=input_ids, cache=cache, use_cache=use_cache).last_hidden_state
        return SimpleNamespace(logits=self.head.logits(hidden[:, -logits_to_keep:]))


def measure(
    pair,
    context_length: int = 300,
    tokens: Iterable[int] = VERIFY_TOKENS,
    batches: Iterable[int] = DRAFT_BATCHES,
    repeats: int = 5,
    models: Iterable[str] = MODELS,
    progress: MeasureProgress | None = None,
    stop: Callable[[], bool] | None = None,
    grid: Iterable[Sequence] | None = None,
    reads: Iterable[int] = DRAFT_READS,
    draft=None,
) -> list[dict[str, Any]]:
    """Forward-pass times of ``pair`` on its own device and dtype, one row per grid point:
    ``{"model", "batch", "tokens", "ms", "min_ms", "max_ms"}`` (``ms`` the median of
    ``repeats`` timed passes after one warm-up; min and max show the spread).

    ``grid`` is a list of (model, batch, tokens) points (``LATENCY_GRID``, ``CURVE_GRID``,
    or any); without one it is ``default_grid(tokens, batches, models, reads)``, the same as
    ``LATENCY_GRID`` with the defaults. Each model's cache is filled once with
    ``context_length`` tokens of a fixed text (``context_ids``) and copied to B identical
    rows for a batch of B; each pass appends k tokens per row and is cropped off again.

    Interleaved: a warm-up sweep over every point, then ``repeats`` timed sweeps, one pass
    per point each. On a shared machine whose speed drifts over minutes, every point's
    median then spans the whole measurement, instead of a slow minute landing on a few
    points (which bent the curve: a verify of 5 tokens 20% slower than the runs' own).

    ``progress(fraction, message)`` is told before each pass; ``stop()`` is asked between
    passes, and when it says True the points timed at least once so far are returned (the
    median of their passes). The whole measurement is marked as heavy work
    (``specviz.record.contention``), so a run timed meanwhile in another thread knows its timings
    were contended.

    ``draft``: the model timed as the draft (default ``pair.draft``): a run's int8 copy
    (``pair.draft_model("int8")``) or its body with a cut head (``HeadedDraft``)."""
    points = _normalize_grid(grid if grid is not None else default_grid(tokens, batches, models, reads))
    need = _context_needed(pair, points, context_length)
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    run = _Sweeps(pair, {"draft": pair.draft if draft is None else draft, "target": pair.target}, points,
                  progress or (lambda fraction, message: None), stop or (lambda: False))
    ids = context_ids(pair.tokenizer, need)
    with busy.heavy("measuring forward-pass costs"):
        caches = run.fill(ids[:context_length])
        if caches is None:
            return []
        if not run.sweep(caches, ids[context_length:], repeats):
            return run.rows()
    run.tell(1.0, f"Measured {len(points)} points")
    return run.rows()


def _context_needed(pair, points: list[GridPoint], context_length: int) -> int:
    """The context a measurement fills: ``context_length`` and the largest pass (BadInput
    when the pair cannot hold it)."""
    if context_length < 1:
        raise BadInput("context_length must be >= 1", "context_length")
    need = context_length + max((k for _, _, k in points), default=0)
    if need > pair.context_length:
        raise BadInput(
            f"measuring needs a context of {need} tokens ({context_length} + the largest pass), "
            f"but the pair handles {pair.context_length}", "context_length",
        )
    return need


@dataclass
class _Sweeps:
    """One ``measure`` in progress: the models timed, the grid, and every point's timed passes."""

    pair: Any
    models: dict[str, Any]  # "draft" | "target" -> the model timed
    points: list[GridPoint]
    tell: MeasureProgress
    stop: Callable[[], bool]
    times: dict[GridPoint, list[float]] = field(init=False)

    def __post_init__(self) -> None:
        self.times = {p: [] for p in self.points}

    def fill(self, context: list[int]) -> dict[tuple[str, int], Any] | None:
        """Each model's cache filled once with ``context``, copied to B rows for a batch of B:
        one cache per (model, batch). None when told to stop first."""
        filled: dict[str, Any] = {}
        caches: dict[tuple[str, int], Any] = {}
        for name, batch, _ in self.points:
            if name not in filled:
                if self.stop():
                    return None
                self.tell(0.0, f"Filling the {name}'s cache ({len(context)} tokens)")
                filled[name] = fill_cache(self.models[name], context, self.pair.device)
            if (name, batch) not in caches:
                caches[name, batch] = batch_cache(filled[name], batch)
        return caches

    def sweep(self, caches: dict[tuple[str, int], Any], following: list[int], repeats: int) -> bool:
        """A warm-up sweep over every point, then ``repeats`` timed ones, one pass per point
        each, feeding the first k of ``following`` to every row. False when told to stop."""
        import torch

        inputs = {(m, b, k): torch.tensor([following[:k]] * b, dtype=torch.long, device=self.pair.device)
                  for m, b, k in self.points}
        total = (repeats + 1) * len(self.points)
        done = 0
        for sweep in range(repeats + 1):  # sweep 0 is the warm-up
            for point in self.points:
                if self.stop():
                    return False
                name, batch, k = point
                what = "warming up" if sweep == 0 else f"pass {sweep} of {repeats}"
                plural = "s" if k > 1 else ""
                self.tell(done / total, f"Timing the {name}: batch {batch}, {k} new token{plural} ({what})")
                ms = timed_pass(self.models[name], caches[name, batch], inputs[point], self.pair.device)
                if sweep:
                    self.times[point].append(ms)
                done += 1
        return True

    def rows(self) -> list[dict[str, Any]]:
        """One row per point timed at least once: the median of its passes, and their spread."""
        return [{"model": m, "batch": b, "tokens": k, "ms": statistics.median(t), "min_ms": min(t), "max_ms": max(t)}
                for (m, b, k), t in self.times.items() if t]


# --- the cache of measurements ------------------------------------------------------

COSTS_FORMAT = 1


def safe_name(text: str, limit: int = 80) -> str:
    """``text`` as one file-name part: runs of anything but letters, digits and ``.+_-`` become
    ``_``; a long name is cut and ends in a hash of the whole, so two long names never merge."""
    name = re.sub(r"[^A-Za-z0-9.+_-]+", "_", str(text)).strip("._-") or "_"
    if len(name) > limit:
        name = name[: limit - 9] + "_" + hashlib.sha256(str(text).encode()).hexdigest()[:8]
    return name


def cache_file_name(draft: str, target: str, device: str, dtype: str, context_length: int, grid: str) -> str:
    """``{draft}-{target}-{device}-{dtype}-ctx{context_length}-{grid}.json``, each part made safe.
    (Names keep their own dashes, for legibility; the file records the pair's names, and a
    file of another pair is never taken for this one's.)"""
    parts = [safe_name(p) for p in (draft, target, device, dtype)]
    return "-".join(parts) + f"-ctx{int(context_length)}-{safe_name(grid)}.json"


def cache_path(pair, context_length: int, grid: Iterable[Sequence] = LATENCY_GRID) -> Path:
    """Where ``load_or_measure`` keeps the measurement of this pair, device, dtype, context, grid."""
    from specviz.models.pair import cache_dir

    name = cache_file_name(pair.draft_name, pair.target_name, str(pair.device), pair.dtype,
                           context_length, grid_name(grid))
    return cache_dir() / "costs" / name


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON to a temporary sibling and rename it over ``path``: never half a file.
    (Created with open(), not mkstemp, so the file gets the umask's mode, not 0600.)"""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.partial")
    try:
        with open(tmp, "x") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _read(path: Path, points: list[GridPoint], header: dict[str, Any]) -> dict | None:
    """The cached measurement if it is readable, matches ``header`` (pair, device, dtype,
    context), covers every grid point and was taken on a quiet machine (no contention: a
    grid timed beside other work holds that work's time, not the pair's); else None (and the
    caller measures again)."""
    try:
        data = json.loads(path.read_text())
        if data.get("format") != COSTS_FORMAT or any(data.get(k) != v for k, v in header.items()):
            return None
        if data.get("contention"):
            return None
        have = {(r["model"], int(r["batch"]), int(r["tokens"])) for r in data["rows"]
                if float(r["ms"]) > 0}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return data if set(points) <= have else None


def load_or_measure(
    pair,
    context_length: int = 300,
    grid: Iterable[Sequence] = LATENCY_GRID,
    progress: MeasureProgress | None = None,
    refresh: bool = False,
    repeats: int = 5,
    stop: Callable[[], bool] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of ``measure`` for this pair, device, dtype, context length and grid: read
    from the cache file (``cache_path``) when it has them all, else measured and saved
    (``refresh=True`` always measures). Returns (rows, meta); meta is the file's header
    (device, dtype, context_length, measured_at in UTC, torch, threads, pair, grid, the
    contention: heavy jobs of other threads and other processes' CPU share that overlapped the
    measurement, as ``specviz.record.contention.Contention`` dicts; an older file has labels) plus ``path`` and
    ``cached`` (True when read from the file). A stopped measurement is returned with
    ``complete`` False and is not saved; nor is one that other work overlapped (its
    ``contention``): it is returned, marked, and the next call measures again."""
    import torch

    points = _normalize_grid(grid)
    path = cache_path(pair, context_length, points)
    header = {"draft": pair.draft_name, "target": pair.target_name, "device": str(pair.device),
              "dtype": pair.dtype, "context_length": context_length}
    data = None if refresh else _read(path, points, header)
    cached = data is not None
    if data is None:
        start_ns = time.perf_counter_ns()
        others = busy.CpuMeter()
        others.start()
        rows = measure(pair, context_length=context_length, grid=points, repeats=repeats,
                       progress=progress, stop=stop)
        others.stop()
        data = {
            "format": COSTS_FORMAT,
            **header,
            "grid": grid_name(points),
            "repeats": repeats,
            "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "contention": [asdict(c) for c in
                           busy.entries(busy.overlapping(start_ns, time.perf_counter_ns()), others)],
            "complete": len(rows) == len(points),
            "rows": rows,
        }
        if data["complete"] and not data["contention"]:  # a busy machine's grid is shown, never kept
            _write_atomic(path, data)
    meta = {k: v for k, v in data.items() if k != "rows"}
    meta.update(path=str(path), cached=cached)
    wanted = set(points)
    rows = [r for r in data["rows"] if (r["model"], int(r["batch"]), int(r["tokens"])) in wanted]
    return rows, meta


def cached(draft: str, target: str, device: str, dtype: str, context_length: int = 300,
           grid: Iterable[Sequence] = LATENCY_GRID) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """The cached measurement for a pair named (draft, target) on ``device`` in ``dtype``, or
    None: for a recorded run, whose pair need not be loaded. Never measures."""
    from specviz.models.pair import cache_dir

    points = _normalize_grid(grid)
    path = cache_dir() / "costs" / cache_file_name(draft, target, device, dtype, context_length, grid_name(points))
    header = {"draft": draft, "target": target, "device": device, "dtype": dtype, "context_length": context_length}
    data = _read(path, points, header)
    if data is None:
        return None
    meta = {k: v for k, v in data.items() if k != "rows"}
    meta.update(path=str(path), cached=True)
    return data["rows"], meta


CONTEXT_STEP = 32  # a replay's costs are measured at its run's mean context, to this step


def run_context(prompt_tokens: int, output_tokens: int, pair_context: int | None = None) -> int:
    """The context a run's replay is timed at: the mean context of its passes, prompt +
    output / 2 tokens, to the nearest CONTEXT_STEP (at least one step), and small enough
    that the pair holds it plus LATENCY_GRID's largest pass. A pass over a 300-token
    context costs up to a quarter more than one over 60 tokens on a CPU, so costs measured
    at a fixed context misjudge short runs (the serial replay's check against the run,
    ``specviz.replay.what_if.check_serial``, found that)."""
    mean = prompt_tokens + output_tokens / 2
    ctx = max(CONTEXT_STEP, CONTEXT_STEP * round(mean / CONTEXT_STEP))
    if pair_context is not None:
        ctx = curve_context_length(pair_context, LATENCY_GRID, ctx)
    return ctx


# --- the verify-cost curve: a sparse grid, its context, a cached curve --------------

SPARSE_CURVE_TOKENS = (1, 2, 4, 8, 16, 32)
# The curve at k = 1, 2, 4, ..., 32 only: both models, batches 1, 4 and 16. 36 points
# instead of CURVE_GRID's 192, so a CPU measures it in minutes (`specviz cost-curve`).
SPARSE_CURVE_GRID: list[GridPoint] = curve_grid(SPARSE_CURVE_TOKENS)
CURVE_CONTEXT = 300  # the context a curve is measured at (load_or_measure's default)


def curve_context_length(pair_context: int, grid: Iterable[Sequence], wanted: int = CURVE_CONTEXT) -> int:
    """The context to measure ``grid`` at: ``wanted``, or less where the pair's context
    cannot hold it and the grid's largest pass (the tiny pair's 256 tokens hold 224 + 32)."""
    largest = max((k for _, _, k in _normalize_grid(grid)), default=0)
    return max(1, min(int(wanted), int(pair_context) - largest))


def cached_curve(draft: str, target: str, device: str, dtype: str, context_length: int = CURVE_CONTEXT,
                 grids: Iterable[Iterable[Sequence]] | None = None,
                 ) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """The first cached measurement of ``grids`` (default: the full curve, then the sparse
    one) for a pair named (draft, target) on ``device`` in ``dtype``, or None. Never measures."""
    for grid in grids if grids is not None else (CURVE_GRID, SPARSE_CURVE_GRID):
        found = cached(draft, target, device, dtype, context_length, grid)
        if found is not None:
            return found
    return None


