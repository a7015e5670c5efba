"""The γ sweep: tokens per second against the draft length, measured, beside what the formula predicts.

``sweep(pair, prompts, gammas)`` runs, for each prompt, the target alone (the baseline)
and speculative decoding at every γ, each ``repeats`` times, and keeps every value: a
point is the median of its runs, with the spread (min, max, all values) beside it.

The runs are interleaved so that a slow moment of the machine does not land on one γ:
for each prompt, repeat 1 runs γ = 1..N then the target alone, repeat 2 the target alone
then γ = N..1, and so on, alternating (``schedule``). Every measured run (a ``Cell``) is
stored in ``done``, keyed by everything the run depends on (``cell_key``: the pair, device,
dtype, prompt, γ, token budget, draft head, policy, sampling, repeat index), so a second
sweep with the same settings, or a sweep resumed after an interruption, runs only what is
missing. A token budget below max γ + 1 is refused (``least_new_tokens``): it cannot
draft the longest γ, and at 1 token it drafts nothing. ``stop()`` is asked before each run: a stopped sweep keeps what it measured.
``progress(done_cells, total_cells, partial_result)`` is told after each run.

From the cells, each (prompt, γ) gets a row (``ROW_KEYS``), and each prompt its
baseline, its measured best γ and the best γ the formula predicts (``theory``) from the
α and c pooled over the prompt's runs:

* α: each speculative run's tokens per round inverted for α at its γ
  (``theory.alpha_from_mean_length``), averaged weighted by the run's rounds;
* c: the median draft pass over the median one-token target step of the target-alone
  runs: the cost ratio as the formula defines it. (A run's own ``cost_ratio_c`` divides
  by its verify pass, which reads γ + 1 tokens; the rows keep that one.)

The formula assumes a verify pass over γ + 1 tokens costs one target step; where it costs
more (compute-bound passes), the measured best γ lies below the predicted one.

``estimate_seconds`` says how long a sweep will take before it starts, from a
``LatencyModel`` (``specviz.measure.forward_costs``): read off one short probe run (``probe_costs``: a
speculative run and a target-alone run of a few tokens), or any measured one. The same
probe, or the last measured curve, says how long measuring the verify-cost curve takes
(``measure_seconds``), for the Cost curve page.

No Streamlit here: the CLI (``specviz sweep``) and the Tune page share it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from specviz.analysis import theory
from specviz.engine.decode import autoregressive, speculative
from specviz.models.pair import ModelPair
from specviz.record.contention import Contention, merged
from specviz.record.errors import BadInput
from specviz.record.limits import MAX_GAMMA, MAX_REPEATS
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Trace
from specviz.record.validate import check
from specviz.replay.latency import LatencyModel, from_trace

AR = 0  # the γ of a target-alone cell
WARMUP_TOKENS = 8  # an untimed speculative run of this many tokens before the first timed one
PROBE_TOKENS = 8
PROBE_GAMMA = 4

ROW_KEYS = (
    "prompt", "gamma", "tokens_per_second", "tokens_per_second_min", "tokens_per_second_max",
    "tokens_per_second_values", "acceptance_rate", "mean_acceptance_length", "alpha", "cost_ratio_c",
    "draft_ms", "verify_ms", "predicted_speedup", "speedup", "n", "contended",
)

Progress = Callable[[int, int, "SweepResult"], None]


# --- inputs --------------------------------------------------------------------------


def parse_gammas(text: str) -> list[int]:
    """``1-10``, ``1,2,4`` or both (``1-4,8``): the γ values, sorted, each once.
    Raises BadInput (field ``gammas``) on anything else."""
    if not isinstance(text, str) or not text.strip():
        raise BadInput("--gammas is empty: give a range such as 1-10 or a list such as 1,2,4", "gammas")
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)\s*(?:-\s*(\d+))?", part)
        if not m:
            raise BadInput(f"--gammas: {part!r} is not a whole number or a range such as 1-10", "gammas")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise BadInput(f"--gammas: the range {part} runs backwards; write {hi}-{lo}", "gammas")
        out.update(range(lo, hi + 1))
    return check_gammas(sorted(out))


def check_gammas(gammas: Iterable[int]) -> list[int]:
    """The γ values sorted and each once, all whole numbers in 1..MAX_GAMMA (else BadInput)."""
    values = list(gammas)
    if not values:
        raise BadInput("no γ values to sweep: give at least one", "gammas")
    for g in values:
        if isinstance(g, bool) or not isinstance(g, int) or not 1 <= g <= MAX_GAMMA:
            raise BadInput(f"every γ must be a whole number from 1 to {MAX_GAMMA}; got {g!r}", "gammas")
    return sorted(set(values))


def check_prompts(prompts: Iterable[str]) -> list[str]:
    """The prompts in order, each once; at least one, none empty (else BadInput)."""
    if isinstance(prompts, str):
        prompts = [prompts]
    out: list[str] = []
    for p in prompts:
        if not isinstance(p, str) or not p.strip():
            raise BadInput("a prompt is empty: type something for the models to continue", "prompt")
        if p not in out:
            out.append(p)
    if not out:
        raise BadInput("no prompt to sweep: give at least one", "prompt")
    return out


def check_repeats(repeats: int) -> int:
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
        raise BadInput(f"repeats must be a whole number from 1 to {MAX_REPEATS}; got {repeats!r}", "repeats")
    return repeats


def least_new_tokens(gammas: Iterable[int]) -> int:
    """The fewest new tokens a run needs for a sweep over ``gammas`` to measure every γ:
    max γ + 1. Every round ends with the target's own token, so a run drafts at most one
    token fewer than it has left (the engine drafts min(γ, left − 1)): with fewer, the
    longest γ are never drafted in full and measure a shorter one, and at 1 token nothing
    is drafted at all (no acceptance, no α, a "best γ" picked from timing noise)."""
    return max(gammas) + 1


def check_max_new_tokens(max_new_tokens: int, gammas: Iterable[int]) -> int:
    """``max_new_tokens`` when it can measure every γ of ``gammas`` (``least_new_tokens``);
    else BadInput (field ``max_new_tokens``) saying the least and why."""
    gammas = check_gammas(gammas)
    least = least_new_tokens(gammas)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < least:
        raise BadInput(f"max new tokens must be at least {least} to sweep γ up to {gammas[-1]}: every round ends "
                       f"with the target's own token, so a run drafts at most one token fewer than it writes; "
                       f"got {max_new_tokens!r}", "max_new_tokens")
    return max_new_tokens


def schedule(prompts: Sequence[str], gammas: Sequence[int], repeats: int) -> list[tuple[str, int, int]]:
    """The order the runs are measured in: (prompt, γ, repeat), γ = 0 for the target alone.
    For each prompt, even repeats run γ ascending then the target alone, odd repeats the
    target alone then γ descending: a slow moment of the machine spreads over every γ."""
    forward = [*sorted(gammas), AR]
    out = []
    for prompt in prompts:
        for r in range(repeats):
            order = forward if r % 2 == 0 else forward[::-1]
            out += [(prompt, g, r) for g in order]
    return out


def run_config(base: RunConfig | None, prompt: str, gamma: int, max_new_tokens: int) -> RunConfig:
    """The config of one cell: ``base`` (or greedy defaults) with this prompt, γ and budget. A
    dynamic token tree sweeps its depth: γ is the tree's depth (a static shape is refused by
    ``check_tree_sweep``)."""
    base = base if base is not None else RunConfig()
    mode = "autoregressive" if gamma == AR else "speculative"
    depth = gamma if base.tree_nodes and gamma != AR else base.tree_depth
    return dataclasses.replace(base, mode=mode, prompt=prompt, gamma=gamma or max(1, base.gamma),
                               max_new_tokens=max_new_tokens, stop=list(base.stop), tree_depth=depth)


def cell_key(pair: ModelPair, config: RunConfig, repeat: int) -> tuple:
    """Everything one measured run depends on, with the repeat index. The target alone does
    not depend on γ, the drafter, the policy or the draft head: those read 0 / "" there."""
    ar = config.mode == "autoregressive"
    return (pair.draft_name, pair.target_name, str(pair.device), pair.dtype, config.prompt, config.chat,
            AR if ar else config.gamma, config.max_new_tokens,
            0 if ar else config.draft_vocab, "" if ar else config.policy, "" if ar else config.drafter,
            config.temperature, config.top_k, config.top_p, config.seed, tuple(config.stop), repeat)


# --- one measured run ----------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One measured run: the numbers of its trace's summary (the trace itself is not kept)."""

    prompt: str
    gamma: int  # 0: the target alone
    repeat: int
    tokens_per_second: float
    new_tokens: int
    rounds: int
    wall_ms: float  # on the engine's clock
    seconds: float  # the whole run in real time, off-clock work (text, record) included
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    cost_ratio_c: float | None = None  # the run's own: median draft pass / median verify pass
    draft_ms: float | None = None  # median draft forward
    target_ms: float | None = None  # median target forward: a verify pass, or one step when alone
    contention: tuple[Contention, ...] = ()  # what competed with the run (specviz.record.contention)
    measured_at: float = 0.0  # time.time()

    @classmethod
    def of(cls, trace: Trace, repeat: int, seconds: float) -> "Cell":
        s = trace.summary
        ar = trace.config.mode == "autoregressive"
        return cls(
            prompt=trace.config.prompt, gamma=AR if ar else trace.config.gamma, repeat=repeat,
            tokens_per_second=float(s["tokens_per_second"]), new_tokens=int(s["new_tokens"]),
            rounds=int(s["rounds"]), wall_ms=float(s["wall_ms"]), seconds=seconds,
            acceptance_rate=None if ar else s.get("acceptance_rate"),
            mean_acceptance_length=None if ar else s.get("mean_acceptance_length"),
            cost_ratio_c=s.get("cost_ratio_c"), draft_ms=s.get("draft_forward_ms_median"),
            target_ms=s.get("target_forward_ms_median"), contention=tuple(trace.contention),
            measured_at=time.time(),
        )


