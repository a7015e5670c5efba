"""Passes that launch less: a static KV cache and compiled forward passes (``RunConfig.compiled``).

At one sequence in eager PyTorch a small model on a GPU is launch-bound: a pass costs a
fixed time per kernel launch and per layer, so the 0.5B draft cost 0.84 of the 1.5B target
on an H200 (docs/design.md, "On a GPU"). CUDA graphs replay a whole pass as one launch, but
they need every tensor at a fixed address and every shape fixed:

* the cache is a ``transformers.StaticCache`` of ``length`` positions, allocated once; its
  ``cumulative_length`` says how many hold the sequence, so a rollback (``crop``) and a
  tree's compaction (``keep_only``: the kept rows gathered into the front, in place) move
  no allocation, and the stale rows past the length are never attended (the causal mask
  runs over cache positions);
* ``compiled(model)`` is ``torch.compile`` of the model: mode ``reduce-overhead`` (CUDA
  graphs) on a GPU, the default (Inductor's fused kernels) elsewhere. It runs the one-token
  pass, the one shape every round repeats γ times (the draft's step; the target's own step
  when it decodes alone), compiled once per model and cache length and warmed up before a
  run's clock starts (``warm``). The verify (one a round, a width that changes with the
  policy), the prefill (a new length every prompt) and cut heads run eager.

The logits come out of a graph's own buffer, which the next replay overwrites: each pass's
are copied before it returns. The arithmetic is the model's own, so greedy output stays
the target's (tests/test_compiled.py, fp32).
"""

from __future__ import annotations

import functools

import torch
from transformers import StaticCache

from specviz.models.kv import KVModel

STEP_TOKENS = 1  # passes of at most this many new tokens run compiled: the one-token step
BUCKET = 256  # cache lengths are rounded up to a multiple of this: a few sizes, so a few compilations


def cache_length(needed: int, context: int) -> int:
    """The static cache's size for a run that may hold ``needed`` positions: rounded up to a
    multiple of BUCKET (one compiled graph serves every run of that size), at most ``context``."""
    return max(1, min(context, -(-needed // BUCKET) * BUCKET))


@functools.lru_cache(maxsize=8)
def compiled(model: torch.nn.Module):
    """``torch.compile`` of ``model``, once per model: CUDA graphs on a GPU, Inductor elsewhere."""
    device = next(model.parameters()).device
    mode = "reduce-overhead" if device.type == "cuda" else None
    return torch.compile(model, mode=mode, dynamic=False)


def warm(model: torch.nn.Module, device: torch.device, length: int) -> None:
    """Compile (or look up) the one-token pass for a cache of ``length`` positions, off any
    run's clock: a throwaway cache, a two-token prefill, then one compiled step."""
    kv = StaticKV(model, device, length, compiled(model))
    kv.forward([0, 0], 1)
    kv.forward([0], 1)


class StaticKV(KVModel):
    """A KVModel over a StaticCache of ``length`` positions; passes of up to STEP_TOKENS new
    tokens run through ``step`` (a compiled model) once the prefill has allocated the cache."""

    def __init__(self, model: torch.nn.Module, device: torch.device, length: int, step=None):
        super().__init__(model, device)
        self.cache = StaticCache(config=model.config, max_cache_len=length)
        self.length = length
        self.step = step

    @property
    def cache_len(self) -> int:
        return int(self.cache.get_seq_length())

    def forward(self, new: list[int], keep: int, allow: torch.Tensor | None = None,
                positions: list[int] | None = None) -> torch.Tensor:
        """As KVModel.forward; a tree's mask is widened to the cache's ``length`` columns (the
        static cache is attended whole; the columns past the sequence stay blocked)."""
        if keep < 1:
            raise ValueError("keep must be >= 1")
        if len(self.tokens) + len(new) > self.length:
            raise ValueError(f"the static cache holds {self.length} positions; this pass would need "
                             f"{len(self.tokens) + len(new)}")
        ids = torch.tensor([new], dtype=torch.long, device=self.device)
        kw = {}
        if allow is not None:
            wide = torch.zeros(allow.shape[0], self.length, dtype=torch.bool)
            wide[:, : allow.shape[1]] = allow
            dtype = self.model.dtype
            blocked = torch.tensor(torch.finfo(dtype).min, dtype=dtype, device=self.device)
            kw["attention_mask"] = torch.where(wide.to(self.device), torch.zeros((), dtype=dtype, device=self.device),
                                               blocked)[None, None]
            kw["position_ids"] = torch.tensor([positions], dtype=torch.long, device=self.device)
        run = self.step if self.step is not None and self.tokens and len(new) <= STEP_TOKENS else self.model
        with torch.inference_mode():
            out = run(input_ids=ids, cache=self.cache, use_cache=True, logits_to_keep=keep, **kw)
            logits = out.logits[0, -keep:].float().clone()  # out of the graph's buffer before the next replay
        self.tokens.extend(new)
        return logits

    def keep_only(self, positions: list[int]) -> None:
        """Gather the kept rows into the front of each layer's static tensors, in place (their
        addresses are what a captured graph reads), and set the cache's length."""
        index = torch.tensor(positions, dtype=torch.long, device=self.device)
        n = len(positions)
        with torch.inference_mode():
            for layer in self.cache.layers:
                layer.keys[:, :, :n] = layer.keys.index_select(-2, index)
                layer.values[:, :, :n] = layer.values.index_select(-2, index)
                layer.cumulative_length.fill_(n)
        self.tokens = [self.tokens[i] for i in positions]
