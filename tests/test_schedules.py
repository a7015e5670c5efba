"""Schedule replays (specviz/replay/schedules.py) on hand-built greedy runs; no model is loaded.

Every expected number is worked out by hand in the comments, with a tiny latency model:

    draft(B)  = 10 + 2 (B - 1) ms   one draft pass for B sequences (draft(4) = 16, draft(6) = 20);
                                    one reading k tokens of one sequence costs the same as draft(k)
                                    (no reads measured: a batch stands in), e.g. 12 ms for the
                                    two tokens read after a bonus
    verify(k) = 50 + k ms           one target pass reading k new tokens
    the first passes: draft prefill 30 ms, target prefill 80 ms; overhead 0 (one case: 5 ms)

Output token j is 100 + j. The draft's candidates at j are filler ids 1000 + 10 j + i
(i = 0..7) with the target's token put at index ranks[j]: the draft proposes 100 + j where
the rank is 0, and 1000 + 10 j where it is not. U is UNKNOWN: a draft token after a wrong one.
"""

from __future__ import annotations

import pytest

from specviz.figures.schedules import axis_span
from specviz.record.errors import BadInput
from specviz.record.limits import UNKNOWN_TOKEN as U
from specviz.record.run_config import EVENT_KINDS, FORWARD_KINDS, LANES, RunConfig
from specviz.record.run_trace import Trace
from specviz.replay.latency import LatencyModel
from specviz.replay.schedules import ReplayInput, Settings, fan_out, pearl, serial, simulate_all, ssd

COSTS = LatencyModel(draft_ms={1: 10.0, 2: 12.0}, verify_ms={1: 51.0, 2: 52.0},
                     draft_prefill_ms=30.0, target_prefill_ms=80.0)
SLOW_BOOKKEEPING = LatencyModel(draft_ms={1: 10.0, 2: 12.0}, verify_ms={1: 51.0, 2: 52.0},
                                draft_prefill_ms=30.0, target_prefill_ms=80.0, overhead_ms=5.0)
EOS = 999
D, T = "draft", "target"
PRE, FWD, VER = "prefill", "draft_forward", "verify_forward"


def recorded(ranks, tokens=None, top=None):
    """(ranks, candidates, tokens) of a run: see the module docstring; ``top`` overrides
    the draft's first candidate at some positions (to make it propose an EOS)."""
    tokens = tokens or [100 + j for j in range(len(ranks))]
    candidates = []
    for j, rank in enumerate(ranks):
        row = [1000 + 10 * j + i for i in range(8)]
        row[rank] = tokens[j]
        candidates.append(row)
    for j, tok in (top or {}).items():
        candidates[j][0] = tok
    return ranks, candidates, tokens


def passes(result):
    """Each round's forward passes as (lane, kind, start, end)."""
    return [[(e.lane, e.kind, e.start_ms, e.end_ms) for e in r.events if e.kind in FORWARD_KINDS]
            for r in result.trace.rounds]


def shape(result):
    """Each round as (gamma, proposed, accepted, correction, bonus, emitted)."""
    return [(r.gamma, r.proposed, r.accepted, r.correction, r.bonus, r.emitted) for r in result.trace.rounds]


def rollbacks(result):
    return [[(e.lane, e.start_ms, e.tokens) for e in r.events if e.kind == "rollback"] for r in result.trace.rounds]


# --- every token agrees: ranks all 0, 10 tokens, gamma 3, budget 10 ---------------------

AGREE = recorded([0] * 10)
AGREE_SETTINGS = Settings(gamma=3, max_new_tokens=10)


def test_all_agree_serial():
    r = serial(ReplayInput(*AGREE), COSTS, AGREE_SETTINGS)
    # R1: 3 drafts (prefill 30, then 10, 10) 0-50, the target's prefill 50-130; all 3 accepted + bonus.
    # R2: 3 drafts, the first reading 2 tokens (102 and the bonus 103: 12), 130-162,
    #     verify(4) = 54: 162-216; 4 more tokens.
    # R3: left = 10 - 8 = 2, so g = left - 1 = 1: one draft after a bonus again (12) 216-228,
    #     verify(2) = 52: 228-280; 108 + bonus 109.
    assert passes(r) == [
        [(D, PRE, 0, 30), (D, FWD, 30, 40), (D, FWD, 40, 50), (T, PRE, 50, 130)],
        [(D, FWD, 130, 142), (D, FWD, 142, 152), (D, FWD, 152, 162), (T, VER, 162, 216)],
        [(D, FWD, 216, 228), (T, VER, 228, 280)],
    ]
    assert shape(r) == [
        (3, [100, 101, 102], 3, 103, True, [100, 101, 102, 103]),
        (3, [104, 105, 106], 3, 107, True, [104, 105, 106, 107]),
        (1, [108], 1, 109, True, [108, 109]),
    ]
    assert r.wall_ms == 280 and r.rounds == 3
    assert r.tokens_per_second == pytest.approx(10 / 0.280)
    # draft busy 30 + 10 + 10 + 32 + 12 = 94 ms; target busy 80 + 54 + 52 = 186 ms
    assert r.draft_idle_fraction == pytest.approx(1 - 94 / 280)
    assert r.target_idle_fraction == pytest.approx(1 - 186 / 280)
    assert r.hits is r.misses is r.hit_rate is r.branches_per_round is r.wasted_draft_ms is None


