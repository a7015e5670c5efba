"""The tiny test pair: built in code from a config and seeded random weights.

A character-level tokenizer (printable ASCII plus newline and three specials) and
two small Qwen2 models. The draft is the target with Gaussian noise added to every
weight, so the two agree often but not always: acceptance lands strictly between
0 and 1. Building the pair takes well under a second and downloads nothing.
"""

from __future__ import annotations

import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIALS = ["<eos>", "<unk>", "<pad>"]
ALPHABET = sorted(set(string.printable) - set("\t\r\x0b\x0c"))
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
CONTEXT = 256


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character; unknown characters map to <unk>."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + ALPHABET)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<eos>", unk_token="<unk>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


# English letters by frequency, then the rest: a built-in ranking for the tiny pair's
# characters, so a cut draft head (FR-Spec) can be tested without shipped data.
FREQUENT = " etaoinshrdlcumwfgypbvkjxqz\nETAOINSHRDLCUMWFGYPBVKJXQZ.,0123456789"


def tiny_token_ranks(tokenizer) -> list[int]:
    """Every id of the tiny tokenizer, most frequent first: specials, then FREQUENT, then the rest."""
    vocab = tokenizer.get_vocab()
    first = [vocab[t] for t in SPECIALS] + [vocab[c] for c in FREQUENT if c in vocab]
    return first + sorted(set(vocab.values()) - set(first))


def tiny_config(vocab_size: int, hidden_size: int = 64) -> Qwen2Config:
    """Two layers, 4 heads of ``hidden_size`` / 4 (vLLM's CPU attention needs heads of 32 or more: 128)."""
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        tie_word_embeddings=False,
        eos_token_id=0,
        pad_token_id=2,
        bos_token_id=None,
    )


def tiny_models(seed: int = 0, noise: float = 0.1,
                hidden_size: int = 64) -> tuple[Qwen2ForCausalLM, Qwen2ForCausalLM]:
    """(draft, target): the target from seeded random weights, the draft a noisy copy.

    Weights are drawn with a larger spread than training init (std 0.3 for the
    output head) so next-token distributions are peaked, as a trained model's are;
    that keeps greedy near-ties rare and acceptance in the interesting range.
    """
    config = tiny_config(len(SPECIALS) + len(ALPHABET), hidden_size)
    gen = torch.Generator().manual_seed(seed)
    target = Qwen2ForCausalLM(config).eval()
    draft = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for name, w in target.named_parameters():
            if name.endswith("norm.weight"):
                continue
            std = 0.3 if ("lm_head" in name or "embed" in name) else 0.08
            w.copy_(torch.randn(w.shape, generator=gen) * std)
        for w_d, w_t in zip(draft.parameters(), target.parameters()):
            w_d.copy_(w_t + torch.randn(w_t.shape, generator=gen) * noise * w_t.std() if w_t.dim() > 1 else w_t)
    return draft, target
