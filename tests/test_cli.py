"""The command line on the tiny pair: output, JSON files, exit codes."""

import json
import subprocess
import sys

import pytest

from specviz import cli
from specviz.trace import SUMMARY_KEYS, Round, Trace

TINY = ["--pair", "tiny", "--dtype", "float32", "--device", "cpu"]


def test_generate_prints_rounds_and_summary_and_writes_trace(tmp_path, capsys):
    out = tmp_path / "run.json"
    rc = cli.main(["generate", *TINY, "--prompt", "def add(a, b):", "--gamma", "3",
                   "--max-new-tokens", "24", "--json", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "round   1  γ=3" in printed
    assert "tokens / s" in printed and "acceptance rate" in printed
    trace = Trace.load(out)
    assert trace.config.gamma == 3 and trace.config.mode == "speculative"
    assert len(trace.output_ids) == 24
    assert set(trace.summary) == set(SUMMARY_KEYS)
    assert printed.count("round ") == len(trace.rounds)


def test_compare_writes_both_traces_and_verdict(tmp_path, capsys):
    out = tmp_path / "cmp.json"
    rc = cli.main(["compare", *TINY, "--prompt", "hello there", "--gamma", "5",
                   "--max-new-tokens", "30", "--json", str(out), "--quiet"])
    assert rc == 0
    data = json.loads(out.read_text())
    assert set(data) >= {"autoregressive", "speculative", "identical", "speedup"}
    ar = Trace.from_dict(data["autoregressive"])
    sd = Trace.from_dict(data["speculative"])
    assert ar.config.mode == "autoregressive" and sd.config.mode == "speculative"
    assert data["identical"] is True and ar.output_ids == sd.output_ids
    assert data["speedup"] == pytest.approx(
        sd.summary["tokens_per_second"] / ar.summary["tokens_per_second"])
    printed = capsys.readouterr().out
    assert "speedup" in printed and "identical" in printed


def test_round_marks_do_not_rely_on_colour():
    rnd = Round(index=0, gamma=3, proposed=[1, 2, 3], proposed_text=["a", "b", "c"],
                accepted=1, rejected=[2, 3], correction=9, correction_text="z")
    plain = cli.format_round(rnd, cli.Style(color=False))
    assert plain.endswith("a ~b~ ~c~ [z]")
    bonus = Round(index=1, gamma=2, proposed=[1, 2], proposed_text=["a", "\n"], accepted=2,
                  correction=9, correction_text="z", bonus=True)
    assert cli.format_round(bonus, cli.Style(color=False)).endswith("a ⏎ [+z]")
    coloured = cli.format_round(rnd, cli.Style(color=True))
    assert "\x1b[32;4m" in coloured and "\x1b[31;9m" in coloured and "\x1b[34;1m" in coloured


@pytest.mark.parametrize("args, message", [
    (["--prompt", "  "], "prompt is empty"),
    (["--prompt", "x", "--gamma", "0"], "gamma"),
    (["--prompt", "x", "--gamma", "33"], "gamma"),
    (["--prompt", "x", "--temperature", "-1"], "temperature"),
    (["--prompt", "x", "--top-p", "0"], "top-p"),
    (["--prompt", "x", "--top-p", "1.5"], "top-p"),
    (["--prompt", "x", "--max-new-tokens", "0"], "max new tokens"),
    (["--prompt", "x", "--max-new-tokens", "4097"], "max new tokens"),
    (["--prompt", "x" * 300], "longer than the models' context"),
    (["--prompt", "x", "--json", "/no/such/folder/out.json"], "does not exist"),
])
def test_bad_input_exits_2_with_a_message(args, message, capsys):
    rc = cli.main(["generate", *TINY, *args])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and "Traceback" not in err


def test_unknown_model_exits_2(tmp_path, capsys):
    rc = cli.main(["compare", "--prompt", "x", "--draft", str(tmp_path / "nope"),
                   "--target", str(tmp_path / "nope2")])
    assert rc == 2
    assert "unknown model or file" in capsys.readouterr().err


def test_module_entry_point_runs_in_a_fresh_process(tmp_path):
    out = tmp_path / "t.json"
    proc = subprocess.run(
        [sys.executable, "-m", "specviz", "generate", *TINY, "--prompt", "ab", "--max-new-tokens", "5",
         "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert len(Trace.load(out).output_ids) == 5
    bad = subprocess.run([sys.executable, "-m", "specviz", "generate", *TINY, "--prompt", "ab", "--gamma", "x"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "invalid int value" in bad.stderr
