"""What else ran while a run was timed, and how a run finds out.

Two kinds of competition slow a run's forward passes, and a run must not pass the slower
timings off as the pair's own:

* heavy work in this process: a model load or a dtype cast in another thread (the app loads
  pairs off the script thread). ``heavy(label)`` wraps such work, and
  ``overlapping(start_ns, end_ns)`` names the jobs that ran during a span of timed work;
* other processes on the same cores: a browser, a video call, an indexer, another copy of the
  app. A ``CpuMeter`` measures the CPU time they took during the timed spans (a sample at
  each span's start and end, never per kernel), as a share in cores:

      other = (busy CPU time of this process's CPUs) - (this process's own CPU time)
      share = sum of other over the timed spans / sum of their wall time

  busy = user + nice + system + irq + softirq of each CPU in this process's affinity (not
  idle, iowait or steal: steal is the hypervisor's, not a process's). A share of 0.9 is
  another program taking 90% of one core. ``CpuMeter.busy`` says whether it is enough to
  mark the run (``BUSY_CORES``, beyond the counters' resolution: ``is_busy``);
* the app's own page work, in other threads of this process: Streamlit serving the page and
  other sessions' scripts share the interpreter (and its lock) with the engine, so their CPU
  time over the timed spans slows it as another program would, unseen by the rule above (it is
  this process's own time). The UI layer names those threads (``count_app_threads``); the meter
  reads their CPU time from the kernel at the same samples, and marks the run from
  ``APP_BUSY_CORES``. The CLI and the benches name none;
* the app's UI process, when the engine runs in a worker process of its own
  (``specviz.worker``): the worker names the UI's process (``count_app_process``), whose CPU
  time (every thread of it: serving the pages, running their scripts) then counts as the app's
  page work, not as another program's:

      other = busy - own - app,   app = the UI process's CPU time over the spans
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import psutil

from specviz.record.contention import APP_PAGES, OTHER_PROCESSES, Contention

KEEP = 64  # finished jobs remembered (a run asks about its last few seconds only)


BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq")  # of psutil.cpu_times(percpu=True)


# The kernel counts CPU time in ticks of 1/CLK_TCK s (10 ms): each span's busy time is off by up
# to a tick per counter, so a share is judged only once it is clear of that (``busy``).
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


# Other processes' share of the cores, in cores, from which a run is marked as timed on a busy
# machine: above what Chromium showing the Live page costs, below two busy programs
# (bench/busy_threshold.py; its numbers in docs/design.md, "A busy machine"). SPECVIZ_BUSY_CORES
# sets another, read when the process starts (the app's engine worker: when it is started): on
# a machine whose steady background load you accept, a higher one; "inf" marks no run.
BUSY_CORES = float(os.environ.get("SPECVIZ_BUSY_CORES") or 0.9)

# The app's own page work's share of the cores from which a run is marked. Every core the page's
# threads take during a pass is one the engine's threads (as many as the cores) wait for, so
# the mark sits far lower than for other programs: a tenth of a core, over the counters'
# resolution as above.
APP_BUSY_CORES = 0.1

# Native thread ids of this process's threads that do the app's page work, seen from the thread
# that samples (``count_app_threads``); None: no such threads (the CLI, a bench).
_app_threads: Callable[[], Iterable[int]] | None = None


# The process doing the app's page work when the engine runs in a worker (its pid); None: none.
_app_process: int | None = None


def count_app_process(pid: int | None) -> None:
    """Name the process whose CPU time counts as the app's own page work (the UI process that
    started this engine worker); None: none."""
    global _app_process
    _app_process = pid


def count_app_threads(native_ids: Callable[[], Iterable[int]] | None) -> None:
    """Name the threads of this process whose CPU time counts as the app's own page work (a
    function, called at each sample, so threads that come and go are followed); None: none."""
    global _app_threads
    _app_threads = native_ids


def thread_seconds(native_ids: Iterable[int]) -> dict[int, float]:
    """CPU time (user + system, seconds) of this process's threads by native id, from
    /proc/self/task/<id>/stat (fields 14 and 15, in ticks); a thread that has ended, or a
    platform without /proc, gives nothing."""
    found = {}
    for tid in native_ids:
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # after the name: field 3 (state) first
        except (OSError, IndexError):
            continue
        found[tid] = (int(fields[11]) + int(fields[12])) * TICK_S
    return found


def process_seconds(pid: int) -> float:
    """CPU time (user + system, seconds, all its threads) of process ``pid``, from
    /proc/<pid>/stat; 0.0 for a process that has ended or a platform without /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) * TICK_S