def measure_cell(pair: ModelPair, config: RunConfig, repeat: int,
                 lock: contextlib.AbstractContextManager | None = None) -> Cell:
    """Run one cell to its end (inside ``lock``, when given) and keep its numbers."""
    with lock if lock is not None else contextlib.nullcontext():
        t0 = time.perf_counter()
        decoding = autoregressive(pair, config) if config.mode == "autoregressive" else speculative(pair, config)
        trace = decoding.run()
        seconds = time.perf_counter() - t0
    return Cell.of(trace, repeat, seconds)


# --- the result -------------------------------------------------------------------------


def _median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


@dataclass
class SweepResult:
    """What a sweep measured (``cells``) and what follows from it: one row per (prompt, γ)
    measured at least once (``ROW_KEYS``), and per prompt the baseline (median target-alone
    tok/s), the pooled α and c, the measured and the predicted best γ."""

    prompts: list[str]
    gammas: list[int]
    repeats: int
    max_new_tokens: int
    settings: dict[str, Any] = field(default_factory=dict)
    cells: list[Cell] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    baseline: dict[str, float] = field(default_factory=dict)
    baseline_min: dict[str, float] = field(default_factory=dict)
    baseline_max: dict[str, float] = field(default_factory=dict)
    target_step_ms: dict[str, float] = field(default_factory=dict)  # median one-token step, target alone
    alpha: dict[str, float] = field(default_factory=dict)
    cost_ratio_c: dict[str, float] = field(default_factory=dict)
    best_gamma_measured: dict[str, int] = field(default_factory=dict)
    best_gamma_predicted: dict[str, int] = field(default_factory=dict)
    stopped: bool = False
    measured: int = 0  # runs this call measured
    reused: int = 0  # runs found in ``done``
    elapsed_s: float = 0.0

    @property
    def total_cells(self) -> int:
        return len(self.prompts) * (len(self.gammas) + 1) * self.repeats

    @property
    def done_cells(self) -> int:
        return len(self.cells)

    @property
    def complete(self) -> bool:
        return self.done_cells == self.total_cells

    def rows_of(self, prompt: str) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["prompt"] == prompt]

    def row(self, prompt: str, gamma: int) -> dict[str, Any] | None:
        return next((r for r in self.rows if r["prompt"] == prompt and r["gamma"] == gamma), None)

    def predicted_speedup(self, prompt: str, gamma: int) -> float | None:
        """The formula's speedup at ``gamma`` from the prompt's pooled α and c (None if unknown)."""
        a, c = self.alpha.get(prompt), self.cost_ratio_c.get(prompt)
        if a is None or c is None:
            return None
        return theory.expected_speedup(a, gamma, c)

    def refined_speedup(self, prompt: str, gamma: int) -> float | None:
        """The refined formula's speedup at ``gamma`` (theory.refined_speedup): the prompt's
        pooled α, its median draft pass, and the verify pass over γ + 1 tokens this sweep
        measured at that γ, against the target alone's one-token step. None if unknown."""
        rows = [r for r in self.rows if r["prompt"] == prompt]
        row = next((r for r in rows if r["gamma"] == gamma), None)
        a, step = self.alpha.get(prompt), self.target_step_ms.get(prompt)
        drafts = [r["draft_ms"] for r in rows if r.get("draft_ms")]
        if row is None or a is None or not step or not drafts or not row.get("verify_ms"):
            return None
        verify = {1: step, gamma + 1: row["verify_ms"]}
        return theory.refined_speedup(a, gamma, statistics.median(drafts), verify)

    def disagreements(self, tolerance: int = 1) -> list[str]:
        """Prompts whose measured and predicted best γ differ by more than ``tolerance``."""
        return [p for p in self.prompts
                if p in self.best_gamma_measured and p in self.best_gamma_predicted
                and abs(self.best_gamma_measured[p] - self.best_gamma_predicted[p]) > tolerance]

    def contended(self) -> list[Contention]:
        """What any run of the sweep was timed under: heavy jobs, other processes at their largest share."""
        return merged(j for c in self.cells for j in c.contention)

    def to_dict(self) -> dict[str, Any]:
        """The CLI's JSON: rows, and per prompt the baseline and the two best γ, plus the rest."""
        return {
            "rows": [dict(r) for r in self.rows],
            "baseline": dict(self.baseline),
            "best_gamma_measured": dict(self.best_gamma_measured),
            "best_gamma_predicted": dict(self.best_gamma_predicted),
            "alpha": dict(self.alpha),
            "cost_ratio_c": dict(self.cost_ratio_c),
            "target_step_ms": dict(self.target_step_ms),
            "prompts": list(self.prompts),
            "gammas": list(self.gammas),
            "repeats": self.repeats,
            "max_new_tokens": self.max_new_tokens,
            "settings": dict(self.settings),
            "complete": self.complete,
            "stopped": self.stopped,
            "cells": [{**asdict(c), "contention": [asdict(j) for j in c.contention]} for c in self.cells],
        }


