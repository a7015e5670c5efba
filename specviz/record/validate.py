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
    MAX_TREE_DEPTH,
    MAX_TREE_NODES,
    MAX_TREE_WIDTH,
    MODES,
    POLICY_NAMES,
    check_quant,
    check_sampling,
    tree_size,
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
    if not isinstance(config.compiled, bool):
        raise BadInput(f"compiled is on or off (true or false); got {config.compiled!r}", "compiled")
    if (not isinstance(config.confidence, (int, float)) or isinstance(config.confidence, bool)
            or not 0 <= config.confidence <= 1):
        raise BadInput(f"the confidence threshold must be from 0 to 1; got {config.confidence!r}", "confidence")
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
    check_tree(config)


def check_tree(config: RunConfig) -> None:
    """Raise BadInput for tree settings outside the engine's bounds (specviz/engine/tree.py)."""
    if not _whole(config.tree_nodes, 0, MAX_TREE_NODES):
        raise BadInput(f"tree nodes must be a whole number from 0 (a chain) to {MAX_TREE_NODES}; "
                       f"got {config.tree_nodes!r}", "tree_nodes")
    if not _whole(config.tree_depth, 1, MAX_TREE_DEPTH):
        raise BadInput(f"tree depth must be a whole number from 1 to {MAX_TREE_DEPTH}; got {config.tree_depth!r}",
                       "tree_depth")
    if not _whole(config.tree_width, 1, MAX_TREE_WIDTH):
        raise BadInput(f"tree width must be a whole number from 1 to {MAX_TREE_WIDTH}; got {config.tree_width!r}",
                       "tree_width")
    shape = config.tree_shape
    if not isinstance(shape, (list, tuple)) or any(not _whole(w, 1, MAX_TREE_WIDTH) for w in shape):
        raise BadInput(f"a tree shape is widths per depth, each from 1 to {MAX_TREE_WIDTH} (e.g. 4,2,2,1); "
                       f"got {shape!r}", "tree_shape")
    if len(shape) > MAX_TREE_DEPTH:
        raise BadInput(f"a tree shape is at most {MAX_TREE_DEPTH} deep; got {len(shape)} widths", "tree_shape")
    if tree_size(list(shape)) > MAX_TREE_NODES:
        raise BadInput(f"the tree shape {','.join(map(str, shape))} has {tree_size(list(shape))} nodes, more than "
                       f"the verify pass takes ({MAX_TREE_NODES}): narrow it", "tree_shape")
    if not config.is_tree or config.mode != "speculative":
        return
    if config.drafter != "model":
        raise BadInput("a token tree needs the model drafter (an n-gram lookup proposes one continuation)", "drafter")
    if config.policy == "heuristic" or (config.policy == "confidence" and config.tree_shape):
        raise BadInput("a token tree has a fixed depth: use the constant draft-length policy (or, for a dynamic "
                       "tree, the confidence policy, which widens it only where the draft is unsure)", "policy")
    if config.draft_vocab:
        raise BadInput("a token tree drafts with the full head: use draft vocabulary 0", "draft_vocab")


def check_remote(config: RunConfig) -> None:
    """What a remote target (specviz/models/remote.py) allows: greedy runs of the model drafter's kind.
    A server returns top-k log-probabilities, not the whole distribution p that
    speculative sampling needs."""
    if config.is_tree and config.mode == "speculative":
        raise BadInput("a remote target verifies a chain only: a server takes no tree attention mask; "
                       "use tree nodes 0", "tree_nodes")
    if config.compiled:
        raise BadInput("compiled passes need a local target: a server compiles its own (use compiled off)", "compiled")
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