def test_all_agree_pearl():
    r = pearl(ReplayInput(*AGREE), COSTS, AGREE_SETTINGS)
    # Each round both models start together and it takes max(drafting, the target's pass).
    # R1 pre-verify: draft 100,101,102 (30 + 10 + 10 = 50) while the target prefills (80)
    #   and checks x1 = 100: accepted, emitted; 101,102 pending -> post-verify. Ends at 80.
    # R2 post-verify: draft 103..105 (30) while the target reads 100,101,102 (verify(3) = 53)
    #   and checks 101, 102 AND 103: all accepted, no token of its own; 104,105 pending. 80-133.
    # R3 the same: 104..106 emitted, 107,108 pending, 133-186.
    # R4: only 1 position left in the budget (109): draft it (10) while the target reads
    #   106,107,108 (53): checks 107,108,109, all accepted. 186-239.
    assert passes(r) == [
        [(D, PRE, 0, 30), (T, PRE, 0, 80), (D, FWD, 30, 40), (D, FWD, 40, 50)],
        [(D, FWD, 80, 90), (T, VER, 80, 133), (D, FWD, 90, 100), (D, FWD, 100, 110)],
        [(D, FWD, 133, 143), (T, VER, 133, 186), (D, FWD, 143, 153), (D, FWD, 153, 163)],
        [(D, FWD, 186, 196), (T, VER, 186, 239)],
    ]
    assert shape(r) == [
        (3, [100], 1, None, False, [100]),
        (3, [101, 102, 103], 3, None, False, [101, 102, 103]),
        (3, [104, 105, 106], 3, None, False, [104, 105, 106]),
        (1, [107, 108, 109], 3, None, False, [107, 108, 109]),
    ]
    assert r.wall_ms == 239 and r.rounds == 4
    # draft busy 50 + 30 + 30 + 10 = 120; target busy 80 + 53 * 3 = 239: never idle
    assert r.draft_idle_fraction == pytest.approx(1 - 120 / 239)
    assert r.target_idle_fraction == pytest.approx(0.0)


def test_all_agree_ssd_is_draft_bound_with_two_branches_per_outcome():
    r = ssd(ReplayInput(*AGREE), COSTS, AGREE_SETTINGS)
    # R1 misses (nothing prepared): the block is drafted first (0-50), then the target's prefill
    #   50-130. Meanwhile, from 50: the glue pass over 4 tokens (draft(4) = 16) 50-66, then
    #   F = 2 branches for each outcome k = 0..3, B = 8, gamma = 3 steps of draft(8) = 24: 66-138.
    #   The round ends when both are done: 138. Outcome (3, 103): rank 0 < F_3 = 2 -> a hit.
    # R2 hits: its block is ready, the verify starts at once: verify(4) = 54, 138-192; the
    #   branches 138-226 again; outcome (3, 107) hits. The round ends at 226.
    # R3 (g = 1, the budget) hits: verify(2) = 52, 226-278; the run is over: no branches.
    assert passes(r) == [
        [(D, PRE, 0, 30), (D, FWD, 30, 40), (D, FWD, 40, 50), (D, FWD, 50, 66), (T, PRE, 50, 130),
         (D, FWD, 66, 90), (D, FWD, 90, 114), (D, FWD, 114, 138)],
        [(D, FWD, 138, 154), (T, VER, 138, 192), (D, FWD, 154, 178), (D, FWD, 178, 202), (D, FWD, 202, 226)],
        [(T, VER, 226, 278)],
    ]
    assert shape(r) == shape(serial(ReplayInput(*AGREE), COSTS, AGREE_SETTINGS))  # same blocks as serial
    assert r.wall_ms == 278  # the branches (16 + 72 = 88 ms) outlast the verify (54 ms)
    assert (r.hits, r.misses, r.hit_rate, r.branches_per_round) == (2, 1, pytest.approx(2 / 3), 8)
    assert r.wasted_draft_ms == pytest.approx(2 * 72 * 7 / 8)  # two hits: 7 of 8 branches unused


def test_all_agree_ssd_with_one_branch_per_outcome():
    r = ssd(ReplayInput(*AGREE), COSTS, Settings(gamma=3, max_new_tokens=10, fanout=1))
    # B = 4: glue 16 + 3 * draft(4) = 3 * 16 = 48 -> 64 ms of branches.
    # R1: block 0-50, prefill 50-130, branches 50-114: ends 130.
    # R2: verify(4) 130-184, branches 130-194: ends 194. R3: verify(2) 194-246.
    assert [p[-1] for p in passes(r)] == [(D, FWD, 98, 114), (D, FWD, 178, 194), (T, VER, 194, 246)]
    assert r.wall_ms == 246  # faster than serial's 276
    assert (r.hits, r.misses, r.branches_per_round) == (2, 1, 4)
    assert r.wasted_draft_ms == pytest.approx(2 * 48 * 3 / 4)


def test_overhead_is_a_sample_event_that_closes_every_round():
    results = simulate_all(ReplayInput(*AGREE), SLOW_BOOKKEEPING, AGREE_SETTINGS)
    # 5 ms more per round, every later step shifted: serial 280 + 3 * 5, PEARL 239 + 4 * 5, SSD 278 + 3 * 5
    assert {k: r.wall_ms for k, r in results.items()} == {"serial": 295, "pearl": 259, "ssd": 293}
    # serial: R1 ends at 130, then its sample 130-135; R2's drafts start at 135 (the first reads 2 tokens).
    samples = [[(e.lane, e.start_ms, e.end_ms) for e in r.events if e.kind == "sample"]
               for r in results["serial"].trace.rounds]
    assert samples == [[(T, 130, 135)], [(T, 221, 226)], [(T, 290, 295)]]
    assert passes(results["serial"])[1][0] == (D, FWD, 135, 147)
    # PEARL: R1 ends at max(50, 80) = 80, sample 80-85; R2's passes start at 85
    assert passes(results["pearl"])[1][:2] == [(D, FWD, 85, 95), (T, VER, 85, 138)]


# --- no token agrees: ranks all 1, 4 tokens, gamma 3, budget 4 ---------------------------

