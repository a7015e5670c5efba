"""Integration tests on the real embedded default pair (Qwen2.5-Coder 0.5B -> 1.5B).

The first run assembles the GGUF parts and converts them into the safetensors
cache (a couple of minutes); later runs load from the cache. fp32 throughout:
exactness is tested where it must hold token for token.
"""

import gc
import json

import pytest

from specviz.cli import commands as cli
from specviz.models.default_parts import DRAFT, TARGET
from specviz.models.pair import cache_dir, load_pair

pytestmark = pytest.mark.default_pair

CODE_PROMPT = "Write a Python function that returns the n-th Fibonacci number."


def test_compare_cli_fp32_identical_and_accepting(tmp_path, capsys):
    out = tmp_path / "compare.json"
    rc = cli.main([
        "compare", "--pair", "default", "--device", "cpu", "--dtype", "float32",
        "--prompt", CODE_PROMPT, "--gamma", "4", "--max-new-tokens", "48",
        "--json", str(out), "--quiet",
    ])
    assert rc == 0, capsys.readouterr().err
    result = json.loads(out.read_text())
    sd, ar = result["speculative"], result["autoregressive"]
    assert result["identical"] is True, result["explanation"]
    assert sd["output_ids"] == ar["output_ids"]
    # the prompt asks for more than 48 tokens of code: the budget, not an EOS, ends the run
    assert len(sd["output_ids"]) == 48 and sd["stop_reason"] == "max_new_tokens"
    assert sd["config"]["dtype"] == "float32"
    assert sd["summary"]["acceptance_rate"] > 0.5
    assert result["speedup"] > 0
    printed = capsys.readouterr().out
    assert "identical" in printed and "True" in printed
    gc.collect()


def test_warm_start_loads_from_cache_without_converting():
    # The test above (or an earlier run) filled the cache.
    for spec in (DRAFT, TARGET):
        folder = cache_dir() / "models" / f"{spec.name}-{spec.sha256[:12]}"
        assert (folder / "model.safetensors").is_file()
        assert (folder / "specviz.json").is_file()
    stages: list[str] = []
    pair = load_pair("default", device="cpu", dtype="bfloat16", progress=lambda m, f: stages.append(m))
    assert not any("Converting" in s or "Assembling" in s for s in stages), stages
    assert pair.dtype == "bfloat16"
    assert pair.tokenizer.eos_token == "<|im_end|>"
    assert len(pair.tokenizer) == 151936
    assert 151645 in pair.eos_ids
    del pair
    gc.collect()
