"""The live run's session state and the settings that feed it.

``LiveState`` is one live run (a ``Race``: the speculative run, then the target alone and
the comparison; whether it is in the history yet), kept in ``st.session_state`` with the
run history and the measured baselines. Beside it: the control widgets' seeding, their
values read into a ``RunConfig`` and checked the way the engine would check them, and
the callbacks of the buttons and example pills.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from specviz import BadInput, ModelPair, RunConfig, Trace
from specviz.compare import Comparison
from specviz.draft_head import SIZES
from specviz.race import Race
from specviz.ui.chrome import DEFAULTS, EXAMPLES
from specviz.ui.pair import pair_key
from specviz.validate import check, encode_prompt


def example_of(prompt: str) -> str:
    """The name of the example prompt this is, or "custom"."""
    for name, text in EXAMPLES.items():
        if prompt.strip() == text:
            return name
    return "custom"


@dataclass
class LiveState:
    """One live run (a ``Race``: speculative, then the target alone) and what the page
    needs to redraw it."""

    race: Race | None = None
    sig: tuple = ()
    example: str = "custom"
    playing: str | None = None  # "run" | "autoplay" while the loop should keep going
    stopped: bool = False
    recorded: bool = False
    run_no: int | None = None
    error: str | None = None

    @property
    def trace(self) -> Trace | None:
        return self.race.sd.trace if self.race is not None else None

    @property
    def with_race(self) -> bool:
        return self.race is not None and self.race.against_target

    @property
    def sd_done(self) -> bool:
        return self.race is not None and self.race.sd.done

    @property
    def ar(self) -> Trace | None:
        """The target-alone run: the finished baseline, or the one being measured."""
        if self.race is None:
            return None
        if self.race.baseline is not None:
            return self.race.baseline.trace
        return self.race.ar.trace if self.race.ar is not None else None

    @property
    def comparison(self) -> Comparison | None:
        return self.race.comparison if self.race is not None else None

    @property
    def finished(self) -> bool:
        return self.race is not None and self.race.done and self.recorded


def live_state() -> LiveState:
    ss = st.session_state
    if "live" not in ss:
        ss["live"] = LiveState()
    ss.setdefault("history", [])
    ss.setdefault("baselines", {})
    return ss["live"]


def init_controls() -> None:
    """Seed the control widgets' values once per session."""
    for k, v in DEFAULTS.items():
        st.session_state.setdefault(k, v)


def read_config() -> RunConfig:
    ss = st.session_state
    return RunConfig(
        prompt=ss.get("prompt") or "",
        gamma=ss.get("gamma", DEFAULTS["gamma"]),
        temperature=float(ss.get("temperature", 0.0)),
        top_k=0,
        top_p=float(ss.get("top_p", 1.0)),
        seed=ss.get("seed", 0),
        max_new_tokens=ss.get("max_new_tokens", DEFAULTS["max_new_tokens"]),
        draft_vocab=ss.get("draft_vocab", 0),
        chat=True,
    )


def signature(cfg: RunConfig) -> tuple:
    return (pair_key(), cfg.prompt, cfg.gamma, cfg.temperature, cfg.top_p, cfg.max_new_tokens, cfg.seed,
            cfg.draft_vocab)


SAMPLING_FIELDS = frozenset({"temperature", "top_p", "top_k", "seed"})


def field_of(exc: BadInput) -> str:
    """Which widget group a BadInput is about: prompt, gamma, max_new_tokens, draft_vocab,
    sampling, general."""
    if exc.field in ("prompt", "gamma", "max_new_tokens", "draft_vocab"):
        return exc.field
    return "sampling" if exc.field in SAMPLING_FIELDS else "general"


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:]


def check_inputs(pair: ModelPair, cfg: RunConfig) -> dict[str, str]:
    """{field: message} for the first setting the engine would refuse (empty when all is
    well), from the same ``check`` the engine runs; it builds no run."""
    try:
        check(pair, cfg)
    except BadInput as exc:
        return {field_of(exc): _sentence(str(exc))}
    except Exception as exc:  # never a traceback on the page
        return {"general": f"These settings cannot run: {type(exc).__name__}: {exc}"}
    return {}


def context_note(pair: ModelPair, cfg: RunConfig) -> str | None:
    """A warning when fewer new tokens fit in the context than asked for."""
    if not cfg.prompt.strip():
        return None
    n = len(encode_prompt(pair.tokenizer, cfg.prompt, cfg.chat))
    room = pair.context_length - n
    if 0 < room < cfg.max_new_tokens:  # room <= 0 is the prompt's own error
        return f"Only {room} new tokens fit in the models' {pair.context_length}-token context after this prompt."
    return None


def draft_head_choices(pair: ModelPair) -> list[int]:
    """0 (the full head) and the FR-Spec cuts smaller than the draft's vocabulary; for a
    small vocabulary (the tiny pair), a quarter and a half of it."""
    vocab = pair.draft_vocab_size
    cuts = [n for n in SIZES if n < vocab] or [vocab // 4, vocab // 2]
    return [0, *cuts]


def draft_head_label(n: int) -> str:
    if not n:
        return "full vocabulary"
    return f"top {n // 1024}k tokens (FR-Spec)" if n % 1024 == 0 else f"top {n} tokens (FR-Spec)"


def set_cmd(cmd: str) -> None:
    st.session_state["_cmd"] = cmd


def pick_example() -> None:
    """Callback of the example pills: fill the prompt, then clear the pick (pills act as buttons)."""
    ss = st.session_state
    name = ss.get("example")
    if name in EXAMPLES:
        ss["prompt"] = EXAMPLES[name]
    ss["example"] = None
