"""The UI's side of the engine worker: start it, greet it, ask it, take turns, stop it.

``EngineClient(spec)`` starts ``python -m specviz.worker`` for one pair (its own session, so a
Ctrl-C in the app's terminal reaches the app, which then ends it) and returns at once;
``hello()`` waits until the pair is loaded there. Every request takes a connection from a small
pool (one per caller at a time), so callers in several threads wait in the worker's FIFO, told
their place as it changes (``waiting(n)``). A caller whose ``waiting`` raises (a Streamlit
rerun) closes its connection: its place in line goes with it.

A worker that dies (killed, out of memory) is noticed at the next answer it cannot give: the
request raises ``WorkerDied`` with the exit status, and the next request starts a fresh worker
(``generation`` counts them, so what lived in the old one is known to be gone).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import asdict
from multiprocessing.connection import Client, Connection

from specviz.record.errors import SpecvizError
from specviz.record.i18n import N_, Translator
from specviz.worker.protocol import AUTHKEY_ENV, Hello, Spec, WorkerDied

CONNECT_TIMEOUT_S = 120.0  # how long a connection may wait for a starting worker's socket
STOP_GRACE_S = 5.0
# How long the worker's OpenMP threads spin for the next parallel region before they sleep.
# libgomp's default (300,000 turns) runs a lone run 8% faster, but beside busy programs its
# spinning threads keep the cores those would take, and a short run beside them goes unmarked
# (tests/test_busy_browser.py fails): measured in docs/design.md, "The engine in a process of its own".
SPIN_COUNT = "20000"
Waiting = Callable[[int], None]

_clients: weakref.WeakSet[EngineClient] = weakref.WeakSet()


def exit_text(code: int | None, tr: Translator = N_) -> str:
    """A worker's exit status in words ("exit code 1", "killed by SIGKILL"), through ``tr``
    (a page's translator; the library's messages stay English)."""
    if code is None:
        return tr(N_("no exit status"))
    if code < 0:
        try:
            return tr(N_("killed by {signal}")).format(signal=signal.Signals(-code).name)
        except ValueError:
            return tr(N_("killed by signal {n}")).format(n=-code)
    return tr(N_("exit code {code}")).format(code=code)


class EngineClient:
    """One pair's engine worker, seen from the UI (see the module docstring)."""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.generation = 0
        self.info: Hello | None = None
        self._lock = threading.Lock()
        self._pool: list[Connection] = []
        self._proc: subprocess.Popen | None = None
        self._dir: str | None = None
        self._key = b""
        self._stopped = False
        self._held: dict[int, list] = {}  # thread -> the turns it holds through ``with client:``
        self.start()
        _clients.add(self)

    # --- the process -----------------------------------------------------------------------

    def start(self) -> None:
        """Start a fresh worker (the old one, if any, is stopped first)."""
        with self._lock:
            self._spawn()

    def _spawn(self) -> None:
        self._halt()
        self._dir = tempfile.mkdtemp(prefix="specviz-worker-")
        self._key = secrets.token_bytes(16)
        env = dict(os.environ, **{AUTHKEY_ENV: self._key.hex()})
        env.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "specviz.worker", "--address", self.address,
             "--spec", json.dumps(asdict(self.spec))],
            env=env, stdin=subprocess.PIPE, start_new_session=True)  # its stdin's end is this process's
        self.generation += 1
        self.info = None
        self._stopped = False

    @property
    def address(self) -> str:
        return os.path.join(self._dir or "", "engine.sock")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_code(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def stop(self) -> None:
        """End the worker: asked first, then terminated, then killed."""
        with self._lock:
            self._stopped = True
            self._halt()

    def _halt(self) -> None:
        """End the worker: its stdin closed (it exits at once, mid-pass too), then terminated,
        then killed; its socket's folder removed."""
        proc, pool = self._proc, self._pool
        self._pool = []
        for conn in pool:
            with contextlib.suppress(OSError):
                conn.close()
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _died(self) -> WorkerDied:
        code = self.exit_code()
        if self._stopped:
            return WorkerDied("The engine was stopped (the pair was unloaded).", code, stopped=True)
        return WorkerDied(f"The engine's process stopped ({exit_text(code)}), so what ran there is lost; the next "
                          "request starts it again.", code)

    # --- connections -------------------------------------------------------------------------

    def _connect(self) -> Connection:
        """A connection to the worker: a free one from the pool, else a new one (waiting for a
        starting worker's socket to appear). A worker found dead is started again first."""
        with self._lock:
            if self._pool:
                return self._pool.pop()
            if not self.alive:
                raise self._died()
            address, key, proc = self.address, self._key, self._proc
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while True:
            try:
                return Client(address, family="AF_UNIX", authkey=key)
            except (FileNotFoundError, ConnectionRefusedError):
                if proc.poll() is not None:
                    raise self._died() from None
                if time.monotonic() > deadline:
                    raise WorkerDied("The engine's process did not open its socket in time.", proc.poll()) from None
                time.sleep(0.05)

    def _give_back(self, conn: Connection, generation: int) -> None:
        with self._lock:
            if generation == self.generation and self.alive:
                self._pool.append(conn)
                return
        with contextlib.suppress(OSError):
            conn.close()

    def ensure_running(self) -> bool:
        """Start a fresh worker if this one died (not if it was stopped); True when it did (a
        caller in another thread that finds it started already gets False)."""
        with self._lock:
            if self.alive or self._stopped:
                return False
            self._spawn()
            return True

    def request(self, message: tuple, waiting: Waiting | None = None,
                progress: Callable[[float, str], None] | None = None):
        """Send one request and return its answer's value ("ok" or "item"); ("end", snapshot)
        raises StopIteration(snapshot); ("err", exc) raises exc. ``waiting(n)`` hears the turns
        ahead while it waits, ``progress(fraction, message)`` the work's progress."""
        generation = self.generation
        conn = self._connect()
        try:
            conn.send(message)
            while True:
                reply = conn.recv()
                if reply[0] == "waiting":
                    if waiting is not None:
                        waiting(reply[1])
                elif reply[0] == "progress":
                    if progress is not None:
                        progress(reply[1], reply[2])
                else:
                    break
        except (EOFError, OSError) as exc:
            with contextlib.suppress(OSError):
                conn.close()
            if self._proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=2.0)  # a killed worker's status is there at once
            raise self._died() from exc
        except BaseException:  # the caller gave up waiting: its place in line goes with the connection
            with contextlib.suppress(OSError):
                conn.close()
            raise
        self._give_back(conn, generation)
        kind = reply[0]
        if kind in ("ok", "item", "granted"):
            return reply[1] if len(reply) > 1 else None
        if kind == "end":
            raise StopIteration(reply[1])
        raise reply[1]

    def notify(self, message: tuple) -> None:
        """Send a message that needs no answer (close, release); lost quietly if the worker is gone."""
        with contextlib.suppress(SpecvizError, OSError, EOFError):
            generation = self.generation
            conn = self._connect()
            conn.send(message)
            self._give_back(conn, generation)

    # --- what callers use ------------------------------------------------------------------------

    def hello(self, choose_draft: bool = True) -> Hello:
        """Wait until the worker has loaded the pair (and, with ``choose_draft``, measured which
        draft pays here); the load's failure, if any, is raised here."""
        self.info = self.request(("hello", choose_draft))
        return self.info

    def call(self, fn: str, *args, waiting: Waiting | None = None,
             progress: Callable[[float, str], None] | None = None, **kwargs):
        """``fn(pair, *args, **kwargs)`` in the worker, its turn taken; ``fn`` as "module:name".
        With ``progress``, ``fn`` gets a ``progress=`` argument whose calls reach it here."""
        return self.request(("call", fn, args, kwargs, progress is not None), waiting, progress)

    def open(self, cls: str, *args, waiting: Waiting | None = None, **kwargs) -> tuple[int, object]:
        """``cls(pair, *args, **kwargs)`` kept in the worker: (its handle, its first snapshot)."""
        return self.request(("open", cls, args, kwargs), waiting)

    def next(self, handle: int, waiting: Waiting | None = None, settle: bool = False):
        """The object's next ``step()``; StopIteration(final snapshot) at its end. ``settle``: the
        caller has just drawn; the step waits (off the run's clock) for the machine to settle."""
        return self.request(("next", handle, True) if settle else ("next", handle), waiting)

    def close(self, handle: int) -> None:
        self.notify(("close", handle))

    @contextlib.contextmanager
    def turn(self, waiting: Waiting | None = None) -> Iterator[None]:
        """Hold the engine for the block: the worker runs nothing else meanwhile (for work on
        the UI's own copy of the pair, which must not overlap a timed pass, nor the reverse). A
        worker that is not running holds nothing: the block just runs."""
        generation, conn = self.generation, None
        try:
            conn = self._connect()
            conn.send(("hold",))
            while (reply := conn.recv())[0] == "waiting":
                if waiting is not None:
                    waiting(reply[1])
        except (WorkerDied, EOFError, OSError):  # no worker running: nothing to hold
            conn = None
        except BaseException:  # the caller gave up waiting: its place in line goes with the connection
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.close()
            raise
        try:
            yield
        finally:
            if conn is not None:
                try:
                    conn.send(("release",))
                    self._give_back(conn, generation)
                except (OSError, EOFError):
                    with contextlib.suppress(OSError):
                        conn.close()

    # The pages pass the client where a lock is wanted (``with client: ...``): it holds the engine.
    def __enter__(self) -> EngineClient:
        cm = self.turn()
        cm.__enter__()
        self._held.setdefault(threading.get_ident(), []).append(cm)
        return self

    def __exit__(self, *exc) -> None:
        self._held[threading.get_ident()].pop().__exit__(*exc)


@atexit.register
def _stop_all() -> None:
    for client in list(_clients):
        with contextlib.suppress(Exception):
            client.stop()
