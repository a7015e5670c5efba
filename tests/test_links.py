"""Share links (specviz/ui/links.py): the Live page's settings in a URL's query string and
back. Pure functions: no Streamlit, no model."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import pytest

from specviz.record.limits import MAX_GAMMA, MAX_NEW_TOKENS
from specviz.ui import links

EXAMPLES = {
    "Code": "Write a Python function is_prime(n).",
    "JSON": "Return a JSON object for a book.",
    "中文": "用三句话介绍长城的历史。",
}
DEFAULTS = {"prompt": EXAMPLES["Code"], "gamma": 4, "temperature": 0.0, "top_p": 1.0, "max_new_tokens": 64,
            "seed": 0, "draft_vocab": 0, "draft_int8": False}
LIMITS = links.Limits(examples=EXAMPLES, draft_heads=(0, 8192, 16384, 32768, 65536))


def parse(**query):
    return links.parse_query(query, LIMITS)


# --- good values ------------------------------------------------------------------------------


def test_every_setting_is_read():
    values, problems = parse(gamma="7", temperature="0.7", top_p="0.9", max_new_tokens="128", seed="42",
                             draft_vocab="32768", draft_int8="1", prompt="Count to ten.")
    assert not problems
    assert values == {"gamma": 7, "temperature": 0.7, "top_p": 0.9, "max_new_tokens": 128, "seed": 42,
                      "draft_vocab": 32768, "draft_int8": True, "prompt": "Count to ten."}


def test_an_example_sets_the_prompt_by_name_slug_or_any_case():
    for name in ("json", "JSON", "Json", " json "):
        assert parse(example=name) == ({"prompt": EXAMPLES["JSON"]}, [])
    assert parse(example="chinese")[0] == {"prompt": EXAMPLES["中文"]}
    assert parse(example="中文")[0] == {"prompt": EXAMPLES["中文"]}


def test_a_prompt_wins_over_an_example_and_a_bad_prompt_falls_back_to_it():
    assert parse(example="json", prompt="Hi there")[0] == {"prompt": "Hi there"}
    assert parse(prompt="Hi there", example="json")[0] == {"prompt": "Hi there"}
    values, problems = parse(example="json", prompt="   ")
    assert values == {"prompt": EXAMPLES["JSON"]}
    assert [p.param for p in problems] == ["prompt"]


def test_the_limits_themselves_are_accepted():
    values, problems = parse(gamma=str(MAX_GAMMA), temperature="2", top_p="0.05", max_new_tokens=str(MAX_NEW_TOKENS),
                             seed=str(links.MAX_SEED), draft_int8="off", prompt="x" * links.MAX_PROMPT_CHARS)
    assert not problems
    assert values["gamma"] == MAX_GAMMA and values["max_new_tokens"] == MAX_NEW_TOKENS
    assert values["draft_int8"] is False


def test_switch_words():
    for word, on in (("1", True), ("true", True), ("ON", True), ("yes", True), ("0", False), ("false", False),
                     ("off", False), ("No", False)):
        assert parse(draft_int8=word)[0] == {"draft_int8": on}, word


def test_the_language_and_streamlits_own_parameters_are_left_alone():
    assert parse(lang="zh", embed="true", embed_options="dark_theme", gamma="5") == ({"gamma": 5}, [])


def test_a_repeated_parameter_counts_once_the_last_one():
    values, problems = links.parse_query({"gamma": ["3", "6"]}, LIMITS)
    assert values == {"gamma": 6} and not problems


# --- bad values: each one a Problem that names its parameter and its value ---------------------

BAD = [
    ("gamma", "abc", "not a whole number"),
    ("gamma", "4.5", "not a whole number"),
    ("gamma", "", "not a whole number"),
    ("gamma", "0", "from 1 to 32"),
    ("gamma", "999", "from 1 to 32"),
    ("gamma", "9" * 40, "not a whole number"),
    ("temperature", "-1", "temperature must be >= 0"),
    ("temperature", "5", "range, 0 to 2"),
    ("temperature", "nan", "not a number"),
    ("temperature", "inf", "not a number"),
    ("temperature", "hot", "not a number"),
    ("top_p", "2", "top-p must be in (0, 1]"),
    ("top_p", "0", "top-p must be in (0, 1]"),
    ("top_p", "0.01", "range, 0.05 to 1"),
    ("seed", "-5", "seed must be a whole number >= 0"),
    ("seed", str(2**40), "range, 0 to 2147483647"),
    ("seed", "1e3", "not a whole number"),
    ("max_new_tokens", "0", f"from 1 to {MAX_NEW_TOKENS}"),
    ("max_new_tokens", "100000", f"from 1 to {MAX_NEW_TOKENS}"),
    ("max_new_tokens", "-3", f"from 1 to {MAX_NEW_TOKENS}"),
    ("draft_vocab", "1000", "not one of 0, 8192, 16384, 32768, 65536"),
    ("draft_vocab", "-1", "not one of 0, 8192"),
    ("draft_int8", "maybe", "not 1 or 0"),
    ("example", "poetry", "not one of code, json, chinese"),
    ("prompt", "", "the prompt is empty"),
    ("prompt", "x" * (links.MAX_PROMPT_CHARS + 1), f"{links.MAX_PROMPT_CHARS + 1} characters, more than the "
                                                    f"{links.MAX_PROMPT_CHARS} a link can carry"),
    ("gama", "8", "not a setting of the Live page"),
]


@pytest.mark.parametrize("param, value, reason", BAD, ids=[f"{p}={v[:12]}" for p, v, _ in BAD])
def test_a_bad_value_is_a_problem_naming_the_parameter_and_the_value(param, value, reason):
    values, problems = parse(**{param: value})
    assert values == {}
    (problem,) = problems
    assert problem.param == param
    assert problem.value == links.shown(value)
    assert reason in problem.reason, problem.reason


def test_bad_values_leave_the_good_ones_in_force():
    values, problems = parse(gamma="abc", temperature="0.5", seed="-5", example="json")
    assert values == {"temperature": 0.5, "prompt": EXAMPLES["JSON"]}
    assert [p.param for p in problems] == ["gamma", "seed"]


def test_a_long_value_is_quoted_short_and_on_one_line():
    assert links.shown("a\nb\tc") == "a b c"
    long = links.shown("y" * 500)
    assert len(long) == links.SHOWN_CHARS and long.endswith("…")


def test_server_mode_caps_are_the_links_caps():
    capped = links.Limits(examples=EXAMPLES, max_new_tokens=256, max_prompt_chars=100)
    values, problems = links.parse_query({"max_new_tokens": "300", "prompt": "p" * 101}, capped)
    assert values == {}
    assert [p.param for p in problems] == ["max_new_tokens", "prompt"]
    assert problems[0].reason == "max new tokens must be from 1 to 256; got 300"
    assert links.parse_query({"max_new_tokens": "256"}, capped) == ({"max_new_tokens": 256}, [])


def test_the_int8_draft_needs_the_cpu():
    on_gpu = links.Limits(examples=EXAMPLES, device="cuda")
    values, problems = links.parse_query({"draft_int8": "1"}, on_gpu)
    assert values == {} and problems[0].param == "draft_int8" and "CPU only" in problems[0].reason
    assert links.parse_query({"draft_int8": "0"}, on_gpu) == ({"draft_int8": False}, [])


def test_without_the_pairs_heads_any_whole_draft_vocab_passes_the_engines_check():
    free = links.Limits(examples=EXAMPLES)
    assert links.parse_query({"draft_vocab": "5000"}, free) == ({"draft_vocab": 5000}, [])
    assert "draft vocabulary must be" in links.parse_query({"draft_vocab": "-2"}, free)[1][0].reason


def test_every_reason_has_a_translation_template():
    """The page shows each reason in its language: each is one of the templates the page
    translates (links.TEMPLATES, or the engine's refusals it already knows)."""
    from specviz.record.i18n import template_pattern
    from specviz.ui.state import LINK_REASONS

    for param, value, _reason in BAD:
        (problem,) = parse(**{param: value})[1]
        assert any(template_pattern(t).match(problem.reason) for t in LINK_REASONS), problem.reason


# --- format, and the round trip ----------------------------------------------------------------


def test_defaults_make_an_empty_query():
    assert links.format_query(DEFAULTS, DEFAULTS, LIMITS) == {}


def test_only_the_changed_settings_are_written_in_a_fixed_order():
    settings = {**DEFAULTS, "seed": 3, "gamma": 6, "temperature": 0.7000000000000001, "prompt": EXAMPLES["JSON"]}
    assert links.format_query(settings, DEFAULTS, LIMITS) == {"example": "json", "gamma": "6", "temperature": "0.7",
                                                              "seed": "3"}
    assert list(links.format_query(settings, DEFAULTS, LIMITS)) == ["example", "gamma", "temperature", "seed"]


ROUND_TRIPS = [
    {"gamma": 7, "temperature": 0.7, "top_p": 0.9, "seed": 3, "max_new_tokens": 200},
    {"prompt": EXAMPLES["中文"], "draft_int8": True, "draft_vocab": 32768},
    {"prompt": "Café & naïve?\nLine two: 50% #hash + [link](http://x) `code`", "gamma": 1},
    {"prompt": "Write a haiku about GPUs.", "temperature": 2.0, "top_p": 0.05, "seed": 2**31 - 1},
]


@pytest.mark.parametrize("changed", ROUND_TRIPS)
def test_format_then_parse_gives_the_settings_back(changed):
    settings = {**DEFAULTS, **changed}
    query = links.format_query(settings, DEFAULTS, LIMITS)
    url = links.share_url("http://localhost:8501/", query)
    parsed = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))  # through a real URL
    values, problems = links.parse_query(parsed, LIMITS)
    assert not problems
    assert {**DEFAULTS, **values} == settings


