"""Finding one's way at 1280×720, in Chromium on the tiny pair, in English and in Chinese:
every page link shows in the top navigation (no "N more"), no button, tab or checkbox label
is cut, the guided tour runs end to end on a live run and on a recorded one, and the pair
card marks loading apart from ready.

A server of this module's own (the others share conftest's app_server), so that its first session sees
the pair load: the ``app`` fixture records what the pair card said meanwhile. Screenshots of
every page in both languages go to artifacts/nav-*.png.
"""

from __future__ import annotations

import re

import pytest
from helpers import (
    ACTION_TIMEOUT_MS,
    RUN_TIMEOUT_MS,
    VIEWPORT,
    app_server_running,
    button,
    compared_with_run_1,
    expect,
    no_exceptions,
    short_runs,
    shot,
    status,
    wait_for_pair,
    wait_for_run,
)

from specviz.record.i18n import gettext_for
from specviz.record.limits import DEFAULT_GAMMA
from specviz.ui import tour
from specviz.ui.chrome import NAV, PAGES

pytestmark = pytest.mark.browser
LANGS = {"en": "en", "zh": "zh_CN"}  # ?lang= tag -> catalog
# An element each page draws once its script has run: the wait for a page opened by a click.
DRAWN = {
    "pages/start.py": ".st-key-tour_start", "pages/live.py": ".st-key-run", "pages/replay.py": ".st-key-replay_play",
    "pages/parallel.py": ".st-key-parallel_source", "pages/about.py": ".katex-display",
    "pages/inspect_round.py": ".st-key-inspect_source", "pages/theory.py": ".st-key-theory_alpha",
    "pages/sweep.py": ".st-key-sweep_start", "pages/costs.py": ".st-key-costs_repeats",
    "pages/server.py": ".st-key-server_every",
}
# Every label a viewer reads on a control; which are cut (an ellipsis, or text wider than its box).
CUT_LABELS = """() => {
  const sel = 'button, [role="tab"], [data-testid="stCheckbox"] label, [data-testid="stRadio"] label, '
    + '[data-testid="stPageLink"] a, [data-testid="stTopNavLink"], [data-testid="stTopNavSection"]';
  const cut = [];
  for (const el of document.querySelectorAll(sel)) {
    const text = el.innerText.trim();
    if (!text || !el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) continue;
    for (const e of [el, ...el.querySelectorAll('*')]) {
      const cs = getComputedStyle(e);
      const clips = e === el || cs.overflowX !== 'visible' || cs.textOverflow !== 'clip';
      if (clips && e.textContent.trim() && e.scrollWidth > e.clientWidth) {
        cut.push(`${text.replace(/\\s+/g, ' ')} (${e.scrollWidth} px of text in ${e.clientWidth} px)`);
        break;
      }
    }
  }
  return cut;
}"""


@pytest.fixture(scope="module")
def server():
    """A fresh app server: the first session must see the pair load (a cold start)."""
    with app_server_running("streamlit-nav-server.log") as url:
        yield url


@pytest.fixture(scope="module")
def app(server, browser):
    """The server, once its first session has loaded the pair; with what the pair card's
    ``data-sv-pair`` said meanwhile, and whether the Run button was on the page each time."""
    ctx = browser.new_context(viewport=VIEWPORT)
    ctx.set_default_timeout(ACTION_TIMEOUT_MS)
    ctx.add_init_script("""
        window.__svPair = [];
        new MutationObserver(() => {
            const card = document.querySelector('.sv-card');
            const state = card ? card.getAttribute('data-sv-pair') : null;
            const last = window.__svPair[window.__svPair.length - 1];
            if (state && (!last || last.state !== state))
                window.__svPair.push({state, run: !!document.querySelector('.st-key-run button')});
        }).observe(document, {subtree: true, childList: true, attributes: true});
    """)
    page = ctx.new_page()
    try:
        page.goto(server)
        wait_for_pair(page)
        expect(button(page, "run")).to_be_visible()
        yield server, page.evaluate("window.__svPair")
    finally:
        ctx.close()


def _session(browser, url: str, lang: str, path: str = ""):
    """A fresh session at 1280×720 in ``lang`` on page ``path`` ("" for Live), the pair loaded."""
    ctx = browser.new_context(viewport=VIEWPORT)
    ctx.set_default_timeout(ACTION_TIMEOUT_MS)
    page = ctx.new_page()
    page.goto(f"{url}/{path}?lang={lang}")
    wait_for_pair(page)
    return ctx, page


