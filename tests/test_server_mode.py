"""Server mode (specviz/ui/server_mode.py): its settings read from an environment mapping,
the caps the app enforces with them, the pairs it offers, and the loading rules that hold
in every mode (safetensors or GGUF only, never trust_remote_code)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specviz import BadInput, RunConfig
from specviz.record.errors import ModelError
from specviz.record.limits import MAX_NEW_TOKENS, PAIRS
from specviz.ui import server_mode
from specviz.ui.server_mode import ServerSettings, allowed_pairs, check_config, from_env

ROOT = Path(__file__).resolve().parent.parent
ON = {"SPECVIZ_SERVER_MODE": "1"}


# --- the environment --------------------------------------------------------------------------


def test_off_by_default_with_the_engines_limits():
    s = from_env({})
    assert s == ServerSettings()
    assert not s.on and s.max_new_tokens == MAX_NEW_TOKENS and s.max_prompt_chars is None
    assert s.upload_mb is None and s.pairs == PAIRS and not s.problems


@pytest.mark.parametrize("word", ["1", "true", "TRUE", "yes", "on", " On "])
def test_on_words(word):
    s = from_env({"SPECVIZ_SERVER_MODE": word})
    assert s.on and not s.problems


@pytest.mark.parametrize("word", ["0", "false", "no", "off", "", "  "])
def test_off_words(word):
    assert not from_env({"SPECVIZ_SERVER_MODE": word}).on


def test_a_typo_fails_safe_server_mode_on_and_said():
    s = from_env({"SPECVIZ_SERVER_MODE": "ture"})
    assert s.on
    assert s.problems == ("SPECVIZ_SERVER_MODE=ture is neither on nor off (1 or 0); server mode is on",)


def test_server_mode_defaults():
    s = from_env(ON)
    assert s.on and s.max_new_tokens == 256 and s.max_prompt_chars == 4000 and s.upload_mb == 5
    assert s.upload_mb == 5 and s.pairs == ("default", "tiny") and not s.problems


def test_the_caps_are_configurable():
    s = from_env({**ON, "SPECVIZ_MAX_NEW_TOKENS": "128", "SPECVIZ_MAX_PROMPT_CHARS": "500",
                  "SPECVIZ_MAX_UPLOAD_MB": "2", "SPECVIZ_SERVER_PAIRS": "tiny"})
    assert (s.max_new_tokens, s.max_prompt_chars, s.upload_mb, s.pairs) == (128, 500, 2, ("tiny",))
    assert not s.problems


def test_the_token_cap_also_applies_off_server_mode():
    assert from_env({"SPECVIZ_MAX_NEW_TOKENS": "512"}).max_new_tokens == 512


@pytest.mark.parametrize("name, value", [
    ("SPECVIZ_MAX_NEW_TOKENS", "abc"), ("SPECVIZ_MAX_NEW_TOKENS", "0"), ("SPECVIZ_MAX_NEW_TOKENS", "5000"),
    ("SPECVIZ_MAX_NEW_TOKENS", "-1"), ("SPECVIZ_MAX_NEW_TOKENS", "12.5"), ("SPECVIZ_MAX_PROMPT_CHARS", "lots"),
    ("SPECVIZ_MAX_UPLOAD_MB", "0"), ("SPECVIZ_MAX_UPLOAD_MB", "1e9"),
])
def test_a_bad_number_keeps_the_default_and_is_said(name, value):
    s = from_env({**ON, name: value})
    default = from_env(ON)
    assert s.max_new_tokens == default.max_new_tokens and s.max_prompt_chars == default.max_prompt_chars
    assert s.upload_mb == default.upload_mb
    (problem,) = s.problems
    assert problem.startswith(f"{name}={value} is not a whole number from 1 to ")


def test_unknown_pairs_are_said_and_the_known_ones_kept():
    s = from_env({**ON, "SPECVIZ_SERVER_PAIRS": "tiny, /models/evil, Qwen/Qwen2-7B"})
    assert s.pairs == ("tiny",)
    assert s.problems and s.problems[0].startswith("SPECVIZ_SERVER_PAIRS=")
    assert from_env({**ON, "SPECVIZ_SERVER_PAIRS": "nothing-known"}).pairs == ("default", "tiny")


def test_the_pairs_setting_counts_only_in_server_mode():
    assert from_env({"SPECVIZ_SERVER_PAIRS": "tiny"}).pairs == PAIRS


def test_upload_limits(monkeypatch):
    assert server_mode.upload_limit_mb({}) is None
    assert server_mode.upload_limit_mb(ON) == 5
    assert server_mode.upload_limit_mb({**ON, "SPECVIZ_MAX_UPLOAD_MB": "3"}) == 3
    monkeypatch.setenv("SPECVIZ_SERVER_MODE", "on")
    monkeypatch.setenv("SPECVIZ_MAX_UPLOAD_MB", "7")
    assert server_mode.upload_limit_mb() == 7 and server_mode.current().upload_mb == 7


def test_every_message_has_a_translation_template():
    from specviz.record.i18n import template_pattern

    s = from_env({"SPECVIZ_SERVER_MODE": "maybe", "SPECVIZ_MAX_NEW_TOKENS": "x", "SPECVIZ_SERVER_PAIRS": "big"})
    assert len(s.problems) == 3
    for problem in s.problems:
        assert any(template_pattern(t).match(problem) for t in server_mode.TEMPLATES), problem


# --- the caps, enforced where the app validates a run -------------------------------------------


def test_check_config_enforces_the_token_cap_in_the_engines_words():
    s = from_env(ON)
    check_config(RunConfig(prompt="hi", max_new_tokens=256), s)
    with pytest.raises(BadInput) as exc:
        check_config(RunConfig(prompt="hi", max_new_tokens=257), s)
    assert exc.value.field == "max_new_tokens"
    assert str(exc.value) == "max new tokens must be from 1 to 256; got 257"


def test_check_config_enforces_the_prompt_limit():
    s = from_env({**ON, "SPECVIZ_MAX_PROMPT_CHARS": "10"})
    check_config(RunConfig(prompt="x" * 10), s)
    with pytest.raises(BadInput) as exc:
        check_config(RunConfig(prompt="x" * 11), s)
    assert exc.value.field == "prompt" and "11 characters" in str(exc.value) and "at most 10" in str(exc.value)


def test_off_server_mode_check_config_allows_what_the_engine_allows():
    """Off server mode the caps are the engine's own (validate.check_settings): the same
    boundary, refused in the same words, and no prompt limit."""
    from specviz.record.validate import check_settings

    s = from_env({})
    assert not s.on and s.max_prompt_chars is None and s.max_new_tokens == MAX_NEW_TOKENS
    at_most = RunConfig(prompt="x" * 100_000, max_new_tokens=MAX_NEW_TOKENS)
    assert check_config(at_most, s) is None and check_settings(at_most) is None
    over = RunConfig(prompt="x", max_new_tokens=MAX_NEW_TOKENS + 1)
    with pytest.raises(BadInput) as ours:
        check_config(over, s)
    with pytest.raises(BadInput) as engines:
        check_settings(RunConfig(prompt="x", max_new_tokens=MAX_NEW_TOKENS + 1))
    assert ours.value.field == engines.value.field == "max_new_tokens"
    assert str(ours.value).lower() == str(engines.value).lower() == f"max new tokens must be from 1 to {MAX_NEW_TOKENS}; got {MAX_NEW_TOKENS + 1}"


def test_the_live_pages_check_refuses_over_the_cap(tiny_pair, monkeypatch):
    """state.check_inputs (what the Live page runs before any run) applies server mode's cap,
    and says it in the page's words (a translated template)."""
    from specviz.ui import state

    monkeypatch.setattr(state, "_", lambda s: s)  # English, outside a Streamlit run
    monkeypatch.setattr(state.server_mode, "current", lambda: from_env(ON))
    errors = state.check_inputs(tiny_pair, RunConfig(prompt="hello", max_new_tokens=300))
    assert errors == {"max_new_tokens": "Max new tokens must be from 1 to 256; got 300"}
    assert state.check_inputs(tiny_pair, RunConfig(prompt="hello", max_new_tokens=256)) == {}
    errors = state.check_inputs(tiny_pair, RunConfig(prompt="y" * 4001))
    assert list(errors) == ["prompt"] and "4001 characters" in errors["prompt"]