DISAGREE = recorded([1, 1, 1, 1])
DISAGREE_SETTINGS = Settings(gamma=3, max_new_tokens=4)


def test_none_agree_serial():
    r = serial(ReplayInput(*DISAGREE), COSTS, DISAGREE_SETTINGS)
    # Each round the draft's first token is wrong (1000 + 10 j) and the rest unknown: one token a round.
    # R1 g = 3: 0-50, prefill 50-130. R2 g = min(3, 4 - 1 - 1) = 2: 130-150, verify(3) 150-203.
    # R3 g = 1: 203-213, verify(2) 213-265. R4 g = 0: no draft, verify(1) = 51: 265-316.
    assert passes(r) == [
        [(D, PRE, 0, 30), (D, FWD, 30, 40), (D, FWD, 40, 50), (T, PRE, 50, 130)],
        [(D, FWD, 130, 140), (D, FWD, 140, 150), (T, VER, 150, 203)],
        [(D, FWD, 203, 213), (T, VER, 213, 265)],
        [(T, VER, 265, 316)],
    ]
    assert shape(r) == [
        (3, [1000, U, U], 0, 100, False, [100]),
        (2, [1010, U], 0, 101, False, [101]),
        (1, [1020], 0, 102, False, [102]),
        (0, [], 0, 103, False, [103]),
    ]
    assert r.wall_ms == 316
    # the target drops the rejected tokens from its cache
    assert rollbacks(r) == [[(T, 130, [1000, U, U])], [(T, 203, [1010, U])], [(T, 265, [1020])], []]


def test_none_agree_pearl_stays_in_pre_verify():
    r = pearl(ReplayInput(*DISAGREE), COSTS, DISAGREE_SETTINGS)
    # Pre-verify every round: the target rejects x1 and emits its own token; the block is thrown away.
    # R1: draft 0-50 (g = 3) | prefill 0-80 -> 80. R2: draft 80-110 (g = min(3, 4 - 1) = 3) | verify(1) 80-131.
    # R3: g = 2: 131-151 | 131-182. R4: g = 1: 182-192 | 182-233.
    assert passes(r) == [
        [(D, PRE, 0, 30), (T, PRE, 0, 80), (D, FWD, 30, 40), (D, FWD, 40, 50)],
        [(D, FWD, 80, 90), (T, VER, 80, 131), (D, FWD, 90, 100), (D, FWD, 100, 110)],
        [(D, FWD, 131, 141), (T, VER, 131, 182), (D, FWD, 141, 151)],
        [(D, FWD, 182, 192), (T, VER, 182, 233)],
    ]
    assert shape(r) == [(3, [1000], 0, 100, False, [100]), (3, [1010], 0, 101, False, [101]),
                        (2, [1020], 0, 102, False, [102]), (1, [1030], 0, 103, False, [103])]
    assert r.wall_ms == 233
    # the draft throws its whole block away; the target read nothing unverified
    assert rollbacks(r) == [[(D, 80, [1000, U, U])], [(D, 131, [1010, U, U])], [(D, 182, [1020, U])],
                            [(D, 233, [1030])]]


def test_none_agree_ssd_hits_on_the_second_candidate():
    r = ssd(ReplayInput(*DISAGREE), COSTS, DISAGREE_SETTINGS)
    # Every correction is the draft's second choice (rank 1): within k = 0's F_0 = 2 branches.
    # R1 (miss): block 0-50, prefill 50-130; glue draft(4) = 16: 50-66; B = 8: 3 * 24 -> 66-138.
    # R2 (hit), g = 2: verify(3) 138-191; glue draft(3) = 14: 138-152; B = 6: 3 * 20 -> 152-212.
    # R3 (hit), g = 1: verify(2) 212-264; glue draft(2) = 12: 212-224; B = 4: 3 * 16 -> 224-272.
    # R4 (hit), g = 0: verify(1) 272-323; the last round: no branches.
    assert passes(r) == [
        [(D, PRE, 0, 30), (D, FWD, 30, 40), (D, FWD, 40, 50), (D, FWD, 50, 66), (T, PRE, 50, 130),
         (D, FWD, 66, 90), (D, FWD, 90, 114), (D, FWD, 114, 138)],
        [(D, FWD, 138, 152), (T, VER, 138, 191), (D, FWD, 152, 172), (D, FWD, 172, 192), (D, FWD, 192, 212)],
        [(D, FWD, 212, 224), (T, VER, 212, 264), (D, FWD, 224, 240), (D, FWD, 240, 256), (D, FWD, 256, 272)],
        [(T, VER, 272, 323)],
    ]
    assert r.wall_ms == 323
    assert (r.hits, r.misses, r.hit_rate) == (3, 1, 0.75)
    assert r.branches_per_round == pytest.approx((8 + 6 + 4) / 3)
    # hits only: 72 * 7/8 + 60 * 5/6 + 48 * 3/4 = 63 + 50 + 36
    assert r.wasted_draft_ms == pytest.approx(149)


# --- alternating agreement: ranks 0, 1, 0, 1, 0, 1, gamma 2, budget 6 ---------------------

ALTERNATING = recorded([0, 1, 0, 1, 0, 1])
ALTERNATING_SETTINGS = Settings(gamma=2, max_new_tokens=6)


def test_alternating_serial():
    r = serial(ReplayInput(*ALTERNATING), COSTS, ALTERNATING_SETTINGS)
    # R1: 100 accepted, 1010 rejected, correction 101. Drafts 0-40, prefill 40-120.
    # R2: the same at 102/103: drafts 120-140, verify(3) 140-193.
    # R3: g = 1: 104 accepted + bonus 105: draft 193-203, verify(2) 203-255.
    assert passes(r) == [
        [(D, PRE, 0, 30), (D, FWD, 30, 40), (T, PRE, 40, 120)],
        [(D, FWD, 120, 130), (D, FWD, 130, 140), (T, VER, 140, 193)],
        [(D, FWD, 193, 203), (T, VER, 203, 255)],
    ]
    assert shape(r) == [(2, [100, 1010], 1, 101, False, [100, 101]),
                        (2, [102, 1030], 1, 103, False, [102, 103]),
                        (1, [104], 1, 105, True, [104, 105])]
    assert r.wall_ms == 255