def aggregate(result: SweepResult) -> SweepResult:
    """Fill ``result``'s rows and per-prompt numbers from its cells (in place; returns it)."""
    for name in ("baseline", "baseline_min", "baseline_max", "target_step_ms", "alpha", "cost_ratio_c",
                 "best_gamma_measured", "best_gamma_predicted"):
        getattr(result, name).clear()
    result.rows = []
    by: dict[tuple[str, int], list[Cell]] = {}
    for c in result.cells:
        by.setdefault((c.prompt, c.gamma), []).append(c)
    for prompt in result.prompts:
        alone = sorted(by.get((prompt, AR), []), key=lambda c: c.repeat)
        if alone:
            tps = [c.tokens_per_second for c in alone]
            result.baseline[prompt] = statistics.median(tps)
            result.baseline_min[prompt], result.baseline_max[prompt] = min(tps), max(tps)
            if (step := _median(c.target_ms for c in alone)) is not None:
                result.target_step_ms[prompt] = step
        sd = [c for g in result.gammas for c in by.get((prompt, g), [])]
        alpha, c = _pooled(sd, result.target_step_ms.get(prompt))
        if alpha is not None:
            result.alpha[prompt] = alpha
        if c is not None:
            result.cost_ratio_c[prompt] = c
        for g in result.gammas:
            cells = sorted(by.get((prompt, g), []), key=lambda x: x.repeat)
            if cells:
                result.rows.append(_row(result, prompt, g, cells))
        rows = result.rows_of(prompt)
        if rows:
            best = max(rows, key=lambda r: r["tokens_per_second"])  # ties: the smaller γ (rows ascend)
            result.best_gamma_measured[prompt] = best["gamma"]
        if alpha is not None and c is not None:
            # the integer argmax over the swept γ (theory.best_gamma over 1..N for a range 1..N)
            result.best_gamma_predicted[prompt] = max(
                result.gammas, key=lambda g: theory.expected_speedup(alpha, g, c))
    return result