# --- the pairs offered ------------------------------------------------------------------------


def test_off_server_mode_every_named_pair_is_offered():
    assert allowed_pairs(from_env({}), installed=lambda name: False) == PAIRS


def test_in_server_mode_only_installed_pairs_are_offered():
    s = from_env(ON)
    assert allowed_pairs(s, installed=lambda name: name == "tiny") == ("tiny",)
    assert allowed_pairs(s, installed=lambda name: True) == ("default", "tiny")
    # none installed: all the configured ones, so the page can say how to install them
    assert allowed_pairs(s, installed=lambda name: False) == ("default", "tiny")
    only_default = from_env({**ON, "SPECVIZ_SERVER_PAIRS": "default"})
    assert allowed_pairs(only_default, installed=lambda name: True) == ("default",)


def test_pair_installed(monkeypatch, specviz_cache):  # an empty cache: no converted copy
    import specviz.models.default_parts
    import specviz.models.pair

    server_mode.pair_installed.cache_clear()
    try:
        assert server_mode.pair_installed("tiny")
        assert not server_mode.pair_installed("/some/path")

        def missing(spec):
            raise ModelError(f"the {spec.role} model part package is not installed")

        monkeypatch.setattr(specviz.models.default_parts, "find_parts", missing)
        assert not server_mode.pair_installed("default")
        server_mode.pair_installed.cache_clear()
        monkeypatch.setattr(specviz.models.default_parts, "find_parts", lambda spec: [])
        assert server_mode.pair_installed("default")
        server_mode.pair_installed.cache_clear()  # the remote choice needs the draft only
        monkeypatch.setattr(specviz.models.default_parts, "find_parts",
                            lambda spec: [] if spec.role == "draft" else missing(spec))
        assert server_mode.pair_installed("remote") and not server_mode.pair_installed("default")
    finally:
        server_mode.pair_installed.cache_clear()