def app_seconds(start: dict[int, float], end: dict[int, float]) -> float:
    """CPU time the app's page threads took between two samples: each thread's growth (a thread
    that started in between, all of its time; one that ended, none)."""
    return sum(t - start.get(tid, 0.0) for tid, t in end.items())


@dataclass
class Job:
    label: str
    start_ns: int
    end_ns: int | None = None  # None while running
    thread: int = 0


_lock = threading.Lock()


_jobs: dict[int, Job] = {}


_ids = itertools.count()


@contextlib.contextmanager
def heavy(label: str) -> Iterator[None]:
    """Mark the work inside as heavy for as long as it runs."""
    job_id = next(_ids)
    with _lock:
        _jobs[job_id] = Job(label, time.perf_counter_ns(), thread=threading.get_ident())
    try:
        yield
    finally:
        with _lock:
            _jobs[job_id].end_ns = time.perf_counter_ns()
            done = sorted(i for i, j in _jobs.items() if j.end_ns is not None)
            for old in done[:-KEEP]:
                del _jobs[old]


def overlapping(start_ns: int, end_ns: int) -> list[str]:
    """Labels of heavy jobs in other threads that ran at some moment of [start_ns, end_ns]."""
    me = threading.get_ident()
    with _lock:
        return sorted({
            j.label for j in _jobs.values()
            if j.thread != me and j.start_ns < end_ns and (j.end_ns is None or j.end_ns > start_ns)
        })


@dataclass(frozen=True)
class CpuSample:
    """The CPU counters at one moment (seconds)."""

    wall_s: float  # time.perf_counter()
    busy_s: float  # busy time of this process's CPUs, every process's (busy_seconds)
    own_s: float  # this process's own CPU time, all its threads (user + system)
    app_s: dict[int, float] = dataclasses.field(default_factory=dict)  # the app's page threads' (thread_seconds)
    app_proc_s: float = 0.0  # the app's UI process's, when the engine runs in a worker (process_seconds)


def busy_seconds(per_cpu: Sequence, cpus: Iterable[int]) -> float:
    """Busy CPU time of the CPUs ``cpus``: user + nice + system + irq + softirq of each row of
    ``per_cpu`` (psutil.cpu_times(percpu=True)); a field a platform lacks counts 0."""
    return sum(getattr(per_cpu[i], f, 0.0) for i in cpus if i < len(per_cpu) for f in BUSY_FIELDS)


def own_seconds(times) -> float:
    """A process's own CPU time: user + system of psutil.Process().cpu_times()."""
    return times.user + times.system


def other_seconds(start: CpuSample, end: CpuSample) -> float:
    """CPU time other processes took on this process's CPUs between two samples: the busy
    time's growth less this process's own and the app's UI process's (negative within the
    counters' resolution)."""
    return (end.busy_s - start.busy_s) - (end.own_s - start.own_s) - (end.app_proc_s - start.app_proc_s)


def cpu_share(other_s: float, wall_s: float) -> float | None:
    """Cores other processes took on average: other CPU time / wall time (None without time)."""
    return max(0.0, other_s / wall_s) if wall_s > 0 else None


def resolution_s(spans: int, cpus: int, tick_s: float = TICK_S) -> float:
    """How far the other-process CPU time of ``spans`` spans may be off, one standard deviation:
    each span reads every CPU's busy counters and the process's own, each truncated to a tick
    (an error uniform in a tick: sd tick/sqrt(6) per difference), independent from span to span."""
    counters = 2 * cpus + 2  # user and system of each CPU (the others rarely move), the process's two
    return tick_s * math.sqrt(spans * counters / 6)


def is_busy(other_s: float, wall_s: float, spans: int, cpus: int, threshold: float | None = None,
            tick_s: float = TICK_S) -> bool:
    """Whether other processes took at least ``threshold`` cores (default ``BUSY_CORES``) over
    ``wall_s`` seconds of timed spans, by more than three times the counters' resolution (so a
    short run on a quiet machine, a few ticks off, is not marked)."""
    threshold = BUSY_CORES if threshold is None else threshold
    return wall_s > 0 and other_s - threshold * wall_s > 3 * resolution_s(spans, cpus, tick_s)


