"""The FR-Spec token ranking asset (assets/token_ranks/, built by tools/build_token_ranks.py).

Fast: reads the shipped files only, no model and no tokenizer loaded. Where the default
pair's converted cache exists, its tokenizer.json is also checked against the ranking
(hash and control-token ids); elsewhere that test skips.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from array import array
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ASSET = ROOT / "assets" / "token_ranks"
VOCAB = 151_936


@pytest.fixture(scope="module")
def meta() -> dict:
    return json.loads((ASSET / "qwen2.5-coder.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def order() -> list[int]:
    data = (ASSET / "qwen2.5-coder.u32").read_bytes()
    ids = array("I")
    assert ids.itemsize == 4
    ids.frombytes(data)
    if sys.byteorder == "big":  # the file is little-endian
        ids.byteswap()
    return ids.tolist()


def test_file_is_a_permutation_of_the_vocabulary(order, meta):
    assert (ASSET / "qwen2.5-coder.u32").stat().st_size == 4 * VOCAB
    assert len(order) == meta["vocab_size"] == VOCAB
    assert sorted(order) == list(range(VOCAB))


def test_metadata(meta):
    assert re.fullmatch(r"[0-9a-f]{64}", meta["tokenizer_sha256"])
    assert meta["generated_by"].startswith("python3 tools/build_token_ranks.py")
    assert re.fullmatch(r"\d+\.\d+\.\d+", meta["python_version"])
    names = [s["name"] for s in meta["sources"]]
    assert names == ["python-stdlib", "wordfreq-en", "wordfreq-zh"]
    for source in meta["sources"]:
        assert source["tokens"] > 0 and 0 < source["weight"] <= 1 and source["version"]
    assert sum(s["weight"] for s in meta["sources"]) == pytest.approx(1, abs=1e-5)
    assert set(meta["coverage"]) == {"8192", "16384", "32768", "65536"}


def test_control_tokens_then_pinned_punctuation_come_first(order, meta):
    special, pinned = meta["special_ids"], meta["pinned_ids"]
    assert len(special) == 20 and {151643, 151644, 151645} <= set(special)  # endoftext, im_start, im_end
    assert order[: len(special)] == special == sorted(special)
    assert order[len(special): len(special) + len(pinned)] == pinned
    assert len(pinned) == len(meta["pinned_text"])


def test_never_seen_ids_end_the_list_in_id_order(order, meta):
    head = len(meta["special_ids"]) + len(meta["pinned_ids"])
    tail = order[head + meta["seen_ids"]:]
    assert tail == sorted(tail)
    assert set(range(151_665, VOCAB)) <= set(tail)  # the unused [PAD] rows of the LM head


def test_coverage_of_recorded_outputs(order, meta):
    """Recompute the recorded coverage from the traces, and hold it to a floor."""
    position = [0] * VOCAB
    for rank, token in enumerate(order):
        position[token] = rank
    outputs = [json.loads(p.read_text(encoding="utf-8"))["output_ids"]
               for p in sorted((ROOT / "assets" / "traces").glob("*.json"))]
    ids = [i for out in outputs for i in out]
    assert ids and meta["coverage_tokens"] == len(ids)
    for n, share in meta["coverage"].items():
        assert share == pytest.approx(sum(position[i] < int(n) for i in ids) / len(ids), abs=1e-4)
    values = [meta["coverage"][n] for n in ("8192", "16384", "32768", "65536")]
    assert values == sorted(values)
    assert meta["coverage"]["32768"] >= 0.9


def test_ranking_matches_the_cached_tokenizer(meta):
    """Only where the default pair's converted cache exists (no model is loaded)."""
    from specviz.models.default_parts import DRAFT
    from specviz.models.pair import cache_dir, dtype_folder

    base = cache_dir() / "models" / f"{DRAFT.name}-{DRAFT.sha256[:12]}"
    found = [f / "tokenizer.json" for f in (base, dtype_folder(base, "bfloat16")) if (f / "tokenizer.json").is_file()]
    if not found:  # the fp32 copy or the bf16 one (the app's bf16 start and the tests write that one)
        pytest.skip("the default pair's converted cache is not on this machine")
    path = found[0]
    data = path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == meta["tokenizer_sha256"]
    added = {t["content"]: t["id"] for t in json.loads(data)["added_tokens"]}
    assert sorted(i for s, i in added.items() if s.startswith("<|")) == meta["special_ids"]
