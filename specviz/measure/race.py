"""The race: speculative decoding against the target alone, side by side.

A speedup is a ratio of two runs, so both must be measured under the same
conditions: the same pair, prompt and settings, one right after the other. The CLI
and the app both call ``Race``: the speculative run first, then the target alone,
then the comparison (speedup, exactness and why not).

The target-alone run does not depend on gamma, so a class moving the gamma slider
could reuse it. By default it is re-measured every time. A caller may allow reuse
(``reuse=True``); a stored baseline is then used only while it is recent and the
machine runs at the same speed: the new speculative run's median draft pass must
agree with that of the run the baseline was raced beside (the same kind of pass,
whatever gamma) within ``REUSE_TOLERANCE``.

The same conditions include the machine's load: a race whose two runs saw different
contention (``same_load``: another program took a core during one of them, or a model
loaded beside one) does not measure a fair ratio, and says so.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass

from specviz.analysis.compare import Comparison, compare
from specviz.engine.decode import Decoding, autoregressive, speculative
from specviz.models import busy
from specviz.models.pair import ModelPair
from specviz.record import contention
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Round, Trace

REUSE_MAX_AGE_S = 600.0
REUSE_TOLERANCE = 0.15


@dataclass
class Baseline:
    """A target-alone run and the conditions it was measured under."""

    trace: Trace
    run: int | None  # the app's run number it was measured in
    measured_at: float  # time.time()
    draft_ms: float | None  # median draft forward of the speculative run raced beside it


def baseline_key(config: RunConfig) -> tuple:
    """What the target-alone run depends on (not gamma, drafter, policy or draft head)."""
    return (config.draft, config.target, config.device, config.dtype, config.prompt, config.chat,
            config.max_new_tokens, config.temperature, config.top_k, config.top_p, config.seed,
            tuple(config.stop))


def why_not_reuse(baseline: Baseline, sd: Trace, now: float) -> str | None:
    """None when ``baseline`` may stand in for a fresh measurement beside ``sd``; else why not."""
    age = now - baseline.measured_at
    if age > REUSE_MAX_AGE_S:
        return f"it is {age / 60:.0f} min old"
    new = sd.summary.get("draft_forward_ms_median")
    if new is None or baseline.draft_ms is None:
        return "no draft passes to compare the machine's speed by"
    drift = abs(new / baseline.draft_ms - 1)
    if drift > REUSE_TOLERANCE:
        return f"draft passes now take {new:.0f} ms against {baseline.draft_ms:.0f} ms then"
    return None


def other_share(trace: Trace) -> float:
    """Cores other work took during the run's timed work as its trace records it: other processes
    and the app's own pages (0 where neither is marked: below ``busy.BUSY_CORES``,
    ``busy.APP_BUSY_CORES``)."""
    return sum(c.cpu_share or 0.0 for c in trace.contention
               if c.label in (contention.OTHER_PROCESSES, contention.APP_PAGES))


def same_load(a: Trace, b: Trace) -> bool:
    """Whether two runs were timed under the same load: the same heavy jobs in this process, and
    other processes' shares less than ``busy.BUSY_CORES`` apart (an unmarked run counts 0)."""
    jobs = lambda t: {c.label for c in t.contention if c.cpu_share is None}  # noqa: E731
    return jobs(a) == jobs(b) and abs(other_share(a) - other_share(b)) < busy.BUSY_CORES


class Race:
    """Iterate for ("speculative" | "autoregressive", Round) pairs, speculative first.
    When both runs are done, ``comparison`` holds the verdict and ``baseline`` the
    target-alone run used (``reused`` says whether it was measured earlier)."""

    def __init__(self, pair: ModelPair, config: RunConfig, against_target: bool = True,
                 baselines: dict[tuple, Baseline] | None = None, reuse: bool = False, run: int | None = None):
        self.pair = pair
        self.sd: Decoding = speculative(pair, config)
        self.against_target = against_target
        self.baselines = baselines if baselines is not None else {}
        self.reuse, self.run_no = reuse, run
        self.ar: Decoding | None = None
        self.baseline: Baseline | None = None
        self.reused = False
        self.not_reused_because: str | None = None
        self.comparison: Comparison | None = None

    def __iter__(self) -> Iterator[tuple[str, Round]]:
        return self

    @property
    def done(self) -> bool:
        return self.sd.done and (not self.against_target or self.comparison is not None)

    def __next__(self) -> tuple[str, Round]:
        if not self.sd.done:
            try:
                return "speculative", next(self.sd)
            except StopIteration:
                pass
        if not self.against_target or self.comparison is not None:
            raise StopIteration
        if self.ar is None and self._reuse():
            return self.__next__()
        if self.ar is None:
            cfg = dataclasses.replace(self.sd.trace.config, stop=list(self.sd.trace.config.stop))
            self.ar = autoregressive(self.pair, cfg)
        try:
            return "autoregressive", next(self.ar)
        except StopIteration:
            self._finish(Baseline(self.ar.trace, self.run_no, time.time(),
                                  self.sd.trace.summary.get("draft_forward_ms_median")))
            raise

    @property
    def fair(self) -> bool | None:
        """Whether both runs of the finished race saw the same load (None before its end or
        without a target-alone run): only then is the speedup the pair's ratio."""
        if self.comparison is None or self.baseline is None:
            return None
        return same_load(self.sd.trace, self.baseline.trace)

    def run(self) -> "Race":
        for _ in self:
            pass
        return self

    def _reuse(self) -> bool:
        """Take a stored baseline if allowed and still valid; True when taken."""
        stored = self.baselines.get(baseline_key(self.sd.trace.config))
        if stored is None:
            return False
        why = why_not_reuse(stored, self.sd.trace, time.time()) if self.reuse else "reuse is off"
        if why is not None:
            self.not_reused_because = why
            return False
        self.reused = True
        self._finish(stored)
        return True

    def _finish(self, baseline: Baseline) -> None:
        self.baseline = baseline
        if not self.reused:
            self.baselines[baseline_key(self.sd.trace.config)] = baseline
        self.comparison = compare(baseline.trace, self.sd.trace, self.pair.tokenizer)
