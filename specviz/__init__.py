"""specviz: watch speculative decoding run, round by round, on a real model pair.

The package is a stack of layers, each a subpackage that imports only those below it
(``pyproject.toml``'s import-linter contracts check it; docs/design.md has the map):

    ui | cli      the Streamlit app's state and views; the terminal front end
    figures       plotly figures and token-strip HTML, pure functions of a Trace
    measure       timed experiments on a loaded pair: forward costs, the race, the sweep,
                  the branch passes a replay needs, PEARL run for real
    engine        the decode loop, acceptance rules, drafters, detokenising, the queue
    models        a pair on this machine: loading, the cache, GGUF parts, the KV model
                  and the run clock, the remote target, the tiny pair, int8, the cut head
    analysis | replay   what a run means (theory, metrics, marks, the round story) and
                  what it would have done under another schedule (no torch)
    record        the trace and its schema, limits, validation, errors, the translator

The names below load lazily, so ``import specviz`` (and ``from specviz import Trace``)
loads neither torch nor transformers until an engine or model name is used.
"""

from __future__ import annotations

import importlib

_PUBLIC = {
    "Decoding": "specviz.engine.decode",
    "autoregressive": "specviz.engine.decode",
    "speculative": "specviz.engine.decode",
    "BadInput": "specviz.record.errors",
    "ModelError": "specviz.record.errors",
    "SpecvizError": "specviz.record.errors",
    "ModelPair": "specviz.models.pair",
    "load_pair": "specviz.models.pair",
    "Event": "specviz.record.run_trace",
    "Round": "specviz.record.run_trace",
    "RunConfig": "specviz.record.run_config",
    "Trace": "specviz.record.run_trace",
}
__all__ = sorted(_PUBLIC)
__version__ = "0.2.0"


def __getattr__(name: str):
    """``specviz.<name>`` for a public name: imported from its module on first use (PEP 562)."""
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'specviz' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
