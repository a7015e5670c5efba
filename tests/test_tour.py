"""The guided tour (specviz.ui.tour) and the navigation's page list (specviz.ui.chrome):
the steps' contents, the tour's state, and the Start here page and step bar through AppTest
on the tiny pair. The browser run of the tour is in tests/test_nav_browser.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specviz.figures.theory import run_point
from specviz.record.i18n import gettext_for
from specviz.ui import server_mode, tour
from specviz.ui.chrome import NAV, PAGES, TRACES_DIR
from specviz.ui.replay import load_trace_file

pytestmark = pytest.mark.usefixtures("app_tiny_only")  # every test runs the app on the tiny pair
ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
TIMEOUT = 90
ALL_STEPS = [(flavour, n, step) for flavour, steps in tour.STEPS.items() for n, step in enumerate(steps, 1)]


def _sources(*folders: str) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for f in folders for p in sorted((ROOT / f).glob("*.py")))


def _page_source(page: str) -> str:
    """A page's file and the specviz.ui modules it draws with (``from specviz.ui import x, y``)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    imports = re.findall(r"^from specviz\.ui import ([\w, ]+)$", text, re.M)
    names = [n.split(" as ")[0].strip() for line in imports for n in line.split(",")]
    return "\n".join([text] + [(ROOT / "specviz" / "ui" / f"{n}.py").read_text(encoding="utf-8") for n in names
                                if (ROOT / "specviz" / "ui" / f"{n}.py").is_file()])


# --- the navigation ------------------------------------------------------------------------------

def test_the_navigation_lists_every_page_once_start_here_first():
    listed = [p for paths in NAV.values() for p in paths]
    assert sorted(listed) == sorted(PAGES) == sorted(f"pages/{p.name}" for p in (ROOT / "pages").glob("*.py"))
    assert len(listed) == len(set(listed))
    assert NAV[""][0] == "pages/start.py" and list(PAGES)[0] == "pages/start.py"


# --- the steps ------------------------------------------------------------------------------------

def test_each_tour_has_the_eight_steps_of_a_first_run():
    for steps in tour.STEPS.values():
        assert len(steps) == 8
        pages = [s.page for s in steps]
        assert pages[5:] == ["pages/theory.py", "pages/parallel.py", "pages/about.py"]  # theory, PEARL/SSD, next
        assert all(p == pages[0] for p in pages[:5])  # run, strip, step, timeline, γ: on one page
    assert tour.LIVE_STEPS[0].page == "pages/live.py" and tour.RECORDED_STEPS[0].page == "pages/replay.py"


@pytest.mark.parametrize("flavour,n,step", ALL_STEPS, ids=[f"{f}-{n}" for f, n, _s in ALL_STEPS])
def test_a_step_points_at_what_its_page_draws(flavour, n, step):
    """The widget it names is a label its page (or a ui module) draws, its highlight's keys are
    widget keys there, and its links and page are pages of the app."""
    source = _sources("pages", "specviz/ui")
    page_source = _page_source(step.page)
    if not step.figure:
        assert f'_("{step.widget}")' in page_source, (step.page, step.widget)
    for key in re.findall(r"\.st-key-([\w-]+)", step.highlight):
        assert f'key="{key}"' in page_source, (step.page, key)
    if step.highlight and not re.search(r"\.st-key-", step.highlight):
        assert re.sub(r"^\.", "", step.highlight.split()[0]) in source  # a class the ui draws (sv-strip)
    assert step.page in PAGES and all(p in PAGES for p in step.links)


def test_the_names_the_steps_quote_are_labels_the_app_draws():
    source = _sources("pages", "specviz/ui")
    for key, name in tour.NAMES.items():
        assert f'_("{name}")' in source or f'N_("{name}")' in source, (key, name)


def test_every_recorded_run_a_step_names_is_shipped():
    for _flavour, _n, step in ALL_STEPS:
        for stem in re.findall(r"\{recorded\}([\w-]+)", step.text) + [tour.RECORDED]:
            assert (TRACES_DIR / f"{stem}.json").is_file(), stem


@pytest.mark.parametrize("lang", ["en", "zh_CN"])
def test_every_step_reads_whole_in_both_languages(lang):
    tr = gettext_for(lang)
    for _flavour, _n, step in ALL_STEPS:
        text = tour.step_text(step, tr)
        assert "{" not in text and "}" not in text, text
        assert text.count(".") + text.count("。") <= 3, text  # one or two sentences (a third on why)
        if lang == "zh_CN":
            assert re.search(r"[\u4e00-\u9fff]", text) and "Recorded run" not in text, text


def test_the_tour_says_why_acceptance_depends_on_the_text():
    en = gettext_for("en")
    for steps in tour.STEPS.values():
        text = tour.step_text(steps[4], en)  # move γ and compare
        assert "syntax and keys pin code and JSON down" in text and "prose" in text


# --- the state ---------------------------------------------------------------------------------

def test_start_next_back_and_end():
    ss: dict = {}
    assert tour.current(ss) is None
    tour.start(ss, "live")
    assert tour.current(ss) == (1, tour.LIVE_STEPS[0])
    assert tour.page_to_open(ss, "pages/start.py") == "pages/live.py"
    assert tour.page_to_open(ss, "pages/live.py") is None  # once only
    tour.move(ss, -1)
    assert tour.current(ss)[0] == 1  # no step 0
    for n in range(2, 9):
        tour.move(ss, +1)
        assert tour.current(ss) == (n, tour.LIVE_STEPS[n - 1])
    assert tour.page_to_open(ss, "pages/live.py") == "pages/about.py"
    tour.move(ss, +1)  # Finish
    assert tour.current(ss) is None and not {tour.STEP, tour.PRESET, tour.GOTO} & set(ss)
    tour.start(ss, "recorded")
    tour.end(ss)
    assert tour.current(ss) is None