def test_a_prompt_too_long_for_a_link_is_left_out():
    settings = {**DEFAULTS, "prompt": "z" * (links.MAX_PROMPT_CHARS + 1), "gamma": 5}
    assert links.format_query(settings, DEFAULTS, LIMITS) == {"gamma": "5"}
    assert not links.prompt_fits(settings["prompt"], LIMITS)


def test_share_url():
    assert links.share_url("http://h:8501/", {}) == "http://h:8501/"
    assert links.share_url("http://h:8501/", {"example": "json", "gamma": "6"}) == "http://h:8501/?example=json&gamma=6"
    assert links.share_url("/", {"prompt": "a b&c"}) == "/?prompt=a+b%26c"


def test_code_span_shows_any_text_as_written():
    assert links.code_span("gamma=abc") == "` gamma=abc `"
    assert links.code_span("a`b") == "`` a`b ``"
    assert links.code_span("x\ny") == "` x y `"


def test_links_and_server_mode_import_no_streamlit():
    """Pure modules: parsing and server settings never touch Streamlit (tests call them
    directly; only specviz/ui/state.py turns them into widgets and messages)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "specviz"
    for path in (root / "ui" / "links.py", root / "ui" / "server_mode.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [n for n in names if n.split(".")[0] == "streamlit"], path
