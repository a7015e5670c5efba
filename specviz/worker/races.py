"""A live race in the engine worker (``RaceSession``), and its mirror in the UI (``RemoteRace``).

The worker keeps the ``specviz.measure.race.Race`` and runs its rounds; after each it sends the
round and a ``Snapshot`` of what the page reads (the two runs' traces, the baseline, the
verdict). The mirror answers the Live page's questions (``sd.trace``, ``ar``, ``baseline``,
``comparison``, ``done``, ``fair``...) from the latest snapshot, as a ``Race`` in the same
process would, and stores a freshly measured baseline in the session's ``baselines`` so a later
race may reuse it.

A trace that has stopped changing is sent once: later snapshots carry None in its place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from specviz.analysis.compare import Comparison
from specviz.measure.race import Baseline, Race, baseline_key
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Round, Trace
from specviz.worker.client import EngineClient
from specviz.worker.protocol import WorkerDied

SESSION = "specviz.worker.races:RaceSession"


@dataclass
class Snapshot:
    """What the page reads of a race, after a round (None: as in the last snapshot sent)."""

    sd: Trace | None
    sd_done: bool
    ar: Trace | None
    has_ar: bool
    baseline: Baseline | None
    reused: bool
    not_reused_because: str | None
    comparison: Comparison | None
    done: bool
    fair: bool | None


class RaceSession:
    """A ``Race`` kept in the worker: built at ``open`` (a refused setting raises ``BadInput``
    there), one round per ``step``. ``baselines`` holds the session's stored target-alone runs of
    the prompt, for the race to reuse when allowed."""

    def __init__(self, pair, config: RunConfig, against_target: bool, baselines: dict, reuse: bool,
                 run: int | None):
        self.race = Race(pair, config, against_target=against_target, baselines=dict(baselines), reuse=reuse,
                         run=run)
        self._sent_sd = False  # the finished speculative trace went out already
        self._sent_ar = False

    def snapshot(self) -> Snapshot:
        r = self.race
        sd = None if self._sent_sd else r.sd.trace
        self._sent_sd = r.sd.done
        ar = r.ar.trace if r.ar is not None and not self._sent_ar else None
        self._sent_ar = r.ar is not None and r.ar.done
        return Snapshot(sd, r.sd.done, ar, r.ar is not None, r.baseline, r.reused, r.not_reused_because,
                        r.comparison, r.done, r.fair)

    def step(self) -> tuple[str, Round, Snapshot]:
        which, rnd = next(self.race)
        return which, rnd, self.snapshot()


@dataclass
class Lane:
    """One run of the race as the page reads it: its trace, and whether it has ended."""

    trace: Trace
    done: bool = False


class RemoteRace:
    """The Live page's race, run in the engine worker (see the module docstring). Iterate it, or
    call ``step(waiting)`` to hear the turns ahead while it waits, for ("speculative" |
    "autoregressive", Round); ``close()`` lets the worker forget it."""

    def __init__(self, client: EngineClient, config: RunConfig, against_target: bool = True,
                 baselines: dict | None = None, reuse: bool = False, run: int | None = None,
                 waiting: Callable[[int], None] | None = None):
        self.client, self.generation = client, client.generation
        self.against_target, self.reuse, self.run_no = against_target, reuse, run
        self.baselines = baselines if baselines is not None else {}
        same_prompt = {k: b for k, b in self.baselines.items() if k[4] == config.prompt}  # baseline_key's prompt
        self.sd: Lane | None = None
        self.ar: Lane | None = None
        self.baseline: Baseline | None = None
        self.reused = False
        self.not_reused_because: str | None = None
        self.comparison: Comparison | None = None
        self.done = False
        self.fair: bool | None = None
        self.handle, snap = client.open(SESSION, dataclasses.replace(config, stop=list(config.stop)),
                                        against_target, same_prompt, reuse, run, waiting=waiting)
        self._apply(snap)

    def _apply(self, snap: Snapshot) -> None:
        if snap.sd is not None:
            self.sd = Lane(snap.sd)
        self.sd.done = snap.sd_done
        if snap.ar is not None:
            self.ar = Lane(snap.ar)
        if self.ar is not None:
            self.ar.done = snap.baseline is not None and not snap.reused
        fresh = snap.baseline is not None and self.baseline is None and not snap.reused
        self.baseline, self.reused, self.not_reused_because = snap.baseline, snap.reused, snap.not_reused_because
        self.comparison, self.done, self.fair = snap.comparison, snap.done, snap.fair
        if fresh:
            self.baselines[baseline_key(self.sd.trace.config)] = snap.baseline

    def __iter__(self) -> RemoteRace:
        return self

    def __next__(self) -> tuple[str, Round]:
        return self.step()

    def step(self, waiting: Callable[[int], None] | None = None) -> tuple[str, Round]:
        if self.done:
            raise StopIteration
        if self.client.generation != self.generation:
            raise WorkerDied("The engine was restarted since this run began, so the run is lost. Run or Step "
                             "starts it again.")
        try:
            which, rnd, snap = self.client.next(self.handle, waiting)
        except StopIteration as end:
            self._apply(end.value)
            raise StopIteration from None
        self._apply(snap)
        return which, rnd

    def run(self) -> RemoteRace:
        for _ in self:
            pass
        return self

    def close(self) -> None:
        if self.client.generation == self.generation and not self.done:
            self.client.close(self.handle)
