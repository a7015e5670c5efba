"""Closed-form expectations of speculative decoding (Leviathan et al. 2023).

alpha: probability that the target accepts a draft token (i.i.d. per position),
gamma: draft length, c: cost ratio = draft forward time / target forward time.

  E[tokens per round] = (1 - alpha^(gamma+1)) / (1 - alpha)
  E[speedup]          = (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma*c + 1))

A gain exists iff alpha > c for some gamma; the best gamma is an integer argmax.

The refined formula replaces the one target step of a verify pass by its measured cost
T(gamma + 1) (specviz.measure.forward_costs measures the curve T(k)):

  E[speedup]          = E[tokens per round] * T(1) / (gamma * t_draft + T(gamma + 1))

Derivation: per round the serial schedule pays gamma draft passes (t_draft each, one new
token each) and one target pass over gamma + 1 new tokens (the last emitted token and the
gamma drafts), T(gamma + 1); the round emits E[tokens per round] tokens on average. The
target alone pays T(1) per token. Speedup = (tokens per ms, speculative) / (tokens per ms,
alone) = (E / (gamma * t_draft + T(gamma + 1))) / (1 / T(1)). With T(gamma + 1) = T(1) and
c = t_draft / T(1) it is Leviathan et al.'s Theorem 3.8 again.

Where speculative decoding loses: for the simple formula, no gamma gives a speedup above 1
exactly when alpha <= c (``breakeven_alpha``: for alpha <= c, alpha^i <= alpha <= c for
every i >= 1, so 1 + alpha + ... + alpha^gamma <= 1 + gamma * c; for alpha > c, gamma = 1
already gives (1 + alpha) / (1 + c) > 1, Corollary 3.9). For the refined formula the
bound depends on the whole curve, and ``breakeven_alpha_refined`` finds it numerically.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

VerifyCost = Callable[[int], float] | Mapping[int, float]  # k new tokens -> cost of one target pass

# The default pair's target (Qwen2.5-Coder-1.5B, its Q4_K_M weights dequantised to the dtype):
# one forward pass over k new tokens on a 200-token cache, median ms, on the reference machine
# of docs/design.md ("Measured timings": a 2-core AMD EPYC with AVX512-BF16, torch 2.13 on the
# CPU). In float32 the pass is compute-bound (5 tokens cost 1.9 one-token passes), in bfloat16
# memory-bound (1.04): what pages quote when this machine has no curve of its own yet.
REFERENCE_TARGET_MS = {"float32": {1: 295.0, 5: 568.0, 9: 665.0}, "bfloat16": {1: 120.0, 5: 125.0, 9: 143.0}}


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


# --- the refined formula: a verify pass costs what it was measured to cost ----------


def _verify_cost(verify: VerifyCost, tokens: int) -> float:
    cost = verify[tokens] if isinstance(verify, Mapping) else verify(tokens)
    return float(cost)


def refined_speedup(alpha: float, gamma: int, t_draft: float, verify: VerifyCost) -> float:
    """Wall-time speedup over the target alone when one verify pass over gamma + 1 tokens
    costs ``verify(gamma + 1)`` and one step of the target alone ``verify(1)``:

        E[tokens per round] * T(1) / (gamma * t_draft + T(gamma + 1))

    ``t_draft`` (one draft pass) and ``verify`` (k -> one target pass over k new tokens: a
    callable such as ``LatencyModel.verify``, or a mapping) in one unit, ms or T(1) = 1."""
    if gamma < 1:
        raise ValueError("gamma must be >= 1")
    t1 = _verify_cost(verify, 1)
    round_cost = gamma * t_draft + _verify_cost(verify, gamma + 1)
    if t1 <= 0 or round_cost <= 0:
        raise ValueError("forward-pass costs must be positive")
    return expected_tokens_per_round(alpha, gamma) * t1 / round_cost


def best_gamma_refined(alpha: float, t_draft: float, verify: VerifyCost, max_gamma: int = 32) -> int:
    """The draft length in 1..max_gamma with the highest refined speedup."""
    return max(range(1, max_gamma + 1), key=lambda g: refined_speedup(alpha, g, t_draft, verify))


def breakeven_alpha(c: float) -> float:
    """The largest alpha at which no draft length gains (simple formula): speculative
    decoding loses, or at best breaks even, exactly when alpha <= c (see the module text);
    1.0 when c >= 1 (then nothing gains)."""
    if c < 0:
        raise ValueError(f"c must be >= 0; got {c}")
    return min(float(c), 1.0)


def breakeven_alpha_refined(t_draft: float, verify: VerifyCost, max_gamma: int = 32) -> float:
    """The largest alpha at which no gamma in 1..max_gamma gives a refined speedup above 1.

    For each gamma the speedup rises with alpha, so gamma gains exactly when
    E[tokens per round](alpha, gamma) > R(gamma) = (gamma * t_draft + T(gamma + 1)) / T(1);
    that threshold is E's inverse at R(gamma) (0 when R <= 1, 1 when R >= gamma + 1, where
    even a perfect draft cannot pay for the round). The answer is the smallest threshold
    over gamma: below it every gamma loses. With a flat curve (T(k) = T(1)) it is c."""
    t1 = _verify_cost(verify, 1)
    if t1 <= 0:
        raise ValueError("forward-pass costs must be positive")
    best = 1.0
    for g in range(1, max_gamma + 1):
        ratio = (g * t_draft + _verify_cost(verify, g + 1)) / t1
        if ratio <= 1.0:
            return 0.0
        if ratio < g + 1:
            best = min(best, alpha_from_mean_length(ratio, g))
    return best
