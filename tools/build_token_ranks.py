"""Build the frequency ranking of token ids used by FR-Spec drafting.

FR-Spec (Zhao et al. 2025, "FR-Spec: Accelerating Large-Vocabulary Language Models
via Frequency-Ranked Speculative Sampling", arXiv:2502.14856) lets the draft model
score only the N most frequent token ids instead of its whole LM head. This script
writes that order for the default pair's tokenizer (Qwen2.5-Coder, 151,936 ids):

    pip install -r requirements-tools.txt
    python3 tools/build_token_ranks.py [--out assets/token_ranks]
    python3 tools/build_token_ranks.py --coverage-only   # after re-recording assets/traces/

Outputs, in ``--out``:

- ``qwen2.5-coder.u32``: every id of the vocabulary once, most frequent first
  (little-endian uint32, no header), so any prefix of length N is a valid top-N set.
- ``qwen2.5-coder.json``: vocab size, sha256 of the tokenizer.json it was made for,
  the sources and weights, and the coverage of the recorded traces' output tokens.

Order: the chat template's control tokens (token strings starting with ``<|``) by id,
then the pinned full-width punctuation (``PINNED``), then the other ids by descending
weighted frequency, ties broken by id; ids never seen (rare byte sequences, the
``[PAD…]`` rows) end the list in id order.

The corpus is offline and reproducible (same Python, same wordfreq, same tokenizer ->
same bytes). Three sources, each normalised to a distribution over ids and then mixed:

- ``python-stdlib`` (weight 1/3): the running interpreter's standard library ``.py``
  files (tests and site-packages skipped), one file per document, each wrapped in a
  Markdown ``python`` fence. Code, docstrings and comments: the Coder model's home ground.
- ``wordfreq-en`` (weight 1/3): wordfreq's 50,000 most frequent English words, each
  weighted by its frequency; encoded with a leading space (3/4 of its weight: the
  usual position in running text) and bare (1/4: sentence and line starts).
- ``wordfreq-zh`` (weight 1/3): the same for Chinese (no spaces in Chinese text, so
  encoded bare only).

Equal thirds: the app's prompts are code, JSON, English prose and Chinese; code alone
(~3 M tokens) would otherwise drown the two word lists, and no source is privileged
without evidence. Word frequencies come from ``get_frequency_dict`` (the packaged table)
rather than ``word_frequency``, which would need jieba to re-tokenise Chinese words.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import io
import json
import platform
import sys
import sysconfig
import tokenize
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere: `specviz` is the repo's package

NAME = "qwen2.5-coder"
COVERAGE_N = (8192, 16384, 32768, 65536)
TOP_WORDS = 50_000
WEIGHTS = {"python-stdlib": 1 / 3, "wordfreq-en": 1 / 3, "wordfreq-zh": 1 / 3}
EN_SPACE_SHARE = 0.75  # share of an English word's weight given to " word" (vs "word")
SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}
# Full-width (CJK) punctuation and typographic quotes/dashes. wordfreq strips punctuation
# and the stdlib has almost no Chinese, so no source can count these; yet every Chinese
# sentence has some. They are pinned right after the control tokens (FR-Spec only asks
# whether an id is in the top N, N >= 8192, so their exact place there does not matter).
PINNED = "，。、：；！？（）“”‘’《》【】…—"


def stdlib_files() -> list[Path]:
    """The standard library's .py files, tests and site-packages left out, in path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [
        p for p in root.rglob("*.py")
        if not SKIP_DIRS.intersection(p.relative_to(root).parts[:-1])
    ]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def read_source(path: Path) -> str:
    """A source file's text, decoded per its coding cookie (PEP 263)."""
    data = path.read_bytes()
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return data.decode("utf-8", errors="replace")


def count_code(tk, vocab: int) -> tuple[np.ndarray, dict]:
    """Token counts over the stdlib, one encoded document per file.

    Each file is wrapped in a Markdown code fence, as an instruct model quotes code
    (two fences a file: enough to rank the fence tokens, nothing else moves)."""
    files = stdlib_files()
    counts = np.zeros(vocab, dtype=np.int64)
    for start in range(0, len(files), 64):  # batches keep memory small; counts are ints
        batch = [f"```python\n{read_source(p)}```\n\n" for p in files[start:start + 64]]
        for enc in tk.encode_batch(batch, add_special_tokens=False):
            counts += np.bincount(np.asarray(enc.ids, dtype=np.int64), minlength=vocab)
    info = {"version": platform.python_version(), "files": len(files),
            "tokens": int(counts.sum())}
    return counts.astype(np.float64), info


def count_words(tk, vocab: int, lang: str) -> tuple[np.ndarray, dict]:
    """Frequency-weighted token mass of wordfreq's top words for ``lang``."""
    import wordfreq

    words = wordfreq.top_n_list(lang, TOP_WORDS)  # most frequent first; fixed order
    freq = wordfreq.get_frequency_dict(lang)
    variants = [(" ", EN_SPACE_SHARE), ("", 1 - EN_SPACE_SHARE)] if lang == "en" else [("", 1.0)]
    ids, weights, n_tokens = [], [], 0
    for prefix, share in variants:
        encodings = tk.encode_batch([prefix + w for w in words], add_special_tokens=False)
        for w, enc in zip(words, encodings):
            ids.extend(enc.ids)
            weights.extend([freq[w] * share] * len(enc.ids))
            n_tokens += len(enc.ids)
    # bincount sums in input order: deterministic for a fixed word list
    mass = np.bincount(np.asarray(ids, dtype=np.int64), weights=np.asarray(weights), minlength=vocab)
    info = {"version": importlib.metadata.version("wordfreq"), "words": len(words),
            "tokens": n_tokens}
    return mass, info


