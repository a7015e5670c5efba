"""The guided tour ("Start here"): a newcomer's first run in eight steps.

The tour's state is three session keys: the step on screen (``tour_step``, 1 to 8; absent,
no tour), the run it follows (``tour_flavour``: ``live``, the user's own run on the Live
page, or ``recorded``, a recorded trace on Replay, which needs no model), and the step
whose page has yet to open (``tour_preset``: there, once, the step sets its presets and
scrolls its widget into view).
The functions that change it take any mapping (``st.session_state`` in the app, a dict in
the tests). Each ``Step`` names the page it happens on, the widget or figure it points at
(a widget by the label the page shows), what to do in one or two sentences, and a CSS
selector of the element the step bar outlines. ``render_start`` draws the Start here page;
``render_bar`` the step bar that every page draws at its top (frame.page_chrome) while the
tour runs.
"""

from __future__ import annotations

import functools
import html
import json
from collections.abc import MutableMapping
from dataclasses import dataclass

import streamlit as st

from specviz.figures.theory import run_point
from specviz.record.i18n import N_, Translator
from specviz.ui.chrome import FEATURED_TRACE, PAGES, TRACES_DIR, keep_choices, translator
from specviz.ui.lang import _
from specviz.ui.replay import load_trace_file

STEP, FLAVOUR, PRESET, GOTO = "tour_step", "tour_flavour", "tour_preset", "tour_goto"
FLAVOURS = {"live": N_("your own run (Live)"), "recorded": N_("a recorded run (no model needed)")}
RECORDED = FEATURED_TRACE  # the recorded flavour's run (code, γ 4, greedy)
THEORY_MAX_GAMMA = 16  # the Theory page's γ slider ends here


@dataclass(frozen=True)
class Step:
    title: str  # N_: the step's name
    page: str  # the page it happens on: a key of chrome.PAGES
    widget: str  # N_: what it points at; a widget by the label the page shows
    text: str  # N_: what to do and what to see, one or two sentences
    highlight: str = ""  # CSS selector of the element the bar outlines on that page
    figure: bool = False  # ``widget`` describes a figure rather than quoting a label
    links: tuple[str, ...] = ()  # further pages the step offers


_STRIP = Step(
    N_("Read the strip"), "pages/live.py", N_("the token strip"),
    N_("Each mark in the strip is one token: a green underline is a draft guess the target accepted, a "
       "strike-through one it rejected, and a blue **{fix}** box the target's own token in its place. The legend "
       "above the strip names every mark."),
    ".sv-strip", figure=True)
_TIMELINE = Step(
    N_("Read the timeline's waits"), "pages/live.py", N_("the timeline"),
    N_("Below the strip, the timeline puts every forward pass on the clock: the Draft and Target lanes take "
       "turns, and while one model works the other waits (hatched, its idle share under its name). That serial "
       "wait is what PEARL and SSD remove in step 7."),
    '[class*="st-key-timeline-"]', figure=True)
_WHY_TEXT = N_("syntax and keys pin code and JSON down, while in open prose a small draft picks another "
               "wording, as plausible as the target's, that the target rejects.")
_NEXT = Step(
    N_("What to try next"), "pages/about.py", N_("How speculative decoding works"),
    N_("This page has the formulas behind what you saw. Then walk one round token by token in **{inspect}**, "
       "find this machine's best γ in **{tune}**, and measure how a verify pass grows with its tokens in "
       "**{costs}**."),
    links=("pages/inspect_round.py", "pages/sweep.py", "pages/costs.py"))

LIVE_STEPS = (
    Step(N_("Run"), "pages/live.py", N_("Run"),
         N_("Press **{run}** in the toolbar. The small draft model guesses γ tokens ahead, and the large target "
            "checks all of them in one forward pass, round after round."),
         ".st-key-run button"),
    _STRIP,
    Step(N_("Step one round"), "pages/live.py", N_("Step"),
         N_("Press **{step}** to watch a single round in slow motion: the draft's guesses appear as dashed boxes, "
            "the target checks them in one pass, and the verdict marks each one. The status line above the "
            "strip says which phase you see."),
         ".st-key-step button"),
    _TIMELINE,
    Step(N_("Move γ and compare"), "pages/live.py", N_("γ · draft length"),
         N_("Move **{gamma}** to 4, press **{run}** again and compare the two rows of the **{history}**; "
            "then run the **{prose}** example. Its acceptance is lower: {why}"),
         ".st-key-gamma"),
    Step(N_("See the theory with your run marked"), "pages/theory.py", N_("Use my run's α, c and γ"),
         N_("Theory draws the speedup the formula expects against γ, with your last run marked ★ on the "
            "curves. Press **{use_run}** to set the sliders to your run and read its best γ."),
         ".st-key-theory_use_run button"),
    Step(N_("See PEARL and SSD on your run"), "pages/parallel.py", N_("Run to replay"),
         N_("Parallel replays your run (**{run_to_replay}**) under three schedules: serial, PEARL (the target "
            "verifies while the draft drafts) and SSD (the draft pre-drafts the next block for each likely "
            "verdict). Compare the lanes' waits and their tokens per second."),
         ".st-key-parallel_source"),
    _NEXT,
)

