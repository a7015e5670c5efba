"""Two models in two threads, each pinned to a core: the machinery a schedule run for real
shares (``specviz.measure.pearl_real``, ``specviz.measure.ssd_real``).

Threads and cores. A coordinator (the caller's thread) hands each round's work to two
single-thread executors, the draft's and the target's, and waits for what it needs: the
meeting points are the schedule's. Each worker pins itself to one core
(``os.sched_setaffinity(0, {core})`` on Linux pins the calling thread only) and sets one
intra-op thread. Where affinity is not available (not Linux, fewer cores than asked for)
the run still goes, unpinned, and ``OverlapRun.pinned`` says so, with the reason in ``note``.

torch's thread count is process-wide: ``torch.set_num_threads(1)`` for the run sets it for
every thread of the process (each new thread takes the global value at its first parallel
op; the call also sets the calling thread's own OpenMP count). So while a run is in
progress any other torch work in the process also runs single-threaded; the caller's
count is restored when the run ends, raised or not. One thread per op is the point here:
two models on two cores, rather than each pass spread over both.

A run's text is decoded once after the run, off the clock (``finish_text``: ``wall_ms`` is
fixed before).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from specviz.engine.detokenize import RunText
from specviz.models.pair import ModelPair
from specviz.record.errors import BadInput
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Trace
from specviz.record.validate import check

THREADS = 1  # intra-op threads per op, for each model, during a run


@dataclass
class OverlapRun:
    """A real overlapped run: its trace, and how its threads were placed."""

    trace: Trace
    pinned: bool  # each thread held to its own core
    cores: tuple[int, int]  # (draft core, target core) asked for
    threads: int = THREADS  # torch intra-op threads per op during the run
    schedule: str = "pearl"
    note: str = ""  # why not pinned, when it was not
    worker_cores: dict[str, list[int]] = field(default_factory=dict)  # lane -> cores its thread could use


def refuse(config: RunConfig, schedule: str) -> None:
    """BadInput for what a run for real does not do, naming the field. ``schedule`` names it
    in the message ("PEARL", "SSD")."""
    what = f"the overlapped {schedule} run"
    if config.temperature != 0:
        raise BadInput(f"{what} is greedy only: set temperature 0", "temperature")
    if config.drafter != "model":
        raise BadInput(f"{what} needs the model drafter (a draft model to overlap)", "drafter")
    if config.draft_vocab:
        raise BadInput(f"{what} uses the draft's full head: set draft vocabulary 0", "draft_vocab")
    if config.draft_quant != "none":
        raise BadInput(f"{what} uses the draft as loaded: set draft quantization none", "draft_quant")
    if config.policy != "constant":
        raise BadInput(f"{schedule} drafts a constant gamma: use policy constant", "policy")
    if config.stop:
        raise BadInput(f"{what} stops at EOS and max new tokens only, not at stop strings", "stop")


def new_trace(pair: ModelPair, config: RunConfig, schedule: str) -> Trace:
    """An empty speculative Trace for a run of ``config`` (copied, not changed) on ``pair``,
    after ``refuse`` and the settings' check against the pair."""
    cfg = dataclasses.replace(config, mode="speculative", stop=list(config.stop))
    refuse(cfg, schedule)
    prompt_ids = check(pair, cfg)
    cfg.draft, cfg.target = pair.draft_name, pair.target_name
    cfg.device, cfg.dtype = str(pair.device), pair.dtype
    cfg.target_url = pair.remote.url if pair.remote is not None else ""
    return Trace(config=cfg, prompt_ids=prompt_ids, eos_ids=list(pair.eos_ids))


def default_cores(pair: ModelPair) -> tuple[int, int]:
    """(draft core, target core): (0, 1); with a remote target (1, 0): its thread only waits
    for the server, and a vLLM CPU server on this machine binds its worker to core 0 (its
    default ``VLLM_CPU_OMP_THREADS_BIND=auto`` on 2 cores), so the draft takes the other one."""
    return (1, 0) if pair.remote is not None else (0, 1)


def why_not_pinned(cores: tuple[int, int]) -> str:
    """"" when the two threads can be pinned to ``cores``; else why not."""
    if not hasattr(os, "sched_setaffinity"):
        return "no thread affinity on this platform (os.sched_setaffinity is Linux only)"
    if len(set(cores)) != 2:
        return f"two different cores are needed, got {cores}"
    allowed = os.sched_getaffinity(0)
    if not set(cores) <= allowed:
        return f"cores {list(cores)} are not all available to this process (it may use {sorted(allowed)})"
    return ""


def settle(core: int | None) -> tuple[list[int], str]:
    """Run first on each worker thread: one intra-op thread, and this thread alone pinned to
    ``core`` (None: not pinned). Returns the cores the thread may run on, and why pinning
    failed ("" when it did not)."""
    torch.set_num_threads(THREADS)
    failed = ""
    if core is not None:
        try:
            os.sched_setaffinity(0, {core})  # pid 0: the calling thread only
        except OSError as exc:
            failed = f"pinning a thread to core {core} failed: {exc}"
    return (sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []), failed


@dataclass
class Lanes:
    """The two single-thread executors of a run and where their threads landed."""

    draft: ThreadPoolExecutor
    target: ThreadPoolExecutor
    cores: tuple[int, int]
    pinned: bool = False
    note: str = ""
    worker_cores: dict[str, list[int]] = field(default_factory=dict)

    def result(self, trace: Trace, schedule: str) -> OverlapRun:
        return OverlapRun(trace, self.pinned, self.cores, THREADS, schedule, self.note, self.worker_cores)


@contextlib.contextmanager
def lanes(cores: tuple[int, int], name: str) -> Iterator[Lanes]:
    """A draft and a target executor (threads named specviz-<name>-draft / -target), each
    thread settled on its core (``settle``); on exit, raised or not, both threads are gone
    and torch's thread count is the caller's again."""
    cores = (int(cores[0]), int(cores[1]))
    note = why_not_pinned(cores)
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    got = Lanes(ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"specviz-{name}-draft"),
                ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"specviz-{name}-target"), cores)
    try:
        placed = {"draft": got.draft.submit(settle, cores[0] if not note else None),
                  "target": got.target.submit(settle, cores[1] if not note else None)}
        for lane, f in placed.items():
            got.worker_cores[lane], failed = f.result()
            note = note or failed
        got.note, got.pinned = note, not note
        yield got
    finally:
        got.draft.shutdown(wait=True, cancel_futures=True)
        got.target.shutdown(wait=True, cancel_futures=True)
        torch.set_num_threads(before)


def finish_text(pair: ModelPair, trace: Trace) -> Trace:
    """Each round's text and the run's, decoded after the run (off the clock); the summary."""
    text = RunText(pair.tokenizer, trace.prompt_ids)
    for rnd in trace.rounds:
        rnd.proposed_text = text.pieces(rnd.proposed)
        if rnd.correction is not None:
            rnd.correction_text = text.pieces([rnd.correction], after=rnd.proposed[: rnd.accepted])[0]
        rnd.emitted_text = text.commit(rnd.emitted)
    trace.output_text = text.text
    return trace.finish()
