"""The constants every page shares.

Where the app's files lie
(assets, recorded traces), the app's pages and their groups in the top navigation, and the
fixed choices the pages offer: the example prompts, the keyboard shortcuts, the slow-motion
speeds and the live controls' starting values. Nothing here loads a model or keeps state.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from specviz.record.i18n import N_, Translator, gettext_for
from specviz.record.limits import DEFAULT_CONFIDENCE, DEFAULT_GAMMA, DEFAULT_POLICY
from specviz.ui.lang import current

ROOT = Path(__file__).resolve().parent.parent.parent
ASSETS = ROOT / "assets"
TRACES_DIR = ASSETS / "traces"
# The recorded run a page opens on when the session has no Live run, and the tour's with no model:
# code at γ 4, greedy, raced against the target alone (the run that shows the most).
FEATURED_TRACE = "code-gamma4-greedy"

# Every page: its file, its title (shown as _(title)) and icon, in the navigation's order.
PAGES = {
    "pages/start.py": (N_("Start here"), ":material/flag:"),
    "pages/live.py": (N_("Live"), ":material/play_circle:"),
    "pages/replay.py": (N_("Replay"), ":material/replay:"),
    "pages/parallel.py": (N_("Parallel"), ":material/view_week:"),
    "pages/about.py": (N_("How it works"), ":material/school:"),
    "pages/inspect_round.py": (N_("Inspect a round"), ":material/troubleshoot:"),
    "pages/theory.py": (N_("Theory"), ":material/functions:"),
    "pages/sweep.py": (N_("Tune"), ":material/tune:"),
    "pages/costs.py": (N_("Cost curve"), ":material/show_chart:"),
    "pages/server.py": (N_("Server"), ":material/dns:"),
}
# A page whose URL is not its file's name: inspect_round.py (inspect.py would shadow the
# standard library's inspect) keeps the /inspect that links and bookmarks already use.
URLS = {"pages/inspect_round.py": "inspect"}
# The top navigation's groups (shown as _(name)): "" holds the links shown one by one, every
# other group is a menu. At 1280 px with the sidebar open the navigation gets about 710 px:
# ten links do not fit (Streamlit folds the last ones into "N more", in English in every
# language); four links and two menus take about 630 px in English, less in Chinese.
NAV = {
    "": ("pages/start.py", "pages/live.py", "pages/replay.py", "pages/parallel.py"),
    N_("Understand"): ("pages/about.py", "pages/inspect_round.py", "pages/theory.py"),
    N_("Tune and serve"): ("pages/sweep.py", "pages/costs.py", "pages/server.py"),
}

# The names are keys (stored in the run history) and English text marked with N_: the page
# shows _(name). The prompts stay as they are in every language: they are what the models
# read, and the point is how well the draft guesses each kind of text.
EXAMPLES = {
    N_("Code"): "Write a Python function is_prime(n) that returns True when n is a prime number.",
    "JSON": "Return a JSON object for a book with the keys title, author, year and tags (three tags).",
    N_("Prose"): "Describe a rainy afternoon in a small seaside town in three sentences.",
    "中文": "用三句话介绍长城的历史。",
    N_("Counting"): "Count from 1 to 40, separated by commas.",
}
SHORTCUTS = {"run": "G", "step": "S", "autoplay": "A", "stop": "X"}
SPEEDS = {N_("Instant"): 0.0, N_("Fast"): 0.35, N_("Normal"): 1.0, N_("Slow"): 2.2}  # keys shown as _(key)
DEFAULTS = {
    "prompt": EXAMPLES["Code"],
    "gamma": DEFAULT_GAMMA,  # the confidence policy's cap; with it off, exactly γ every round
    "temperature": 0.0,
    "top_p": 1.0,
    "max_new_tokens": 64,
    "seed": 0,
    "race": True,
    "reuse_baseline": False,
    "draft_vocab": 0,
    "draft_int8": False,
    "draft_stop": DEFAULT_POLICY == "confidence",  # stop drafting after a token the draft gave q < τ
    "confidence": DEFAULT_CONFIDENCE,
    "draft_shape": "chain",  # or "tree": tree_nodes nodes, tree_width wide, γ deep
    "tree_nodes": 16,
    "tree_width": 3,
    "speed": "Normal",
}
DRAFT_SHAPES = {"chain": N_("Chain"), "tree": N_("Tree")}


def calling_page(filename: str) -> str:
    """A page's file as a key of PAGES ("pages/live.py"): the page that called specviz.ui.frame.page_chrome."""
    path = Path(filename).resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def translator() -> Translator:
    """The page language's ``_``, bound now: for a widget's format_func, which Streamlit may
    call again outside the script run (AppTest does, when it sends the widget's value)."""
    return gettext_for(current())


def keep_choices(*keys: str) -> None:
    """Keep these choice widgets' values across a language change. Call it before drawing them.

    The browser sends a choice back as the text it shows (its format_func's), and Streamlit
    reads it against this run's texts: after a switch of language the old text is no
    longer an option, and the widget would fall back to its default (a select_slider) or
    return the text itself (a selectbox). Read here, before the widget is drawn, the value
    is still last run's; set again, it wins over the browser's."""
    ss = st.session_state
    lang = current()
    drawn_in = ss.setdefault("_choice_langs", {})
    for key in keys:
        if key in ss and drawn_in.get(key, lang) != lang:
            ss[key] = ss[key]
        drawn_in[key] = lang


def recorded_traces(remote: bool = False) -> list[Path]:
    """The shipped recorded runs (assets/traces/*.json); with ``remote``, then the runs whose
    target was a vLLM server (assets/traces/remote/)."""
    local = sorted(TRACES_DIR.glob("*.json")) if TRACES_DIR.is_dir() else []
    return local + (sorted((TRACES_DIR / "remote").glob("*.json")) if remote else [])
