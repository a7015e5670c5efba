"""Greedy speculative decoding reproduces the target's own greedy output, token for
token (fp32 tiny pair), and the engine keeps its invariants while doing it:

* after every round the target's cache holds exactly ids[:-1] (record and KV
  tensors agree) and the draft's cache holds a prefix of ids;
* no round drafts past the token budget, so no cache ever holds a position the
  output could not reach;
* EOS, stop strings, the token budget and the context end the run where they
  should, with nothing emitted after them.
"""

from __future__ import annotations

import string

import pytest
from helpers import int8_needs_cpu, make_config, recording_kv, run_ar, run_sd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specviz.engine.drafters
from specviz import autoregressive, speculative
from specviz.engine.drafters import ModelDrafter

pytestmark = pytest.mark.usefixtures("single_thread")

PRINTABLE = "".join(chr(c) for c in range(32, 127)) + "\n"
prompts = st.text(alphabet=PRINTABLE, min_size=1, max_size=60).filter(lambda s: s.strip())


# --- helpers ------------------------------------------------------------------------


def check_round(rnd, ids_before, left, greedy=True):
    """Structural facts of one round, given the sequence and budget it started from."""
    n = len(rnd.proposed)
    assert 0 <= rnd.gamma <= max(left - 1, 0), "the round may draft at most left-1 tokens"
    assert n <= rnd.gamma
    assert 0 <= rnd.accepted <= n
    assert rnd.rejected == rnd.proposed[rnd.accepted:]
    assert rnd.bonus == (n > 0 and rnd.accepted == n)
    assert len(rnd.target_probs) == len(rnd.draft_probs) == n == len(rnd.proposed_text)
    assert len(rnd.margin) == rnd.accepted + 1
    full = rnd.proposed[: rnd.accepted] + [rnd.correction]
    assert 1 <= len(rnd.emitted) <= len(full)
    assert rnd.emitted == full[: len(rnd.emitted)], "emitted must be a prefix of accepted + correction"
    verify = [e for e in rnd.events if e.lane == "target" and e.is_forward]
    assert len(verify) == 1, "exactly one target pass per round"
    if rnd.index == 0:  # the first pass reads the whole prompt and verifies in the same forward
        assert verify[0].kind == "prefill"
        assert verify[0].tokens == ids_before + rnd.proposed
    else:
        assert verify[0].kind in ("verify_forward", "target_forward")
        assert verify[0].tokens == [ids_before[-1]] + rnd.proposed, "the verify pass feeds the pending token and the draft"
    assert all(0.0 <= x <= 1.0 for x in rnd.target_probs + rnd.draft_probs)
    if greedy:
        assert all(x > 0.0 for x in rnd.draft_probs), "a greedy draft proposes its own argmax"


def drive(pair, dec, rec):
    """Run ``dec`` to the end, checking the cache and round invariants after every round."""
    trace = dec.trace
    cfg = trace.config
    prompt = list(trace.prompt_ids)
    ids_before = list(prompt)
    rec.mark()  # the KVModels are created on the first next()
    for rnd in dec:
        left = min(cfg.max_new_tokens - (len(ids_before) - len(prompt)), pair.context_length - len(ids_before))
        check_round(rnd, ids_before, left, greedy=cfg.temperature == 0)
        ids = prompt + trace.output_ids
        assert ids == ids_before + rnd.emitted
        target = rec.target(pair)
        assert target.tokens == ids[:-1], f"round {rnd.index}: target cache record is not ids[:-1]"
        assert target.cache_len == len(target.tokens), f"round {rnd.index}: KV length != record length"
        draft = rec.draft(pair)
        if cfg.mode == "speculative" and cfg.drafter == "model":
            assert draft is not None
            assert draft.tokens == ids[: len(draft.tokens)], f"round {rnd.index}: draft cache is not a prefix of ids"
            assert draft.cache_len == len(draft.tokens)
        else:
            assert draft is None, "no draft model may run here"
        ids_before = ids
    # nothing was ever computed past the last position the output could reach
    ceiling = min(len(prompt) + cfg.max_new_tokens, pair.context_length) - 1
    assert rec.current, "the run created no KVModel: the recorder is not in place"
    for kv in rec.current:
        assert rec.peak[id(kv)] <= ceiling, "a cache grew past the token budget"
    assert dec.done
    assert trace.summary, "the trace is summarised when the run ends"
    return trace