def _snapshot(result: SweepResult) -> SweepResult:
    """A separate, aggregated copy of a result in progress (what ``progress`` is given)."""
    return aggregate(SweepResult(
        prompts=list(result.prompts), gammas=list(result.gammas), repeats=result.repeats,
        max_new_tokens=result.max_new_tokens, settings=dict(result.settings), cells=list(result.cells),
        stopped=result.stopped, measured=result.measured, reused=result.reused, elapsed_s=result.elapsed_s))


def _pooled(cells: list[Cell], step_ms: float | None) -> tuple[float | None, float | None]:
    """The prompt's α (round-weighted over its speculative runs) and c (median draft pass
    over the target-alone one-token step; before any target-alone run, the runs' own c)."""
    weighted, rounds = 0.0, 0
    for c in cells:
        if c.mean_acceptance_length is not None and c.rounds:
            weighted += c.rounds * theory.alpha_from_mean_length(c.mean_acceptance_length, c.gamma)
            rounds += c.rounds
    alpha = weighted / rounds if rounds else None
    draft = _median(c.draft_ms for c in cells)
    if draft is not None and step_ms:
        cost = draft / step_ms
    else:
        cost = _median(c.cost_ratio_c for c in cells)
    return alpha, cost


def _row(result: SweepResult, prompt: str, gamma: int, cells: list[Cell]) -> dict[str, Any]:
    tps = [c.tokens_per_second for c in cells]
    med = statistics.median(tps)
    length = _median(c.mean_acceptance_length for c in cells)
    base = result.baseline.get(prompt)
    return {
        "prompt": prompt,
        "gamma": gamma,
        "tokens_per_second": med,
        "tokens_per_second_min": min(tps),
        "tokens_per_second_max": max(tps),
        "tokens_per_second_values": tps,
        "acceptance_rate": _median(c.acceptance_rate for c in cells),
        "mean_acceptance_length": length,
        "alpha": None if length is None else theory.alpha_from_mean_length(length, gamma),
        "cost_ratio_c": _median(c.cost_ratio_c for c in cells),
        "draft_ms": _median(c.draft_ms for c in cells),
        "verify_ms": _median(c.target_ms for c in cells),
        "predicted_speedup": result.predicted_speedup(prompt, gamma),
        "speedup": med / base if base else None,
        "n": len(cells),
        "contended": sum(bool(c.contention) for c in cells),
    }