def test_alternating_pearl_switches_modes_every_round():
    r = pearl(ReplayInput(*ALTERNATING), COSTS, ALTERNATING_SETTINGS)
    # R1 pre: draft 100, 1010 (0-40) | prefill 0-80; x1 = 100 accepted; 1010 pending -> post.
    # R2 post: draft positions 2, 3 (unknown: they follow the wrong 1010) 80-100 | the target reads
    #   100, 1010 (verify(2) = 52) 80-132 and checks 1010 and the new U: 1010 rejected, correction 101;
    #   both models roll back -> pre.
    # R3 pre at 2: 132-152 | verify(1) 132-183: 102 accepted, 1030 pending. R4 post: 183-203 | 183-235: 103.
    # R5 pre at 4: 235-255 | 235-286: 104 accepted, 1050 pending.
    # R6 post: no position left to draft (start = 6 = budget) | the target reads 104, 1050: 286-338; 105.
    assert passes(r) == [
        [(D, PRE, 0, 30), (T, PRE, 0, 80), (D, FWD, 30, 40)],
        [(D, FWD, 80, 90), (T, VER, 80, 132), (D, FWD, 90, 100)],
        [(D, FWD, 132, 142), (T, VER, 132, 183), (D, FWD, 142, 152)],
        [(D, FWD, 183, 193), (T, VER, 183, 235), (D, FWD, 193, 203)],
        [(D, FWD, 235, 245), (T, VER, 235, 286), (D, FWD, 245, 255)],
        [(T, VER, 286, 338)],
    ]
    assert shape(r) == [
        (2, [100], 1, None, False, [100]),
        (2, [1010, U], 0, 101, False, [101]),
        (2, [102], 1, None, False, [102]),
        (2, [1030, U], 0, 103, False, [103]),
        (2, [104], 1, None, False, [104]),
        (0, [1050], 0, 105, False, [105]),
    ]
    assert r.wall_ms == 338  # PEARL's worst case: every other round is thrown away
    assert rollbacks(r)[1] == [(D, 132, [1010, U, U]), (T, 132, [1010])]


def test_alternating_ssd_misses_then_hits():
    r = ssd(ReplayInput(*ALTERNATING), COSTS, ALTERNATING_SETTINGS)
    # R1 (miss): block 100, 1010 drafted 0-40, prefill 40-120; glue draft(3) = 14: 40-54;
    #   B = 2 * 3 = 6: 2 steps of draft(6) = 20: 54-94. Outcome (1, 101): rank 1 <= F_1 = 2: a hit.
    # R2 (hit): verify(3) 120-173; glue 120-134, branches 134-174 -> ends 174; (1, 103) hits.
    # R3 (hit), g = 1: verify(2) 174-226: 104 + bonus 105, the end.
    assert passes(r) == [
        [(D, PRE, 0, 30), (D, FWD, 30, 40), (D, FWD, 40, 54), (T, PRE, 40, 120), (D, FWD, 54, 74), (D, FWD, 74, 94)],
        [(D, FWD, 120, 134), (T, VER, 120, 173), (D, FWD, 134, 154), (D, FWD, 154, 174)],
        [(T, VER, 174, 226)],
    ]
    assert r.wall_ms == 226  # serial: 255
    assert (r.hits, r.misses, r.branches_per_round) == (2, 1, 6)
    assert r.wasted_draft_ms == pytest.approx(2 * 40 * 5 / 6)


# --- SSD: a miss, then a hit or a miss depending on the fan-out ----------------------------

FAR = recorded([0, 3, 0, 0])  # the correction at position 1 is the draft's 4th choice


def test_ssd_outcome_outside_the_branches_misses():
    r = ssd(ReplayInput(*FAR), COSTS, Settings(gamma=2, max_new_tokens=4, fanout=2))
    # R1 (miss): 0-40, prefill 40-120, glue 40-54, B = 6: 54-94. Outcome (1, 101) has rank 3 > F_1 = 2.
    # R2 (miss), g = min(2, 4 - 2 - 1) = 1: the draft drafts 102 after the verify: 120-130, then
    #   verify(2) 130-182: 102 + bonus 103.
    assert passes(r)[1] == [(D, FWD, 120, 130), (T, VER, 130, 182)]
    assert r.wall_ms == 182
    assert (r.hits, r.misses, r.hit_rate) == (0, 2, 0.0)
    assert r.wasted_draft_ms == pytest.approx(40)  # a miss wastes every branch: 2 * draft(6)


def test_ssd_wider_fanout_turns_the_miss_into_a_hit():
    r = ssd(ReplayInput(*FAR), COSTS, Settings(gamma=2, max_new_tokens=4, fanout=3))
    # B = 9: glue 40-54, 2 steps of draft(9) = 26: 54-106; rank 3 <= F_1 = 3: a hit.
    # R2 (hit): verify(2) at once, 120-172.
    assert passes(r)[0][-2:] == [(D, FWD, 54, 80), (D, FWD, 80, 106)]
    assert passes(r)[1] == [(T, VER, 120, 172)]
    assert r.wall_ms == 172
    assert (r.hits, r.misses, r.branches_per_round) == (1, 1, 9)
    assert r.wasted_draft_ms == pytest.approx(52 * 8 / 9)


