"""The engine worker's process (``python -m specviz.worker``): load the pair, then serve.

Requests are served one at a time, in the order they arrived over all connections (one
connection per caller at a time: the UI's sessions, its pages), so no two timed passes ever
overlap and no session can starve another: the engine's FIFO turn queue. While a request
waits, its caller is told how many turns are ahead of it; a caller that gives up closes its
connection, and its place in line goes with it. A connection that holds the engine (``hold``:
a page measuring on the UI's own copy of the pair) keeps every other request waiting until it
releases it.

Nothing but the engine runs here while a pass is timed: connections are accepted by a thread
that sleeps in ``accept``, and requests are read between requests, never during one.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
import threading
import time
from collections import OrderedDict, deque
from multiprocessing.connection import Connection, Listener, wait

from specviz.models import busy
from specviz.record.errors import SpecvizError
from specviz.worker.protocol import AUTHKEY_ENV, QUEUED, EngineFailed, Hello, Spec, resolve, sendable

MAX_OPEN = 32  # open objects (live races) kept; the least recently used goes first


class Server:
    """The request loop over the open connections (see the module docstring)."""

    def __init__(self, listener: Listener, pair=None, failure: Exception | None = None, load_s: float = 0.0):
        self.pair, self.failure, self.load_s = pair, failure, load_s
        self.conns: list[Connection] = []
        self.line: deque[tuple[Connection, tuple]] = deque()
        self.told: dict[Connection, int] = {}
        self.holder: Connection | None = None
        self.objects: OrderedDict[int, object] = OrderedDict()
        self.handles = itertools.count(1)
        self.hello: Hello | None = None
        self._new: list[Connection] = []
        self._new_lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        threading.Thread(target=self._accept, args=(listener,), name="specviz-accept", daemon=True).start()

    def _accept(self, listener: Listener) -> None:
        while True:
            try:
                conn = listener.accept()
            except OSError:  # the listener closed: the process is ending
                return
            except Exception:  # a caller without the key
                continue
            with self._new_lock:
                self._new.append(conn)
            os.write(self._wake_w, b"c")

    def serve(self) -> None:
        while True:
            idle = self.holder is not None or not self.line
            self._take(None if idle else 0)
            self._tell()
            if self.holder is None and self.line:
                conn, request = self.line.popleft()
                self.told.pop(conn, None)
                self._send(conn, self._answer(conn, request))

    def _take(self, timeout: float | None) -> None:
        """Read what has arrived (waiting up to ``timeout`` s for something, None: until it does)."""
        for ready in wait([self._wake_r, *self.conns], timeout):
            if ready == self._wake_r:
                os.read(self._wake_r, 4096)
                with self._new_lock:
                    self.conns.extend(self._new)
                    self._new.clear()
                continue
            try:
                request = ready.recv()
            except (EOFError, OSError):
                self._drop(ready)
                continue
            self._arrive(ready, request)

    def _arrive(self, conn: Connection, request: tuple) -> None:
        kind = request[0]
        if kind == "release":
            if conn is self.holder:
                self.holder = None
        elif kind == "close":
            self.objects.pop(request[1], None)
        elif kind in QUEUED:
            self.line.append((conn, request))
        else:
            self._send(conn, ("err", SpecvizError(f"the engine worker has no request {kind!r}")))

    def _drop(self, conn: Connection) -> None:
        """A caller that went away: its connection, its place in line and its hold go with it."""
        if conn in self.conns:
            self.conns.remove(conn)
        self.line = deque((c, r) for c, r in self.line if c is not conn)
        self.told.pop(conn, None)
        if self.holder is conn:
            self.holder = None
        conn.close()

    def _tell(self) -> None:
        """Tell each waiting caller how many turns are ahead of it, when that changed."""
        for i, (conn, _request) in enumerate(list(self.line)):
            ahead = i + (self.holder is not None)
            if ahead and self.told.get(conn) != ahead:
                self.told[conn] = ahead
                self._send(conn, ("waiting", ahead))

    def _send(self, conn: Connection, message: tuple) -> None:
        try:
            conn.send(message)
        except (OSError, EOFError):
            self._drop(conn)
        except Exception as exc:  # an answer that does not pickle
            try:
                conn.send(("err", EngineFailed(f"the engine's answer could not be sent ({type(exc).__name__}: {exc})")))
            except (OSError, EOFError):
                self._drop(conn)

    def _answer(self, conn: Connection, request: tuple) -> tuple:
        kind = request[0]
        try:
            if self.failure is not None:
                raise self.failure
            if kind == "hold":
                self.holder = conn
                return ("granted",)
            if kind == "hello":
                return ("ok", self._hello(request[1]))
            if kind == "call":
                _kind, path, args, kwargs, *told = request
                if told and told[0]:  # the caller hears the work's progress (between timed passes)
                    kwargs = dict(kwargs, progress=lambda fraction, message="": conn.send(
                        ("progress", fraction, message)))
                return ("ok", resolve(path)(self.pair, *args, **kwargs))
            if kind == "open":
                _kind, path, args, kwargs = request
                obj = resolve(path)(self.pair, *args, **kwargs)
                handle = next(self.handles)
                self.objects[handle] = obj
                while len(self.objects) > MAX_OPEN:
                    self.objects.popitem(last=False)
                return ("ok", (handle, obj.snapshot()))
            obj = self.objects.get(request[1])
            if obj is None:
                raise SpecvizError("This run is no longer kept by the engine (too many runs were opened since).")
            self.objects.move_to_end(request[1])
            if request[2:3] == (True,):
                busy.settle()
            try:
                return ("item", obj.step())
            except StopIteration:
                del self.objects[request[1]]  # done: nothing more to ask of it
                return ("end", obj.snapshot())
        except Exception as exc:  # every failure goes back to the caller, which says it
            return ("err", sendable(exc))

    def _hello(self, choose_draft: bool) -> Hello:
        """The pair as loaded; the first hello that asks measures which draft pays here (cached
        per machine: ``specviz.measure.draft_choice``), while the UI waits and nothing else runs."""
        pair = self.pair
        if choose_draft and pair.draft_choice is None and pair.remote is None:
            from specviz.measure import draft_choice

            try:
                pair.draft_choice = draft_choice.load_or_measure(pair)
            except Exception as exc:  # the pair still works, with the plain draft as its default
                pair.notes.append(f"could not measure the draft variants ({type(exc).__name__}: {exc})")
        return Hello(os.getpid(), pair.describe(), self.load_s, pair.draft_choice, list(pair.notes))


def die_with_parent() -> None:
    """End this process when the UI's does: the UI holds the write end of this process's stdin,
    so its end (even a SIGKILL) reads here as end of file, and a killed server never leaves a
    worker holding the models. (Not prctl's death signal: that follows the thread that started
    the worker, and the UI starts it from a loader thread that ends.)"""

    def watch() -> None:
        with contextlib.suppress(OSError):
            while sys.stdin.buffer.read(4096):
                pass
        os._exit(0)

    threading.Thread(target=watch, name="specviz-parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m specviz.worker", description="specviz's engine worker (the app starts it)")
    ap.add_argument("--address", required=True, help="the local socket to listen on")
    ap.add_argument("--spec", required=True, help="the pair to load, as JSON (specviz.worker.protocol.Spec)")
    args = ap.parse_args(argv)
    key = os.environ.pop(AUTHKEY_ENV, None)
    if not key:
        sys.exit("specviz.worker: started without its key; the app starts it (specviz.worker.client)")
    parent = os.getppid()
    die_with_parent()
    busy.count_app_process(parent)  # the UI's CPU time is the app's page work, not another program's
    listener = Listener(args.address, family="AF_UNIX", authkey=bytes.fromhex(key))
    spec = Spec(**json.loads(args.spec))
    pair, failure, start = None, None, time.perf_counter()
    try:
        from specviz.models.pair import load_pair

        pair = load_pair(spec.name, **spec.load_kwargs())
    except Exception as exc:  # said to every caller: the UI shows it as the load's failure
        failure = sendable(exc)
    try:
        Server(listener, pair, failure, time.perf_counter() - start).serve()  # until the UI closes our stdin
    finally:
        listener.close()