# --- the sweep --------------------------------------------------------------------------


def _settings(pair: ModelPair, base: RunConfig) -> dict[str, Any]:
    return {"draft": pair.draft_name, "target": pair.target_name, "device": str(pair.device),
            "dtype": pair.dtype, "chat": base.chat, "policy": base.policy, "drafter": base.drafter,
            "draft_vocab": base.draft_vocab, "temperature": base.temperature, "top_k": base.top_k,
            "top_p": base.top_p, "seed": base.seed, "stop": list(base.stop)}


def sweep(
    pair: ModelPair,
    prompts: Iterable[str],
    gammas: Iterable[int],
    repeats: int = 3,
    max_new_tokens: int = 64,
    base_config: RunConfig | None = None,
    progress: Progress | None = None,
    stop: Callable[[], bool] | None = None,
    done: dict[tuple, Cell] | None = None,
    lock: contextlib.AbstractContextManager | None = None,
    warmup: bool = True,
) -> SweepResult:
    """Measure the target alone and speculative decoding at every γ, for every prompt,
    ``repeats`` times, interleaved (``schedule``). Cells already in ``done`` (keyed by
    ``cell_key``) are taken as they are; each new one is added to it as soon as it is
    measured. ``stop()`` is asked before every run: when it says True no further run
    starts, and the result holds what was measured (``stopped`` True). ``progress`` is
    told after every run. ``lock`` (a context manager, e.g. a threading.Lock) is held
    around each run. ``warmup`` runs one short untimed speculative run before the first
    timed one of this call (never when nothing is left to measure).

    Every setting is checked before anything runs: BadInput names the field at fault."""
    prompts = check_prompts(prompts)
    gammas = check_gammas(gammas)
    repeats = check_repeats(repeats)
    max_new_tokens = check_max_new_tokens(max_new_tokens, gammas)
    base = base_config if base_config is not None else RunConfig()
    for prompt in prompts:  # every prompt against the pair (its length, the context) first
        check(pair, run_config(base, prompt, max(gammas), max_new_tokens))
    done = done if done is not None else {}
    result = SweepResult(prompts=prompts, gammas=gammas, repeats=repeats, max_new_tokens=max_new_tokens,
                         settings=_settings(pair, base))
    plan = schedule(prompts, gammas, repeats)
    total = len(plan)
    t0 = time.perf_counter()
    warmed = not warmup
    for prompt, gamma, repeat in plan:
        cfg = run_config(base, prompt, gamma, max_new_tokens)
        key = cell_key(pair, cfg, repeat)
        if key in done:
            result.cells.append(done[key])
            result.reused += 1
            continue
        if result.stopped or (stop is not None and stop()):
            result.stopped = True
            continue  # no more runs; the cells already in ``done`` are still collected
        if not warmed:
            _warm_up(pair, run_config(base, prompts[0], gammas[0], min(WARMUP_TOKENS, max_new_tokens)), lock)
            warmed = True
        cell = measure_cell(pair, cfg, repeat, lock)
        done[key] = cell
        result.cells.append(cell)
        result.measured += 1
        if progress is not None:
            result.elapsed_s = time.perf_counter() - t0
            progress(len(result.cells), total, _snapshot(result))
    result.elapsed_s = time.perf_counter() - t0
    return aggregate(result)


