"""Integration tests on the real embedded default pair (Qwen2.5-Coder 0.5B -> 1.5B).

The first run assembles the GGUF parts and converts them into the bf16 safetensors
cache (a couple of minutes; conftest's default_bf16_folders); later runs load from the cache.
Exactness is tested in fp32, where it must hold token for token, on those bf16 weights cast
to fp32 (no second, fp32 conversion of the GGUFs): one fp32 pair for the module, and one
race on it (the CLI's compare), whose two runs are the references of the tree and SSD tests.
"""

import contextlib
import gc
import io
import json

import pytest
from helpers import ssd_simulated

import specviz.models.pair
from specviz import RunConfig, Trace, speculative
from specviz.cli import commands as cli
from specviz.measure.ssd_real import ssd_run, user_budget
from specviz.models.default_parts import DRAFT, TARGET
from specviz.models.pair import cache_dir, dtype_folder, load_pair

pytestmark = pytest.mark.default_pair

CODE_PROMPT = "Write a Python function that returns the n-th Fibonacci number."
NEW_TOKENS = 48


@pytest.fixture(scope="module")
def fp32_pair(default_bf16_folders):
    """The default pair in fp32 (its bf16 cache folders, cast), loaded once for the module, after the
    warm-start test has loaded and dropped the bf16 pair (never both in memory)."""
    draft, target = default_bf16_folders
    pair = load_pair(draft=str(draft), target=str(target), device="cpu", dtype="float32")
    yield pair
    del pair
    gc.collect()


@pytest.fixture(scope="module")
def race(fp32_pair, default_bf16_folders, tmp_path_factory):
    """``specviz compare`` on the code prompt (γ 4, 48 new tokens, fp32), its JSON and what it
    printed. The CLI's loader gets the module's pair, after checking that the CLI asked for
    exactly it: the folders, the CPU, fp32."""
    draft, target = default_bf16_folders
    out = tmp_path_factory.mktemp("compare") / "compare.json"
    asked = []

    def module_pair(pair, d, t, device, dtype, progress=None, **kw):
        asked.append((pair, d, t, device, dtype, kw))
        return fp32_pair

    mp = pytest.MonkeyPatch()
    mp.setattr(specviz.models.pair, "load_pair", module_pair)
    try:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            rc = cli.main([
                "compare", "--draft", str(draft), "--target", str(target), "--device", "cpu", "--dtype", "float32",
                "--prompt", CODE_PROMPT, "--gamma", "4", "--max-new-tokens", str(NEW_TOKENS),
                "--json", str(out), "--quiet",
            ])
    finally:
        mp.undo()
    assert asked == [(None, str(draft), str(target), "cpu", "float32", {"target_url": None, "target_model": None})]
    return rc, json.loads(out.read_text()) if out.exists() else None, printed.getvalue()


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


def test_compare_cli_fp32_identical_and_accepting(race):
    rc, result, printed = race
    assert rc == 0
    sd, ar = result["speculative"], result["autoregressive"]
    assert result["identical"] is True, result["explanation"]
    assert sd["output_ids"] == ar["output_ids"]
    # the prompt asks for more than 48 tokens of code: the budget, not an EOS, ends the run
    assert len(sd["output_ids"]) == NEW_TOKENS and sd["stop_reason"] == "max_new_tokens"
    assert sd["config"]["dtype"] == "float32"
    assert sd["summary"]["acceptance_rate"] > 0.5
    assert result["speedup"] > 0
    assert "identical" in printed and "True" in printed


def test_greedy_tree_fp32_is_the_targets_own_output(fp32_pair, race):
    """A token tree on the real pair (fp32, the bf16 weights cast): the target's own greedy
    output token for token (the race's target-alone run; the chain's is checked by the race)."""
    reference = race[1]["autoregressive"]["output_ids"][:24]
    tree = speculative(fp32_pair, RunConfig(prompt=CODE_PROMPT, max_new_tokens=24, tree_nodes=12, tree_depth=4,
                                            tree_width=3), inspect=False).run()
    assert tree.output_ids == reference
    assert all(0 < len(r.tree) <= 12 for r in tree.rounds if r.gamma)
    assert tree.summary["mean_acceptance_length"] > 2


def test_ssd_fp32_output_and_hits_are_the_serial_runs(fp32_pair, race):
    """SSD for real on the real pair (fp32): the race's speculative run's output, token for token,
    and the hits its simulation replays from that serial run (tests/test_ssd_real.py: the tiny pair)."""
    sd = Trace.from_dict(race[1]["speculative"])
    budget = user_budget(None, 4, 2)
    run = ssd_run(fp32_pair, sd.config, budget)
    assert run.trace.output_ids == sd.output_ids
    assert run.hits == ssd_simulated(sd, budget).hits, "on the real pair too the hits are the simulation's"
