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

Threads and cores: ``specviz.measure.two_threads`` (shared with the SSD run for real). The
coordinator hands each round's drafting and verifying to the draft's and the target's
executors and waits for both: that is the once-per-round meeting.

Timing: every event is on one ``Clock`` (perf_counter, ms since the run started), never
paused: the coordinator's verdict and rollbacks are on it too (as the target lane's
``sample`` and both lanes' ``rollback``). The round's text is decoded once after the run,
off the clock (``wall_ms`` is fixed before).

Greedy, model drafter, full head only; in float32 the output equals the target's own
greedy output token for token.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait

import torch

from specviz.engine.acceptance import Sampling, greedy_accept
from specviz.engine.decode import verify
from specviz.engine.drafters import ModelDrafter, Proposal
from specviz.measure import two_threads
from specviz.measure.two_threads import THREADS, OverlapRun
from specviz.models import busy
from specviz.models.kv import Clock, KVModel
from specviz.models.pair import ModelPair
from specviz.record import stopping
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Event, Round, Trace

SCHEDULE = "pearl"
__all__ = ["SCHEDULE", "THREADS", "OverlapRun", "pearl_run"]


def pearl_run(pair: ModelPair, config: RunConfig, cores: tuple[int, int] | None = None) -> OverlapRun:
    """Run greedy PEARL for real, the draft on ``cores[0]`` and the target on ``cores[1]``
    (module docstring; default ``two_threads.default_cores``). ``config`` is copied, not
    changed; its gamma is PEARL's constant draft length. Threads are gone and torch's thread
    count restored on return or raise."""
    trace = two_threads.new_trace(pair, config, "PEARL")
    with two_threads.lanes(cores or two_threads.default_cores(pair), SCHEDULE) as lanes:
        _rounds(pair, trace, lanes.draft, lanes.target)
    return lanes.result(two_threads.finish_text(pair, trace), SCHEDULE)


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
        k, target_token = greedy_accept(logits, checked)
        rejected = k < len(checked)
        own = target_token if rejected or not new else None
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