def checked(pair, mode, **overrides):
    make = speculative if mode == "speculative" else autoregressive
    with recording_kv() as rec:
        return drive(pair, make(pair, make_config(**overrides)), rec)


# --- exactness ----------------------------------------------------------------------


@pytest.mark.slow
@settings(
    max_examples=200, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    prompt=prompts,
    gamma=st.integers(1, 12),
    max_new=st.integers(1, 40),
    drafter=st.sampled_from(["model", "ngram"]),
    policy=st.sampled_from(["constant", "heuristic", "confidence"]),
    confidence=st.sampled_from([0.05, 0.3, 0.6, 0.95]),
    chat=st.booleans(),
)
def test_greedy_speculative_equals_autoregressive(tiny_pair, prompt, gamma, max_new, drafter, policy, confidence,
                                                  chat):
    common = dict(prompt=prompt, max_new_tokens=max_new, chat=chat)
    ar = checked(tiny_pair, "autoregressive", **common)
    sd = checked(tiny_pair, "speculative", gamma=gamma, drafter=drafter, policy=policy, confidence=confidence,
                 **common)
    assert sd.output_ids == ar.output_ids
    assert sd.output_text == ar.output_text
    assert sd.stop_reason == ar.stop_reason
    assert sum(len(r.emitted) for r in sd.rounds) == len(sd.output_ids)
    assert len(ar.rounds) == len(ar.output_ids), "autoregressive: one token per round"
    assert all(r.gamma == 0 and not r.proposed for r in ar.rounds)


@pytest.mark.parametrize("drafter", ["model", "ngram"])
@pytest.mark.parametrize("prompt", ["Hello world", "abcabcabcabc", "def f(x):\n    return x"])
def test_exact_over_a_long_run(tiny_pair, drafter, prompt):
    ar = checked(tiny_pair, "autoregressive", prompt=prompt, max_new_tokens=150)
    sd = checked(tiny_pair, "speculative", prompt=prompt, max_new_tokens=150, gamma=5, drafter=drafter)
    assert sd.output_ids == ar.output_ids
    if drafter == "model":
        # the pair is built so the draft agrees often but not always
        assert 0.0 < sd.summary["acceptance_rate"] < 1.0
        assert len(sd.rounds) < len(ar.rounds)


def test_heuristic_policy_follows_its_schedule(tiny_pair):
    sd = checked(tiny_pair, "speculative", prompt="The quick brown fox", max_new_tokens=120, gamma=2, policy="heuristic")
    state, produced = 2, 0
    prompt_len = len(sd.prompt_ids)
    grew = shrank = False
    for i, rnd in enumerate(sd.rounds):
        if i:
            prev = sd.rounds[i - 1]
            if prev.proposed:
                full = prev.accepted == len(prev.proposed)
                new_state = min(32, state + 2) if full else max(1, state - 1)
                grew |= new_state > state
                shrank |= new_state < state
                state = new_state
        left = min(120 - produced, 256 - prompt_len - produced)
        assert rnd.gamma == min(state, left - 1), f"round {i}"
        produced += len(rnd.emitted)
    assert grew and shrank, "the run should exercise both directions of the schedule"


@pytest.mark.parametrize("confidence", [0.2, 0.3, 0.5])
@pytest.mark.parametrize("variant", [dict(), dict(draft_vocab=24), dict(draft_quant="int8")])
def test_confidence_policy_stops_right_after_the_first_unsure_token(tiny_pair, confidence, variant):
    """Up to γ tokens; the draft stops right after a proposal whose q is below τ (and says so),
    never before; the output is still the target's own."""
    int8_needs_cpu(tiny_pair, variant.get("draft_quant", "none"))
    prompt = "The quick brown fox"
    sd = run_sd(tiny_pair, prompt=prompt, max_new_tokens=60, gamma=8, policy="confidence", confidence=confidence,
                **variant)
    assert sd.output_ids == target_own(tiny_pair, prompt, 60)
    stopped = 0
    for rnd in sd.rounds:
        q = rnd.draft_probs
        assert all(x >= confidence for x in q[:-1]), "the draft went on past a token below τ"
        if rnd.draft_stop:
            stopped += 1
            assert rnd.draft_stop == "confidence" and q[-1] < confidence and len(rnd.proposed) < rnd.gamma
        elif rnd.proposed and rnd.proposed[-1] not in sd.eos_ids:
            assert len(rnd.proposed) == rnd.gamma, "a round that did not stop early drafts γ"
    assert stopped, "no round stopped early: the test would prove nothing"


