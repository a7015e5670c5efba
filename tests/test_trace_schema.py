"""Traces you can trust: every trace read from a file or an upload is checked against the
trace schema (specviz.record.schema), and a bad one is refused with the field at fault and
its value, never a crash; ``specviz validate``; the published schema file is up to date."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path

import pytest
from helpers import make_config, run_ar, run_sd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_core import PydanticUndefined

from specviz import BadInput, Trace, speculative
from specviz.cli import commands as cli
from specviz.record import schema as S
from specviz.record.contention import Contention
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Event, Round, summarize, trace_upto

pytestmark = pytest.mark.usefixtures("single_thread")

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "assets" / "traces").glob("*.json"))
SCHEMA_FILE = ROOT / "assets" / "trace.schema.json"
# the bases the mutations start from: speculative runs (drafts, several rounds, events), one
# greedy with its draft ranks and one sampled; not a target-alone run, which drafts nothing
BASE = ROOT / "assets" / "traces" / "code-gamma4-greedy.json"
SAMPLED = ROOT / "assets" / "traces" / "prose-gamma4-sampled.json"


def shipped(path: Path = BASE) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def refused(data) -> S.BadTrace:
    """The BadTrace ``data`` (a dict, or JSON text) is refused with; its message names its field."""
    with pytest.raises(S.BadTrace) as info:
        Trace.from_json(data) if isinstance(data, str) else Trace.from_dict(data)
    exc = info.value
    assert isinstance(exc, BadInput) and exc.field
    assert exc.field in (S.FILE, S.TOP) or exc.field in str(exc), str(exc)
    assert exc.problems and exc.problems[0] == (exc.field, str(exc))
    return exc


# --- good traces ------------------------------------------------------------------------------------


def test_traces_are_shipped():
    assert len(SHIPPED) >= 4
    assert BASE in SHIPPED and SAMPLED in SHIPPED
    base, sampled = shipped(), shipped(SAMPLED)
    assert base["config"]["mode"] == sampled["config"]["mode"] == "speculative"
    assert base["config"]["temperature"] == 0 and base["draft_ranks"]
    assert sampled["config"]["temperature"] > 0
    assert min(len(base["rounds"]), len(sampled["rounds"])) > 5


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_trace_is_valid(path):
    trace = Trace.load(path)
    assert Trace.load(path) == trace
    data = json.loads(path.read_text(encoding="utf-8"))
    assert trace.summary == summarize(trace) == data["summary"]
    assert path.stat().st_size * 20 < S.MAX_TRACE_BYTES, "the size limit leaves room for much longer runs"


@pytest.fixture(scope="module")
def engine_traces(tiny_pair):
    sampling = speculative(tiny_pair, make_config(prompt="héllo ✓ wörld", temperature=0.8, top_k=10, gamma=3,
                                                  max_new_tokens=24, stop=["@@never"]))
    next(sampling)
    next(sampling)  # two rounds of a run still in progress
    return {
        "speculative": run_sd(tiny_pair, prompt="Hello world", gamma=4, max_new_tokens=24),
        "ngram, heuristic": run_sd(tiny_pair, prompt="abcabcabc", drafter="ngram", gamma=5, policy="heuristic",
                                   max_new_tokens=24),
        "autoregressive": run_ar(tiny_pair, prompt="Hello world", max_new_tokens=12),
        "sampling, in progress": sampling.trace,
    }


@pytest.mark.parametrize("name", ["speculative", "ngram, heuristic", "autoregressive", "sampling, in progress"])
def test_traces_the_engine_writes_round_trip(engine_traces, name, tmp_path):
    trace = engine_traces[name]
    path = tmp_path / "run.json"
    trace.save(path)
    back = Trace.load(path)
    assert back == trace and back.to_json() == trace.to_json()
    assert Trace.from_dict(json.loads(trace.to_json())) == trace
    if name.endswith("in progress"):
        assert back.summary == {}, "a run in progress stays one: its summary is filled when it ends"


@pytest.mark.parametrize("name", ["speculative", "autoregressive"])
def test_the_summary_is_recomputed_never_read(engine_traces, name):
    trace = engine_traces[name]
    data = trace.to_dict()
    data["summary"] = {**data["summary"], "tokens_per_second": 1e9, "acceptance_rate": "all of them",
                       "rounds": None}
    back = Trace.from_dict(data)
    assert back.summary == summarize(trace) == trace.summary
    data["summary"] = {"new_tokens": 1}  # a partial summary: the whole one comes back
    assert Trace.from_dict(data).summary == trace.summary


def test_the_published_schema_accepts_the_traces_and_refuses_bad_ones(engine_traces):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for data in [shipped(p) for p in SHIPPED] + [t.to_dict() for t in engine_traces.values()]:
        assert not list(validator.iter_errors(json.loads(json.dumps(data))))
    data = shipped()
    data["rounds"][0]["events"][0]["kind"] = "nap"
    data["config"]["extra"] = 1
    assert len(list(validator.iter_errors(data))) == 2


def test_the_schema_file_is_up_to_date():
    assert SCHEMA_FILE.read_text(encoding="utf-8") == S.schema_json(), (
        "assets/trace.schema.json is stale: python -m specviz.record.schema > assets/trace.schema.json")


def test_the_models_mirror_the_dataclasses():
    """Each pydantic model has its dataclass's fields with the same defaults: a field added to one
    and not the other fails here (schema_version and summary are the two meant to differ)."""
    for cls in (Event, Round, RunConfig, Contention, Trace):
        model = S.MODELS[cls.__name__]
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert list(fields) == list(model.model_fields), cls.__name__
        for name, f in fields.items():
            if (cls.__name__, name) in {("Trace", "schema_version"), ("Trace", "summary")}:
                continue
            default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            default = PydanticUndefined if default is dataclasses.MISSING else default
            assert model.model_fields[name].get_default(call_default_factory=True) == default, (cls.__name__, name)


# --- bad traces: each names its field and the value -----------------------------------------------------


def _set(*keys_value):
    *keys, value = keys_value

    def mutate(d):
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value

    return mutate


def _drop(*keys):
    def mutate(d):
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]

    return mutate


BAD = {  # what goes wrong: (mutation, the field named, text the message shows)
    "wrong type, a count as text": (_set("rounds", 3, "accepted", "2"), "rounds[3].accepted", 'whole number; got "2"'),
    "wrong type, a count as true": (_set("rounds", 3, "accepted", True), "rounds[3].accepted", "got true"),
    "wrong type, a time as text": (_set("rounds", 0, "events", 1, "start_ms", "soon"), "rounds[0].events[1].start_ms",
                                   'got "soon"'),
    "wrong type, a list as a number": (_set("prompt_ids", 5), "prompt_ids", "must be a list; got 5"),
    "a token id as a float": (_set("output_ids", 2, 3.5), "output_ids[2]", "got 3.5"),
    "a negative token id": (_set("prompt_ids", 0, -1), "prompt_ids[0]", "at least 0; got -1"),
    "a proposal below -1": (_set("rounds", 1, "proposed", 0, -4), "rounds[1].proposed[0]", "at least -1; got -4"),
    "accepted above the proposal": (_set("rounds", 3, "accepted", 99), "rounds[3].accepted",
                                    "tokens proposed; got 99"),
    "accepted below 0": (_set("rounds", 3, "accepted", -1), "rounds[3].accepted", "at least 0; got -1"),
    "end before start": (_set("rounds", 2, "events", 0, "end_ms", 0.001), "rounds[2].events[0].end_ms", "got 0.001"),
    "a negative time": (_set("wall_ms", -3.0), "wall_ms", "got -3.0"),
    "unknown event kind": (_set("rounds", 2, "events", 0, "kind", "nap"), "rounds[2].events[0].kind",
                           '"verify_forward"; got "nap"'),
    "unknown lane": (_set("rounds", 2, "events", 0, "lane", "gpu"), "rounds[2].events[0].lane",
                     'one of "draft", "target"; got "gpu"'),
    "unknown field, top level": (_set("comment", "hi"), "comment", 'unknown fields are refused); got "hi"'),
    "unknown field, config": (_set("config", "turbo", True), "config.turbo", "got true"),
    "unknown field, round": (_set("rounds", 4, "q", [0.5]), "rounds[4].q", "got [0.5]"),
    "unknown field, event": (_set("rounds", 4, "events", 2, "gpu", 0), "rounds[4].events[2].gpu", "got 0"),
    "unknown field, summary": (_set("summary", "speed", "fast"), "summary.speed", 'got "fast"'),
    "an odd key": (_set("config", "new\nsetting", 1), 'config["new\\nsetting"]', "got 1"),
    "config not an object": (_set("config", [1, 2]), "config", "must be a JSON object; got [1, 2]"),
    "config as text": (_set("config", "gamma=4"), "config", 'got "gamma=4"'),
    "config missing": (_drop("config"), "config", "config is missing"),
    "a round's index missing": (_drop("rounds", 0, "index"), "rounds[0].index", "is missing"),
    "rounds not a list": (_set("rounds", {"0": {}}), "rounds", 'must be a list; got {"0": {}}'),
    "a round not an object": (_set("rounds", 1, 7), "rounds[1]", "must be a JSON object; got 7"),
    "gamma out of range": (_set("config", "gamma", 99), "config.gamma", "at most 32; got 99"),
    "a round's gamma out of range": (_set("rounds", 0, "gamma", 40), "rounds[0].gamma", "at most 32; got 40"),
    "top_p 0": (_set("config", "top_p", 0), "config.top_p", "more than 0"),
    "temperature too high": (_set("config", "temperature", 1000.0), "config.temperature", "at most 100; got 1000.0"),
    "max_new_tokens 0": (_set("config", "max_new_tokens", 0), "config.max_new_tokens", "at least 1; got 0"),
    "unknown mode": (_set("config", "mode", "fast"), "config.mode", 'got "fast"'),
    "unknown drafter": (_set("config", "drafter", "oracle"), "config.drafter", 'got "oracle"'),
    "unknown dtype": (_set("config", "dtype", "int4"), "config.dtype", 'got "int4"'),
    "an empty stop string": (_set("config", "stop", ["ok", ""]), "config.stop[1]", 'must not be empty; got ""'),
    "a cut head with an n-gram drafter": (lambda d: d["config"].update(drafter="ngram", draft_vocab=8192),
                                          "config.draft_vocab", "got 8192"),
    "an int8 n-gram drafter, no prompt": (lambda d: d["config"].update(drafter="ngram", draft_quant="int8", prompt=""),
                                          "config.draft_quant", 'needs the model drafter'),
    "a probability above 1": (_set("rounds", 0, "draft_probs", 0, 1.5), "rounds[0].draft_probs[0]", "at most 1"),
    "NaN": (_set("rounds", 0, "target_probs", 0, math.nan), "rounds[0].target_probs[0]", "finite number; got NaN"),
    "infinity": (_set("wall_ms", math.inf), "wall_ms", "finite number; got Infinity"),
    "an output that is not the rounds'": (_set("output_ids", 3, 424242), "output_ids[3]",
                                          "emitted tokens in order; got 424242"),
    "a wrong schema_version": (_set("schema_version", 5), "schema_version", "is 5; this specviz reads version 4"),
    "schema_version as text": (_set("schema_version", "4"), "schema_version", 'is "4"'),
    "a contention entry without its label": (_set("contention", [{"cpu_share": 0.9}]), "contention[0].label",
                                             "is missing"),
    "a negative CPU share": (_set("contention", [{"label": "other processes", "cpu_share": -0.5}]),
                             "contention[0].cpu_share", "at least 0"),
    "schema_version missing": (_drop("schema_version"), "schema_version", "schema_version is missing"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_trace_names_its_field_and_value(case):
    mutate, field, shown = BAD[case]
    data = shipped()
    mutate(data)
    exc = refused(json.dumps(data))
    assert exc.field == field
    assert shown in str(exc), str(exc)


def test_a_trace_need_not_carry_its_prompt():
    """A schedule replayed from ranks alone (specviz.replay.schedules) has a config with no prompt."""
    from specviz.replay.latency import LatencyModel
    from specviz.replay.schedules import ReplayInput, Settings, simulate_all

    for data in (shipped(), shipped(SAMPLED)):
        data["config"]["prompt"] = ""
        assert Trace.from_dict(data).config.prompt == ""
    costs = LatencyModel(draft_ms={1: 10.0, 4: 14.0}, verify_ms={1: 50.0, 2: 51.0, 4: 53.0},
                         target_prefill_ms=80.0, draft_prefill_ms=30.0, overhead_ms=1.0)
    ranks = [0, 1, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0]
    tokens = [5 + i for i in range(len(ranks))]
    candidates = [[t if r == 0 else 900 + i, t] for i, (r, t) in enumerate(zip(ranks, tokens))]
    for replay in (Settings(gamma=3, max_new_tokens=12), Settings(gamma=2, policy="heuristic", max_new_tokens=12),
                     Settings(gamma=3, max_new_tokens=12, fanout_mode="geometric"),
                     Settings(gamma=4, max_new_tokens=12, eos_ids=frozenset({tokens[-1]}))):
        for result in simulate_all(ReplayInput(ranks, candidates, tokens), costs, replay).values():
            assert result.trace.config.prompt == ""
            assert Trace.from_json(result.trace.to_json()) == result.trace


def test_every_problem_is_listed_first_in_file_order():
    data = shipped()
    data["rounds"][1]["accepted"] = "x"
    data["rounds"][5]["events"][0]["lane"] = "gpu"
    data["extra"] = 1
    exc = refused(data)
    assert [f for f, _m in exc.problems] == ["rounds[1].accepted", "rounds[5].events[0].lane", "extra"]


@pytest.mark.parametrize("top", [[1, 2, 3], "trace", 7, None, True])
def test_a_top_level_that_is_no_object_is_refused(top):
    exc = refused(json.dumps(top))
    assert exc.field == S.TOP and "expected a JSON object; got" in str(exc)
    with pytest.raises(S.BadTrace):
        Trace.from_dict(top)


def test_a_file_that_is_not_json_is_refused(tmp_path):
    for text, shown in [("{not json", "line 1, column 2"), ("", "line 1, column 1"),
                        ('{"a": 1,}', "column 9"), ("[" * 100_000, "nested too deep"),
                        ("9" * 5000, "digits")]:
        exc = refused(text)
        assert exc.field == S.FILE and "not valid JSON" in str(exc) and shown in str(exc), str(exc)
    path = tmp_path / "t.json"
    path.write_text("{nope", encoding="utf-8")
    with pytest.raises(S.BadTrace, match="not valid JSON"):
        Trace.load(path)


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"config": "\xff\xfe"}')
    for call in (lambda: Trace.load(path), lambda: S.decode(path.read_bytes())):
        with pytest.raises(S.BadTrace, match="not UTF-8") as info:
            call()
        assert info.value.field == S.FILE


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    big = tmp_path / "big.json"
    with big.open("wb") as f:  # sparse: nothing written, nothing read
        f.truncate(S.MAX_TRACE_BYTES + 1)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("a file over the limit was read"))
    with pytest.raises(S.BadTrace, match="the file is 16,777,217 bytes, more than the 16 MB a trace may be") as info:
        Trace.load(big)
    assert info.value.field == S.FILE


def test_oversized_bytes_and_text_are_refused():
    with pytest.raises(S.BadTrace, match="more than the 16 MB") as info:
        S.decode(b" " * (S.MAX_TRACE_BYTES + 1))
    assert info.value.field == S.FILE
    text = " " * (S.MAX_TRACE_BYTES - 10) + '"✓✓✓✓"'  # under the limit in characters, over it in bytes
    exc = refused(text)
    assert "the file is 16,777,220 bytes, more than the 16 MB" in str(exc)
    with pytest.raises(S.BadTrace, match="the file is 24 MB, more than the 16 MB"):
        S.parse_json(" " * (S.MAX_TRACE_BYTES * 3 // 2))
    assert S.parse_json(" " * (S.MAX_TRACE_BYTES - 2) + "{}") == {}  # at the limit: read


def test_the_replay_page_loader_refuses_with_the_field(engine_traces):
    from specviz import ui

    data = engine_traces["speculative"].to_dict()
    data["rounds"][0]["accepted"] = 17
    with pytest.raises(BadInput, match=r"rounds\[0\]\.accepted must be at most") as info:
        ui.load_trace_file(json.dumps(data).encode())
    assert info.value.field == "rounds[0].accepted"
    with pytest.raises(BadInput, match="more than the 16 MB") as info:
        ui.load_trace_file(b" " * (S.MAX_TRACE_BYTES + 1))
    assert info.value.field == S.FILE
    for bad in (b'{"config": 3, "schema_version": 2}', b"[]", b"\xff"):
        with pytest.raises(BadInput):
            ui.load_trace_file(bad)
    assert ui.load_trace_file(BASE.read_bytes()) == Trace.load(BASE)


def test_messages_translate_through_their_own_template():
    """Each message is said in another language by the template that wrote it, values kept (a
    general template never shadows a specific one)."""
    samples = {"field": "rounds[3].accepted", "value": "99", "limit": "4", "choices": '"a", "b"',
               "reason": "why", "size": "17.0 MB", "error": "Expecting value at line 1, column 1",
               "version": "2"}

    def tr(template: str) -> str:
        return "<" + str(S.MESSAGES.index(template)) + ">" + template

    for i, template in enumerate(S.MESSAGES):
        message = template.format(**samples)
        assert S.translate(message, tr) == f"<{i}>" + message, template
    assert S.translate("something else", tr) == "something else"


# --- anything at all: a BadInput naming a field, or a trace ------------------------------------------------

VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 2**40), st.floats(allow_nan=True, allow_infinity=True),
                   st.text(max_size=4), st.lists(st.integers(-2, 9), max_size=3),
                   st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            yield from _paths(v, (*prefix, i))


SMALL = trace_upto(Trace.load(BASE), 3).to_dict()
PATHS = [p for p in _paths(SMALL) if p]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(where=st.sampled_from(PATHS), how=st.sampled_from(["set", "drop", "add"]), value=VALUES,
       key=st.text(min_size=1, max_size=4))
def test_any_change_loads_or_names_a_field(where, how, value, key):
    data = copy.deepcopy(SMALL)
    parent = data
    for k in where[:-1]:
        parent = parent[k]
    if how == "set":
        parent[where[-1]] = value
    elif how == "drop":
        del parent[where[-1]]
    elif isinstance(parent[where[-1]], dict):
        parent[where[-1]][key] = value
    try:
        text = json.dumps(data, ensure_ascii=False)
        trace = Trace.from_json(text)
    except S.BadTrace as exc:
        assert exc.field in str(exc)
        assert any(exc.field.startswith(S.path((k,))) for k in {*SMALL, *data}), exc.field
    else:
        assert Trace.from_json(trace.to_json()) == trace


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.binary(max_size=64), st.text(max_size=64).map(str.encode)))
def test_any_bytes_load_or_are_refused(data):
    try:
        Trace.from_json(S.decode(data))
    except BadInput as exc:
        assert exc.field


# --- specviz validate --------------------------------------------------------------------------------------


def test_validate_exits_0_when_every_file_is_a_trace(capsys):
    rc = cli.main(["validate", *map(str, SHIPPED)])
    out = capsys.readouterr()
    assert rc == 0, out
    assert out.out.count(": ok (") == len(SHIPPED) and not out.err


def test_validate_exits_2_and_names_each_bad_file_and_field(tmp_path, capsys):
    data = shipped()
    data["rounds"][3]["accepted"] = "all"
    data["rounds"][0]["events"][0]["kind"] = "nap"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**shipped(), "config": "gamma=4"}), encoding="utf-8")
    junk = tmp_path / "junk.json"
    junk.write_bytes(b"\x00\xff")
    over = tmp_path / "over.json"
    data = shipped()
    data["rounds"][3]["accepted"] = 99
    over.write_text(json.dumps(data), encoding="utf-8")
    n = len(data["rounds"][3]["proposed"])
    rc = cli.main(["validate", str(BASE), str(bad), str(config), str(junk), str(tmp_path / "none.json"),
                   str(over)])
    out = capsys.readouterr()
    assert rc == 2
    lines = out.out.splitlines()
    assert lines[0].startswith(f"{BASE}: ok")
    assert lines[1].startswith(f"{bad}: invalid: rounds[0].events[0].kind must be one of")
    assert lines[2] == '  rounds[3].accepted must be a whole number; got "all"'
    assert lines[3] == f'{config}: invalid: config must be a JSON object; got "gamma=4"'
    assert lines[4].startswith(f"{junk}: invalid: the file is not UTF-8")
    assert lines[5].startswith(f"{tmp_path / 'none.json'}: cannot be read")
    assert lines[6] == f"{over}: invalid: rounds[3].accepted must be at most the {n} tokens proposed; got 99"
    assert "5 of 6 file(s) are not valid traces" in out.err


def test_validate_needs_a_file(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["validate"])
    assert info.value.code == 2


@pytest.mark.slow
def test_validate_runs_as_a_command(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**shipped(), "wall_ms": "long"}), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "specviz", "validate", str(SHIPPED[1]), str(bad)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert f'{bad}: invalid: wall_ms must be a finite number; got "long"' in proc.stdout
    ok = subprocess.run([sys.executable, "-m", "specviz", "validate", str(SHIPPED[1])],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and ": ok (" in ok.stdout