def test_ssd_bonus_outcome_hits_on_the_draft_top_choice():
    # k == g (all accepted): the bonus branches are the draft's top F_g, its top choice included.
    r = ssd(ReplayInput(*recorded([0, 0, 0, 0, 0])), COSTS, Settings(gamma=2, max_new_tokens=5, fanout=1))
    # R1: 100, 101 accepted, bonus 102 has rank 0 < F_2 = 1: a hit; R2 (g = 1): 103 + bonus 104.
    assert (r.hits, r.misses) == (1, 1)


# --- fan-out allocations --------------------------------------------------------------------


def test_fan_out_uniform_and_its_cap():
    assert fan_out(3, Settings(gamma=3, fanout=2), alpha=0.5) == [2, 2, 2, 2]
    # 3 * 4 = 12 branches capped at 10: the last outcomes lose theirs first
    assert fan_out(3, Settings(gamma=3, fanout=3, max_branches=10), alpha=0.5) == [3, 3, 3, 1]


def test_fan_out_geometric():
    s = Settings(gamma=3, fanout=2, fanout_mode="geometric")
    # budget 2 * 4 = 8; P(k) = 0.5, 0.25, 0.125 and P(3) = 0.125 (capped: all of the tail);
    # r = 1: weights sqrt(P) = .7071, .5, .3536, .3536 (sum 1.9142) -> 8 w / sum = 2.955, 2.090,
    # 1.478, 1.478 -> floors 2, 2, 1, 1 (6), the 2 left by largest remainder: k = 0, then k = 2.
    assert fan_out(3, s, alpha=0.5) == [3, 2, 2, 1]
    assert fan_out(3, s, alpha=0.0) == [8, 0, 0, 0]  # the first token is always rejected
    assert fan_out(3, s, alpha=1.0) == [0, 0, 0, 8]  # every block is fully accepted
    assert sum(fan_out(31, Settings(gamma=31, fanout=2, fanout_mode="geometric"), alpha=0.8)) == 32


def test_ssd_geometric_spends_the_same_budget():
    ranks, candidates, tokens = ALTERNATING
    r = ssd(ReplayInput(ranks, candidates, tokens), COSTS, Settings(gamma=2, max_new_tokens=6, fanout_mode="geometric"))
    # alpha defaults to the run's share of rank 0 (3 of 6 = 0.5): budget 6 over k = 0, 1, 2:
    # weights sqrt(.5, .25, .25) -> 6 w / sum = 2.485, 1.757, 1.757 -> 2, 1, 1 + remainders k = 1, 2
    # -> [2, 2, 2]: the same branches as uniform here, so the same timeline.
    assert r.branches_per_round == 6
    assert passes(r) == passes(ssd(ReplayInput(ranks, candidates, tokens), COSTS, ALTERNATING_SETTINGS))


# --- the draft-length policy, the budget cut, EOS ------------------------------------------


def test_heuristic_gamma_sequence_and_budget_cut():
    run = recorded([0, 0, 2, 0, 0, 1, 4, 0, 0, 0, 0, 0])
    r = serial(ReplayInput(*run), COSTS, Settings(gamma=2, policy="heuristic", max_new_tokens=12))
    # R1 g = 2: 100, 101 accepted (+bonus 102): full -> +2.  R2 g = 4 at 3: 103, 104 accepted,
    # 1050 rejected (105 fixes it): -1.  R3 g = 3 at 6: 1060 rejected: -1.  R4 g = 2 at 7: full: +2.
    # R5 at 10: the policy says 4 but left = 2, so g = left - 1 = 1: 110 + bonus 111.
    assert [rnd.gamma for rnd in r.trace.rounds] == [2, 4, 3, 2, 1]
    assert shape(r)[1] == (4, [103, 104, 1050, U], 2, 105, False, [103, 104, 105])
    assert r.trace.config.policy == "heuristic"
    # PEARL and SSD keep a constant gamma, as their references do
    assert [rnd.gamma for rnd in ssd(ReplayInput(*run), COSTS, Settings(gamma=2, policy="heuristic", max_new_tokens=12))
            .trace.rounds] == [2, 2, 2, 2, 1]


EOS_DRAFT = recorded([0, 1, 0, 0, 0], top={1: EOS})  # the draft proposes EOS at position 1, wrongly
EOS_SETTINGS = Settings(gamma=4, max_new_tokens=5, eos_ids=frozenset({EOS}))


def test_eos_proposal_stops_the_block():
    r = serial(ReplayInput(*EOS_DRAFT), COSTS, EOS_SETTINGS)
    # R1 g = 4 but the draft stops after proposing EOS: 2 passes (0-40), prefill 40-120; 101 fixes it.
    # R2 g = min(4, 5 - 2 - 1) = 2: 120-140, verify(3) 140-193: 102, 103 + bonus 104.
    assert shape(r) == [(4, [100, EOS], 1, 101, False, [100, 101]), (2, [102, 103], 2, 104, True, [102, 103, 104])]
    assert passes(r)[0] == [(D, PRE, 0, 30), (D, FWD, 30, 40), (T, PRE, 40, 120)]
    assert r.wall_ms == 193
    # PEARL: R1 pre drafts 100, EOS (0-40) | prefill 0-80: 100 accepted, EOS pending.
    # R2 post: the draft proposed EOS, so it drafts nothing; the target reads 100, EOS (80-132): rejected, 101.
    # R3 pre at 2: 102..104 (132-162) | verify(1) 132-183: 102. R4 post: nothing left to draft;
    # the target reads 102, 103, 104 (183-236) and accepts 103, 104.
    p = pearl(ReplayInput(*EOS_DRAFT), COSTS, EOS_SETTINGS)
    assert passes(p)[1] == [(T, VER, 80, 132)]
    assert [(rnd.gamma, rnd.proposed, rnd.emitted) for rnd in p.trace.rounds] == [
        (4, [100], [100]), (0, [EOS], [101]), (3, [102], [102]), (0, [103, 104], [103, 104])]
    assert p.wall_ms == 236