def rank(tk, vocab: int, score: np.ndarray) -> tuple[np.ndarray, list[int], list[int]]:
    """All ids: control tokens (by id), pinned punctuation (in PINNED order), then the
    rest by descending score, ties by id (so never-seen ids end the list in id order)."""
    special = sorted(i for s, i in tk.get_vocab(with_added_tokens=True).items()
                     if s.startswith("<|") and i < vocab)
    pinned = []
    for ch in PINNED:
        ids = tk.encode(ch, add_special_tokens=False).ids
        assert len(ids) == 1, f"{ch!r} is not one token"
        if ids[0] not in special and ids[0] not in pinned:
            pinned.append(ids[0])
    rest = np.setdiff1d(np.arange(vocab), special + pinned)  # sorted by id
    rest = rest[np.lexsort((rest, -score[rest]))]  # primary: -score; secondary: id
    order = np.concatenate([np.asarray(special + pinned, dtype=np.int64), rest])
    assert np.array_equal(np.sort(order), np.arange(vocab))
    return order, special, pinned


def coverage(order: np.ndarray, traces: list[Path]) -> tuple[dict, dict]:
    """Share of the traces' output tokens whose id falls in the top N, pooled and per file."""
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    per_file, pooled = {}, []
    for path in traces:
        ids = np.asarray(json.loads(path.read_text(encoding="utf-8"))["output_ids"], dtype=np.int64)
        pooled.append(ids)
        per_file[path.stem] = {"tokens": int(ids.size),
                               **{str(n): round(float((position[ids] < n).mean()), 4) for n in COVERAGE_N}}
    ids = np.concatenate(pooled)
    total = {str(n): round(float((position[ids] < n).mean()), 4) for n in COVERAGE_N}
    return total, per_file


def coverage_fields(order: np.ndarray) -> dict:
    """The meta fields that describe the ranking's coverage of the shipped traces."""
    total, per_file = coverage(order, sorted((ROOT / "assets" / "traces").glob("*.json")))
    return {"coverage": total, "coverage_by_trace": per_file,
            "coverage_tokens": sum(v["tokens"] for v in per_file.values())}


def refresh_coverage(out: Path) -> None:
    """Recompute the coverage fields of an existing ranking (the order is left as it is)."""
    order = np.frombuffer((out / f"{NAME}.u32").read_bytes(), dtype="<u4").astype(np.int64)
    meta_path = out / f"{NAME}.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8")) | coverage_fields(order)
    meta_path.write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({"out": str(out), "coverage": meta["coverage"]}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="assets/token_ranks", help="output folder")
    parser.add_argument("--coverage-only", action="store_true",
                        help="keep the ranking; recompute only its coverage of the shipped traces")
    args = parser.parse_args()
    if args.coverage_only:
        refresh_coverage(Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out)
        return

    from specviz.models.draft_head import vocab_fingerprint
    from specviz.models.pair import load_tokenizer, materialize

    folder = materialize("default-draft", lambda message, fraction: None)
    tok = load_tokenizer(folder)
    tk = tok.backend_tokenizer  # the fast (Rust) tokenizer: batch encoding
    vocab = int(json.loads((folder / "config.json").read_text())["vocab_size"])
    assert tk.get_vocab_size(with_added_tokens=True) <= vocab

    raw = {"python-stdlib": count_code(tk, vocab), "wordfreq-en": count_words(tk, vocab, "en"),
           "wordfreq-zh": count_words(tk, vocab, "zh")}
    score = np.zeros(vocab)
    for name, (mass, _) in raw.items():  # fixed order: deterministic float sums
        score += WEIGHTS[name] * mass / mass.sum()
    order, special, pinned = rank(tk, vocab, score)

    out = Path(args.out)
    if not out.is_absolute():
        out = ROOT / out
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{NAME}.u32").write_bytes(order.astype("<u4").tobytes())
    meta = {
        "vocab_size": vocab,
        "tokenizer_sha256": hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest(),
        # what the engine matches a ranking to a pair by: the vocabulary itself, not a file's bytes
        "vocab_fingerprint": vocab_fingerprint(tok),
        "format": "little-endian uint32, vocab_size entries, no header; most frequent first",
        "special_ids": special,
        "pinned_ids": pinned,
        "pinned_text": PINNED,
        # ids ranked by count, after the control and pinned ones; the rest were never seen
        "seen_ids": int((score[order[len(special) + len(pinned):]] > 0).sum()),
        "sources": [{"name": name, **info, "weight": round(WEIGHTS[name], 6)}
                    for name, (_, info) in raw.items()],
        "generated_by": "python3 tools/build_token_ranks.py --out " + Path(args.out).as_posix(),
        "python_version": platform.python_version(),
        **coverage_fields(order),
    }
    (out / f"{NAME}.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({"out": str(out), "coverage": meta["coverage"], "coverage_by_trace": meta["coverage_by_trace"]},
                     indent=2))


if __name__ == "__main__":
    main()