def own_cpus(proc: psutil.Process) -> list[int]:
    """The CPUs ``proc`` may run on (every CPU where a platform has no affinity: macOS)."""
    try:
        return sorted(proc.cpu_affinity())
    except (AttributeError, psutil.Error):
        return list(range(psutil.cpu_count() or 1))


SETTLE_MAX_S = 0.5  # the longest a timed pass waits for the page's redraw (``settle``)
SETTLE_QUIET_CORES = 0.25  # every other process together under this share of the cores: settled


def settle(max_s: float = SETTLE_MAX_S, window_s: float = 0.1, quiet_cores: float = SETTLE_QUIET_CORES) -> float:
    """Wait, at most ``max_s``, until every other process on this process's CPUs together (the
    app's UI and the browser drawing what it just sent among them) took under ``quiet_cores``
    cores over a window of ``window_s``; returns the seconds waited. The engine worker calls it
    before a round that follows a redraw, off the run's clock: on a small machine the browser
    digests a redraw while the next pass runs and takes one of its threads' cores (the pass after
    the Run click's redraw took 396–961 ms instead of 323; docs/design.md)."""
    proc = psutil.Process()
    cpus = own_cpus(proc)

    def others() -> float:
        return busy_seconds(psutil.cpu_times(percpu=True), cpus) - own_seconds(proc.cpu_times())

    start = time.perf_counter()
    while True:
        before = others()
        time.sleep(window_s)
        if others() - before < quiet_cores * window_s or time.perf_counter() - start + window_s > max_s:
            return time.perf_counter() - start


class CpuMeter:
    """Other processes' CPU time over a run's timed spans: ``start()`` at each span's start,
    ``stop()`` at its end (about 60 µs each: two reads of /proc on Linux). ``share`` is the
    cores they took on average; ``busy()`` whether that marks the run."""

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self.cpus = own_cpus(self._proc)
        self.other_s = 0.0
        self.app_s = 0.0  # the app's page work's CPU time over the spans (its threads here, or its UI process)
        self.wall_s = 0.0
        self.spans = 0
        self._start: CpuSample | None = None

    def sample(self) -> CpuSample:
        busy = busy_seconds(psutil.cpu_times(percpu=True), self.cpus)
        app = thread_seconds(_app_threads()) if _app_threads is not None else {}
        proc = process_seconds(_app_process) if _app_process is not None else 0.0
        return CpuSample(time.perf_counter(), busy, own_seconds(self._proc.cpu_times()), app, proc)

    def start(self) -> None:
        if self._start is None:
            self._start = self.sample()

    def stop(self) -> None:
        if self._start is not None:
            end = self.sample()
            self.other_s += other_seconds(self._start, end)
            self.app_s += app_seconds(self._start.app_s, end.app_s) + end.app_proc_s - self._start.app_proc_s
            self.wall_s += end.wall_s - self._start.wall_s
            self.spans += 1
            self._start = None

    @property
    def share(self) -> float | None:
        return cpu_share(self.other_s, self.wall_s)

    def busy(self) -> bool:
        return is_busy(self.other_s, self.wall_s, self.spans, len(self.cpus))

    @property
    def app_share(self) -> float | None:
        return cpu_share(self.app_s, self.wall_s)

    def app_busy(self) -> bool:
        """Whether the app's own page work took enough of the cores to mark the run (``APP_BUSY_CORES``)."""
        return is_busy(self.app_s, self.wall_s, self.spans, len(self.cpus), threshold=APP_BUSY_CORES)


def entries(jobs: Iterable[str], meter: CpuMeter | None) -> list[Contention]:
    """A run's contention list: the heavy jobs by label, then the app's own page work and other
    processes when they took enough of the cores (``CpuMeter.app_busy``, ``CpuMeter.busy``), with
    their shares rounded to 0.01 core."""
    found = [Contention(j) for j in sorted(set(jobs))]
    if meter is not None and meter.app_busy():
        found.append(Contention(APP_PAGES, round(meter.app_share, 2)))
    if meter is not None and meter.busy():
        found.append(Contention(OTHER_PROCESSES, round(meter.share, 2)))
    return found


def served_here(url: str) -> bool:
    """Whether a remote target's server runs on this machine (a loopback address): its CPU
    time is then the run's own work, not competition, and other processes go unmeasured."""
    host = urlsplit(url).hostname if url else None
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