RECORDED_STEPS = (
    Step(N_("Play a recorded run"), "pages/replay.py", N_("Play"),
         N_("This tour needs no model: it replays a real run of the default pair, **{recorded}{trace}** in the "
            "sidebar's **{recorded_run}**. Press **{play}** to watch it round by round, at its recorded timings."),
         ".st-key-replay_play button"),
    Step(_STRIP.title, "pages/replay.py", _STRIP.widget, _STRIP.text, _STRIP.highlight, figure=True),
    Step(N_("Step one round"), "pages/replay.py", N_("Step"),
         N_("Press **{step}** in the sidebar to show one round more, the draft's guesses and the target's verdict; "
            "**{show_up_to}** says where you are."),
         ".st-key-replay_step button"),
    Step(_TIMELINE.title, "pages/replay.py", _TIMELINE.widget, _TIMELINE.text, _TIMELINE.highlight, figure=True),
    Step(N_("Compare γ and the text"), "pages/replay.py", N_("Recorded run"),
         N_("In **{recorded_run}**, pick **{recorded}code-gamma8-greedy** (γ 8) and compare its tokens per second "
            "and acceptance with γ 4; then pick **{recorded}prose-gamma4-greedy**. Its acceptance is lower: {why}"),
         ".st-key-replay_source"),
    Step(N_("See the theory with the run marked"), "pages/theory.py", N_("α · per-token acceptance"),
         N_("Theory draws the speedup the formula expects against γ. The tour has set its sliders (**{alpha}**, "
            "**{c}**, **{gamma}**) to the recorded run's, so the γ marked on the curves is that run."),
         ".st-key-theory_alpha, .st-key-theory_c, .st-key-theory_gamma"),
    Step(N_("See PEARL and SSD on the run"), "pages/parallel.py", N_("Run to replay"),
         N_("Parallel replays the same recorded run (**{run_to_replay}**) under three schedules: serial, PEARL (the "
            "target verifies while the draft drafts) and SSD (the draft pre-drafts the next block for each likely "
            "verdict). Compare the lanes' waits and their tokens per second."),
         ".st-key-parallel_source"),
    _NEXT,
)
STEPS = {"live": LIVE_STEPS, "recorded": RECORDED_STEPS}


# The names the steps quote, as the pages show them: widget labels and page titles ({name} in a step's text).
NAMES = {
    "run": N_("Run"), "step": N_("Step"), "gamma": N_("γ · draft length"), "history": N_("Run history"),
    "prose": N_("Prose"), "use_run": N_("Use my run's α, c and γ"), "alpha": N_("α · per-token acceptance"),
    "c": N_("c · cost ratio"), "fix": N_("fix"), "run_to_replay": N_("Run to replay"), "play": N_("Play"),
    "recorded_run": N_("Recorded run"), "show_up_to": N_("Show up to round"), "recorded": N_("Recorded: "),
    "inspect": PAGES["pages/inspect_round.py"][0], "tune": PAGES["pages/sweep.py"][0], "costs": PAGES["pages/costs.py"][0],
}


def step_text(step: Step, tr: Translator = _) -> str:
    """The step's sentences in the page's language, the names it quotes as the pages show them."""
    names = {key: tr(name) for key, name in NAMES.items()}
    return tr(step.text).format(why=tr(_WHY_TEXT), trace=RECORDED, **names)


# --- state --------------------------------------------------------------------------------------

def default_flavour(installed: bool) -> str:
    """The tour follows the user's own run where the pair is installed, else a recorded one."""
    return "live" if installed else "recorded"


def current(ss: MutableMapping) -> tuple[int, Step] | None:
    """The step on screen (its number from 1) and the step itself; None when no tour runs."""
    n, flavour = ss.get(STEP), ss.get(FLAVOUR)
    if flavour not in STEPS or not isinstance(n, int) or not 1 <= n <= len(STEPS[flavour]):
        return None
    return n, STEPS[flavour][n - 1]