def collect(pair: ModelPair, prompts: Iterable[str], gammas: Iterable[int], repeats: int = 3,
            max_new_tokens: int = 64, base_config: RunConfig | None = None,
            done: dict[tuple, Cell] | None = None) -> SweepResult:
    """The result of a sweep with these settings from the cells in ``done`` alone: runs nothing."""
    return sweep(pair, prompts, gammas, repeats, max_new_tokens, base_config, stop=lambda: True,
                 done=done if done is not None else {}, warmup=False)


def pending(pair: ModelPair, prompts: Iterable[str], gammas: Iterable[int], repeats: int,
            max_new_tokens: int, base_config: RunConfig | None = None,
            done: dict[tuple, Cell] | None = None) -> list[tuple[str, int, int]]:
    """The (prompt, γ, repeat) cells of ``schedule`` that ``done`` does not hold yet."""
    done = done or {}
    check_max_new_tokens(max_new_tokens, gammas)
    return [(p, g, r) for p, g, r in schedule(check_prompts(prompts), check_gammas(gammas), repeats)
            if cell_key(pair, run_config(base_config, p, g, max_new_tokens), r) not in done]


def _warm_up(pair: ModelPair, config: RunConfig, lock) -> None:
    """One short untimed run, so the first timed one does not pay for first-use costs."""
    with lock if lock is not None else contextlib.nullcontext():
        speculative(pair, config).run()


# --- how long it will take ------------------------------------------------------------


