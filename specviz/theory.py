"""Closed-form expectations of speculative decoding (Leviathan et al. 2023).

alpha: probability that the target accepts a draft token (i.i.d. per position),
gamma: draft length, c: cost ratio = draft forward time / target forward time.

  E[tokens per round] = (1 - alpha^(gamma+1)) / (1 - alpha)
  E[speedup]          = (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma*c + 1))

A gain exists iff alpha > c for some gamma; the best gamma is an integer argmax.
"""

from __future__ import annotations


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    """Mean tokens one round emits: 1 + alpha + ... + alpha^gamma."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1]; got {alpha}")
    if alpha == 1:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def expected_speedup(alpha: float, gamma: int, c: float) -> float:
    """Wall-time speedup over the target alone, if a verify pass costs one target step."""
    return expected_tokens_per_round(alpha, gamma) / (gamma * c + 1)


def best_gamma(alpha: float, c: float, max_gamma: int = 32) -> int:
    """The draft length in 1..max_gamma with the highest expected speedup."""
    return max(range(1, max_gamma + 1), key=lambda g: expected_speedup(alpha, g, c))


def alpha_from_mean_length(mean_length: float, gamma: int) -> float:
    """Invert E[tokens per round] for alpha (bisection; the map is increasing).

    mean_acceptance_length (1 + accepted/rounds) is the measured E[tokens per
    round] of a constant-gamma run, so this gives the alpha that explains it.
    """
    if gamma < 1:
        raise ValueError("gamma must be >= 1")
    target = min(max(mean_length, 1.0), gamma + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_tokens_per_round(mid, gamma) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