def test_the_app_in_server_mode(app_tiny_only, monkeypatch):
    """The Live page under SPECVIZ_SERVER_MODE=1: the token cap on its widget, the note in
    the sidebar, no precision choice, only the offered pairs."""
    from specviz.ui import pair as ui_pair

    monkeypatch.setenv("SPECVIZ_SERVER_MODE", "1")
    monkeypatch.setenv("SPECVIZ_SERVER_PAIRS", "tiny")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.run()
    assert not at.exception, at.exception
    assert at.number_input(key="max_new_tokens").max == 256
    pairs = at.selectbox(key="pair_name")
    assert len(pairs.options) == 1 and pairs.value == "tiny"
    assert "pair_dtype" not in [s.key for s in at.selectbox]
    notes = [c.value for c in at.sidebar.caption if "Server mode" in c.value]
    assert notes and "256 new tokens" in notes[0] and "5 MB" in notes[0], notes
    assert ui_pair.offered_pairs() == ("tiny",)


def test_a_remote_target_is_never_offered_in_server_mode(app_tiny_only, monkeypatch):
    """A public server's users must not make it connect to addresses they type."""
    from specviz.ui import pair as ui_pair

    monkeypatch.delenv("SPECVIZ_SERVER_MODE", raising=False)
    assert "remote" in ui_pair.offered_pairs()
    monkeypatch.setenv("SPECVIZ_SERVER_MODE", "1")
    for configured in ("default,tiny", "remote,tiny", "remote"):
        monkeypatch.setenv("SPECVIZ_SERVER_PAIRS", configured)
        assert "remote" not in ui_pair.offered_pairs(), configured


def test_a_link_over_the_servers_cap_is_refused_with_a_message(app_tiny_only, monkeypatch):
    monkeypatch.setenv("SPECVIZ_SERVER_MODE", "1")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.query_params["max_new_tokens"] = "1000"
    at.run()
    assert not at.exception, at.exception
    assert at.number_input(key="max_new_tokens").value == 64
    (warning,) = [w.value for w in at.warning if "this link" in w.value]
    assert "max_new_tokens=1000" in warning and "from 1 to 256" in warning


# --- loading: safetensors or GGUF only, never remote code ---------------------------------------


def _calls(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def _sources():
    for folder in ("specviz", "pages", "tools", "bench"):
        yield from (ROOT / folder).rglob("*.py")
    yield ROOT / "app.py"


def test_trust_remote_code_is_never_turned_on():
    """No call anywhere passes trust_remote_code other than a literal False (transformers'
    default is off), nor hides it in **kwargs built from a dict literal."""
    for path in _sources():
        for call in _calls(path):
            for kw in call.keywords:
                if kw.arg == "trust_remote_code":
                    assert isinstance(kw.value, ast.Constant) and kw.value.value is False, \
                        f"{path.relative_to(ROOT)}:{call.lineno}"
                if kw.arg is None and isinstance(kw.value, ast.Dict):
                    keys = [k.value for k in kw.value.keys if isinstance(k, ast.Constant)]
                    assert "trust_remote_code" not in keys, f"{path.relative_to(ROOT)}:{call.lineno}"
        assert "trust_remote_code=True" not in path.read_text(encoding="utf-8").replace(" ", ""), path


def test_models_load_from_safetensors_only():
    """The one place weights load from a folder asks for safetensors (never a pickle
    fallback), and nothing calls torch.load or pickle (but the engine worker's socket, whose
    pickles come from this app's own process, behind a key only the two of them hold)."""
    files = (ROOT / "specviz" / "models" / "pair.py", ROOT / "specviz" / "models" / "gguf_convert.py")
    loads = [c for f in files for c in _calls(f) if isinstance(c.func, ast.Attribute) and c.func.attr == "from_pretrained"
             and isinstance(c.func.value, ast.Name) and c.func.value.id == "AutoModelForCausalLM"]
    assert loads
    for call in loads:
        kw = {k.arg: k.value for k in call.keywords}
        gguf = "gguf_file" in kw
        safetensors = isinstance(kw.get("use_safetensors"), ast.Constant) and kw["use_safetensors"].value is True
        assert gguf or safetensors, f"line {call.lineno} loads weights that may be a pickle"
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        assert "torch.load(" not in text, path
        assert "import pickle" not in text or path.parent.name == "worker", path
