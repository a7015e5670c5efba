"""One model pair, many sessions: a first-come, first-served queue for the engine.

Forward passes are serialised: a pass timed while another session's pass runs would
not show the real cost. Sessions take turns in the order they asked (a FIFO, unlike a
bare lock, which may let one busy session starve the others), and a waiting session
knows how many runs are ahead of it, so the page can say "waiting for the model: 2
runs ahead". A waiter that gives up (its tab closed, a widget clicked: the wait raises)
leaves the queue at once and never blocks the ones behind it.

The queue is a plain context manager (``with ENGINE: ...``) and, for a waiter that
wants to show its place, ``with ENGINE.turn(waiting=callback): ...``.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class EngineQueue:
    """A FIFO lock whose waiters can see their place in line."""

    def __init__(self, poll_s: float = 0.2):
        self._cond = threading.Condition()
        self._line: deque[int] = deque()  # tickets; the first holds the engine
        self._tickets = itertools.count()
        self._local = threading.local()
        self.poll_s = poll_s

    @property
    def waiting(self) -> int:
        """Sessions waiting now (not counting the one that holds the engine)."""
        with self._cond:
            return max(0, len(self._line) - 1)

    def ahead(self, ticket: int) -> int:
        """How many turns come before ``ticket``'s: 0 when it holds the engine."""
        with self._cond:
            return self._line.index(ticket)

    @contextmanager
    def turn(self, waiting: Callable[[int], None] | None = None) -> Iterator[None]:
        """Hold the engine for the block. While others are ahead, ``waiting(n)`` is called
        (outside the queue's own lock) whenever n, the number of turns ahead, changes;
        if it raises, the place in line is given up and the exception goes on."""
        with self._cond:
            ticket = next(self._tickets)
            self._line.append(ticket)
        try:
            told = None
            while True:
                with self._cond:
                    n = self._line.index(ticket)
                    if n and n == told:
                        self._cond.wait(self.poll_s)
                        n = self._line.index(ticket)
                if n == 0:
                    break
                if n != told and waiting is not None:
                    waiting(n)
                told = n
        except BaseException:
            self._leave(ticket)
            raise
        try:
            yield
        finally:
            self._leave(ticket)

    def _leave(self, ticket: int) -> None:
        with self._cond:
            self._line.remove(ticket)
            self._cond.notify_all()

    def __enter__(self) -> "EngineQueue":
        cm = self.turn()
        cm.__enter__()
        self._local.__dict__.setdefault("held", []).append(cm)
        return self

    def __exit__(self, *exc) -> None:
        self._local.held.pop().__exit__(*exc)
