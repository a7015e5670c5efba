"""Shared fixtures for the engine tests: the tiny pair (fp32, CPU), run helpers and
a recorder of the KV-cached models a run creates.

Nothing here may reach a model hub: HF_HUB_OFFLINE is set before anything imports
huggingface_hub.
"""

from __future__ import annotations

import contextlib
import os
import subprocess

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import specviz.engine.decode  # noqa: E402
import specviz.engine.drafters  # noqa: E402
import specviz.models.pair  # noqa: E402
from specviz import RunConfig, autoregressive, load_pair, speculative  # noqa: E402
from specviz.models.kv import KVModel  # noqa: E402


def stop_process(proc, grace_s: float) -> None:
    """End a server the tests started: terminate, wait ``grace_s``, then kill."""
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@pytest.fixture(scope="session")
def tiny_pair():
    """The tiny Qwen2 pair in fp32 on the CPU. Never mutate it in a test."""
    return load_pair("tiny", device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def single_thread():
    """One intra-op thread for a module's tests: on the tiny models it is several times
    faster than two (no thread hand-off per small kernel), above all on a busy machine.
    Restored afterwards, so tests of real models elsewhere keep every core.
    Use it with ``pytestmark = pytest.mark.usefixtures("single_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_config(**overrides) -> RunConfig:
    """A fresh RunConfig (Decoding mutates the one it gets) with greedy defaults."""
    base = dict(
        prompt="Hello world", gamma=4, max_new_tokens=32, temperature=0.0, top_k=0,
        top_p=1.0, seed=0, chat=True, stop=[], drafter="model", policy="constant",
    )
    base.update(overrides)
    return RunConfig(**base)


def run_sd(pair, **overrides):
    return speculative(pair, make_config(**overrides)).run()


def run_ar(pair, **overrides):
    return autoregressive(pair, make_config(**overrides)).run()


class KVRecorder:
    """Every KVModel the engine creates, plus the longest record each ever held."""

    def __init__(self) -> None:
        self.instances: list[KVModel] = []
        self.peak: dict[int, int] = {}
        self.start = 0

    def mark(self) -> None:
        """Forget the KVModels of earlier runs: only later ones count from now on."""
        self.start = len(self.instances)

    @property
    def current(self) -> list[KVModel]:
        return self.instances[self.start:]

    def of(self, model) -> list[KVModel]:
        return [kv for kv in self.current if kv.model is model]

    def target(self, pair) -> KVModel:
        (kv,) = self.of(pair.target)
        return kv

    def draft(self, pair) -> KVModel | None:
        found = self.of(pair.draft)
        assert len(found) <= 1
        return found[0] if found else None


@contextlib.contextmanager
def recording_kv():
    """Patch the engine's KVModel with a subclass that registers its instances and
    tracks the peak cache length (the engine itself runs unchanged). Usable inside
    hypothesis tests, where function-scoped fixtures are not."""
    rec = KVRecorder()

    class Recorded(KVModel):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            rec.instances.append(self)
            rec.peak[id(self)] = 0

        def forward(self, new, keep):
            out = super().forward(new, keep)
            rec.peak[id(self)] = max(rec.peak[id(self)], len(self.tokens), self.cache_len)
            return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(specviz.engine.decode, "KVModel", Recorded)
        mp.setattr(specviz.models.pair, "KVModel", Recorded)  # ModelPair.target_kv
        mp.setattr(specviz.engine.drafters, "KVModel", Recorded)
        yield rec


@pytest.fixture
def kv_recorder():
    with recording_kv() as rec:
        yield rec


@pytest.fixture
def app_tiny_only(monkeypatch):
    """The app on the tiny pair; asking for any other pair (minutes, ~10 GB) fails loudly."""
    from specviz.ui import pair as ui_pair

    real = ui_pair.load_pair

    def guarded(name, **kw):
        assert name == "tiny", f"a test asked for the {name!r} pair"
        return real(name, **kw)

    monkeypatch.setattr(ui_pair, "load_pair", guarded)
    monkeypatch.setenv("SPECVIZ_PAIR", "tiny")
