"""A live race in the engine worker (``RaceSession``), and its mirror in the UI (``RemoteRace``).

The worker keeps the ``specviz.measure.race.Race`` and runs its rounds; after each it sends the
round and a ``Snapshot`` of what the page reads (the two runs' traces, the baseline, the
verdict). The mirror answers the Live page's questions (``sd.trace``, ``ar``, ``baseline``,
``comparison``, ``done``, ``fair``...) from the latest snapshot, as a ``Race`` in the same
process would, and stores a freshly measured baseline in the session's ``baselines`` so a later
race may reuse it.

Each trace travels whole twice at most: when its run starts and when it ends (with its summary
and the draft's views). Between, a round travels with its run's ``Tail`` (the output so far, the
wall clock, the contention seen), which the mirror appends: a round costs the same to send at
the hundredth round as at the first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from specviz.analysis.compare import Comparison
from specviz.measure.race import Baseline, Race, baseline_key, same_load
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Round, Trace
from specviz.worker.client import EngineClient
from specviz.worker.protocol import WorkerDied

SESSION = "specviz.worker.races:RaceSession"


@dataclass
class Tail:
    """What a round changes in its run's trace besides the round itself."""

    output_ids: list[int]
    output_text: str
    wall_ms: float
    contention: list
    stop_reason: str

    @classmethod
    def of(cls, trace: Trace) -> Tail:
        return cls(list(trace.output_ids), trace.output_text, trace.wall_ms, list(trace.contention),
                   trace.stop_reason)

    def onto(self, trace: Trace, rnd: Round) -> None:
        trace.rounds.append(rnd)
        trace.output_ids, trace.output_text, trace.wall_ms = self.output_ids, self.output_text, self.wall_ms
        trace.contention, trace.stop_reason = self.contention, self.stop_reason


@dataclass
class Snapshot:
    """What the page reads of a race, after a round. A run's trace is whole when the run starts
    or ends, else None and the round's ``tail`` tells what changed."""

    sd: Trace | None
    sd_done: bool
    ar: Trace | None
    ar_done: bool
    tail: Tail | None
    baseline: Baseline | None
    reused: bool
    not_reused_because: str | None
    comparison: Comparison | None
    done: bool


class RaceSession:
    """A ``Race`` kept in the worker: built at ``open`` (a refused setting raises ``BadInput``
    there), one round per ``step``. ``baselines`` holds the session's stored target-alone runs of
    the prompt, for the race to reuse when allowed."""

    def __init__(self, pair, config: RunConfig, against_target: bool, baselines: dict, reuse: bool,
                 run: int | None):
        self.race = Race(pair, config, against_target=against_target, baselines=dict(baselines), reuse=reuse,
                         run=run)
        self._sent: dict[str, str] = {}  # run -> "started" | "ended": how far its whole trace went out

    def _whole(self, which: str, run) -> Trace | None:
        """The run's trace when it must go whole (its start, its end), else None."""
        if run is None:
            return None
        state = "ended" if run.done else "started"
        if self._sent.get(which) == state:
            return None
        self._sent[which] = state
        return run.trace

    def snapshot(self, moved: str | None = None) -> Snapshot:
        r = self.race
        sd, ar = self._whole("speculative", r.sd), self._whole("autoregressive", r.ar)
        run = {"speculative": r.sd, "autoregressive": r.ar}.get(moved)
        whole = sd if moved == "speculative" else ar
        tail = Tail.of(run.trace) if run is not None and whole is None else None
        return Snapshot(sd, r.sd.done, ar, r.ar is not None and r.ar.done, tail, r.baseline, r.reused,
                        r.not_reused_because, r.comparison, r.done)

    def step(self) -> tuple[str, Round, Snapshot]:
        which, rnd = next(self.race)
        return which, rnd, self.snapshot(which)


@dataclass
class Lane:
    """One run of the race as the page reads it: its trace, and whether it has ended."""

    trace: Trace
    done: bool = False


class RemoteRace:
    """The Live page's race, run in the engine worker (see the module docstring). Iterate it, or
    call ``step(waiting)`` to hear the turns ahead while it waits, for ("speculative" |
    "autoregressive", Round); ``close()`` lets the worker forget it. ``pair`` is the UI's own copy
    of the pair, for what the page reads of it (the tokenizer); the worker's does the work."""

    def __init__(self, client: EngineClient, config: RunConfig, against_target: bool = True,
                 baselines: dict | None = None, reuse: bool = False, run: int | None = None,
                 waiting: Callable[[int], None] | None = None, pair=None):
        self.client, self.generation = client, client.generation
        self.pair = pair  # the UI's copy of the pair (its tokenizer), for the page
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
        self.handle, snap = client.open(SESSION, dataclasses.replace(config, stop=list(config.stop)),
                                        against_target, same_prompt, reuse, run, waiting=waiting)
        self._apply(snap)

    def _apply(self, snap: Snapshot, which: str | None = None, rnd: Round | None = None) -> None:
        if snap.sd is not None:
            self.sd = Lane(snap.sd)
        if snap.ar is not None:
            self.ar = Lane(snap.ar)
        if snap.tail is not None:
            snap.tail.onto((self.sd if which == "speculative" else self.ar).trace, rnd)
        self.sd.done = snap.sd_done
        if self.ar is not None:
            self.ar.done = snap.ar_done
        fresh = snap.baseline is not None and self.baseline is None and not snap.reused
        self.baseline, self.reused, self.not_reused_because = snap.baseline, snap.reused, snap.not_reused_because
        self.comparison, self.done = snap.comparison, snap.done
        if fresh:
            self.baselines[baseline_key(self.sd.trace.config)] = snap.baseline

    @property
    def fair(self) -> bool | None:
        """As ``Race.fair``: whether the finished race's two runs saw the same load (None before
        its end or without a target-alone run), from the traces as they stand here."""
        if self.comparison is None or self.baseline is None:
            return None
        return same_load(self.sd.trace, self.baseline.trace)

    def __iter__(self) -> RemoteRace:
        return self

    def __next__(self) -> tuple[str, Round]:
        return self.step()

    def step(self, waiting: Callable[[int], None] | None = None, settle: bool = False) -> tuple[str, Round]:
        """The next round; ``settle``: the page has just drawn (``EngineClient.next``)."""
        if self.done:
            raise StopIteration
        if self.client.generation != self.generation:
            raise WorkerDied("The engine was restarted since this run began, so the run is lost.", restarted=True)
        try:
            which, rnd, snap = self.client.next(self.handle, waiting, settle)
        except StopIteration as end:
            self._apply(end.value)
            raise StopIteration from None
        self._apply(snap, which, rnd)
        return which, rnd

    def run(self) -> RemoteRace:
        for _ in self:
            pass
        return self

    def close(self) -> None:
        if self.client.generation == self.generation and not self.done:
            self.client.close(self.handle)
