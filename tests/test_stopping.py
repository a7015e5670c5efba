"""The one stopping rule (specviz.record.stopping.cut) the engine, PEARL-for-real and the replays share."""

from specviz.record.stopping import cut


def test_eos_is_kept_and_nothing_after_it():
    assert cut([5, 9, 6], 0, 10, 10, {9}) == ([5, 9], "eos")


def test_a_stop_string_cuts_after_an_eos_cut():
    assert cut([5, 6, 7], 0, 10, 10, set(), lambda toks: 2) == ([5, 6], "stop_string")
    assert cut([5, 6], 0, 10, 10, set(), lambda toks: None) == ([5, 6], None)


def test_the_budget_and_the_context():
    assert cut([1, 2, 3], 8, 10, 10, set()) == ([1, 2], "max_new_tokens")
    assert cut([1, 2, 3], 8, 10, 64, set()) == ([1, 2], "context")
    assert cut([1, 9, 3], 8, 10, 10, {9}) == ([1, 9], "eos")  # the EOS names the stop, not the budget
    assert cut([1], 0, 10, 10, set()) == ([1], None)
