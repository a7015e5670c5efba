"""One place that says which runs are allowed, for the library, the CLI and the app.

``check_settings(config)`` needs no model: the CLI calls it before a minute of model
loading. ``check(pair, config)`` adds what needs the pair (the prompt's length in its
tokenizer, the context, the draft head) and returns the prompt's token ids. Both are
pure: they build no run and touch no model weights. Every refusal is a ``BadInput``
naming the field at fault, so a UI can show it next to the right widget.
"""

from __future__ import annotations

from specviz.record.errors import BadInput
from specviz.record.limits import (
    DRAFTER_NAMES,
    MAX_GAMMA,
    MAX_NEW_TOKENS,
    MODES,
    POLICY_NAMES,
    check_quant,
    check_sampling,
)
from specviz.record.run_config import RunConfig


def _whole(value, low: int, high: int | None = None) -> bool:
    """An int (not a bool) in [low, high]."""
    return (
        isinstance(value, int) and not isinstance(value, bool) and value >= low
        and (high is None or value <= high)
    )


def check_settings(config: RunConfig) -> None:
    """Raise BadInput for the first setting outside what the engine accepts."""
    if config.mode not in MODES:
        raise BadInput(f"mode must be one of {', '.join(MODES)}; got {config.mode!r}", "mode")
    if not isinstance(config.prompt, str) or not config.prompt.strip():
        raise BadInput("the prompt is empty: type something for the models to continue", "prompt")
    if not _whole(config.gamma, 1, MAX_GAMMA):
        raise BadInput(
            f"gamma (draft length) must be a whole number from 1 to {MAX_GAMMA}; got {config.gamma!r}", "gamma"
        )
    if not _whole(config.max_new_tokens, 1, MAX_NEW_TOKENS):
        raise BadInput(
            f"max new tokens must be from 1 to {MAX_NEW_TOKENS}; got {config.max_new_tokens!r}", "max_new_tokens"
        )
    check_sampling(config.temperature, config.top_k, config.top_p)
    if not _whole(config.seed, 0):
        raise BadInput(f"seed must be a whole number >= 0; got {config.seed!r}", "seed")
    if not isinstance(config.stop, (list, tuple)) or any(not isinstance(s, str) or not s for s in config.stop):
        raise BadInput("stop strings must be non-empty text", "stop")
    if config.drafter not in DRAFTER_NAMES:
        raise BadInput(f"drafter must be one of {', '.join(DRAFTER_NAMES)}; got {config.drafter!r}", "drafter")
    if config.policy not in POLICY_NAMES:
        raise BadInput(
            f"draft-length policy must be one of {', '.join(POLICY_NAMES)}; got {config.policy!r}", "policy"
        )
    if not _whole(config.draft_vocab, 0):
        raise BadInput(
            f"draft vocabulary must be a whole number >= 0 (0 = the full head); got {config.draft_vocab!r}",
            "draft_vocab",
        )
    if config.draft_vocab and config.drafter != "model":
        raise BadInput("a cut draft vocabulary needs the model drafter (an n-gram lookup has no head)",
                       "draft_vocab")
    check_quant(config.draft_quant)
    if config.draft_quant != "none" and config.drafter != "model":
        raise BadInput("an int8 draft needs the model drafter (an n-gram lookup has no weights)", "draft_quant")


def check_remote(config: RunConfig) -> None:
    """What a remote target (specviz/models/remote.py) allows: greedy runs of the model drafter's kind.
    A server returns top-k log-probabilities, not the whole distribution p that
    speculative sampling needs."""
    if config.temperature != 0:
        raise BadInput("a remote target is greedy only: a server returns its top log-probabilities, not the whole "
                       "distribution that speculative sampling needs; use temperature 0", "temperature")


def encode_prompt(tokenizer, prompt: str, chat: bool) -> list[int]:
    """Token ids of the prompt, through the chat template where the model has one."""
    if chat and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        return tokenizer.encode(text, add_special_tokens=False)
    return tokenizer.encode(prompt)


def check(pair, config: RunConfig) -> list[int]:
    """Everything ``check_settings`` checks, plus what needs the pair; returns the
    prompt's token ids. ``pair`` is a ModelPair (its tokenizer, context and vocabulary)."""
    check_settings(config)
    if getattr(pair, "remote", None) is not None:
        check_remote(config)
    prompt_ids = encode_prompt(pair.tokenizer, config.prompt, config.chat)
    if len(prompt_ids) >= pair.context_length:
        raise BadInput(
            f"the prompt is {len(prompt_ids)} tokens, longer than the models' context of "
            f"{pair.context_length} tokens: shorten it",
            "prompt",
        )
    if config.draft_vocab and config.mode == "speculative":
        vocab = pair.draft_vocab_size
        if config.draft_vocab >= vocab:
            raise BadInput(
                f"draft vocabulary {config.draft_vocab} is not smaller than the draft's {vocab} tokens: "
                "use 0 for the full head", "draft_vocab",
            )
        pair.token_ranks()  # raises BadInput when no frequency ranking fits this tokenizer
    if config.mode == "speculative":
        check_quant(config.draft_quant, pair.device)
    return prompt_ids