def start(ss: MutableMapping, flavour: str) -> None:
    """Begin at step 1 on ``flavour``'s run; the next script run opens step 1's page."""
    if flavour not in STEPS:
        raise ValueError(f"no tour on {flavour!r}: choose one of {', '.join(STEPS)}")
    ss[FLAVOUR] = flavour
    go(ss, 1)


def go(ss: MutableMapping, n: int) -> None:
    """Show step ``n`` (clamped to the tour); the next script run opens its page. Past the last
    step the tour ends."""
    steps = STEPS.get(ss.get(FLAVOUR), ())
    if n > len(steps):
        end(ss)
        return
    ss[STEP] = max(1, n)
    ss[PRESET] = ss[GOTO] = ss[STEP]


def move(ss: MutableMapping, delta: int) -> None:
    """Back (−1) or Next (+1) from the step on screen."""
    if (now := current(ss)) is not None:
        go(ss, now[0] + delta)


def end(ss: MutableMapping) -> None:
    """End the tour (End, or Next on the last step): the bar goes; the run it followed stays chosen."""
    for key in (STEP, PRESET, GOTO):
        ss.pop(key, None)


def page_to_open(ss: MutableMapping, here: str) -> str | None:
    """Once after Start, Back or Next: the step's page, when it is not the one on screen."""
    if ss.pop(GOTO, None) is None or (now := current(ss)) is None:
        return None
    return now[1].page if now[1].page != here else None


def arrive(ss: MutableMapping, here: str, tr: Translator = _) -> dict[str, object] | None:
    """None, unless the step's page opens for the first time since Start, Back or Next: then
    the widget values the step sets there. Only the recorded run needs any: Theory's sliders
    at the run's α, c and γ (no Live run marks its curves), and Parallel's choice of run (it
    would open on the first recorded file)."""
    now = current(ss)
    if now is None or ss.get(PRESET) != now[0] or now[1].page != here:
        return None
    del ss[PRESET]
    if ss[FLAVOUR] == "recorded" and here == "pages/theory.py":
        alpha, c, gamma = recorded_point()
        return {"theory_alpha": alpha, "theory_c": c, "theory_gamma": gamma}
    if ss[FLAVOUR] == "recorded" and here == "pages/parallel.py":
        return {"parallel_source": tr("Recorded: ") + RECORDED}
    return {}


@functools.lru_cache(maxsize=1)
def recorded_point() -> tuple[float, float, int]:
    """The recorded run's α (from its tokens per round), c and γ, as Theory's sliders take them
    (α to 0.99, c to 1, γ to 16, two decimals): what "Use my run's α, c and γ" sets for a Live run."""
    run = run_point(load_trace_file((TRACES_DIR / f"{RECORDED}.json").read_bytes()))
    alpha = round(min(max(run.alpha, 0.0), 0.99), 2)
    c = round(min(max(run.c, 0.0), 1.0), 2)
    return alpha, c, min(run.gamma, THEORY_MAX_GAMMA)


# --- drawing ------------------------------------------------------------------------------------

def page_name(path: str) -> str:
    return _(PAGES[path][0])


def head_html(n: int, total: int, title: str) -> str:
    """The bar's first line: one dot per step (those done ticked off, the current one filled)
    and the step's title."""
    dots = "".join(
        f'<span class="sv-tour-dot {"sv-tour-now" if i == n else "sv-tour-done" if i < n else ""}">{i}</span>'
        for i in range(1, total + 1))
    label = html.escape(_("Step {n} of {total}").format(n=n, total=total), quote=True)
    name = html.escape(_("Tour") + " · " + title)
    return (f'<div class="sv-tour-head"><span class="sv-tour-steps" data-sv-tour-step="{n}" role="img" '
            f'aria-label="{label}">{dots}</span><b>{name}</b></div>')


def highlight_css(selector: str) -> str:
    """An outline around the step's widget (three pulses, then steady); nothing where it is absent."""
    return (f"<style>{selector} {{ outline: 0.22rem solid var(--sv-draft); outline-offset: 0.2rem; "
            f"border-radius: 0.5rem; animation: sv-tour-pulse 0.9s ease-in-out 3; }} "
            f"@media (prefers-reduced-motion: reduce) {{ {selector} {{ animation: none; }} }}</style>")


