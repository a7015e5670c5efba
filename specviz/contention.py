"""Heavy background work that would slow a timed run, and how a run finds out.

A model load or a dtype cast in another thread (the app loads pairs off the script
thread) competes with a run's forward passes for cores and memory bandwidth. A run
cannot stop it, but it must not pass off the slower timings as the pair's own:
``heavy(label)`` wraps such work, and ``overlapping(start_ns, end_ns)`` names the
jobs that ran during a span of a run's timed work, so the run is marked as timed
under contention and the UI says so.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

KEEP = 64  # finished jobs remembered (a run asks about its last few seconds only)


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
