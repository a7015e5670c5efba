"""Runs a page can show without running anything: this session's last Live run and the
recorded traces; the costs a schedule replay of one of them is timed with; and this
machine's measured verify-cost curve, when there is one."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import streamlit as st

from specviz.measure import branch_costs
from specviz.measure import forward_costs as C
from specviz.record.errors import BadInput
from specviz.record.run_trace import Trace
from specviz.replay import latency
from specviz.replay import what_if
from specviz.ui.chrome import recorded_traces
from specviz.ui.lang import _
from specviz.ui.replay import load_trace_file


def replay_sources(speculative_only: bool = False) -> dict[str, Callable[[], Trace | None]]:
    """Label -> loader: the session's last finished Live run first (if any), then every recorded
    trace; with ``speculative_only``, not the recorded target-alone runs (nothing drafted)."""
    sources: dict[str, Callable[[], Trace | None]] = {}
    live = st.session_state.get("live")
    if live is not None and live.trace is not None and live.sd_done:
        sources[_("This session's last Live run")] = lambda: live.trace
    for path in recorded_traces():
        if speculative_only and _target_alone(path):
            continue
        sources[_("Recorded: ") + path.stem] = lambda path=path: load_trace_file(path.read_bytes())
    return sources


def _target_alone(path: Path) -> bool:
    """A recorded target-alone run, as its own config says (not its name); False when unreadable."""
    try:
        return _recorded(path, path.stat().st_mtime_ns).config.mode == "autoregressive"
    except (BadInput, OSError):
        return False


MATCHED = ("prompt", "chat", "max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop", "draft", "target", "target_url",
           "device", "dtype")


@functools.lru_cache(maxsize=64)
def _recorded(path: Path, mtime_ns: int) -> Trace:
    return load_trace_file(path.read_bytes())


def recorded_run(stem: str) -> Trace | None:
    """The shipped recorded trace named ``stem`` (assets/traces/<stem>.json), read once; None
    when it is not there or cannot be read."""
    path = next((p for p in recorded_traces() if p.stem == stem), None)
    try:
        return _recorded(path, path.stat().st_mtime_ns) if path is not None else None
    except (BadInput, OSError):
        return None


def recorded_baseline(trace: Trace) -> Trace | None:
    """The recorded target-alone run of ``trace``'s prompt and settings (pair, device, dtype,
    sampling, length), for the Replay page's race; None when none was recorded."""
    want = {k: getattr(trace.config, k) for k in MATCHED}
    for path in recorded_traces(remote=True):
        if _target_alone(path):
            ar = _recorded(path, path.stat().st_mtime_ns)
            if all(getattr(ar.config, k) == v for k, v in want.items()):
                return ar
    return None


def load_source(sources: dict, label: str | None) -> tuple[Trace | None, str | None]:
    """The chosen source's trace, or (None, a message saying why not)."""
    if not sources:
        return None, None
    loader = sources.get(label) or next(iter(sources.values()))
    try:
        return loader(), None
    except (BadInput, OSError) as exc:
        return None, _("That run cannot be read: ") + str(exc)


def schedule_costs(trace: Trace) -> tuple[latency.LatencyModel, str, bool]:
    """The costs to replay ``trace`` with, a sentence saying where they come from, and
    whether they are this machine's measured passes: those measured for the run's pair,
    device and dtype at the run's own context (``branch_costs.replay_context``) when cached,
    with the run's own prefills and bookkeeping; else all from the run. What the run did not
    time (SSD's batched passes) the Parallel page measures itself (``specviz.measure.branch_costs.QuickCosts``)."""
    cfg = trace.config
    ctx = branch_costs.replay_context(trace)
    found = C.cached(cfg.draft, cfg.target, cfg.device, cfg.dtype, context_length=ctx)
    model = what_if.costs_for(trace, found)
    if found is None:
        return model, _("Costs read off the run itself: its mean pass of each kind."), False
    note = _("Forward-pass costs measured on this machine on {when} ({device}, {dtype}, a context of {ctx} "
             "tokens, the run's mean); prefills and bookkeeping from the run.").format(
        when=found[1].get("measured_at", "?"), device=cfg.device, dtype=cfg.dtype, ctx=ctx)
    if what_if.own_draft(trace):
        note += " " + _("The draft's passes are the run's own: its draft (a cut head or int8 weights) is not "
                        "the one measured.")
    return model, note, True


def verify_curve(pair) -> latency.LatencyModel | None:
    """This machine's verify-cost curve for ``pair`` (its device and dtype) at the curve's
    context, when one was measured (the Cost curve page, ``specviz cost-curve``); else None."""
    if pair is None:
        return None
    ctx = C.curve_context_length(pair.context_length, C.SPARSE_CURVE_GRID)
    found = C.cached_curve(pair.draft_name, pair.target_name, str(pair.device), pair.dtype, ctx,
                           grids=(C.CURVE_GRID, C.SPARSE_CURVE_GRID, C.LATENCY_GRID))
    return latency.latency_model(found[0], meta=found[1]) if found is not None else None
