"""Where a run stops: the one stopping rule of the engine (``specviz.engine.decode``), the
overlapped PEARL run (``specviz.measure.pearl_real``) and the replays
(``specviz.replay.schedules``). Pure: no torch, no tokenizer (stop strings come in as a
function that finds where one completes).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

# A run's stop reasons (``Trace.stop_reason``; "" while it runs)
EOS, STOP_STRING, MAX_NEW_TOKENS, CONTEXT = "eos", "stop_string", "max_new_tokens", "context"


def cut(emitted: list[int], produced: int, limit: int, max_new_tokens: int, eos_ids: Collection[int],
        stop_cut: Callable[[list[int]], int | None] | None = None) -> tuple[list[int], str | None]:
    """Apply the stopping rules to a round's ``emitted`` tokens, after ``produced`` output
    tokens, with room for ``limit`` output tokens in all (the smaller of ``max_new_tokens``
    and what the context leaves): an EOS is kept and nothing after it; then a stop string
    (``stop_cut(tokens)``: how many of them to keep so the output ends just after the first
    stop string they complete, or None); then the budget: the tokens past ``limit`` go.
    Returns (the tokens kept, the stop reason: None when the run goes on)."""
    stop = None
    for i, t in enumerate(emitted):
        if t in eos_ids:
            emitted, stop = emitted[: i + 1], EOS
            break
    if stop_cut is not None and (m := stop_cut(emitted)) is not None:
        emitted, stop = emitted[:m], STOP_STRING
    if produced + len(emitted) >= limit:
        emitted = emitted[: limit - produced]
        if stop is None:
            stop = MAX_NEW_TOKENS if produced + len(emitted) >= max_new_tokens else CONTEXT
    return emitted, stop