def _go(page, path: str, lang: str) -> None:
    """Open ``path`` as a user does, through the top navigation (a link, or a group's menu),
    in the same session; wait until the page has drawn."""
    tr = gettext_for(LANGS[lang])
    title = tr(PAGES[path][0])
    nav = page.locator('[data-testid="stTopNav"]')
    group = next(name for name, paths in NAV.items() if path in paths)
    if group:
        nav.locator('[data-testid="stTopNavSection"]', has_text=tr(group)).click()
        link = page.locator('[data-testid="stTopNavDropdownLink"]').filter(has=page.get_by_text(title, exact=True))
    else:
        link = nav.locator('[data-testid="stTopNavLink"]').filter(has=page.get_by_text(title, exact=True))
    link.click()
    expect(page.locator(DRAWN[path]).first).to_be_visible(timeout=60_000)
    wait_for_run(page)


def test_loading_is_marked_apart_from_ready(app):
    """The first session saw the card say "loading" before "ready", with no Run button
    until then (the page's script state alone cannot tell the two apart)."""
    _url, states = app
    names = [s["state"] for s in states]
    assert names[0] == "loading" and names[-1] == "ready", states
    assert not any(s["run"] for s in states if s["state"] == "loading"), states


@pytest.mark.parametrize("lang", LANGS)
def test_every_page_link_shows_at_1280(app, browser, lang):
    """No "N more": every link and group of the top navigation shows whole, in the
    viewport, and every page is a link or in a group's menu."""
    url, _states = app
    tr = gettext_for(LANGS[lang])
    ctx, page = _session(browser, url, lang)
    try:
        nav = page.locator('[data-testid="stTopNav"]')
        rest = nav.locator(".rc-overflow-item-rest")  # Streamlit's "N more" (rc-overflow's rest item)
        expect(rest).to_have_text("")
        expect(rest).to_have_css("opacity", "0")
        right = nav.bounding_box()["x"] + nav.bounding_box()["width"]
        for group, paths in NAV.items():
            if group:
                item = nav.locator('[data-testid="stTopNavSection"]', has_text=tr(group))
                expect(item).to_be_in_viewport(ratio=1)
                item.click()
                menu = page.locator('[data-testid="stTopNavPopover"]')
                for path in paths:
                    expect(menu.get_by_role("menuitem", name=tr(PAGES[path][0]))).to_be_visible()
                page.keyboard.press("Escape")
                expect(menu).to_have_count(0)
                items = [item]
            else:
                items = [nav.locator('[data-testid="stTopNavLink"]').filter(has=page.get_by_text(tr(PAGES[p][0]),
                                                                                                  exact=True))
                         for p in paths]
            for it in items:
                expect(it).to_be_in_viewport(ratio=1)
                box = it.bounding_box()
                assert box["x"] + box["width"] <= right + 0.5, f"{it.inner_text()!r} runs past the navigation"
        shot(page, f"nav-{lang}-top.png")
    finally:
        ctx.close()


SWEEP_PLAN = "{runs} runs: {prompts} prompt(s) × ({gammas} γ values + the target alone) × {repeats} repeats."


def _sweep_briefly(page, lang: str) -> None:
    """A short sweep on Tune (the first prompt only, γ 1 and 2, one repeat, 16 tokens): its
    results bring the downloads. Start only once the plan says so: Start's callback sweeps
    the settings of the last script run that finished."""
    page.locator('.st-key-sweep_examples [data-tag-index="1"] button').click()  # the second prompt off
    expect(page.locator('.st-key-sweep_examples [data-tag-index="1"]')).to_have_count(0)
    wait_for_run(page)
    gammas = page.locator(".st-key-sweep_gamma_range").get_by_role("slider")
    top = gammas.nth(1)
    top.focus()
    for _ in range(8):  # 10 -> 2
        top.press("ArrowLeft")
    top.blur()
    wait_for_run(page)
    for key, value in (("sweep_repeats", "1"), ("sweep_max_new_tokens", "16")):
        box = page.locator(f".st-key-{key} input")
        box.fill(value)
        box.press("Enter")
        expect(box).to_have_value(value)
        wait_for_run(page)
    plan = gettext_for(LANGS[lang])(SWEEP_PLAN).format(runs=3, prompts=1, gammas=2, repeats=1)
    expect(page.locator('[data-testid="stMain"]')).to_contain_text(plan, timeout=60_000)
    wait_for_run(page)
    button(page, "sweep_start").click()
    expect(page.locator(".st-key-sweep_csv button")).to_be_visible(timeout=RUN_TIMEOUT_MS)
    wait_for_run(page)


