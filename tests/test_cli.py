"""The command line on the tiny pair: output, JSON files, exit codes."""

import json
import re
import subprocess
import sys
import unicodedata

import pytest

from specviz.cli import commands as cli
from specviz.record.errors import BadInput
from specviz.record.run_config import SUMMARY_KEYS
from specviz.record.run_trace import Round, Trace

TINY = ["--pair", "tiny", "--dtype", "float32", "--device", "cpu"]


def test_generate_prints_rounds_and_summary_and_writes_trace(tmp_path, capsys):
    out = tmp_path / "run.json"
    rc = cli.main(["generate", *TINY, "--prompt", "def add(a, b):", "--gamma", "3",
                   "--max-new-tokens", "24", "--json", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "round   1  γ=3" in printed
    assert "Tokens / s" in printed and "Acceptance" in printed and "Cost ratio c" in printed
    trace = Trace.load(out)
    assert trace.config.gamma == 3 and trace.config.mode == "speculative"
    assert len(trace.output_ids) == 24
    assert set(trace.summary) == set(SUMMARY_KEYS)
    assert sum(line.startswith("round ") for line in printed.splitlines()) == len(trace.rounds)


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
    assert "Speedup" in printed and "identical" in printed


def test_round_marks_do_not_rely_on_colour():
    rnd = Round(index=0, gamma=3, proposed=[1, 2, 3], proposed_text=["a", "b", "c"],
                accepted=1, rejected=[2, 3], correction=9, correction_text="z", emitted=[1, 9])
    plain = cli.format_round(rnd, cli.Style(color=False))
    assert plain.endswith("1/3 ok a ~b~ ~c~ [z]")
    bonus = Round(index=1, gamma=2, proposed=[1, 2], proposed_text=["a", "\n"], accepted=2,
                  correction=9, correction_text=" z", bonus=True, emitted=[1, 2, 9])
    assert cli.format_round(bonus, cli.Style(color=False)).endswith("a ↵ [+·z]")
    alone = Round(index=2, gamma=0, correction=9, correction_text="z", emitted=[9])
    assert cli.format_round(alone, cli.Style(color=False)).endswith("0/0 ok [=z]")
    coloured = cli.format_round(rnd, cli.Style(color=True))
    assert coloured.count("\x1b[32;4m") == 1 and coloured.count("\x1b[31;9m") == 2
    assert coloured.count("\x1b[34;1m") == 1


def test_a_round_cut_by_a_stop_prints_no_correction():
    """The target's token is only printed when the round emitted it: a stop string that
    ended the output inside the accepted tokens leaves no [correction] and marks the rest cut."""
    rnd = Round(index=0, gamma=3, proposed=[1, 2, 3], proposed_text=["a", "b", "c"], accepted=3,
                correction=9, correction_text="z", bonus=True, emitted=[1])
    plain = cli.format_round(rnd, cli.Style(color=False))
    assert plain.endswith("3/3 ok a {b} {c}")
    assert "[" not in plain and "z" not in plain
    rejected = Round(index=0, gamma=3, proposed=[1, 2, 3], proposed_text=["a", "b", "c"], accepted=1,
                     rejected=[2, 3], correction=9, correction_text="z", emitted=[1])
    assert cli.format_round(rejected, cli.Style(color=False)).endswith("1/3 ok a ~b~ ~c~")


@pytest.mark.parametrize("color", [False, True])
def test_control_characters_never_reach_the_terminal(color):
    nasty = ["\x1b[2J", "\x07bell", "\x9b31m", "\u202eevil", "\r\x00"]
    rnd = Round(index=0, gamma=5, proposed=[1, 2, 3, 4, 5], proposed_text=nasty, accepted=2,
                rejected=[3, 4, 5], correction=9, correction_text="\x1b]0;title\x07", emitted=[1, 2, 9])
    out = cli.format_round(rnd, cli.Style(color=color))
    ours = re.sub(r"\x1b\[(?:0|2|32;4|31;9|34;1)m", "", out)  # the style's own SGR codes
    assert not [ch for ch in ours if unicodedata.category(ch) == "Cc" or ch == "\u202e"], repr(out)
    assert "\\x1b[2J" in ours and "\\x07bell" in ours and "\\x9b31m" in ours and "\\u202eevil" in ours
    assert "\\x0d\\x00" in ours and "\\x1b]0;title\\x07" in ours
    if not color:
        assert "\x1b" not in out


def test_summary_prints_each_metric_through_its_formatter():
    from specviz.analysis import metrics

    summary = {"new_tokens": 24, "rounds": 7, "wall_ms": 1234.5, "tokens_per_second": 19.44,
               "acceptance_rate": 0.456, "cost_ratio_c": None}
    lines = cli.format_summary(summary, "speculative").splitlines()
    assert lines[0] == "speculative" and len(lines) == 1 + len(cli.SUMMARY_ROWS)
    table = {line[:32].strip(): line[32:].strip() for line in lines[1:]}
    assert table["Wall time"] == "1.23 s" and table["Tokens / s"] == "19.4" and table["Acceptance"] == "46%"
    assert table["Cost ratio c"] == "–" and table["New tokens"] == "24"
    assert set(table) == {metrics.metric(k).label for k in cli.SUMMARY_ROWS}
    speedup = cli.format_summary({"speedup": 0.98499}, keys=("speedup",))
    assert speedup.split() == ["Speedup", "×0.98"]


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


COMMAND_LINES = {
    "generate": ["generate", *TINY, "--prompt", "x"],
    "compare": ["compare", *TINY, "--prompt", "x"],
    "schedules": ["schedules", *TINY, "--prompt", "x"],
    "sweep": ["sweep", *TINY, "--prompt", "x", "--gammas", "1-2"],
    "overlap": ["overlap", *TINY, "--schedule", "ssd", "--prompt", "x"],
    "cost-curve": ["cost-curve", *TINY, "--json", "{tmp}/curve.json"],
}


@pytest.mark.parametrize("command", list(COMMAND_LINES))
@pytest.mark.parametrize("raised, rc, said", [
    (KeyboardInterrupt, 130, "specviz: interrupted"),
    (lambda: BadInput("the pair is broken"), 2, "specviz: error: the pair is broken"),
])
def test_every_command_says_an_interrupt_or_a_bad_input_in_one_line(command, raised, rc, said, monkeypatch, capsys,
                                                                  tmp_path):
    def load(*_a, **_k):
        raise raised()

    monkeypatch.setattr(cli, "_load", load)
    assert cli.main([a.format(tmp=tmp_path) for a in COMMAND_LINES[command]]) == rc
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == said and "Traceback" not in err


def test_validate_says_an_interrupt_in_one_line(tmp_path, monkeypatch, capsys):
    def load(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(Trace, "load", load)
    assert cli.main(["validate", str(tmp_path / "a.json")]) == 130
    assert capsys.readouterr().err.strip() == "specviz: interrupted"


@pytest.mark.slow
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
