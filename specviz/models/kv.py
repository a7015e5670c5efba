"""A causal LM bound to its own KV cache, with an exact record of what the cache holds.

The record (``tokens``) makes rollback a matter of arithmetic: to continue from a
sequence, keep the longest common prefix of the cache and the sequence, crop the
rest (``DynamicCache.crop`` takes a negative count), and feed what is missing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import torch
from transformers import DynamicCache

from specviz.models import busy
from specviz.record import contention


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels, so a timed span is the work and not its launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def common_prefix(record: list[int], seq: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    if len(record) <= len(seq) and seq[: len(record)] == record:
        return len(record)  # the usual case, compared at C speed
    n = min(len(record), len(seq))
    i = 0
    while i < n and record[i] == seq[i]:
        i += 1
    return i


class KVModel:
    """One model, one cache. Many KVModels may share the same weights.

    ``head``, when given, replaces the model's LM head (a ``CutHead``: logits over a
    subset of the vocabulary); the transformer body runs unchanged."""

    logprob_rows = False  # forward() returns logits (remote.RemoteKV returns log-probs)

    def __init__(self, model: torch.nn.Module, device: torch.device, head=None):
        self.model = model
        self.device = device
        self.head = head
        self.cache = DynamicCache(config=model.config)
        self.tokens: list[int] = []

    @property
    def cache_len(self) -> int:
        """Length of the KV tensors themselves (not of the record)."""
        return self.cache.get_seq_length()

    def common_prefix(self, seq: list[int]) -> int:
        """Length of the longest common prefix of the cache record and ``seq``."""
        return common_prefix(self.tokens, seq)

    def rollback(self, length: int) -> int:
        """Drop cached positions >= length; returns how many were dropped."""
        drop = len(self.tokens) - length
        if drop > 0:
            self.cache.crop(-drop)
            del self.tokens[length:]
        return max(drop, 0)

    def forward(self, new: list[int], keep: int, allow: torch.Tensor | None = None,
                positions: list[int] | None = None) -> torch.Tensor:
        """Append ``new`` to the cache; return float32 logits [keep, V] of the last positions
        (V = the head's size: the whole vocabulary, or the kept ids of a cut head).

        keep >= 1: transformers reads logits_to_keep=0 as "all positions". A token tree
        passes ``allow`` [len(new), cache + len(new)] (which cached and new positions each
        new token may attend to: its prefix and its ancestors) and ``positions`` (each new
        token's position id: prefix length + depth); transformers takes a 4D mask as is."""
        if keep < 1:
            raise ValueError("keep must be >= 1")
        ids = torch.tensor([new], dtype=torch.long, device=self.device)
        kw = {}
        if allow is not None:
            dtype = self.model.dtype if self.model.dtype.is_floating_point else torch.float32
            blocked = torch.tensor(torch.finfo(dtype).min, dtype=dtype, device=self.device)
            kw["attention_mask"] = torch.where(allow.to(self.device), torch.zeros((), dtype=dtype, device=self.device),
                                               blocked)[None, None]
            kw["position_ids"] = torch.tensor([positions], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            if self.head is None:
                out = self.model(input_ids=ids, cache=self.cache, use_cache=True, logits_to_keep=keep, **kw)
                logits = out.logits[0, -keep:]
            else:
                hidden = self.model.base_model(input_ids=ids, cache=self.cache, use_cache=True, **kw).last_hidden_state
                logits = self.head.logits(hidden[0, -keep:])
        self.tokens.extend(new)
        return logits.float()

    def timed_forward(self, new: list[int], keep: int, clock: "Clock", **tree) -> tuple[torch.Tensor, float, float]:
        """forward(), synchronised, with its start and end on ``clock`` (ms)."""
        start = clock.now()
        logits = self.forward(new, keep, **tree).cpu()
        synchronize(self.device)
        return logits, start, clock.now()

    def keep_only(self, positions: list[int]) -> None:
        """Keep only these cached positions, in this order (a token tree's accepted path after
        its prefix): the KV rows are gathered, nothing is recomputed. A kept row's rotary
        position is the one it was computed at, so the kept positions must be the sequence
        they now form (prefix, then the path at prefix length + depth)."""
        index = torch.tensor(positions, dtype=torch.long, device=self.device)
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(-2, index)
            layer.values = layer.values.index_select(-2, index)
        self.tokens = [self.tokens[i] for i in positions]

    def take_waits(self) -> list:
        """Spans of a forward spent outside the model (a remote target's network): none here."""
        return []


class Clock:
    """Milliseconds of engine time since the run started (perf_counter_ns).

    The clock stops while the caller holds a yielded round (drawing it, animating
    it, waiting for a Step click) and while the engine does display work (``off``),
    so timings are the engine's own. It also notes what competed with the timed work
    (``contention``): heavy work in other threads of this process (a model load) that
    overlapped a stretch of it, and the CPU time other processes took meanwhile, sampled
    when the caller's hold starts and ends (``pause``, ``resume``; display work inside
    ``off`` is short and counts as timed there). ``others=False`` measures no other
    processes (a target served from this machine is one: its work is the run's own)."""

    def __init__(self, others: bool = True) -> None:
        self.cpu = busy.CpuMeter() if others else None
        if self.cpu is not None:
            self.cpu.start()
        self.t0 = time.perf_counter_ns()
        self.paused_at: int | None = None
        self.running_since_ns = self.t0
        self.contended: set[str] = set()

    def now(self) -> float:
        end = self.paused_at if self.paused_at is not None else time.perf_counter_ns()
        return (end - self.t0) / 1e6

    def check(self) -> None:
        """Note heavy work that overlapped the timed stretch so far."""
        if self.paused_at is None:
            self.contended.update(busy.overlapping(self.running_since_ns, time.perf_counter_ns()))

    def _halt(self) -> None:
        if self.paused_at is None:
            self.check()
            self.paused_at = time.perf_counter_ns()

    def _go(self) -> None:
        if self.paused_at is not None:
            now = time.perf_counter_ns()
            self.t0 += now - self.paused_at
            self.paused_at = None
            self.running_since_ns = now

    def pause(self) -> None:
        """Stop the clock while the caller holds the run; the CPU sample is taken off the clock."""
        if self.paused_at is None:
            self._halt()
            if self.cpu is not None:
                self.cpu.stop()

    def resume(self) -> None:
        if self.paused_at is not None:
            if self.cpu is not None:
                self.cpu.start()
            self._go()

    def contention(self) -> list[contention.Contention]:
        """What competed with the timed work so far (``busy.entries``): call it paused, or
        at the very end, where its one CPU sample is past the last timing."""
        if self.paused_at is None:  # the timed stretch so far, then on from here
            self.check()
            if self.cpu is not None:
                self.cpu.stop()
                self.cpu.start()
        return busy.entries(self.contended, self.cpu)

    @contextlib.contextmanager
    def off(self) -> Iterator[None]:
        """Stop the clock for the work inside (text, display bookkeeping)."""
        if self.paused_at is not None:
            yield
            return
        self._halt()
        try:
            yield
        finally:
            self._go()
