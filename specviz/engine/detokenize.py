"""The text of a run, decoded incrementally and off the engine clock.

A run's token ids are decided on the clock; what they read as is display work. The
tokenizers library's streaming decoder (``DecodeStream``) turns each new id into the
text it adds in O(1), holding back the bytes of a character split across tokens
until the character is whole, so a run never re-decodes its whole output (which
would be O(n^2) over a run). A copy of the stream decodes a round's proposals as
a continuation of the committed output without committing them.

Two streams run side by side: ``shown`` keeps special tokens (the strip marks an
``<|im_end|>``), ``plain`` skips them (the output text, as ``decode(...,
skip_special_tokens=True)`` would give it).
"""

from __future__ import annotations

import copy

from tokenizers.decoders import DecodeStream

PRIME = 4  # prompt ids fed to the streams first, so the first piece decodes in context


def _backend(tokenizer):
    """The Rust tokenizer behind a fast Hugging Face tokenizer."""
    backend = getattr(tokenizer, "_tokenizer", None) or getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise TypeError("specviz needs a fast (tokenizers-backed) tokenizer")
    return backend


def _steps(backend, stream: DecodeStream, ids: list[int]) -> list[str]:
    """Feed ``ids`` to ``stream``; the text each adds ("" while a character is incomplete)."""
    return [stream.step(backend, int(i)) or "" for i in ids]


class RunText:
    """The committed output's text, grown a round at a time."""

    def __init__(self, tokenizer, prompt_ids: list[int]):
        self._backend = _backend(tokenizer)
        prime = list(prompt_ids[-PRIME:])
        self._shown = DecodeStream(ids=prime, skip_special_tokens=False)
        self._plain = DecodeStream(ids=prime, skip_special_tokens=True)
        self.text = ""  # the output so far, special tokens skipped

    def pieces(self, ids: list[int], after: list[int] = ()) -> list[str]:
        """What each of ``ids`` would show, following the committed output and then
        ``after`` (also uncommitted). Nothing is committed."""
        stream = copy.copy(self._shown)
        _steps(self._backend, stream, list(after))
        return _steps(self._backend, stream, ids)

    def plain_pieces(self, ids: list[int]) -> list[str]:
        """The output text each of ``ids`` would add (special tokens add ""). Nothing is committed."""
        return _steps(self._backend, copy.copy(self._plain), ids)

    def alone(self, ids: list[int]) -> list[str]:
        """Each of ``ids`` decoded on its own, special tokens shown (one batched decode, no
        stream: out of context). Nothing is committed."""
        return self._backend.decode_batch([[t] for t in ids], skip_special_tokens=False)

    def commit(self, ids: list[int]) -> str:
        """Append ``ids`` to the output; returns the text they added."""
        _steps(self._backend, self._shown, ids)
        added = "".join(_steps(self._backend, self._plain, ids))
        self.text += added
        return added

    def stop_cut(self, ids: list[int], stops: list[str]) -> int | None:
        """The number of ``ids`` to keep so the output ends just after the first stop
        string it completes, or None when none completes. Looks only at the tail of
        the committed text that a stop string could still straddle, so the cost is
        independent of the output's length."""
        if not stops or not ids:
            return None
        reach = max(len(s) for s in stops)
        text = self.text[-reach:]
        for m, piece in enumerate(self.plain_pieces(ids), start=1):
            text += piece
            if any(s in text for s in stops):
                return m
        return None