def scroll_script(selector: str) -> str:
    """Bring the step's widget into view once it is drawn, and keep it there while the page
    settles: checked every 250 ms, scrolled (at once, not smoothly) whenever it is out of view,
    for 2 s after it first has a size, or 30 s in all. A single smooth scroll as soon as the
    widget existed left it out of view on a loaded machine, where the page grew above it after."""
    return ("<script>(() => { let tries = 0, seen = 0; const timer = setInterval(() => { "
            f"const el = document.querySelector({json.dumps(selector)}); "
            "const box = el ? el.getBoundingClientRect() : null; "
            "if (box && box.height > 0) { "
            "if (box.bottom <= 0 || box.top >= window.innerHeight) el.scrollIntoView({block: 'center'}); "
            "seen++; } "
            "if (seen >= 8 || ++tries > 120) clearInterval(timer); }, 250); })();</script>")


def render_bar(here: str) -> None:
    """The tour's bar above the page ``here`` (a key of chrome.PAGES) while the tour runs: the step
    indicator, the step's sentences, Back, Next and End, a link to the step's page when it is not
    this one, and the outline around the step's widget. Opens the step's page after Start, Back
    or Next; as the step's page opens, sets its presets and scrolls its widget into view."""
    ss = st.session_state
    if (target := page_to_open(ss, here)) is not None:
        st.switch_page(target)
    arrived = arrive(ss, here)
    if arrived:
        ss.update(arrived)
    if (now := current(ss)) is None:
        return
    n, step = now
    total = len(STEPS[ss[FLAVOUR]])
    with st.container(border=True, key="sv-tour"):
        head, buttons = st.columns([1.3, 1], vertical_alignment="center")
        head.html(head_html(n, total, _(step.title)))
        with buttons, st.container(horizontal=True, horizontal_alignment="right", vertical_alignment="center"):
            st.button(_("Back"), key="tour_back", icon=":material/chevron_left:", disabled=n == 1,
                      on_click=move, args=(ss, -1))
            st.button(_("Next") if n < total else _("Finish"), key="tour_next", type="primary",
                      icon=":material/chevron_right:" if n < total else ":material/check:", on_click=move,
                      args=(ss, 1))
            st.button(_("End the tour"), key="tour_end", type="tertiary", icon=":material/close:", on_click=end,
                      args=(ss,))
        st.markdown(step_text(step))
        if here != step.page:
            st.page_link(step.page, label=_("This step is on {page}: open it").format(page=page_name(step.page)),
                         icon=PAGES[step.page][1])
        if step.links:
            with st.container(horizontal=True):
                for path in step.links:
                    st.page_link(path, label=page_name(path), icon=PAGES[path][1])
    if here == step.page and step.highlight:
        st.html(highlight_css(step.highlight))
        if arrived is not None:
            st.html(scroll_script(step.highlight), unsafe_allow_javascript=True)


def render_start(installed: bool) -> None:
    """The Start here page: what the tour does, whose run it follows, the eight steps (each
    with a link to its page and the widget it points at), and Start (or Continue)."""
    ss = st.session_state
    st.markdown("## " + _("Start here: your first run in eight steps"))
    st.markdown(_("A small draft model guesses, a large target checks. Eight short steps take you through a run, "
                  "from the first press of Run to PEARL and SSD, in about ten minutes; a bar at the top of each "
                  "page says what to do and where."))
    flavours = list(FLAVOURS) if installed else ["recorded"]
    if not installed:
        st.info(_("No model pair is installed here, so the tour follows a recorded run: every step works "
                  "without a model."), icon=":material/replay:")
    tr = translator()  # bound now: the format_func may run outside the script run
    keep_choices("tour_pick")  # shown translated: keep the choice when the language changes
    pick = st.segmented_control(_("The tour follows"), flavours, format_func=lambda f: tr(FLAVOURS[f]),
                                default=ss.get(FLAVOUR) if ss.get(FLAVOUR) in flavours else default_flavour(installed),
                                required=True, key="tour_pick")
    now = current(ss)
    with st.container(horizontal=True):
        if now is not None and ss[FLAVOUR] == pick:
            st.button(_("Continue at step {n}").format(n=now[0]), key="tour_continue", type="primary",
                      icon=":material/play_arrow:", on_click=go, args=(ss, now[0]))
            st.button(_("Start again"), key="tour_start", icon=":material/restart_alt:", on_click=start,
                      args=(ss, pick))
        else:
            st.button(_("Start the tour"), key="tour_start", type="primary", icon=":material/play_arrow:",
                      on_click=start, args=(ss, pick))
    for i, step in enumerate(STEPS[pick], start=1):
        text, link = st.columns([4, 1.4], vertical_alignment="center")
        text.markdown(f"**{i}. {_(step.title)}** · {step_text(step)}")
        link.page_link(step.page, label=page_name(step.page), icon=PAGES[step.page][1])
        link.caption(_(step.widget) if step.figure else f"“{_(step.widget)}”")
