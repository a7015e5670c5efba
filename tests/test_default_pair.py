"""Integration tests on the real embedded default pair (Qwen2.5-Coder 0.5B -> 1.5B).

The first run assembles the GGUF parts and converts them into the bf16 safetensors
cache (a couple of minutes; conftest's default_bf16_folders); later runs load from the cache.
Exactness is tested in fp32, where it must hold token for token, on those bf16 weights cast
to fp32 (no second, fp32 conversion of the GGUFs).
"""

import gc
import json

import pytest

from specviz.cli import commands as cli
from specviz.models.default_parts import DRAFT, TARGET
from specviz.models.pair import cache_dir, dtype_folder, load_pair

pytestmark = pytest.mark.default_pair

CODE_PROMPT = "Write a Python function that returns the n-th Fibonacci number."


def test_compare_cli_fp32_identical_and_accepting(default_bf16_folders, tmp_path, capsys):
    draft, target = default_bf16_folders
    out = tmp_path / "compare.json"
    rc = cli.main([
        "compare", "--draft", str(draft), "--target", str(target), "--device", "cpu", "--dtype", "float32",
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


def test_warm_start_loads_from_cache_without_converting(default_bf16_folders):
    # default_bf16_folders (or an earlier run) filled the cache.
    for spec, made in zip((DRAFT, TARGET), default_bf16_folders, strict=True):
        folder = dtype_folder(cache_dir() / "models" / f"{spec.name}-{spec.sha256[:12]}", "bfloat16")
        assert folder == made
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


@pytest.mark.slow
def test_greedy_tree_fp32_is_the_targets_own_output(default_bf16_folders):
    """A token tree on the real pair (fp32, the bf16 weights cast): the target's own greedy
    output token for token (the chain's is checked by the compare test above)."""
    from specviz import RunConfig, autoregressive, speculative

    draft, target = default_bf16_folders
    pair = load_pair(draft=str(draft), target=str(target), device="cpu", dtype="float32")
    ar = autoregressive(pair, RunConfig(prompt=CODE_PROMPT, max_new_tokens=24), inspect=False).run()
    tree = speculative(pair, RunConfig(prompt=CODE_PROMPT, max_new_tokens=24, tree_nodes=12, tree_depth=4,
                                       tree_width=3), inspect=False).run()
    assert tree.output_ids == ar.output_ids
    assert all(0 < len(r.tree) <= 12 for r in tree.rounds if r.gamma)
    assert tree.summary["mean_acceptance_length"] > 2
    del pair
    gc.collect()