# --- the draft variants: a cut head (FR-Spec) and an int8 draft ------------------------------------

_AR: dict[tuple[str, int], list[int]] = {}


def target_own(pair, prompt: str, n: int = 40) -> list[int]:
    """The target's own greedy n tokens for ``prompt`` (computed once per prompt and length)."""
    if (prompt, n) not in _AR:
        _AR[prompt, n] = run_ar(pair, prompt=prompt, max_new_tokens=n).output_ids
    return _AR[prompt, n]


VARIANT_PROMPTS = ["Hello world", "The quick brown fox jumps", "1, 2, 3, 4"]
VARIANTS = (
    # the cut head of n ids: every n, gamma and prompt (tests/test_draft_head.py covers the rest)
    [(dict(draft_vocab=n), g, p) for n in (6, 12, 24, 60) for g in (1, 3, 6) for p in VARIANT_PROMPTS]
    # the int8 draft, with the full head and a cut one (tests/test_quant.py covers the rest)
    + [(dict(draft_vocab=n, draft_quant="int8"), g, p) for n in (0, 24) for g in (1, 4) for p in VARIANT_PROMPTS[:2]]
)


@pytest.mark.parametrize("variant, gamma, prompt", VARIANTS,
                         ids=[f"{'-'.join(f'{k}={v}' for k, v in d.items())}-g{g}-{p[:5]}" for d, g, p in VARIANTS])
def test_greedy_output_is_the_targets_own_for_every_draft_variant(tiny_pair, variant, gamma, prompt):
    int8_needs_cpu(tiny_pair, variant.get("draft_quant", "none"))
    sd = run_sd(tiny_pair, prompt=prompt, gamma=gamma, max_new_tokens=40, **variant)
    assert sd.output_ids == target_own(tiny_pair, prompt)
    quant, n = variant.get("draft_quant", "none"), variant["draft_vocab"]
    assert sd.config.draft_vocab == n and sd.config.draft_quant == quant
    proposed = [t for r in sd.rounds for t in r.proposed]
    assert proposed, "the draft proposed nothing: the test would prove nothing"
    if n:
        kept = set(tiny_pair.cut_head(n, quant).ids.tolist())
        assert set(proposed) <= kept, "the cut draft proposed an id outside its head"


# --- edges of the draft length ----------------------------------------------------------


@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_gamma_one(tiny_pair, drafter):
    ar = run_ar(tiny_pair, prompt="abcabcabc", max_new_tokens=25)
    sd = checked(tiny_pair, "speculative", prompt="abcabcabc", max_new_tokens=25, gamma=1, drafter=drafter)
    assert sd.output_ids == ar.output_ids
    assert len(sd.output_ids) == 25
    assert all(len(r.proposed) <= 1 and len(r.emitted) <= 2 for r in sd.rounds)
    assert sd.stop_reason == "max_new_tokens"


@pytest.mark.parametrize("max_new", [1, 2, 3])
@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_gamma_larger_than_tokens_left(tiny_pair, max_new, drafter, kv_recorder):
    dec = speculative(tiny_pair, make_config(prompt="abcabcabc", gamma=32, max_new_tokens=max_new, drafter=drafter))
    sd = drive(tiny_pair, dec, kv_recorder)
    ar = run_ar(tiny_pair, prompt="abcabcabc", max_new_tokens=max_new)
    assert len(sd.output_ids) == max_new
    assert sd.output_ids == ar.output_ids
    assert sd.stop_reason == "max_new_tokens"
    assert sd.rounds[0].gamma == max_new - 1, "gamma is cut to the budget"
    prompt_len = len(sd.prompt_ids)
    for kv in kv_recorder.current:
        assert kv_recorder.peak[id(kv)] <= prompt_len + max_new - 1


# --- EOS ----------------------------------------------------------------------------