def probe_costs(pair: ModelPair, prompt: str, base_config: RunConfig | None = None,
                tokens: int = PROBE_TOKENS, gamma: int = PROBE_GAMMA,
                lock: contextlib.AbstractContextManager | None = None) -> LatencyModel:
    """A LatencyModel read off one short probe: a speculative run (γ = ``gamma``) and a
    target-alone run of ``tokens`` tokens each on ``prompt``; the passes' medians (a short
    probe's mean is at the mercy of one slow pass), the prefills as they were. Besides the passes'
    costs, ``meta`` keeps the probe's α (``alpha``) and the real time the runs spent off
    the engine's clock per run (``off_clock_ms_per_run``: setup, text, the record; over
    ``probe_tokens`` tokens), which a sweep's runs pay too. One untimed run of 2 tokens
    comes first, so the probe does not time first-use costs."""
    base = base_config if base_config is not None else RunConfig()
    sd_cfg = run_config(base, prompt, min(gamma, MAX_GAMMA), tokens)
    ar_cfg = run_config(base, prompt, AR, tokens)
    with lock if lock is not None else contextlib.nullcontext():
        speculative(pair, dataclasses.replace(sd_cfg, max_new_tokens=2)).run()  # untimed: first-use costs
        t0 = time.perf_counter()
        sd = speculative(pair, sd_cfg).run()
        t1 = time.perf_counter()
        ar = autoregressive(pair, ar_cfg).run()
        t2 = time.perf_counter()
    model = from_trace(sd)  # its prefills; the passes again below, as medians
    drafts = [e.duration_ms for e in sd.events if e.kind == "draft_forward"]
    if drafts:
        one = statistics.median(drafts)
        model.draft_ms = {1: one, 2: 2 * one}
    by_k: dict[int, list[float]] = {}
    for e in [*sd.events, *ar.events]:
        if e.kind in ("verify_forward", "target_forward"):
            by_k.setdefault(len(e.tokens), []).append(e.duration_ms)
    model.verify_ms.update({k: statistics.median(v) for k, v in by_k.items()})
    per_round = [max(0.0, r.end_ms - r.start_ms - sum(e.duration_ms for e in r.events if e.is_forward))
                 for r in sd.rounds]
    if per_round:
        model.overhead_ms = statistics.median(per_round)
    off = (t1 - t0) * 1000 - sd.wall_ms + (t2 - t1) * 1000 - ar.wall_ms
    made = (len(sd.output_ids) + len(ar.output_ids)) / 2
    length = sd.summary.get("mean_acceptance_length") or 1.0
    model.source = "a short probe run"
    model.meta.update(alpha=theory.alpha_from_mean_length(length, sd_cfg.gamma),
                      off_clock_ms_per_run=max(0.0, off) / 2, probe_tokens=max(1.0, made),
                      prompt_tokens=len(sd.prompt_ids))
    return model


def run_ms(costs: LatencyModel, gamma: int, max_new_tokens: int, alpha: float | None = None) -> float:
    """The expected real time (ms) of one run of ``max_new_tokens`` tokens (an upper bound:
    a run may stop early at EOS). γ = 0: the target alone, one step per token; else rounds
    of γ draft passes and one verify pass over γ + 1 tokens, as many as the expected
    tokens per round (α: ``costs.meta["alpha"]``, else 0.6) need."""
    if alpha is None:
        alpha = float(costs.meta.get("alpha", 0.6))
    alpha = min(max(alpha, 0.0), 1.0)
    # work off the engine's clock: part of it per run (setup), part per token (text, the
    # record); one probe size cannot tell them apart, so half of it is taken to grow with tokens
    probe_tokens = float(costs.meta.get("probe_tokens", max_new_tokens)) or 1.0
    extra = float(costs.meta.get("off_clock_ms_per_run", 0.0)) * (1 + max_new_tokens / probe_tokens) / 2
    if gamma == AR:
        return costs.target_prefill_ms + max_new_tokens * (costs.verify(1) + costs.overhead_ms) + extra
    rounds = max_new_tokens / theory.expected_tokens_per_round(alpha, gamma)
    per_round = gamma * costs.draft(1) + costs.verify(gamma + 1) + costs.overhead_ms
    return costs.draft_prefill_ms + costs.target_prefill_ms + rounds * per_round + extra