def test_a_recorded_chain_knows_the_draft_after_its_wrong_token():
    # The run's draft proposed 1000 (wrong) then EOS from position 0. Without its chain the
    # replay drafts 1000, U, U (3 passes, 0-50; prefill 50-130); with it the block stops at EOS:
    # 2 passes (0-40), prefill 40-120. Either way 100 corrects it; R2 drafts 101, 102 (20 ms) and
    # verify(3) = 53 keeps both + bonus 103.
    run = recorded([1, 0, 0, 0])
    settings = Settings(gamma=3, max_new_tokens=4, eos_ids=frozenset({EOS}))
    blind = serial(ReplayInput(*run), COSTS, settings)
    seen = serial(ReplayInput(*run, chains={0: [1000, EOS]}), COSTS, settings)
    assert blind.trace.rounds[0].proposed == [1000, U, U] and blind.wall_ms == 130 + 20 + 53
    assert seen.trace.rounds[0].proposed == [1000, EOS] and seen.wall_ms == 120 + 20 + 53
    assert passes(seen)[0] == [(D, PRE, 0, 30), (D, FWD, 30, 40), (T, PRE, 40, 120)]
    assert [rnd.emitted for rnd in seen.trace.rounds] == [[100], [101, 102, 103]]


def test_a_chain_through_the_targets_tokens_is_the_chain_from_there():
    # Recorded (gamma 5) from 0: 100, 101, 102 right, 1030 wrong, then EOS. Replayed at gamma 2:
    # R1 100, 101 + bonus 102; R2 starts at 3, where no block was recorded: the chain from 0 went
    # through 100, 101, 102, so from 3 the draft proposes 1030 and then EOS, not an unknown token.
    run = recorded([0, 0, 0, 1, 0, 0])
    settings = Settings(gamma=2, max_new_tokens=6, eos_ids=frozenset({EOS}))
    chains = {0: [100, 101, 102, 1030, EOS]}
    assert serial(ReplayInput(*run), COSTS, settings).trace.rounds[1].proposed == [1030, U]
    assert serial(ReplayInput(*run, chains=chains), COSTS, settings).trace.rounds[1].proposed == [1030, EOS]
    # a chain whose tokens leave the target's before the block starts says nothing there
    wrong = ReplayInput(*run, chains={0: [100, 999, 102, 1030, EOS]})
    assert serial(wrong, COSTS, settings).trace.rounds[1].proposed == [1030, U]
    with pytest.raises(BadInput):
        serial(ReplayInput(*run, chains={6: [1]}), COSTS, settings)


def test_accepted_eos_ends_the_run():
    run = recorded([0, 0, 0], tokens=[100, 101, EOS])
    r = serial(ReplayInput(*run), COSTS, Settings(gamma=4, max_new_tokens=10, eos_ids=frozenset({EOS})))
    # g = 4, but the draft stops after proposing EOS (3 passes, 0-50); prefill 50-130; all 3 accepted
    # and the output ends at EOS: no bonus token is emitted.
    assert shape(r) == [(4, [100, 101, EOS], 3, None, True, [100, 101, EOS])]
    assert r.wall_ms == 130 and r.trace.stop_reason == "eos"


# --- every case, every schedule: the invariants ----------------------------------------------

CASES = {
    "agree": (AGREE, AGREE_SETTINGS),
    "disagree": (DISAGREE, DISAGREE_SETTINGS),
    "alternating": (ALTERNATING, ALTERNATING_SETTINGS),
    "far": (FAR, Settings(gamma=2, max_new_tokens=4)),
    "eos draft": (EOS_DRAFT, EOS_SETTINGS),
    "heuristic": (recorded([0, 0, 2, 0, 0, 1, 4, 0, 0, 0, 0, 0]),
                  Settings(gamma=2, policy="heuristic", max_new_tokens=12)),
    "geometric, stopped early": (recorded([0, 0, 1, 0, 5, 0, 0, 0, 2, 0]),
                                 Settings(gamma=3, max_new_tokens=16, fanout_mode="geometric")),
}


def busy(trace: Trace, lane: str) -> float:
    return sum(e.duration_ms for e in trace.events if e.lane == lane and e.is_forward)


@pytest.mark.parametrize("costs", [COSTS, SLOW_BOOKKEEPING], ids=["no overhead", "overhead"])
@pytest.mark.parametrize("case", CASES)
def test_invariants(case, costs):
    (ranks, candidates, tokens), settings = CASES[case]
    results = simulate_all(ReplayInput(ranks, candidates, tokens), costs, settings)
    assert list(results) == ["serial", "pearl", "ssd"]
    for name, r in results.items():
        trace = r.trace
        assert r.name == name and r.rounds == len(trace.rounds)
        assert [t for rnd in trace.rounds for t in rnd.emitted] == tokens == trace.output_ids
        assert trace.config.mode == "speculative"
        events = trace.events
        assert all(e.lane in LANES and e.kind in EVENT_KINDS and e.end_ms >= e.start_ms for e in events)
        assert trace.wall_ms == r.wall_ms == max(e.end_ms for e in events)
        for lane in LANES:  # one lane never runs two things at once
            spans = sorted((e.start_ms, e.end_ms) for e in events if e.lane == lane)
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), (name, lane)
        for rnd in trace.rounds:  # each round: one sample event of the overhead, on the target lane
            assert [(e.lane, e.duration_ms) for e in rnd.events if e.kind == "sample"] == [(T, costs.overhead_ms)]
        # the reported idle fractions are the summary's, and the summary's are the events'
        for lane, frac in ((D, r.draft_idle_fraction), (T, r.target_idle_fraction)):
            assert frac == trace.summary[f"{lane}_idle_fraction"] == pytest.approx(1 - busy(trace, lane) / r.wall_ms)
        assert r.tokens_per_second == pytest.approx(len(tokens) / r.wall_ms * 1000)
        assert Trace.from_json(trace.to_json()).to_dict() == trace.to_dict()
    serial_events = sorted(results["serial"].trace.events, key=lambda e: e.start_ms)
    assert all(a.end_ms <= b.start_ms for a, b in zip(serial_events, serial_events[1:]))  # strictly one after another
    for name in ("pearl", "ssd"):  # both lanes busy at once somewhere
        d_spans = [(e.start_ms, e.end_ms) for e in results[name].trace.events if e.lane == D and e.is_forward]
        t_spans = [(e.start_ms, e.end_ms) for e in results[name].trace.events if e.lane == T and e.is_forward]
        assert any(min(d[1], t[1]) > max(d[0], t[0]) for d in d_spans for t in t_spans), name
    s = results["ssd"]
    assert s.hits + s.misses == s.rounds and s.misses >= 1  # the first round always misses
    assert s.hit_rate == s.hits / s.rounds and s.wasted_draft_ms >= 0


