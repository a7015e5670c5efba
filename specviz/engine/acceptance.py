"""Sampling settings, logit warping and the two acceptance rules.

Notation: target distribution p, draft distribution q, draft tokens x_1..x_g.

* Greedy (temperature 0): accept x_i while x_i == argmax p_i; then emit argmax p_{k+1}.
* Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): accept x_i with
  probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection emit a token from
  norm(max(0, p_i - q_i)); if all g are accepted emit a bonus token from p_{g+1}.
  The emitted tokens then follow p exactly.

Both p and q are the *warped* distributions (temperature, top-k, top-p applied to
each model alike), so the output follows the warped target, as plain sampling would.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.record.limits import check_sampling

TOPP_CANDIDATES = 1024  # nucleus searched among this many tokens first (exact fallback)


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        check_sampling(self.temperature, self.top_k, self.top_p)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _top_p_mask(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Boolean mask of the tokens outside the nucleus: the smallest set, taken in
    order of probability, whose mass reaches top_p (the top token is always kept)."""
    probs = logits.softmax(-1)
    k = min(TOPP_CANDIDATES, probs.shape[-1])
    top, idx = probs.topk(k, dim=-1)
    keep_sorted = (top.cumsum(-1) - top) < top_p  # mass strictly before each token
    if k < probs.shape[-1] and bool(keep_sorted[..., -1].any()):
        top, idx = probs.sort(dim=-1, descending=True)  # nucleus may reach past k: full sort
        keep_sorted = (top.cumsum(-1) - top) < top_p
    keep = torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, idx, keep_sorted)
    return ~keep


def warp(logits: torch.Tensor, s: Sampling) -> torch.Tensor:
    """Probabilities (float32, rows sum to 1) after temperature, top-k and top-p.

    In greedy mode the temperature-1 softmax is returned (for display only: the
    greedy rule uses the argmax)."""
    logits = logits.float()
    if s.greedy:
        return logits.softmax(-1)
    logits = logits / s.temperature
    if s.top_k and s.top_k < logits.shape[-1]:
        kth = logits.topk(s.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if s.top_p < 1.0:
        logits = logits.masked_fill(_top_p_mask(logits, s.top_p), float("-inf"))
    return logits.softmax(-1)


def pick(probs: torch.Tensor, s: Sampling, gen: torch.Generator) -> int:
    """One token from a probability row: argmax when greedy, else a seeded draw."""
    if s.greedy:
        return int(probs.argmax())
    return int(torch.multinomial(probs.cpu(), 1, generator=gen))


def greedy_accept(p: torch.Tensor, draft: list[int]) -> tuple[int, int | None]:
    """Greedy rule. p: [g+1, V] target rows (or [g]: no bonus row); returns (k accepted, the
    target's next token, None when every guess was accepted and there is no row after them)."""
    best = p.argmax(-1).tolist()
    k = 0
    while k < len(draft) and draft[k] == best[k]:
        k += 1
    return k, best[k] if k < len(best) else None


class Acceptance(tuple):
    """What the speculative-sampling rule decided. It unpacks as ``(k, token)``, as the
    rule's result always has; for the record it also holds the draws that decided it:

    * ``u``: the uniform draw of each judged draft token, a tensor [min(k + 1, g)]
      (x_i was accepted iff u_i < p_i(x_i) / q_i(x_i)); the draws after the first
      rejection decided nothing and are left out;
    * ``row``: the distribution the target's token was drawn from: norm(max(0, p_k - q_k))
      after a rejection (p_k itself when p == q leaves no residual mass), p_g for a bonus."""

    u: torch.Tensor
    row: torch.Tensor | None
    residual: bool

    def __new__(cls, k: int, token: int, u: torch.Tensor | None = None, row: torch.Tensor | None = None,
                residual: bool = False):
        self = super().__new__(cls, (k, token))
        self.u = u if u is not None else torch.empty(0)
        self.row, self.residual = row, residual
        return self

    @property
    def accepted(self) -> int:
        return self[0]

    @property
    def token(self) -> int:
        return self[1]


def sampling_accept(
    p: torch.Tensor, q: torch.Tensor, draft: list[int], gen: torch.Generator
) -> Acceptance:
    """Speculative sampling. p: [g+1, V], q: [g, V] warped rows; returns (k, next token)
    as an ``Acceptance``, which also holds the draws (u) and the row the next token was
    drawn from.

    The next token is a correction from norm(max(0, p_k - q_k)) when k < g, else a
    bonus from p_g. Uses one uniform draw per draft token, then one categorical draw.
    """
    p = p.cpu()
    g = len(draft)
    if g:
        q = q.cpu()
        rows = torch.arange(g)
        tok = torch.tensor(draft)
        ratio = p[rows, tok] / q[rows, tok].clamp_min(1e-30)
        u = torch.rand(g, generator=gen)
        rejected = (u >= ratio).nonzero()
        if len(rejected):
            k = int(rejected[0])
            row, leftover = residual_row(p[k], q[k])
            return Acceptance(k, int(torch.multinomial(row, 1, generator=gen)), u[: k + 1], row, leftover)
        return Acceptance(g, int(torch.multinomial(p[g], 1, generator=gen)), u, p[g])
    return Acceptance(g, int(torch.multinomial(p[g], 1, generator=gen)), None, p[g])


def residual_row(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """After a rejection: norm(max(0, p − q)), and True; where p == q on the support there is
    no residual mass, and p itself is exact: (p, False)."""
    residual = (p - q).clamp_min(0)
    total = residual.sum()
    return (residual / total, True) if total > 0 else (p, False)


def top_tokens(rows: torch.Tensor, k: int) -> list[list[int]]:
    """Each row's ``k`` most probable token ids (zero-probability ids left out), most
    probable first, ties broken by the lower id as argmax breaks them."""
    rows = rows.detach().float().cpu()
    if rows.ndim == 1:
        rows = rows[None]
    k = min(k, rows.shape[-1])
    vals, idx = rows.topk(min(k + 1, rows.shape[-1]), dim=-1)
    kth = vals[:, k - 1 : k]
    ties = (vals[:, -1] == vals[:, k - 1]).tolist() if vals.shape[-1] > k else [False] * len(rows)
    out = []
    for r, row in enumerate(rows):
        if kth[r, 0] <= 0:
            ids = (row > 0).nonzero().squeeze(1)  # fewer than k ids have any probability
        elif ties[r]:
            ids = (row >= kth[r, 0]).nonzero().squeeze(1)
        else:
            ids = idx[r, :k].sort().values
        order = torch.sort(row[ids], descending=True, stable=True).indices[:k]  # ids ascending: ties by the lower
        out.append(ids[order].tolist())
    return out