def test_no_label_is_cut(app, browser):
    """On every page, in Chinese and then (the sidebar's switch, the same session) in English,
    after a Live run (so Theory offers "Use my run's α, c and γ") and a short sweep (so Tune
    offers its downloads): no button, tab or checkbox label is cut."""
    url, _states = app
    ctx, page = _session(browser, url, "zh")
    cut = {}
    try:
        short_runs(page)
        button(page, "run").click()
        expect(page.locator(".sv-badge.sv-finished")).to_be_visible(timeout=RUN_TIMEOUT_MS)
        wait_for_run(page)
        for lang in ("zh", "en"):
            for path in PAGES:
                _go(page, path, lang)  # Live too: Start here comes first, so the run's page was left
                if path == "pages/sweep.py" and lang == "zh":
                    _sweep_briefly(page, lang)
                if path == "pages/sweep.py":
                    page.locator(".st-key-sweep_csv").scroll_into_view_if_needed()  # for the screenshot
                if path == "pages/theory.py":
                    expect(button(page, "theory_use_run")).to_be_visible()
                no_exceptions(page)
                if found := page.evaluate(CUT_LABELS):
                    cut[f"{lang} {path}"] = found
                shot(page, f"nav-{lang}-{path.removeprefix('pages/').removesuffix('.py')}.png")
            if lang == "zh":
                page.locator('[data-testid="stSidebar"]').get_by_text("English", exact=True).click()
                expect(page.locator('[data-testid="stTopNav"]')).to_contain_text(PAGES["pages/start.py"][0])
                wait_for_run(page)
    finally:
        ctx.close()
    assert not cut, f"labels cut at 1280×720: {cut}"


def _step_on_screen(page, flavour: str, n: int, lang: str) -> tour.Step:
    """The bar shows step ``n`` on its page, the widget it names is there and outlined."""
    step = tour.STEPS[flavour][n - 1]
    tr = gettext_for(LANGS[lang])
    bar = page.locator(".st-key-sv-tour")
    # the step may be on another page, opened by Next: as long to come as that page's content (below), as
    # long as a run may take (a loaded phase once took over 60 s to draw the About page's formulas)
    expect(bar.locator(f'[data-sv-tour-step="{n}"]')).to_be_attached(timeout=RUN_TIMEOUT_MS)
    expect(bar).to_contain_text(tr(step.title))
    expect(page.locator(DRAWN[step.page]).first).to_be_visible(timeout=RUN_TIMEOUT_MS)
    if not step.figure:
        # the page may draw again (the tour's own rerun on arrival): on a loaded machine About's main area
        # was still empty 20 s after its heading had shown
        expect(page.get_by_text(tr(step.widget), exact=True).filter(visible=True).first).to_be_visible(
            timeout=RUN_TIMEOUT_MS)
    if step.highlight:
        target = page.locator(step.highlight).filter(visible=True).first
        expect(target).to_be_attached(timeout=30_000)
        expect(target).to_have_css("outline-style", "solid")
    wait_for_run(page)
    return step


def _next(page) -> None:
    """Next (or Finish), once the bar is drawn: on a loaded 2-core machine the page arriving from
    a switch was once blank for over 30 s after its bar had first shown."""
    expect(button(page, "tour_next")).to_be_visible(timeout=RUN_TIMEOUT_MS)
    button(page, "tour_next").click()


