"""One overlapped schedule run for real: greedy PEARL with the draft and the target in two
threads, at once, on one clock.

``specviz.replay.schedules.pearl`` replays a recorded run under PEARL with a latency model; this
module runs PEARL on the pair itself, so the two can be compared. The rules are the
replay's (Liu et al., ICLR 2025, after github.com/smart-lty/ParallelSpeculativeDecoding,
``src/engine.py``, ``Decoding.parallel_speculative_decoding``):

* A round: the draft drafts the next g = min(gamma, budget - first undrafted position)
  tokens (none after it proposed an EOS; a block stops right after an EOS) WHILE the target
  reads the last verified token and the pending (unverified) tokens in one pass. The round
  ends when both are done; only then is the verdict applied and are the caches rolled back.
* pre-verify (the first round too): nothing is pending; the target's one row checks the
  new block's first token x1. Rejected: the target's token is emitted, the block is thrown
  away, stay in pre-verify. Accepted: x1 is emitted, x2..xg become pending, go to post-verify.
* post-verify: the target's rows check the pending tokens AND the new block's first token
  y1 (its last row is spent on y1, not on a bonus). All accepted: they are emitted, no token
  of the target's own, y2..yg become pending, stay in post-verify. A rejection: the accepted
  prefix and the target's token are emitted, both caches roll back (``KVModel.rollback``:
  the target drops the rejected pending tokens, the draft everything past the new
  sequence), the new block is thrown away, back to pre-verify.
* When the draft has nothing left to draft (budget, or an EOS pending), the target's last
  row gives a token of its own; it only ever falls past the end of the run.
* Stopping by the engine's rule (``specviz.record.stopping.cut``): at an EOS (kept, nothing
  after it), at max_new_tokens, or at the context. Stop strings are refused (this run is
  about time, not text).

Invariant at the start of a round, as in the engine: the target's cache holds ids[:-1]
(ids = prompt + output), the draft's a prefix of ids + pending.

Threads and cores. A coordinator (the caller's thread) hands each round's work to two
single-thread executors, the draft's and the target's, and waits for both: that is the
once-per-round meeting. Each worker pins itself to one core (``os.sched_setaffinity(0,
{core})`` on Linux pins the calling thread only) and sets one intra-op thread. Where
affinity is not available (not Linux, fewer cores than asked for) the run still goes,
unpinned, and ``OverlapRun.pinned`` says so, with the reason in ``note``.

torch's thread count is process-wide: ``torch.set_num_threads(1)`` for the run sets it for
every thread of the process (each new thread takes the global value at its first parallel
op; the call also sets the calling thread's own OpenMP count). So while a run is in
progress any other torch work in the process also runs single-threaded; the caller's
count is restored when the run ends, raised or not. One thread per op is the point here:
two models on two cores, rather than each pass spread over both.

Timing: every event is on one ``Clock`` (perf_counter, ms since the run started), never
paused: the coordinator's verdict and rollbacks are on it too (as the target lane's
``sample`` and both lanes' ``rollback``). The round's text is decoded once after the run,
off the clock (``wall_ms`` is fixed before).

Greedy, model drafter, full head only; in float32 the output equals the target's own
greedy output token for token.
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import torch

from specviz.engine.acceptance import Sampling
from specviz.engine.decode import verify
from specviz.engine.detokenize import RunText
from specviz.engine.drafters import ModelDrafter, Proposal
from specviz.models import busy
from specviz.models.kv import Clock, KVModel
from specviz.models.pair import ModelPair
from specviz.record import stopping
from specviz.record.errors import BadInput
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Event, Round, Trace
from specviz.record.validate import check

SCHEDULE = "pearl"
THREADS = 1  # intra-op threads per op, for each model, during a run


@dataclass
class OverlapRun:
    """A real overlapped run: its trace, and how its threads were placed."""

    trace: Trace
    pinned: bool  # each thread held to its own core
    cores: tuple[int, int]  # (draft core, target core) asked for
    threads: int = THREADS  # torch intra-op threads per op during the run
    schedule: str = SCHEDULE
    note: str = ""  # why not pinned, when it was not
    worker_cores: dict[str, list[int]] = field(default_factory=dict)  # lane -> cores its thread could use


def _refuse(config: RunConfig) -> None:
    """BadInput for what this run does not do, naming the field."""
    if config.temperature != 0:
        raise BadInput("the overlapped PEARL run is greedy only: set temperature 0", "temperature")
    if config.drafter != "model":
        raise BadInput("the overlapped PEARL run needs the model drafter (a draft model to overlap)", "drafter")
    if config.draft_vocab:
        raise BadInput("the overlapped PEARL run uses the draft's full head: set draft vocabulary 0", "draft_vocab")
    if config.draft_quant != "none":
        raise BadInput("the overlapped PEARL run uses the draft as loaded: set draft quantization none",
                       "draft_quant")
    if config.policy != "constant":
        raise BadInput("PEARL drafts a constant gamma (its modes adapt the length): use policy constant", "policy")
    if config.stop:
        raise BadInput("the overlapped PEARL run stops at EOS and max new tokens only, not at stop strings", "stop")


def _why_not_pinned(cores: tuple[int, int]) -> str:
    """"" when the two threads can be pinned to ``cores``; else why not."""
    if not hasattr(os, "sched_setaffinity"):
        return "no thread affinity on this platform (os.sched_setaffinity is Linux only)"
    if len(set(cores)) != 2:
        return f"two different cores are needed, got {cores}"
    allowed = os.sched_getaffinity(0)
    if not set(cores) <= allowed:
        return f"cores {list(cores)} are not all available to this process (it may use {sorted(allowed)})"
    return ""


def _settle(core: int | None) -> tuple[list[int], str]:
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


def pearl_run(pair: ModelPair, config: RunConfig, cores: tuple[int, int] | None = None) -> OverlapRun:
    """Run greedy PEARL for real, the draft on ``cores[0]`` and the target on ``cores[1]``
    (module docstring). ``config`` is copied, not changed; its gamma is PEARL's constant
    draft length. Threads are gone and torch's thread count restored on return or raise.

    Default cores: (0, 1); with a remote target (1, 0): its thread only waits for the
    server, and a vLLM CPU server on this machine binds its worker to core 0 (its default
    ``VLLM_CPU_OMP_THREADS_BIND=auto`` on 2 cores), so the draft takes the other one."""
    if cores is None:
        cores = (1, 0) if pair.remote is not None else (0, 1)
    cfg = dataclasses.replace(config, mode="speculative", stop=list(config.stop))
    _refuse(cfg)
    prompt_ids = check(pair, cfg)
    cfg.draft, cfg.target = pair.draft_name, pair.target_name
    cfg.device, cfg.dtype = str(pair.device), pair.dtype
    cfg.target_url = pair.remote.url if pair.remote is not None else ""
    trace = Trace(config=cfg, prompt_ids=prompt_ids, eos_ids=list(pair.eos_ids))
    cores = (int(cores[0]), int(cores[1]))
    note = _why_not_pinned(cores)
    pinned = not note

    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    draft_ex = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specviz-pearl-draft")
    target_ex = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specviz-pearl-target")
    try:
        placed = {"draft": draft_ex.submit(_settle, cores[0] if pinned else None),
                  "target": target_ex.submit(_settle, cores[1] if pinned else None)}
        worker_cores = {}
        for lane, f in placed.items():
            worker_cores[lane], failed = f.result()
            note = note or failed
        pinned = not note
        _rounds(pair, trace, draft_ex, target_ex)
    finally:
        draft_ex.shutdown(wait=True, cancel_futures=True)
        target_ex.shutdown(wait=True, cancel_futures=True)
        torch.set_num_threads(before)

    text = RunText(pair.tokenizer, prompt_ids)  # off the clock: wall_ms is already fixed
    for rnd in trace.rounds:
        rnd.proposed_text = text.pieces(rnd.proposed)
        if rnd.correction is not None:
            rnd.correction_text = text.pieces([rnd.correction], after=rnd.proposed[: rnd.accepted])[0]
        rnd.emitted_text = text.commit(rnd.emitted)
    trace.output_text = text.text
    trace.finish()
    return OverlapRun(trace, pinned, cores, THREADS, SCHEDULE, note, worker_cores)


def _rounds(pair: ModelPair, trace: Trace, draft_ex: ThreadPoolExecutor, target_ex: ThreadPoolExecutor) -> None:
    """The rounds of one run, appended to ``trace`` (module docstring for the rules)."""
    cfg = trace.config
    eos = set(pair.eos_ids)
    clock = Clock(others=not busy.served_here(cfg.target_url))
    target = pair.target_kv()
    drafter = ModelDrafter(KVModel(pair.draft, pair.device), Sampling(), torch.Generator(), clock)
    limit = min(cfg.max_new_tokens, pair.context_length - len(trace.prompt_ids))
    ids = list(trace.prompt_ids)
    pending: list[int] = []  # drafted, not yet verified (they follow ids)
    post = False
    while True:
        produced = len(trace.output_ids)
        stopped = bool(pending) and pending[-1] in eos
        g = 0 if stopped else min(cfg.gamma, limit - produced - len(pending))
        # both start together; the round ends when both are done
        drafting = draft_ex.submit(drafter.propose, ids + pending, g, eos) if g > 0 else None
        verifying = target_ex.submit(verify, target, ids, Proposal(list(pending)), clock, "verify_forward")
        wait([f for f in (drafting, verifying) if f is not None])
        logits, verify_event = verifying.result()
        new = drafting.result().tokens if drafting else []
        draft_events = drafting.result().events if drafting else []

        s0 = clock.now()  # the verdict: the target's rows check pending + y1 (post) or x1 (pre)
        checked = pending + new[:1] if post else new[:1]
        best = logits.argmax(-1).tolist()
        k = 0
        while k < len(checked) and checked[k] == best[k]:
            k += 1
        rejected = k < len(checked)
        own = best[k] if rejected or not new else None
        emitted, stop = stopping.cut(checked[:k] + ([own] if own is not None else []), produced, limit,
                                     cfg.max_new_tokens, eos)
        sample = Event("target", "sample", s0, clock.now(), [own] if own is not None else [])
        events = [*draft_events, *target.take_waits(), verify_event, sample]  # waits: a remote target's network
        if rejected:  # both caches back to the new sequence; the new block is thrown away
            seq = ids + emitted
            for lane, kv, dropped, keep in (("target", target, pending[k:], len(seq) - 1),
                                            ("draft", drafter.kv, (pending + new)[k:], len(seq))):
                r0 = clock.now()
                kv.rollback(min(kv.common_prefix(seq), keep))
                if dropped:
                    events.append(Event(lane, "rollback", r0, clock.now(), list(dropped)))
            pending, post = [], False
        else:
            pending, post = new[1:], bool(new)
        events.sort(key=lambda e: e.start_ms)
        trace.rounds.append(Round(index=len(trace.rounds), gamma=g, proposed=list(checked), accepted=k,
                                  rejected=list(checked[k:]), correction=own,
                                  bonus=own is not None and bool(checked) and k == len(checked),
                                  emitted=emitted, events=events))
        ids += emitted
        trace.output_ids += emitted
        trace.wall_ms = clock.now()
        if stop:
            trace.stop_reason = stop
            trace.contention = clock.contention()
            return