def first_fresh_mid_block_token(trace):
    """(round index, position, token): an accepted draft token, not the block's last
    accepted one, that neither the output nor any proposal contained before it."""
    seen: set[int] = set()
    for rnd in trace.rounds:
        for j in range(rnd.accepted - 1):
            t = rnd.proposed[j]
            if t not in seen and t not in rnd.proposed[:j] and t not in trace.prompt_ids:
                return rnd.index, j, t
        seen.update(rnd.proposed)
        seen.update(rnd.emitted)
    return None


def truncate_at(ids, eos):
    return ids[: ids.index(eos) + 1] if eos in ids else list(ids)


def with_extra_eos(pair, make, config, eos):
    dec = make(pair, config)
    dec.eos.add(eos)  # the generator has not started: every round sees the new set
    return dec


def test_eos_accepted_inside_a_draft_block(tiny_pair, kv_recorder):
    """An EOS that the draft proposes mid-block and the target accepts: the draft stops
    at it, the round emits up to it and not the bonus token after it, and the output is
    the target's own output cut at the same EOS."""
    kw = dict(prompt="Hello world", gamma=4, max_new_tokens=64)
    base = run_sd(tiny_pair, **kw)
    found = first_fresh_mid_block_token(base)
    assert found is not None, "the reference run has no usable mid-block token"
    index, j, eos = found
    original = base.rounds[index]

    dec = with_extra_eos(tiny_pair, speculative, make_config(**kw), eos)
    sd = drive(tiny_pair, dec, kv_recorder)
    ar = autoregressive(tiny_pair, make_config(**kw))
    ar.eos.add(eos)
    ar = ar.run()

    assert sd.stop_reason == "eos" == ar.stop_reason
    assert sd.output_ids == ar.output_ids == truncate_at(base.output_ids, eos)
    assert sd.output_ids[-1] == eos and eos not in sd.output_ids[:-1]
    # the run is the reference run up to the ending round
    assert len(sd.rounds) == index + 1
    for a, b in zip(sd.rounds[:index], base.rounds[:index]):
        assert (a.proposed, a.accepted, a.emitted) == (b.proposed, b.accepted, b.emitted)
    last = sd.rounds[-1]
    assert last.proposed == original.proposed[: j + 1], "the draft stops proposing after an EOS"
    assert last.accepted == j + 1
    assert last.emitted == last.proposed, "nothing after the EOS is emitted (not the bonus)"
    assert last.emitted[-1] == eos
    assert sd.summary["new_tokens"] == len(sd.output_ids)


def test_eos_inside_a_block_when_the_drafter_runs_past_it(tiny_pair, kv_recorder, monkeypatch):
    """The verifier cuts at EOS on its own: with a drafter that ignores stop ids, the
    target accepts tokens after the EOS, and none of them may reach the output."""

    class Unstoppable(ModelDrafter):
        def propose(self, ids, gamma, stop_ids, stop_after=None):
            return super().propose(ids, gamma, set())

    kw = dict(prompt="Hello world", gamma=4, max_new_tokens=64)
    base = run_sd(tiny_pair, **kw)
    index, j, eos = first_fresh_mid_block_token(base)
    original = base.rounds[index]

    monkeypatch.setitem(specviz.engine.drafters.DRAFTERS, "model", Unstoppable)
    sd = drive(tiny_pair, with_extra_eos(tiny_pair, speculative, make_config(**kw), eos), kv_recorder)

    assert sd.stop_reason == "eos"
    assert sd.output_ids == truncate_at(base.output_ids, eos)
    last = sd.rounds[-1]
    assert len(sd.rounds) == index + 1
    assert last.proposed == original.proposed and last.accepted == original.accepted
    assert last.accepted > j + 1, "the target accepted tokens after the EOS"
    assert last.emitted == original.proposed[: j + 1]


@pytest.mark.parametrize("drafter", ["model", "ngram"])
@pytest.mark.parametrize("position", [0, 1, 4, 9, 17, 30])
def test_eos_anywhere_truncates_exactly(tiny_pair, drafter, position):
    """Any token of the target's output declared EOS: the speculative output is the
    target's output cut just after its first occurrence (whether the EOS arrives as an
    accepted draft token, a correction or a bonus)."""
    prompt = "abcabcabc"
    ref = run_ar(tiny_pair, prompt=prompt, max_new_tokens=40).output_ids
    eos = ref[position]
    with recording_kv() as rec:
        sd = drive(tiny_pair, with_extra_eos(tiny_pair, speculative, make_config(prompt=prompt, max_new_tokens=40, gamma=6, drafter=drafter), eos), rec)
    expected = truncate_at(ref, eos)
    assert sd.output_ids == expected
    assert sd.stop_reason == "eos"
    assert sd.rounds[-1].emitted[-1] == eos
    assert all(eos not in r.emitted for r in sd.rounds[:-1])


