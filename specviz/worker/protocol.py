"""What travels between the UI and its engine worker: pickled tuples over a local socket.

Requests (UI → worker), each answered in turn, first come first served:

    ("hello", choose_draft)                  -> ("ok", Hello)
    ("call", "module:function", args, kw)    -> ("ok", function(pair, *args, **kw))
    ("call", "module:function", args, kw, True): the same, with ``progress=`` a function whose
                                                 calls arrive as ("progress", fraction, message)
    ("open", "module:Class", args, kw)       -> ("ok", (handle, obj.snapshot()))   obj = Class(pair, *args, **kw)
    ("next", handle)                         -> ("item", obj.step()) | ("end", obj.snapshot())
    ("next", handle, True): the same, once the machine has settled (``busy.settle``): the caller
                                                 has just drawn, and its browser is drawing
    ("hold",)                                -> ("granted",): nothing else runs until ("release",)

and, taken on arrival without an answer: ("release",), ("close", handle). (The worker ends when
its stdin closes: the UI holds the other end, so that happens when the UI ends, too.) While a
request waits behind others the worker sends ("waiting", n), n the turns ahead of it, whenever n
changes. A request that fails is answered ("err", exception): a ``SpecvizError`` keeps its class
and message (a ``BadInput`` its field); any other exception is sent as ``EngineFailed``, whose
message names the original type.
"""

from __future__ import annotations

import importlib
import pickle
from dataclasses import dataclass, field
from typing import Any

from specviz.record.errors import SpecvizError

QUEUED = ("call", "open", "next", "hold", "hello")  # requests that wait their turn
AUTHKEY_ENV = "SPECVIZ_WORKER_KEY"  # the connection's shared secret, hex, handed to the worker by its environment


class EngineFailed(SpecvizError):
    """An unexpected exception in the engine worker, as ``Type: message``."""


class WorkerDied(SpecvizError):
    """The engine worker stopped (killed, out of memory, crashed): what was running there is lost.
    ``code`` is its exit status (negative: the signal that killed it; None: not known), ``stopped``
    whether the app itself stopped it (the pair was unloaded), ``restarted`` whether a fresh worker
    runs since (the run asked for lived in the old one)."""

    def __init__(self, message: str, code: int | None = None, stopped: bool = False, restarted: bool = False):
        super().__init__(message)
        self.code, self.stopped, self.restarted = code, stopped, restarted


@dataclass(frozen=True)
class Spec:
    """Which pair a worker loads: the arguments of ``specviz.models.pair.load_pair``."""

    name: str | None  # "default" | "tiny" | None (a remote target: the default draft)
    dtype: str = "auto"
    device: str = "auto"
    target_url: str | None = None
    target_model: str | None = None

    def load_kwargs(self) -> dict:
        kw: dict[str, Any] = dict(device=self.device, dtype=self.dtype)
        if self.target_url:
            kw.update(target_url=self.target_url, target_model=self.target_model)
        return kw


@dataclass
class Hello:
    """The worker's answer once its pair is loaded: its process id, the pair as loaded (the pair
    card's ``describe()``), how long the load took, and the draft variant that pays here."""

    pid: int
    describe: dict = field(default_factory=dict)
    load_s: float = 0.0
    draft_choice: Any = None
    notes: list[str] = field(default_factory=list)


def resolve(path: str):
    """``"module:name"`` -> the object (only specviz's own modules)."""
    module, _, name = path.partition(":")
    if not module.startswith("specviz.") or not name:
        raise SpecvizError(f"the engine worker runs specviz's own functions only, not {path!r}")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def sendable(exc: BaseException) -> SpecvizError:
    """The exception to send back: itself when it is a ``SpecvizError`` that pickles, else an
    ``EngineFailed`` naming it."""
    if isinstance(exc, SpecvizError):
        try:
            pickle.loads(pickle.dumps(exc))
            return exc
        except Exception:
            return SpecvizError(str(exc))
    return EngineFailed(f"{type(exc).__name__}: {exc}")