def estimate_seconds(
    pair_or_costs: ModelPair | LatencyModel,
    prompts: Iterable[str],
    gammas: Iterable[int],
    repeats: int,
    max_new_tokens: int,
    base_config: RunConfig | None = None,
    cells: Iterable[tuple[str, int, int]] | None = None,
    warmup: bool = True,
) -> float:
    """How long a sweep will take on this machine, in seconds: the sum of ``run_ms`` over
    its cells (``cells``: only those, e.g. ``pending``; default: the whole ``schedule``),
    plus the warm-up. Given a LatencyModel, it uses it as is; given a pair, it first runs a
    short probe (``probe_costs``: about two runs of 8 tokens) and estimates from that."""
    prompts = check_prompts(prompts)
    gammas = check_gammas(gammas)
    repeats = check_repeats(repeats)
    max_new_tokens = check_max_new_tokens(max_new_tokens, gammas)
    if isinstance(pair_or_costs, LatencyModel):
        costs = pair_or_costs
    else:
        costs = probe_costs(pair_or_costs, prompts[0], base_config)
    todo = list(cells) if cells is not None else schedule(prompts, gammas, repeats)
    if not todo:
        return 0.0
    ms = sum(run_ms(costs, g, max_new_tokens) for _, g, _ in todo)
    if warmup:
        ms += run_ms(costs, gammas[0], min(WARMUP_TOKENS, max_new_tokens))
    return ms / 1000.0


# --- how long measuring the verify-cost curve will take --------------------------------------


def pass_curves(source: LatencyModel | Iterable[dict[str, Any]]) -> dict[str, dict[int, float]]:
    """The ms of one forward pass of each model ("draft", "target") by the tokens it reads at
    once (batch × new tokens): from a measured curve's rows (``specviz.measure.forward_costs.measure``: the
    slowest row where two share a product), or from a probe's LatencyModel (``probe_costs``:
    the target's step and verify pass, the draft's step and reads, and each model's prompt
    prefill over ``meta["prompt_tokens"]`` tokens)."""
    if not isinstance(source, LatencyModel):
        curves: dict[str, dict[int, float]] = {}
        for row in source:
            n = int(row["batch"]) * int(row["tokens"])
            curve = curves.setdefault(row["model"], {})
            curve[n] = max(curve.get(n, 0.0), float(row["ms"]))
        return curves
    target = dict(source.verify_ms)
    draft = {1: source.draft(1), **source.draft_read_ms}
    prompt = int(source.meta.get("prompt_tokens") or 0)
    if prompt > 1:
        if source.target_prefill_ms:
            target[prompt] = source.target_prefill_ms
        if source.draft_prefill_ms:
            draft[prompt] = source.draft_prefill_ms
    return {"target": target, "draft": draft}


def pass_ms(curve: dict[int, float], tokens: int) -> float:
    """One pass over ``tokens`` tokens on a ``pass_curves`` curve: linear between its points, flat
    below the first, extrapolated from the last two past the last (a pass over many tokens is
    compute-bound: its time grows in proportion)."""
    return LatencyModel(draft_ms={1: 0.0}, verify_ms=curve).verify(tokens)


def measure_seconds(source: LatencyModel | Iterable[dict[str, Any]], grid: Iterable[Sequence],
                    repeats: int, context_length: int) -> float:
    """How long ``specviz.measure.forward_costs.measure`` takes over ``grid`` ((model, batch, new tokens)
    points) on this machine, in seconds: each model's cache filled once (one pass over
    ``context_length`` tokens), then one warm-up and ``repeats`` timed passes per point, each
    over batch × new tokens: a point a measured curve holds at its own median, any other
    from ``pass_curves(source)``."""
    rows = [] if isinstance(source, LatencyModel) else list(source)
    curves = pass_curves(source if isinstance(source, LatencyModel) else rows)
    known = {(str(r["model"]), int(r["batch"]), int(r["tokens"])): float(r["ms"]) for r in rows}
    points = [(str(m), int(b), int(k)) for m, b, k in grid]
    missing = sorted({m for m, _, _ in points} - set(curves))
    if missing:
        raise ValueError(f"no pass times for the {', '.join(missing)} to estimate from")
    fill = sum(pass_ms(curves[m], context_length) for m in {m for m, _, _ in points})
    passes = sum(known.get((m, b, k)) or pass_ms(curves[m], b * k) for m, b, k in points)
    return (fill + (repeats + 1) * passes) / 1000.0