# --- stop strings, budget and context ---------------------------------------------------


@pytest.mark.parametrize("start,length", [(0, 1), (3, 2), (10, 3), (21, 4), (30, 6)])
@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_stop_string(tiny_pair, start, length, drafter):
    prompt = "The quick brown fox"
    ref = run_ar(tiny_pair, prompt=prompt, max_new_tokens=60)
    assert len(ref.output_text) == len(ref.output_ids) == 60, "one character per token"
    stop = ref.output_text[start : start + length]
    end = ref.output_text.index(stop) + len(stop)  # the first occurrence completes it
    ar = run_ar(tiny_pair, prompt=prompt, max_new_tokens=60, stop=[stop])
    sd = checked(tiny_pair, "speculative", prompt=prompt, max_new_tokens=60, stop=[stop], gamma=6, drafter=drafter)
    for t in (ar, sd):
        assert t.stop_reason == "stop_string"
        assert t.output_text == ref.output_text[:end]
        assert t.output_ids == ref.output_ids[:end]
        assert t.output_text.endswith(stop) and t.output_text.count(stop) == 1


def test_stop_string_among_several_and_absent(tiny_pair):
    prompt = "The quick brown fox"
    ref = run_ar(tiny_pair, prompt=prompt, max_new_tokens=60)
    text = ref.output_text
    early, late = text[20:23], text[5:8]
    cut = min(text.index(early) + 3, text.index(late) + 3)
    sd = run_sd(tiny_pair, prompt=prompt, max_new_tokens=60, stop=["\x7fnever", early, late])
    assert sd.output_text == text[:cut] and sd.stop_reason == "stop_string"
    none = run_sd(tiny_pair, prompt=prompt, max_new_tokens=60, stop=["\x7fnever"])
    assert none.output_ids == ref.output_ids and none.stop_reason == "max_new_tokens"


def test_stop_string_completed_by_the_last_budget_token(tiny_pair):
    prompt = "The quick brown fox"
    text = run_ar(tiny_pair, prompt=prompt, max_new_tokens=60).output_text
    # the first n >= 10 where the two characters ending at n occur there first
    n = next(n for n in range(10, 61) if text.index(text[n - 2 : n]) == n - 2)
    sd = run_sd(tiny_pair, prompt=prompt, max_new_tokens=n, stop=[text[n - 2 : n]])
    assert sd.output_text == text[:n]
    assert sd.stop_reason == "stop_string", "the stop string, not the budget, is the reason"


@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_max_new_tokens_stop(tiny_pair, drafter):
    for n in (1, 7, 64):
        sd = run_sd(tiny_pair, prompt="Hello world", max_new_tokens=n, drafter=drafter)
        assert len(sd.output_ids) == n and sd.stop_reason == "max_new_tokens"
        assert sd.summary["new_tokens"] == n


@pytest.mark.parametrize("mode", ["speculative", "autoregressive"])
def test_context_stop(tiny_pair, mode):
    ctx = tiny_pair.context_length
    # chat=False: the tiny tokenizer gives one id per character
    prompt = (string.ascii_letters * 10)[: ctx - 9]
    t = checked(tiny_pair, mode, prompt=prompt, chat=False, max_new_tokens=64, gamma=6)
    assert len(t.prompt_ids) == ctx - 9
    assert len(t.output_ids) == 9 and len(t.prompt_ids) + len(t.output_ids) == ctx
    assert t.stop_reason == "context"


def test_prompt_one_short_of_the_context_gives_one_token(tiny_pair):
    ctx = tiny_pair.context_length
    prompt = (string.ascii_letters * 10)[: ctx - 1]
    t = checked(tiny_pair, "speculative", prompt=prompt, chat=False, max_new_tokens=64, gamma=4)
    assert len(t.output_ids) == 1 and t.stop_reason == "context"
    assert t.rounds[0].gamma == 0 and t.rounds[0].proposed == []
