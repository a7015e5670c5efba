"""The pair card's state marker (specviz.ui.pair.pair_state, the card's ``data-sv-pair``):
what a browser test waits on instead of the page's script state."""

from __future__ import annotations

import time

from specviz.ui import pair as ui_pair


def _settled(loader: ui_pair.PairLoader, timeout_s: float = 120) -> ui_pair.PairLoader:
    deadline = time.monotonic() + timeout_s
    while not loader.done:
        assert time.monotonic() < deadline, "the loader did not finish"
        time.sleep(0.05)  # polling a background thread the test started
    return loader


def test_the_card_says_loading_then_ready():
    loader = ui_pair.PairLoader("tiny", "float32")
    assert ui_pair.pair_state(loader) == "loading"  # the tiny pair takes longer than this line
    assert "data-sv-pair='loading'" in ui_pair._card_html(loader)
    _settled(loader)
    assert ui_pair.pair_state(loader) == "ready"
    assert "data-sv-pair='ready'" in ui_pair._card_html(loader)


def test_the_card_says_failed_and_unconnected():
    loader = _settled(ui_pair.PairLoader("no-such-pair", "float32"))
    assert loader.error is not None and ui_pair.pair_state(loader) == "failed"
    assert "data-sv-pair='failed'" in ui_pair._card_html(loader)
    assert ui_pair.pair_state(None) == "unconnected"
    assert "data-sv-pair='unconnected'" in ui_pair._card_html(None)
