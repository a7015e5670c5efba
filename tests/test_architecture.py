"""The package's architecture, as docs/design.md draws it: layers that import only downwards,
no cycles (imports inside functions included), no torch below the models, Streamlit only in
the ui, thin pages, and a public API that loads lazily."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = ("Decoding", "autoregressive", "speculative", "BadInput", "ModelError", "SpecvizError", "ModelPair",
          "load_pair", "Event", "Round", "RunConfig", "Trace")


def _python(code: str) -> str:
    """Run ``code`` in a fresh interpreter (nothing imported yet) from the repository root."""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip()


def test_the_import_contracts_hold():
    """lint-imports checks pyproject.toml's contracts (layers, no torch in record/replay/analysis/
    figures, streamlit only in ui, the engine below measure, no cycles at any depth)."""
    out = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                          "sys.exit(lint_imports())"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout, out.stdout[-2000:]


def test_import_specviz_loads_no_torch():
    """``import specviz`` and ``from specviz import Trace`` load neither torch nor transformers;
    the first engine name does."""
    loaded = _python(
        "import sys\n"
        "import specviz\n"
        "from specviz import Trace, RunConfig, BadInput\n"
        "before = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "from specviz import speculative\n"
        "print(before, 'torch' in sys.modules)\n")
    assert loaded == "[] True", loaded


@pytest.mark.parametrize("module", ["specviz.record.schema", "specviz.record.validate", "specviz.replay.what_if",
                                    "specviz.analysis.compare", "specviz.analysis.metrics", "specviz.figures"])
def test_the_pure_layers_load_no_torch(module):
    """A recorded run opens, replays and draws with no model: these layers never load torch,
    transformers or Streamlit (the contracts check the imports; this checks what really loads)."""
    loaded = _python(f"import sys, {module}\n"
                     "print(sorted(m for m in ('torch', 'transformers', 'streamlit') if m in sys.modules))")
    assert loaded == "[]", (module, loaded)


def test_the_public_names_still_import():
    """What ``specviz/__init__.py`` exported before the layout changed still imports from ``specviz``."""
    import specviz

    for name in PUBLIC:
        assert getattr(specviz, name) is not None, name
    assert set(PUBLIC) <= set(dir(specviz))
    with pytest.raises(AttributeError):
        specviz.no_such_name  # noqa: B018


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "pages").glob("*.py")))
def test_every_page_is_thin(page):
    """A page is a script of about 60 lines at most: its chrome, its state, its render calls. Its
    state machine, decisions and drawing live in specviz/ui/, where they are tested."""
    lines = (ROOT / "pages" / page).read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 60, (page, len(lines))


@pytest.mark.parametrize("argv", [["validate", "assets/traces/chinese-autoregressive-greedy.json"], ["--help"],
                                  ["generate", "--gamma", "x"]])
def test_a_command_that_runs_no_model_loads_no_torch(argv):
    """``specviz validate``, ``--help`` and a bad flag answer without loading torch or transformers
    (seconds on a busy machine): the parser's choices come from the record layer."""
    loaded = _python("import sys\n"
                     "from specviz.cli.commands import main\n"
                     f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
                     "print('LOADED', sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    assert loaded.splitlines()[-1] == "LOADED []", loaded[-2000:]