def test_the_serial_replay_reuses_the_config_and_prompt():
    config = RunConfig(prompt="count", draft="d", target="t", gamma=7, mode="autoregressive", stop=["x"])
    r = serial(ReplayInput(*AGREE, config=config, prompt_ids=[1, 2, 3]), COSTS, AGREE_SETTINGS)
    assert (r.trace.config.mode, r.trace.config.gamma, r.trace.config.draft, r.trace.config.prompt) == \
        ("speculative", 3, "d", "count")
    assert r.trace.config.stop == ["x"] and r.trace.config.stop is not config.stop
    assert config.mode == "autoregressive"  # the caller's config is left as it was
    assert r.trace.prompt_ids == [1, 2, 3]
    first = r.trace.rounds[0].events
    assert first[0].tokens == [1, 2, 3]  # the draft's prefill reads the prompt
    assert first[3].tokens == [1, 2, 3, 100, 101, 102]  # the target's: the prompt and the block
    assert r.trace.rounds[1].events[3].tokens == [103, 104, 105, 106]  # later: last token + block


def test_timeline_figure_draws_every_schedule():
    from specviz.figures.timeline import timeline_figure

    for r in simulate_all(ReplayInput(*ALTERNATING), COSTS, ALTERNATING_SETTINGS).values():
        fig = timeline_figure(r.trace)
        assert len(fig.data) > 0


def test_round_labels_are_spaced_on_the_shared_axis():
    """The three timelines share one axis: the shorter ones thin their R-labels as the longest
    does, so labels never crowd where a schedule finished early."""
    from specviz.figures import schedules_figure
    from specviz.figures.timeline import MAX_ROUND_LABELS

    run = recorded([0, 1] * 30)
    results = simulate_all(ReplayInput(*run), COSTS, Settings(gamma=2, max_new_tokens=60))
    fig = schedules_figure(results, {n: n for n in results}, "ms")
    axis = axis_span([r.wall_ms for r in results.values()])
    labels = [t for t in fig.data if getattr(t, "mode", None) == "text"]
    assert len(labels) == 3
    lefts = 0
    for t in labels:
        assert all(b - a >= axis / MAX_ROUND_LABELS for a, b in zip(t.x, t.x[1:]))
        # a label in the axis's last slot sits left of its round's start: to its right it would be
        # cut off; the label before it stands two slots away, so the two never touch
        sides = [(x, side) for x, side in zip(t.x, t.textposition)]
        assert all(side == ("top left" if x > axis * (1 - 1 / MAX_ROUND_LABELS) else "top right")
                   for x, side in sides)
        if sides[-1][1] == "top left":
            lefts += 1
            assert len(t.x) < 2 or t.x[-1] - t.x[-2] >= 2 * axis / MAX_ROUND_LABELS
        assert all(x <= axis for x in t.x)
    assert lefts  # the run is made so that one schedule's last round starts in the last slot


def _scaled(costs: LatencyModel, f: float) -> LatencyModel:
    """``costs`` with every pass, prefill and bookkeeping ``f`` times as long."""
    times = lambda d: {k: f * v for k, v in d.items()}  # noqa: E731
    return LatencyModel(times(costs.draft_ms), times(costs.verify_ms), times(costs.draft_read_ms),
                        f * costs.draft_prefill_ms, f * costs.target_prefill_ms, f * costs.overhead_ms)


def _lane_results(walls: dict[str, float]) -> dict:
    """Serial replays of one run whose wall times are ``walls`` (name -> ms)."""
    run, settings = recorded([0, 1] * 10), Settings(gamma=2, max_new_tokens=20)
    base = serial(ReplayInput(*run), COSTS, settings).wall_ms
    return {name: serial(ReplayInput(*run), _scaled(COSTS, ms / base), settings) for name, ms in walls.items()}