def test_a_tour_on_an_unknown_run_is_refused():
    with pytest.raises(ValueError, match="no tour on 'mine': choose one of live, recorded"):
        tour.start({}, "mine")
    assert tour.current({tour.STEP: 3, tour.FLAVOUR: "mine"}) is None
    assert tour.current({tour.STEP: 9, tour.FLAVOUR: "live"}) is None


def test_the_tour_follows_a_recorded_run_where_no_pair_is_installed():
    assert tour.default_flavour(installed=False) == "recorded"
    assert tour.default_flavour(installed=True) == "live"


def test_presets_come_once_on_the_steps_own_page():
    ss: dict = {}
    tour.start(ss, "recorded")
    tour.go(ss, 6)
    en = gettext_for("en")
    assert tour.arrive(ss, "pages/live.py", en) is None  # not the step's page: kept for later
    alpha, c, gamma = tour.recorded_point()
    assert tour.arrive(ss, "pages/theory.py", en) == {"theory_alpha": alpha, "theory_c": c, "theory_gamma": gamma}
    assert tour.arrive(ss, "pages/theory.py", en) is None  # once
    tour.move(ss, +1)
    zh = gettext_for("zh_CN")
    assert tour.arrive(ss, "pages/parallel.py", zh) == {"parallel_source": "录制：" + tour.RECORDED}
    tour.start(ss, "live")
    tour.go(ss, 6)
    assert tour.arrive(ss, "pages/theory.py", en) == {}  # the live run marks Theory itself


def test_the_recorded_point_is_the_runs_own():
    run = run_point(load_trace_file((TRACES_DIR / f"{tour.RECORDED}.json").read_bytes()))
    alpha, c, gamma = tour.recorded_point()
    assert (alpha, c, gamma) == (round(run.alpha, 2), round(run.c, 2), run.gamma) == (0.92, 0.17, 4)


def test_the_step_indicator():
    head = tour.head_html(3, 8, "Step one round")
    assert 'data-sv-tour-step="3"' in head and head.count("sv-tour-dot") == 8
    assert head.count("sv-tour-done") == 2 and head.count("sv-tour-now") == 1
    assert "Step one round" in head


# --- in the app (AppTest, the tiny pair) -------------------------------------------------------------

def _start_page(lang: str = "en") -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["lang"] = "zh" if lang == "zh_CN" else "en"
    at.run()
    at.switch_page("pages/start.py").run()
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("lang", ["en", "zh_CN"])
def test_start_here_lists_the_steps_and_starts_the_tour(lang):
    tr = gettext_for(lang)
    at = _start_page(lang)
    text = " ".join(m.value for m in at.markdown)
    for step in tour.LIVE_STEPS:
        assert tr(step.title) in text
    assert len(at.get("page_link")) == 8
    at.button(key="tour_start").click().run()
    assert not at.exception, at.exception
    assert at.session_state[tour.STEP] == 1 and at.session_state[tour.FLAVOUR] == "live"
    assert at.button(key="run").label == tr("Run")  # on the Live page now
    bar = " ".join(m.value for m in at.markdown)
    assert tour.step_text(tour.LIVE_STEPS[0], tr) in bar
    assert any('data-sv-tour-step="1"' in h.value for h in at.get("html"))
    at.button(key="tour_next").click().run()
    assert at.session_state[tour.STEP] == 2
    at.button(key="tour_end").click().run()
    assert tour.STEP not in at.session_state
    at.switch_page("pages/live.py").run()  # (AppTest forgets a page's own switch_page on the next run)
    assert not any("data-sv-tour-step" in h.value for h in at.get("html"))


def test_start_here_offers_only_the_recorded_run_without_a_pair(monkeypatch):
    """Where the pair is not installed (here it is: server_mode.pair_installed is told otherwise)."""
    monkeypatch.setattr(server_mode, "pair_installed", lambda name: False)
    at = _start_page()
    assert at.get("segmented_control")[0].options == [gettext_for("en")(tour.FLAVOURS["recorded"])]
    assert any("No model pair is installed here" in i.value for i in at.info)
    at.button(key="tour_start").click().run()
    assert at.session_state[tour.FLAVOUR] == "recorded"
    assert at.button(key="replay_play")  # on Replay, which needs no model


def test_theory_opens_on_the_recorded_runs_values():
    at = _start_page()
    at.session_state[tour.FLAVOUR] = "recorded"
    at.session_state[tour.STEP] = at.session_state[tour.PRESET] = 6
    at.switch_page("pages/theory.py").run()
    assert not at.exception, at.exception
    alpha, c, gamma = tour.recorded_point()
    assert (at.slider(key="theory_alpha").value, at.slider(key="theory_c").value,
            at.slider(key="theory_gamma").value) == (alpha, c, gamma)
    assert tour.PRESET not in at.session_state
    at.slider(key="theory_alpha").set_value(0.5).run()  # the user's own choice is kept from then on
    assert at.slider(key="theory_alpha").value == 0.5
