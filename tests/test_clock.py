"""Honest clocks: display work never lands in a run's timings, and a run knows when
heavy work in another thread (a model load) competed with it. (Other processes' CPU time,
the other kind of contention, is tested in test_busy.py: these tests look at the jobs.)"""

from __future__ import annotations

import statistics
import threading
import time

import pytest
from helpers import make_config, run_sd

import specviz.engine.detokenize
from specviz import speculative
from specviz.engine.detokenize import RunText
from specviz.models import busy

pytestmark = pytest.mark.usefixtures("single_thread")
SLOW_S = 0.05


def jobs(trace) -> list[str]:
    """The heavy jobs of this process a run was marked with (not other processes: the machine is shared)."""
    return [c.label for c in trace.contention if c.cpu_share is None]


def _per_round(trace) -> tuple[float, float]:
    s = trace.summary
    return s["overhead_ms"] / s["rounds"], s["wall_ms"] / s["rounds"]


@pytest.mark.slow
def test_slow_text_work_does_not_move_the_timings(tiny_pair, monkeypatch):
    """Every decode made 50 ms slower: a run's overhead and wall time per round stay
    within noise, because all text work happens off the clock."""
    kw = dict(prompt="Hello world", gamma=4, max_new_tokens=24, stop=["@@never"])
    base = [_per_round(run_sd(tiny_pair, **kw)) for _ in range(3)]

    calls = []
    real_steps, real_decode = specviz.engine.detokenize._steps, tiny_pair.tokenizer.decode

    def slow_steps(*args):
        calls.append(1)
        time.sleep(SLOW_S)
        return real_steps(*args)

    def slow_decode(*args, **kwargs):
        calls.append(1)
        time.sleep(SLOW_S)
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(specviz.engine.detokenize, "_steps", slow_steps)
    monkeypatch.setattr(tiny_pair.tokenizer, "decode", slow_decode)
    slow_wall_start = time.perf_counter()
    slow = [run_sd(tiny_pair, **kw) for _ in range(3)]
    real_s = time.perf_counter() - slow_wall_start
    rounds = sum(t.summary["rounds"] for t in slow)
    assert len(calls) >= 3 * rounds, "the slow text path was not exercised"
    assert real_s > SLOW_S * len(calls) * 0.9, "the sleeps really happened"

    base_ovh = statistics.median(o for o, _ in base)
    slow_ovh = statistics.median(_per_round(t)[0] for t in slow)
    base_wall = statistics.median(w for _, w in base)
    slow_wall = statistics.median(_per_round(t)[1] for t in slow)
    # on the clock, the text work would add >= 150 ms per round; noise is a few ms
    assert slow_ovh - base_ovh < 10, (base_ovh, slow_ovh)
    assert slow_wall - base_wall < 15, (base_wall, slow_wall)
    assert slow[0].output_ids == run_sd(tiny_pair, **kw).output_ids


def test_the_sample_event_holds_only_the_acceptance_rule(tiny_pair, monkeypatch):
    real_steps = specviz.engine.detokenize._steps

    def slow_steps(*args):
        time.sleep(SLOW_S)
        return real_steps(*args)

    monkeypatch.setattr(specviz.engine.detokenize, "_steps", slow_steps)
    trace = run_sd(tiny_pair, prompt="Hello world", gamma=3, max_new_tokens=12)
    samples = [e for e in trace.events if e.kind == "sample"]
    assert samples and max(e.duration_ms for e in samples) < SLOW_S * 1000 / 2


def test_output_text_is_built_incrementally_and_exactly(tiny_pair):
    trace = run_sd(tiny_pair, prompt="Hello world", gamma=4, max_new_tokens=48)
    full = tiny_pair.tokenizer.decode(trace.output_ids, skip_special_tokens=True)
    assert trace.output_text == full == "".join(r.emitted_text for r in trace.rounds)


def test_run_text_holds_back_a_split_character():
    """A character split over two byte-level tokens shows up once, whole, on the second."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    ids = fast.encode("a长b")
    assert len(ids) == 5  # 'a', three bytes of 长, 'b'
    text = RunText(fast, [])
    assert text.pieces(ids) == ["a", "", "", "长", "b"]
    assert text.commit(ids[:2]) == "a"
    assert text.commit(ids[2:]) == "长b" and text.text == "a长b"


def test_stop_strings_are_found_across_rounds(tiny_pair):
    base = run_sd(tiny_pair, prompt="Hello world", gamma=4, max_new_tokens=40)
    stop = base.output_text[9:12]
    cut = run_sd(tiny_pair, prompt="Hello world", gamma=4, max_new_tokens=40, stop=[stop])
    assert cut.stop_reason == "stop_string"
    assert cut.output_text.endswith(stop) and cut.output_text.count(stop) == 1
    assert base.output_text.startswith(cut.output_text)


def test_a_load_in_another_thread_marks_the_run(tiny_pair):
    started, release = threading.Event(), threading.Event()

    def load():
        with busy.heavy("loading the default pair (bfloat16)"):
            started.set()
            release.wait(10)

    worker = threading.Thread(target=load)
    worker.start()
    started.wait(5)
    try:
        trace = run_sd(tiny_pair, prompt="Hello world", gamma=3, max_new_tokens=8)
    finally:
        release.set()
        worker.join()
    assert jobs(trace) == ["loading the default pair (bfloat16)"]


def test_a_quiet_run_is_not_marked_and_own_thread_work_does_not_count(tiny_pair):
    with busy.heavy("this thread's own load"):
        pass
    assert jobs(run_sd(tiny_pair, prompt="Hello world", gamma=3, max_new_tokens=8)) == []


def test_a_load_while_the_run_is_paused_does_not_mark_it(tiny_pair):
    """Between rounds the clock is stopped: heavy work then costs the run nothing."""
    dec = speculative(tiny_pair, make_config(prompt="Hello world", gamma=2, max_new_tokens=12))
    next(dec)

    def load():
        with busy.heavy("a load between rounds"):
            time.sleep(0.05)

    worker = threading.Thread(target=load)
    worker.start()
    worker.join()
    trace = dec.run()
    assert jobs(trace) == []