def test_a_lane_far_longer_than_the_others_is_cut_and_labelled():
    """One axis for all, scaled to what is compared: SSD at 33 s beside serial at 8 s and PEARL at
    6 s would squeeze them into a quarter of the width; it is cut at 1.25 × 8 s and says where it ends."""
    from specviz.figures import schedules_figure

    assert axis_span([8000, 6000, 33000]) == pytest.approx(1.25 * 8000)
    assert axis_span([8000, 6000, 15000]) == 15000  # under 2 × the next: all drawn whole
    results = _lane_results({"serial": 8000, "pearl": 6000, "ssd": 33000})
    fig = schedules_figure(results, {n: n for n in results}, "ms")
    assert fig.layout.xaxis3.range[1] == pytest.approx(1.02 * 1.25 * 8000)
    cuts = [a for a in fig.layout.annotations if "cut" in a.text]
    assert len(cuts) == 1 and "33 s" in cuts[0].text and cuts[0].xref == "x3 domain"
    assert (cuts[0].x, cuts[0].xanchor, cuts[0].y, cuts[0].yanchor) == (1, "right", 1, "bottom")  # its title row
    finishes = [s for s in fig.layout.shapes if s.type == "line" and s.x0 == s.x1]
    assert len(finishes) == 2  # the cut lane's finish is off the axis: the label says it
    whole = schedules_figure(_lane_results({"serial": 8000, "pearl": 6000}), {"serial": "s", "pearl": "p"}, "ms")
    assert not [a for a in whole.layout.annotations if "cut" in a.text]


def test_the_legend_sits_above_the_first_lanes_title():
    """The legend at the figure's top edge, the first lane's title below it, inside the margin."""
    from specviz.figures import schedules_figure
    from specviz.figures.schedules import TOP_MARGIN

    results = _lane_results({"serial": 8000, "pearl": 6000})
    fig = schedules_figure(results, {"serial": "Serial: 8 s", "pearl": "PEARL: 6 s"}, "ms")
    assert fig.layout.legend.yref == "container" and fig.layout.legend.y == 1 and fig.layout.legend.yanchor == "top"
    assert fig.layout.margin.t == TOP_MARGIN >= 25 + 22  # a legend row (~25 px) and a title (~22 px) above the lane
    titles = [a for a in fig.layout.annotations if a.text.startswith(("Serial", "PEARL"))]
    assert [(a.xanchor, a.x) for a in titles] == [("left", 0), ("left", 0)]


@pytest.mark.parametrize("bad", [dict(gamma=0), dict(gamma=3, policy="greedy"), dict(gamma=3, fanout=0),
                                 dict(gamma=3, fanout_mode="random"), dict(gamma=3, alpha=1.5),
                                 dict(gamma=3, max_branches=0), dict(gamma=3, max_new_tokens=0)])
def test_bad_settings(bad):
    with pytest.raises(BadInput):
        Settings(**bad)


def test_bad_run():
    ranks, candidates, tokens = AGREE
    with pytest.raises(BadInput, match="one rank"):
        serial(ReplayInput(ranks[:-1], candidates, tokens), COSTS, AGREE_SETTINGS)
    with pytest.raises(BadInput, match="max_new_tokens"):
        pearl(ReplayInput(ranks, candidates, tokens), COSTS, Settings(gamma=3, max_new_tokens=9))


def test_an_empty_run():
    r = ssd(ReplayInput([], [], []), COSTS, AGREE_SETTINGS)
    assert (r.rounds, r.wall_ms, r.hits, r.hit_rate, r.branches_per_round) == (0, 0.0, 0, None, None)


# --- a remote target: every pass is a request, its network time first ---------------------------


def test_a_remote_targets_requests_wait_on_the_network_first():
    """network_ms before every target pass (prefill included): serial adds it to each round;
    under PEARL the draft drafts meanwhile; the replay draws it as the target's network span."""
    remote = LatencyModel(draft_ms={1: 10.0, 2: 12.0}, verify_ms={1: 51.0, 2: 52.0},
                          draft_prefill_ms=30.0, target_prefill_ms=80.0, network_ms=20.0)
    local = {name: r.wall_ms for name, r in simulate_all(ReplayInput(*AGREE), COSTS, AGREE_SETTINGS).items()}
    far = simulate_all(ReplayInput(*AGREE), remote, AGREE_SETTINGS)
    rounds = far["serial"].trace.rounds
    assert far["serial"].wall_ms == pytest.approx(local["serial"] + 20.0 * len(rounds))
    first = [(e.kind, e.start_ms, e.end_ms) for e in rounds[0].events if e.lane == T]
    assert first[:2] == [("network", 50.0, 70.0), (PRE, 70.0, 150.0)]
    for r in far.values():
        assert sum(e.kind == "network" for e in r.trace.events) == r.rounds  # one request a round
    assert far["pearl"].wall_ms < far["serial"].wall_ms
    from specviz.figures import schedules_figure
    from specviz.figures.schedules import LEGEND_ROW, TOP_MARGIN

    fig = schedules_figure(far, {n: n for n in far}, "ms")
    assert "Network and queue (remote target)" in [t.name for t in fig.data]
    assert fig.layout.margin.t == TOP_MARGIN + LEGEND_ROW  # its legend entry wraps to a second row


def test_from_trace_reads_a_remote_targets_network_spans():
    """A remote run's network spans are its own cost, not bookkeeping: their mean per request."""
    from specviz.record.run_trace import Event, Round
    from specviz.replay.latency import from_trace

    def rnd(i, t):
        return Round(index=i, gamma=1, proposed=[5], accepted=1, rejected=[], correction=None, bonus=True,
                     emitted=[5, 6], events=[Event(D, FWD if i else PRE, t, t + 10, [1]),
                                             Event(T, "network", t + 10, t + 10 + 30 * (i + 1)),
                                             Event(T, VER if i else PRE, t + 10 + 30 * (i + 1), t + 100, [1, 5]),
                                             Event(T, "sample", t + 100, t + 104)])
    trace = Trace(config=RunConfig(target_url="http://127.0.0.1:8000"), rounds=[rnd(0, 0), rnd(1, 104)],
                  prompt_ids=[1], output_ids=[5, 6, 5, 6], wall_ms=208.0).finish()
    model = from_trace(trace)
    assert model.network_ms == pytest.approx((30 + 60) / 2)
    assert model.overhead_ms == pytest.approx(4.0)  # the samples only: the network is not bookkeeping
