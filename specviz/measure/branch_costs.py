"""The passes a replay needs and its run did not time. Until those are known a replay's number would be a guess, so
``QuickCosts`` measures just them, in seconds, in a background thread holding the engine
(no live round is timed meanwhile), each as a ratio to a pass the run did time
(``references``) measured beside it; ``specviz.replay.what_if.fill_in`` scales the ratios to the run's own pass.
A ratio measured in the same seconds as its reference does not drift with the machine's
speed, and the replay stays on the run's own clock.
"""

from __future__ import annotations

import contextlib
import threading
import time

from specviz.measure import forward_costs as C
from specviz.record.errors import BadInput, SpecvizError
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Trace
from specviz.replay.latency import GridPoint

QUICK_REPEATS = 5  # timed sweeps of a quick measurement (after one warm-up): seconds on a CPU


def replay_context(trace: Trace, pair_context: int | None = None) -> int:
    """The context (tokens) the forward-pass costs of ``trace``'s replay are measured at."""
    return C.run_context(len(trace.prompt_ids), len(trace.output_ids), pair_context)


def same_pair(pair, cfg: RunConfig) -> bool:
    """Whether ``pair`` (loaded, or None) is the one ``cfg``'s run was recorded with: names,
    device, dtype and remote target."""
    return pair is not None and (pair.draft_name, pair.target_name, str(pair.device), pair.dtype) == (
        cfg.draft, cfg.target, cfg.device, cfg.dtype) and (pair.remote.url if pair.remote else "") == cfg.target_url


def same_draft(pair, cfg: RunConfig) -> bool:
    """Whether ``pair`` (loaded, or None) holds ``cfg``'s run's draft: its name, device and
    dtype (its passes can be measured here even when the run's target was another, remote)."""
    return pair is not None and (pair.draft_name, str(pair.device), pair.dtype) == (cfg.draft, cfg.device, cfg.dtype)


def run_draft(pair, cfg: RunConfig):
    """The draft as ``cfg``'s run drafted with (its int8 copy, its cut head), for ``forward_costs.measure``."""
    draft = pair.draft_model(cfg.draft_quant)
    return C.HeadedDraft(draft, pair.cut_head(cfg.draft_vocab, cfg.draft_quant)) if cfg.draft_vocab else draft


class QuickCosts:
    """The passes a run's replays need and the run did not time (``missing_passes``), for one
    pair, draft (the run's: int8, cut head) and context: measured in a background thread,
    as ratios to ``refs`` (``references``) timed in the same sweeps (``fill_in``).

    ``start(points)`` measures the points not yet known (False: nothing to do, or a
    measurement is running); the thread holds ``lock`` (the engine queue) throughout, so no
    live round is timed meanwhile, and ``forward_costs.measure`` marks it as heavy work, so a run
    timed meanwhile in any other way knows. ``running``, ``error`` (a SpecvizError's
    message) and ``seconds`` (the last measurement's) are for the page to poll."""

    def __init__(self, pair, cfg: RunConfig, context_length: int, refs: dict[str, GridPoint],
                 lock=None, repeats: int = QUICK_REPEATS):
        self.pair, self.cfg, self.context_length, self.refs = pair, cfg, context_length, dict(refs)
        self.lock = lock if lock is not None else contextlib.nullcontext()
        self.repeats = repeats
        self.ratios: dict[GridPoint, float] = {}
        self.error: str | None = None
        self.seconds: float | None = None
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    def missing(self, points) -> set[GridPoint]:
        return {p for p in points if p not in self.ratios}

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, points) -> bool:
        with self._guard:
            todo = self.missing(points)
            if not todo or self.running:
                return False
            self.error = None
            # not a daemon: at exit the process waits for its seconds, rather than tearing torch
            # down under a running pass (which aborts the process: "terminate called ...")
            self._thread = threading.Thread(target=self._measure, args=(sorted(todo),), daemon=False,
                                            name="specviz-quick-costs")
            self._thread.start()
            return True

    def forget_error(self) -> None:
        """Let the next ``start`` try again after a failed measurement."""
        self.error = None

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _measure(self, points: list[GridPoint]) -> None:
        start = time.monotonic()
        try:
            self.ratios.update(measure_ratios(self.pair, self.cfg, self.context_length, points, self.refs,
                                              self.lock, self.repeats))
        except SpecvizError as exc:
            self.error = str(exc)
        except Exception as exc:  # shown on the page, never a traceback
            self.error = f"{type(exc).__name__}: {exc}"
        self.seconds = time.monotonic() - start


def measure_ratios(pair, cfg: RunConfig, context_length: int, points, refs: dict[str, GridPoint],
                   lock=None, repeats: int = QUICK_REPEATS) -> dict[GridPoint, float]:
    """``points`` timed on ``pair`` with ``cfg``'s draft at ``context_length``, each over its
    model's reference pass of ``refs`` timed in the same sweeps: {point: ms / reference ms}.
    Each is its fastest pass: what other work on the machine adds to a pass comes in slices
    of milliseconds (a busy 2-core machine turned the tiny draft's 1.5 ms passes into 2 to
    100 ms), and the fastest of a few is the pass's own cost; the ratio then applies it to
    the run's own pass, which paid what the run's minutes cost."""
    points = sorted(set(points))
    models = {m for m, _, _ in points}
    if "target" in models and pair.target is None:
        raise BadInput("the passes of a remote target cannot be timed here: replay this run at its own γ",
                       "target")
    if models - set(refs):
        raise BadInput(f"the run timed no {' or '.join(sorted(models - set(refs)))} pass to scale by", "trace")
    grid = sorted(set(points) | {refs[m] for m in models})
    with lock if lock is not None else contextlib.nullcontext():
        rows = C.measure(pair, context_length=context_length, grid=grid, repeats=repeats,
                         draft=run_draft(pair, cfg) if "draft" in models else None)
    fastest = {(r["model"], r["batch"], r["tokens"]): r["min_ms"] for r in rows}
    return {p: fastest[p] / fastest[refs[p[0]]] for p in points}
