"""A cheaper draft: its LM head cut to the N most frequent token ids (FR-Spec).

Zhao et al. 2025, "FR-Spec: Accelerating Large-Vocabulary Language Models via
Frequency-Ranked Speculative Sampling". A 0.5B draft with a 151,936-token vocabulary
spends about a quarter of each forward pass in its LM head (151,936 x 896 weights).
Scoring only the N most frequent ids cuts that, and with it the cost ratio c.

The draft only proposes; the target decides. So the output stays exact:

* greedy: a token is accepted iff it is the target's argmax, whatever drafted it;
* sampling: the draft samples from q restricted to the kept ids and renormalised
  (a softmax over the kept logits), and the acceptance rule uses that same q, zero
  outside the kept ids. min(1, p/q) and the residual norm(max(0, p - q)) then keep
  the target's distribution exactly: the residual holds all the mass of p on the
  ids the draft cannot propose.

The ranking comes from ``assets/token_ranks/`` (see docs/token-ranks.md): a file of
all token ids, most frequent first, and a JSON sidecar naming the vocabulary it was
made for by a fingerprint of its tokens.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from functools import lru_cache
from pathlib import Path

import torch

from specviz.models.int8 import int8_linear
from specviz.record.errors import BadInput
from specviz.record.limits import DRAFT_HEAD_SIZES

RANKS_DIR = Path(__file__).resolve().parents[2] / "assets" / "token_ranks"
SIZES = DRAFT_HEAD_SIZES  # the cuts the CLI and the app offer


def vocab_fingerprint(tokenizer) -> str:
    """sha256 of the vocabulary's token strings in id order: two tokenizers with the
    same fingerprint map every id to the same token."""
    vocab = tokenizer.get_vocab()
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    return hashlib.sha256("\n".join(f"{i}\t{t}" for t, i in by_id).encode("utf-8")).hexdigest()


@lru_cache(maxsize=4)
def _ranking_files() -> tuple[tuple[str, Path], ...]:
    """(vocab fingerprint, ranks file) for each shipped ranking."""
    found = []
    for meta in sorted(RANKS_DIR.glob("*.json")) if RANKS_DIR.is_dir() else []:
        try:
            info = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        data = meta.with_suffix(".u32")
        if info.get("vocab_fingerprint") and data.is_file():
            found.append((info["vocab_fingerprint"], data))
    return tuple(found)


def shipped_ranks(fingerprint: str) -> list[int] | None:
    """The shipped ranking made for this vocabulary, or None."""
    for fp, path in _ranking_files():
        if fp == fingerprint:
            ranks = array("I")
            ranks.frombytes(path.read_bytes())
            if ranks.itemsize != 4:
                raise RuntimeError("specviz reads token ranks as 32-bit unsigned ints")
            return list(ranks)
    return None


def kept_ids(ranks: list[int], n: int, always: list[int], vocab_size: int) -> torch.Tensor:
    """The ids a head cut to ``n`` scores: the ``n`` first of ``ranks`` plus ``always``
    (the end-of-sequence ids, so a cut draft can still propose to stop), sorted."""
    if not 0 < n < vocab_size:
        raise BadInput(f"draft vocabulary must be from 1 to {vocab_size - 1}; got {n}", "draft_vocab")
    keep = set(ranks[:n]) | {i for i in always if 0 <= i < vocab_size}
    return torch.tensor(sorted(keep), dtype=torch.long)


class CutHead:
    """The draft's LM head restricted to ``ids``: logits over the kept ids only."""

    def __init__(self, model: torch.nn.Module, ids: torch.Tensor, int8: bool = False):
        head = model.get_output_embeddings()
        if getattr(head, "bias", None) is not None:
            raise BadInput("a cut draft head needs an LM head without bias", "draft_vocab")
        self.vocab_size = head.weight.shape[0]
        self.ids = ids.to(head.weight.device)
        with torch.no_grad():
            self.weight = head.weight.index_select(0, self.ids).clone()
        if int8:  # the kept rows as a dynamic int8 linear, for the int8 draft body (specviz/models/int8.py)
            self.linear = int8_linear(self.weight)
            self.weight = None

    def __len__(self) -> int:
        return len(self.ids)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [T, H] -> logits [T, N] over the kept ids."""
        if self.weight is None:
            return self.linear(hidden)
        return hidden @ self.weight.T

    def spread(self, rows: torch.Tensor) -> torch.Tensor:
        """Probabilities [T, N] over the kept ids -> [T, V] over the whole vocabulary (0 elsewhere)."""
        full = rows.new_zeros(rows.shape[0], self.vocab_size)
        return full.index_copy_(1, self.ids.to(rows.device), rows)