def test_tour_end_to_end_on_a_live_run(app, browser):
    """Start here → the eight steps on the user's own run (Run, Step, γ, Theory's "Use my run",
    Parallel on the live run) → Finish: the bar goes."""
    url, _states = app
    ctx, page = _session(browser, url, "en", "start")
    try:
        expect(page.locator(".st-key-tour_pick")).to_contain_text("your own run (Live)")
        button(page, "tour_start").click()
        _step_on_screen(page, "live", 1, "en")
        short_runs(page)
        shot(page, "nav-tour-en-1.png")
        button(page, "run").click()
        expect(page.locator(".sv-badge.sv-finished")).to_be_visible(timeout=RUN_TIMEOUT_MS)
        wait_for_run(page)
        _next(page)
        _step_on_screen(page, "live", 2, "en")
        expect(page.locator(".sv-strip .sv-tok").first).to_be_visible()
        _next(page)
        _step_on_screen(page, "live", 3, "en")
        button(page, "step").click()
        expect(status(page)).to_contain_text("Round 1", timeout=60_000)
        wait_for_run(page)
        _next(page)
        _step_on_screen(page, "live", 4, "en")
        expect(page.locator('[class*="st-key-timeline-"]').first).to_be_in_viewport()  # scrolled to it
        shot(page, "nav-tour-en-4.png")
        _next(page)
        _step_on_screen(page, "live", 5, "en")
        thumb = page.locator(".st-key-gamma").get_by_role("slider")
        thumb.focus()
        for _ in range(DEFAULT_GAMMA - 4):  # to 4, as the step says
            thumb.press("ArrowLeft")
        expect(page.locator(".st-key-gamma [data-testid='stSliderThumbValue']")).to_have_text("γ = 4")
        thumb.blur()
        wait_for_run(page)
        expect(status(page)).to_contain_text("Settings changed")  # the first run's status, γ moved since
        button(page, "run").click()
        # the second run done: its own status, without the first's note (a busy mark on the first run
        # alone must not pass for the second's end: under load the tour went on with the first run)
        done = page.locator(".sv-status", has=page.locator(".sv-badge.sv-finished"))
        expect(done.filter(has_not_text="Settings changed")).to_be_visible(timeout=RUN_TIMEOUT_MS)
        # the second run is compared with the first, or, on a busy machine, says why not
        expect(compared_with_run_1(page)).to_be_visible(timeout=RUN_TIMEOUT_MS)
        wait_for_run(page)
        _next(page)
        _step_on_screen(page, "live", 6, "en")
        button(page, "theory_use_run").click()
        # the run's γ: 4, or the mean of its rounds' where the draft stopped early (the default policy)
        expect(page.locator(".st-key-theory_gamma [data-testid='stSliderThumbValue']")).to_have_text(
            re.compile(r"^[1-4]$"))
        wait_for_run(page)
        shot(page, "nav-tour-en-6.png")
        _next(page)
        _step_on_screen(page, "live", 7, "en")
        expect(page.locator(".st-key-parallel_source input")).to_have_value("This session's last Live run")
        _next(page)
        _step_on_screen(page, "live", 8, "en")
        bar = page.locator(".st-key-sv-tour")
        for path in tour.LIVE_STEPS[-1].links:
            expect(bar.locator('[data-testid="stPageLink"]', has_text=PAGES[path][0])).to_be_visible()
        shot(page, "nav-tour-en-8.png")
        _next(page)  # Finish
        expect(bar).to_have_count(0)
        wait_for_run(page)
        no_exceptions(page)
    finally:
        ctx.close()


def test_tour_on_a_recorded_run_in_chinese(app, browser):
    """The tour with no model: Replay's recorded run, Theory's sliders set to that run's α, c
    and γ, Parallel on the same run; Back goes back a step, End ends it."""
    url, _states = app
    zh = gettext_for("zh_CN")
    ctx, page = _session(browser, url, "zh", "start")
    try:
        page.locator(".st-key-tour_pick").get_by_text(zh(tour.FLAVOURS["recorded"])).click()
        wait_for_run(page)
        button(page, "tour_start").click()
        _step_on_screen(page, "recorded", 1, "zh")
        source = page.locator(".st-key-replay_source input")
        expect(source).to_have_value(zh("Recorded: ") + tour.RECORDED)
        shot(page, "nav-tour-zh-1.png")
        for n in (2, 3):
            _next(page)
            _step_on_screen(page, "recorded", n, "zh")
        rounds = page.locator('[data-testid="stSidebar"]').get_by_role("slider", name=zh("Show up to round"))
        button(page, "replay_restart").click()
        expect(rounds).to_have_value("0")
        wait_for_run(page)
        button(page, "replay_step").click()
        expect(rounds).to_have_value("1")
        wait_for_run(page)
        for n in (4, 5, 6):
            _next(page)
            _step_on_screen(page, "recorded", n, "zh")
        alpha, c, gamma = tour.recorded_point()
        for key, value in (("theory_alpha", f"{alpha:.2f}"), ("theory_c", f"{c:.2f}"), ("theory_gamma", str(gamma))):
            expect(page.locator(f".st-key-{key} [data-testid='stSliderThumbValue']")).to_have_text(value)
        shot(page, "nav-tour-zh-6.png")
        _next(page)
        _step_on_screen(page, "recorded", 7, "zh")
        expect(page.locator(".st-key-parallel_source input")).to_have_value(zh("Recorded: ") + tour.RECORDED)
        button(page, "tour_back").click()
        _step_on_screen(page, "recorded", 6, "zh")
        button(page, "tour_end").click()
        expect(page.locator(".st-key-sv-tour")).to_have_count(0)
        expect(page).to_have_url(re.compile(r"/theory"))
        no_exceptions(page)
    finally:
        ctx.close()
