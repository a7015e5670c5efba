"""Streamlit helpers: the one specviz module that imports streamlit.

* the model pair, loaded once per server process (``st.cache_resource``) in a
  background thread, with live progress and a friendly page when it is missing;
* the sidebar's pair card (pair, device, dtype, memory);
* the live run: a small state machine kept in ``st.session_state`` that Run,
  Step, Autoplay and Stop drive, and a view of placeholders it updates in place.

The engine's clock stops while a round is held, so the slow-motion animation
between rounds never touches the timings shown: they are the real ones.
"""

from __future__ import annotations

import dataclasses
import html
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import streamlit as st

from specviz import (
    BadInput,
    Decoding,
    ModelError,
    ModelPair,
    RunConfig,
    SpecvizError,
    Trace,
    autoregressive,
    load_pair,
    speculative,
)
from specviz import figures as F
from specviz.compare import Comparison, compare

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"
TRACES_DIR = ASSETS / "traces"

PAIRS = {"default": "Qwen2.5-Coder 0.5B → 1.5B", "tiny": "Tiny test pair (random weights)"}
PAIR_DTYPES = {
    "auto": "auto (bf16 where the CPU has it)",
    "float32": "float32 (token-exact)",
    "bfloat16": "bfloat16 (faster)",
}
EXAMPLES = {
    "Code": "Write a Python function is_prime(n) that returns True when n is a prime number.",
    "JSON": "Return a JSON object for a book with the keys title, author, year and tags (three tags).",
    "Prose": "Describe a rainy afternoon in a small seaside town in three sentences.",
    "中文": "用三句话介绍长城的历史。",
    "Counting": "Count from 1 to 40, separated by commas.",
}
SHORTCUTS = {"run": "G", "step": "S", "autoplay": "A", "stop": "X"}
SPEEDS = {"Instant": 0.0, "Fast": 0.35, "Normal": 1.0, "Slow": 2.2}
DEFAULTS = {
    "prompt": EXAMPLES["Code"],
    "gamma": 4,
    "temperature": 0.0,
    "top_p": 1.0,
    "max_new_tokens": 64,
    "seed": 0,
    "race": True,
    "speed": "Normal",
}
# One round at a time in this process: viewers in several browser tabs share the models,
# and a forward pass timed while another session's pass runs would not be the real cost.
# The lock is taken around next(), where the engine's clock runs; waiting for it happens
# while the clock is paused, so it never shows up in the timings.
ENGINE_LOCK = threading.Lock()
RENDER_EVERY_S = 0.4  # Run at full speed redraws the text at most this often...
CHARTS_EVERY_S = 1.2  # ...and the charts this often: the browser shares the CPU with the models


def page_chrome() -> None:
    """What every page shares: page config, stylesheet, logo. Each page calls it first.

    (Pages do it themselves rather than app.py: with a folder named ``pages/``, Streamlit
    runs a page file on its own when a server's first session opens on that page, and
    AppTest does so on every rerun.)"""
    st.set_page_config(
        page_title="specviz · speculative decoding, live",
        page_icon=str(ASSETS / "icon.svg"),
        layout="wide",
        initial_sidebar_state=340,  # a width in px: a readable prompt box
        menu_items={"About": "specviz: a small draft model proposes, a large target verifies. "
                             "Watch what is accepted, what is thrown away, and who waits for whom."},
    )
    st.html(f"<style>{(ASSETS / 'specviz.css').read_text(encoding='utf-8')}</style>")
    st.logo(str(ASSETS / "logo.svg"), icon_image=str(ASSETS / "icon.svg"), size="large")


def kind_of(prompt: str) -> str:
    for name, text in EXAMPLES.items():
        if prompt.strip() == text:
            return name
    return "custom"


# --- the pair: loaded once per process, in a thread, with progress ------------------------

_STAGES = (  # (message start, overall fraction before, span) for a monotonic overall bar
    ("assembling draft", 0.00, 0.06), ("assembled and verified draft", 0.06, 0.0),
    ("converting draft gguf (first run only): tokenizer", 0.08, 0.0),
    ("converting draft gguf (first run only): dequantising", 0.12, 0.0),
    ("converting draft gguf (first run only): saving", 0.25, 0.0),
    ("assembling target", 0.30, 0.10), ("assembled and verified target", 0.40, 0.0),
    ("converting target gguf (first run only): tokenizer", 0.42, 0.0),
    ("converting target gguf (first run only): dequantising", 0.48, 0.0),
    ("converting target gguf (first run only): saving", 0.68, 0.0),
    ("checking that the tokenizers match", 0.75, 0.0),
    ("loading draft weights", 0.80, 0.0), ("loading target weights", 0.88, 0.0),
    ("pair ready", 1.0, 0.0),
)


class PairLoader:
    """Loads one pair in a background thread; pages poll ``done``/``message``/``fraction``."""

    def __init__(self, name: str, dtype: str):
        self.name, self.dtype = name, dtype
        self.message = "Starting"
        self.fraction = 0.0
        self.cold = False
        self.pair: ModelPair | None = None
        self.error: Exception | None = None
        self.started = time.monotonic()
        self.finished: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"specviz-load-{name}", daemon=True)
        self._thread.start()

    def _progress(self, message: str, fraction: float | None) -> None:
        self.message = message
        low = message.lower()
        if low.startswith(("assembling", "converting")):
            self.cold = True
        for start, before, span in _STAGES:
            if low.startswith(start):
                self.fraction = max(self.fraction, before + span * (fraction or 0.0))
                break

    def _run(self) -> None:
        try:
            dtype = "float32" if self.name == "tiny" else self.dtype
            self.pair = load_pair(self.name, device="auto", dtype=dtype, progress=self._progress)
        except Exception as exc:  # shown to the user; SpecvizError carries a fix-it message
            self.error = exc
        finally:
            self.finished = time.monotonic()

    @property
    def done(self) -> bool:
        return self.finished is not None

    @property
    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started


@st.cache_resource(show_spinner=False, max_entries=4)
def _loader(name: str, dtype: str) -> PairLoader:
    return PairLoader(name, dtype)


def pair_key() -> tuple[str, str]:
    """(pair name, dtype) chosen in the sidebar (or by SPECVIZ_PAIR)."""
    ss = st.session_state
    name = ss.get("pair_name") or env_pair()
    dtype = ss.get("pair_dtype", "auto") if name == "default" else "float32"
    return name, dtype


def env_pair() -> str:
    env = os.environ.get("SPECVIZ_PAIR", "default").strip().lower() or "default"
    return env if env in PAIRS else "default"


def drop_other_precisions() -> None:
    """Callback of the precision choice: forget the default pair in other dtypes, so two
    copies of ~2 GB of weights (9 GB in fp32) do not stay resident side by side."""
    keep = st.session_state.get("pair_dtype", "auto")
    for dtype in PAIR_DTYPES:
        if dtype != keep:
            _loader.clear("default", dtype)


def use_tiny() -> None:
    st.session_state["pair_name"] = "tiny"


def retry_load() -> None:
    _loader.clear(*pair_key())


def _install_command(message: str) -> str | None:
    for line in message.splitlines():
        if "Fix:" in line:
            cmd = line.split("Fix:", 1)[1].strip()
            return cmd.split("  (")[0].strip()
    return None


def recorded_traces() -> list[Path]:
    return sorted(TRACES_DIR.glob("*.json")) if TRACES_DIR.is_dir() else []


def require_pair() -> ModelPair | None:
    """The chosen pair, loading it (with progress) if needed. Where it cannot be loaded,
    say why and how to fix it, offer the tiny pair, and return None."""
    name, dtype = pair_key()
    loader = _loader(name, dtype)
    if loader.done and loader.error is None:
        return loader.pair
    card = sidebar_pair(divider=False)  # the page waits or stops here: show the pair choice now
    if not loader.done:
        box = st.container(border=True)
        box.markdown(f"#### Loading the model pair: {PAIRS[name]}")
        bar = box.progress(0.0, text="Starting")
        note = box.empty()
        while not loader.done:
            bar.progress(min(loader.fraction, 1.0), text=f"{loader.message} · {loader.elapsed:.0f} s")
            card.html(_card_html(loader))
            if loader.cold:
                note.caption(
                    "First start on this machine: the GGUF weights are assembled, checked and converted "
                    "once (about 1 to 2 minutes). Later starts load the converted copy in seconds."
                )
            time.sleep(0.25)
        st.rerun()  # redraw the whole app (sidebar card included) with the pair in hand
    if loader.error is None:
        return loader.pair
    err = loader.error
    message = str(err) if isinstance(err, SpecvizError) else f"{type(err).__name__}: {err}"
    cmd = _install_command(message) if isinstance(err, ModelError) else None
    said = "\n\n".join(line for line in message.splitlines() if not (cmd and "Fix:" in line))
    st.error(f"**The {PAIRS[name]} pair could not be loaded.**\n\n{said}", icon=":material/error:")
    if cmd:
        st.markdown("Install or repair it with:")
        st.code(cmd, language="bash", wrap_lines=True)
        if "requirements.txt" in message:
            st.caption("or install the whole pair at once: `pip install -r requirements.txt`")
    cols = st.columns([1, 1, 2])
    if name != "tiny":
        cols[0].button("Use the tiny test pair", icon=":material/science:", on_click=use_tiny,
                       type="primary", key="use_tiny")
    cols[1].button("Try again", icon=":material/refresh:", on_click=retry_load, key="retry_load")
    if recorded_traces():
        st.page_link("pages/replay.py", label="Or replay a recorded run (no model needed)",
                     icon=":material/replay:")
    return None


def _rss_mb() -> float | None:
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except Exception:
        return None


def _card_html(loader: PairLoader) -> str:
    if not loader.done:
        body = (f"<b>Loading…</b> {int(100 * loader.fraction)}% · {loader.elapsed:.0f} s<br>"
                f"<span class='sv-dim'>{html.escape(loader.message)}</span>")
    elif loader.error is not None:
        body = "<b>Not available</b><br><span class='sv-dim'>the page says how to fix it</span>"
    else:
        d = loader.pair.describe()
        rss = _rss_mb()
        mem = f"weights {d['weights_mb']:,} MB" + (f" · process {rss / 1024:.1f} GB" if rss else "")
        body = (
            f"<b>Draft</b> {html.escape(d['draft'])}<br><b>Target</b> {html.escape(d['target'])}<br>"
            f"<span class='sv-dim'>{html.escape(d['device'])} · {html.escape(d['dtype'])} · {mem}<br>"
            f"loaded in {d['load_ms'] / 1000:.1f} s</span>"
        )
    return f"<div class='sv-card'>{body}</div>"


def sidebar_pair(divider: bool = True):
    """Pair choice and the pair card (names, device, dtype, memory) at the foot of the
    sidebar. Every page calls it once, after its own sidebar widgets. Returns the card's
    placeholder, so a wait for the pair can keep it current."""
    ss = st.session_state
    if "pair_name" not in ss:
        ss["pair_name"] = env_pair()
    with st.sidebar:
        if divider:
            st.divider()
        st.selectbox("Model pair", list(PAIRS), format_func=PAIRS.get, key="pair_name", persist_state="session",
                     help="Set SPECVIZ_PAIR=tiny|default to choose at start-up.")
        if ss["pair_name"] == "default":
            st.selectbox("Precision", list(PAIR_DTYPES), format_func=PAIR_DTYPES.get, key="pair_dtype",
                         persist_state="session", on_change=drop_other_precisions,
                         help="bf16 is about 2.5× faster on CPUs that compute it natively; float32 makes "
                              "greedy speculative output token-exact against the target alone.")
        card = st.empty()
        card.html(_card_html(_loader(*pair_key())))
    return card


# --- the live run: state ----------------------------------------------------------------


@dataclass
class LiveState:
    """One live run and everything the page needs to redraw it."""

    dec: Decoding | None = None
    sig: tuple = ()
    kind: str = "custom"
    race: bool = False
    playing: str | None = None  # "run" | "autoplay" while the loop should keep going
    stopped: bool = False
    ar: Trace | None = None
    ar_dec: Decoding | None = None
    ar_reused_from: int | None = None
    comparison: Comparison | None = None
    recorded: bool = False
    run_no: int | None = None
    error: str | None = None

    @property
    def trace(self) -> Trace | None:
        return self.dec.trace if self.dec is not None else None

    @property
    def sd_done(self) -> bool:
        return self.dec is not None and self.dec.done

    @property
    def finished(self) -> bool:
        return self.sd_done and (not self.race or self.ar is not None) and self.recorded


def live_state() -> LiveState:
    ss = st.session_state
    if "live" not in ss:
        ss["live"] = LiveState()
    ss.setdefault("history", [])
    ss.setdefault("baselines", {})
    return ss["live"]


def init_controls() -> None:
    """Seed the control widgets' values once per session."""
    for k, v in DEFAULTS.items():
        st.session_state.setdefault(k, v)


def read_config() -> RunConfig:
    ss = st.session_state
    return RunConfig(
        prompt=ss.get("prompt") or "",
        gamma=ss.get("gamma", DEFAULTS["gamma"]),
        temperature=float(ss.get("temperature", 0.0)),
        top_k=0,
        top_p=float(ss.get("top_p", 1.0)),
        seed=ss.get("seed", 0),
        max_new_tokens=ss.get("max_new_tokens", DEFAULTS["max_new_tokens"]),
        chat=True,
    )


def signature(cfg: RunConfig) -> tuple:
    return (pair_key(), cfg.prompt, cfg.gamma, cfg.temperature, cfg.top_p, cfg.max_new_tokens, cfg.seed)


SAMPLING_FIELDS = frozenset({"temperature", "top_p", "top_k", "seed"})


def field_of(exc: BadInput) -> str:
    """Which widget group a BadInput is about: prompt, gamma, max_new_tokens, sampling, general."""
    if exc.field in ("prompt", "gamma", "max_new_tokens"):
        return exc.field
    return "sampling" if exc.field in SAMPLING_FIELDS else "general"


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:]


def check_inputs(pair: ModelPair, cfg: RunConfig) -> dict[str, str]:
    """{field: message} for the first setting the engine would refuse (empty when all is well).
    The engine validates when a run is built, which reads no model yet: cheap."""
    try:
        speculative(pair, dataclasses.replace(cfg))
    except BadInput as exc:
        return {field_of(exc): _sentence(str(exc))}
    except Exception as exc:  # never a traceback on the page
        return {"general": f"These settings cannot run: {type(exc).__name__}: {exc}"}
    return {}


def context_note(pair: ModelPair, cfg: RunConfig) -> str | None:
    """A warning when fewer new tokens fit in the context than asked for."""
    try:
        n = len(speculative(pair, dataclasses.replace(cfg)).trace.prompt_ids)
    except SpecvizError:
        return None
    room = pair.context_length - n
    if cfg.max_new_tokens > room:
        return f"Only {room} new tokens fit in the models' {pair.context_length}-token context after this prompt."
    return None


def set_cmd(cmd: str) -> None:
    st.session_state["_cmd"] = cmd


def pick_example() -> None:
    """Callback of the example pills: fill the prompt, then clear the pick (pills act as buttons)."""
    ss = st.session_state
    name = ss.get("example")
    if name in EXAMPLES:
        ss["prompt"] = EXAMPLES[name]
    ss["example"] = None


# --- the live run: view -----------------------------------------------------------------


def _status_html(text: str, badge: str | None = None, badge_cls: str = "sv-live", note: str | None = None) -> str:
    b = f'<span class="sv-badge {badge_cls}">{html.escape(badge)}</span>' if badge else ""
    n = f'<span class="sv-note">{html.escape(note)}</span>' if note else ""
    return f'<div class="sv-status" role="status">{b}<span>{html.escape(text)}</span>{n}</div>'


class RunView:
    """Placeholders for one run's view, laid out once, updated in place.

    Chart keys carry a per-view counter, so redrawing a chart several times in one
    script run never repeats an element id."""

    def __init__(self, race_section: bool = True):
        self.n = 0
        self.status_ph = st.empty()
        st.html(F.legend_html())
        self.strip_ph = st.empty()
        tl, stats = st.columns([3, 1.45], vertical_alignment="top")
        with tl:
            self.timeline_ph = st.empty()
        with stats, st.container(key="sv-stats"):  # the key gives CSS a handle: compact metrics
            self.metrics_ph = st.empty()
        left, right = st.columns([2, 3])
        with left:
            self.accept_ph = st.empty()
        with right:
            self.race_ph = st.empty()
        self.race_fig_ph = st.empty() if race_section else None

    def _key(self, name: str) -> str:
        self.n += 1
        return f"{name}-{self.n}"

    def status(self, text: str, badge: str | None = None, badge_cls: str = "sv-live", note: str | None = None) -> None:
        self._status = _status_html(text, badge, badge_cls, note)
        self.status_ph.html(self._status)

    def wait(self, seconds: float) -> None:
        """Sleep in short slices, re-sending the (unchanged) status line between them: each
        send lets Streamlit notice a click on Stop, so the pause never delays it by more
        than a quarter of a second. Identical content: nothing redraws on screen."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(0.25, left))
            if getattr(self, "_status", None):
                self.status_ph.html(self._status)

    def error(self, text: str) -> None:
        self.status_ph.error(text, icon=":material/error:")

    def strip(self, rounds, live=None, phase="done", shown=None, plain=None) -> None:
        self.strip_ph.html(F.token_strip_html(rounds, live, phase, shown, plain))

    def stats(self, trace: Trace | None, prev: dict | None = None) -> None:
        """The numbers, two by two beside the timeline; idle shares last, next to the lanes."""
        s = F.live_summary(trace) if trace is not None and trace.rounds else {}
        tps = s.get("tokens_per_second")
        acc = s.get("acceptance_rate")
        delta_tps = delta_acc = None
        if prev and trace is not None and trace.summary:
            delta_tps = f"{tps - prev['tok/s']:+.1f} vs #{prev['run']}"
            if acc is not None and prev.get("acceptance") is not None:
                delta_acc = f"{100 * (acc - prev['acceptance']):+.0f} pts"
        spec = trace is None or trace.config.mode == "speculative"
        items = [
            ("Tokens / s", F.fmt_num(tps, 1), delta_tps,
             "New tokens ÷ wall time, on the engine's own clock (animation excluded)."),
            ("Acceptance", F.fmt_pct(acc), delta_acc, "Accepted draft tokens ÷ drafted tokens."),
            ("Tokens / round", F.fmt_num(s.get("mean_acceptance_length"), 2), None,
             "Mean acceptance length = 1 + accepted ÷ rounds: tokens won per target pass."),
            ("Cost ratio c", F.fmt_num(s.get("cost_ratio_c"), 2), None,
             "Median draft pass ÷ median verify pass. Speculation can only pay off when acceptance beats c."),
            ("Rounds", f"{s['rounds']}" if s else "–", None, "Target verify passes so far (one per round)."),
            ("Overhead", F.fmt_ms(s.get("overhead_ms")) if s else "–", None,
             "Wall time inside no forward pass: sampling, cache rollback, Python."),
            ("Draft idle", F.fmt_pct(s.get("draft_idle_fraction")) if s and spec else "–", None,
             "Share of wall time the draft runs no forward pass: it waits while the target verifies."),
            ("Target idle", F.fmt_pct(s.get("target_idle_fraction")) if s else "–", None,
             "Share of wall time the target runs no forward pass: it waits while the draft guesses."),
        ]
        with self.metrics_ph.container():
            for i in range(0, len(items), 2):
                cols = st.columns(2, gap="small")
                for col, (label, value, delta, tip) in zip(cols, items[i: i + 2], strict=False):
                    col.metric(label, value if s else "–", delta=delta, help=tip)

    def timeline(self, trace: Trace) -> None:
        self.timeline_ph.plotly_chart(
            F.timeline_figure(trace), key=self._key("timeline"), config={"displayModeBar": False},
        )

    def charts(self, trace: Trace | None) -> None:
        if trace is None or not (trace.rounds or trace.prefill):
            self.timeline_ph.caption("The timeline of forward passes appears here once the first round has run.")
            self.accept_ph.empty()
            return
        self.timeline(trace)
        if trace.config.mode == "speculative":
            self.accept_ph.plotly_chart(
                F.acceptance_figure(trace), key=self._key("acceptance"), config={"displayModeBar": False},
            )

    def race(self, state: LiveState | None, progress: tuple[int, int] | None = None) -> None:
        if self.race_fig_ph is None:
            return
        if state is None or state.trace is None:
            self.race_ph.empty()
            self.race_fig_ph.empty()
            return
        if not state.race:
            self.race_ph.info(
                "Turn on **Race the target alone** to time the target decoding by itself on the same "
                "prompt: speedup, same-scale timelines and an exactness check.", icon=":material/sports_score:")
            self.race_fig_ph.empty()
            return
        sd = state.trace
        ar = state.ar if state.ar is not None else (state.ar_dec.trace if state.ar_dec is not None else None)
        with self.race_ph.container():
            st.markdown("##### Race: speculative vs the target alone")
            if progress is not None:
                done, total = progress
                st.progress(min(done / max(total, 1), 1.0),
                            text=f"Timing the target alone: {done} of up to {total} tokens")
            elif state.ar is None:
                st.caption("The target-alone run starts when the speculative run ends.")
            else:
                ar_s = F.live_summary(state.ar)
                cmp = state.comparison
                c = st.columns(3)
                c[0].metric("Speedup", f"×{cmp.speedup:.2f}" if cmp and cmp.speedup else "–",
                            help="Speculative tok/s ÷ autoregressive tok/s (real engine timings).")
                c[1].metric("Speculative", f"{F.live_summary(sd)['tokens_per_second']:.1f} tok/s")
                c[2].metric("Target alone", f"{ar_s['tokens_per_second']:.1f} tok/s")
                if cmp is not None:
                    if cmp.identical:
                        st.success(cmp.explanation, icon=":material/check_circle:")
                    else:
                        st.warning(cmp.explanation, icon=":material/compare_arrows:")
                if (line := theory_line(sd)) is not None:
                    st.caption(line)
                if state.ar_reused_from is not None:
                    st.caption(f"Baseline measured in run {state.ar_reused_from} with the same pair, prompt and "
                               "settings, and reused (γ does not change the target-alone run).")
        if sd.rounds:
            self.race_fig_ph.plotly_chart(
                F.race_figure(sd, ar), key=self._key("race"), config={"displayModeBar": False},
            )
        else:
            self.race_fig_ph.empty()


def theory_line(trace: Trace) -> str | None:
    """What the closed form says about this run's measured α and c, in one sentence."""
    from specviz import theory

    s = F.live_summary(trace)
    c, gamma = s.get("cost_ratio_c"), trace.config.gamma
    if not c or not trace.rounds or trace.config.mode != "speculative":
        return None
    alpha = theory.alpha_from_mean_length(s["mean_acceptance_length"], gamma)
    predicted = theory.expected_speedup(alpha, gamma, c)
    best = theory.best_gamma(alpha, c, max_gamma=16)
    head = (f"Theory: a per-token α ≈ {alpha:.2f} (what {s['mean_acceptance_length']:.2f} tokens per round "
            f"implies) and c = {c:.2f} give an expected ×{predicted:.2f} at γ = {gamma}")
    if alpha <= c:
        return head + "; with α ≤ c the draft costs more than it saves, and no γ can win."
    if best != gamma:
        return head + f"; the best γ for these numbers is {best} (×{theory.expected_speedup(alpha, best, c):.2f})."
    return head + ", the best γ for these numbers."


# --- the live run: the controller ---------------------------------------------------------


def _baseline_key(cfg: RunConfig) -> tuple:
    return (pair_key(), cfg.prompt, cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed)


def start_run(pair: ModelPair, state: LiveState, cfg: RunConfig) -> None:
    """Replace the live run with a fresh one (raises BadInput on a setting the engine refuses)."""
    dec = speculative(pair, dataclasses.replace(cfg))
    fresh = LiveState(dec=dec, sig=signature(cfg), kind=kind_of(cfg.prompt),
                      race=bool(st.session_state.get("race", True)))
    for f in dataclasses.fields(LiveState):
        setattr(state, f.name, getattr(fresh, f.name))


def can_continue(state: LiveState, cfg: RunConfig) -> bool:
    return state.dec is not None and not state.finished and state.sig == signature(cfg) and state.error is None


def _prev_row(state: LiveState) -> dict | None:
    rows = st.session_state.get("history", [])
    if state.recorded and state.run_no is not None:
        earlier = [r for r in rows if r["run"] < state.run_no]
        return earlier[-1] if earlier else None
    return rows[-1] if rows else None


def render_state(view: RunView, state: LiveState, cfg: RunConfig) -> None:
    """Draw the whole view from the state, as it stands."""
    tr = state.trace
    changed = state.dec is not None and state.sig != signature(cfg)
    note = "Settings changed: the next Run or Step starts a new run." if changed else None
    if state.error:
        view.error(f"{state.error} Run or Step starts a new run.")
    elif tr is None:
        view.status(f"Ready. Run ({SHORTCUTS['run']}) decodes at full speed; Step ({SHORTCUTS['step']}) "
                    f"shows one round at a time.", "ready", "sv-done")
    elif state.finished:
        s = F.live_summary(tr)
        view.status(f"Done: {s['new_tokens']} tokens in {s['rounds']} rounds, {F.fmt_ms(tr.wall_ms)} "
                    f"({tr.stop_reason.replace('_', ' ')})", "done", "sv-done", note)
    elif state.sd_done:
        view.status("Speculative run done; the target-alone race is next.", "paused", "sv-stop", note)
    elif state.stopped:
        view.status(f"Stopped after round {len(tr.rounds)}. Step or Autoplay continues; Run starts over.",
                    "stopped", "sv-stop", note)
    elif tr.rounds:
        view.status(F.round_caption(tr.rounds[-1]) + f". Next: Step ({SHORTCUTS['step']}).", "paused",
                    "sv-done", note)
    else:
        view.status(f"Ready: prompt read. Step ({SHORTCUTS['step']}) drafts the first round.", "ready",
                    "sv-done", note)
    if tr is not None:
        plain = tr.output_text if state.sd_done else None
        view.strip(tr.rounds, plain=plain)
    else:
        view.strip([])
    view.stats(tr, _prev_row(state))
    view.charts(tr)
    view.race(state)


def animate_round(view: RunView, trace: Trace, rnd, speed: float) -> None:
    """Slow-motion replay of a round already computed (or recorded): the draft's tokens
    appear one by one, the verify pass runs, the verdict lands. ``trace`` holds the round."""
    if speed <= 0:
        return
    prior = trace.rounds[: rnd.index]
    upto = F.trace_upto(trace, rnd.index + 1)
    n = len(rnd.proposed)
    per_tok = min(0.45, 2.4 / max(n, 1)) * speed
    verify_s, hold_s = 1.0 * speed, 0.9 * speed
    total = per_tok * n + verify_s + hold_s
    real_ms = max(rnd.end_ms - rnd.start_ms, 1e-3)
    badge = f"slow motion ×{max(1, round(total * 1000 / real_ms)):,}"
    note = f"this round took {F.fmt_ms(real_ms)} of real engine time; all timings shown are real"
    if n:
        view.status(F.round_caption(rnd, "draft"), badge, "sv-slow", note)
        for i in range(1, n + 1):
            view.strip(prior, rnd, "draft", i)
            view.wait(per_tok)
        view.timeline(F.trace_at(trace, rnd.index, "draft"))  # the draft's bars; the target waits
    view.status(F.round_caption(rnd, "verify") if n else F.round_caption(rnd), badge, "sv-slow", note)
    view.strip(prior, rnd, "verify")
    view.timeline(F.trace_at(trace, rnd.index, "verify"))  # the one verify pass; the draft waits
    view.wait(verify_s)
    view.status(F.round_caption(rnd), badge, "sv-slow", note)
    view.strip(prior + [rnd])
    view.stats(upto)
    view.charts(upto)
    view.wait(hold_s)


def _fail(state: LiveState, exc: Exception) -> None:
    state.playing = None
    if isinstance(exc, SpecvizError):
        state.error = str(exc)
    else:
        state.error = f"The engine stopped with {type(exc).__name__}: {exc}"


def _next_round(state: LiveState):
    try:
        with ENGINE_LOCK:
            return next(state.dec)
    except StopIteration:
        return None


def run_race(pair: ModelPair, view: RunView, state: LiveState) -> None:
    """Time the target alone on the same prompt (or reuse a baseline measured with the same settings)."""
    sd = state.trace
    key = _baseline_key(sd.config)
    baselines = st.session_state["baselines"]
    if key in baselines:
        state.ar, state.ar_reused_from = baselines[key]
        return
    if state.ar_dec is None:
        cfg = dataclasses.replace(sd.config, mode="autoregressive", stop=list(sd.config.stop))
        state.ar_dec = autoregressive(pair, cfg)
    ar = state.ar_dec
    total = ar.trace.config.max_new_tokens
    last = 0.0
    view.race(state, progress=(len(ar.trace.output_ids), total))
    while not ar.done:
        try:
            with ENGINE_LOCK:
                next(ar)
        except StopIteration:
            break
        if time.monotonic() - last > CHARTS_EVERY_S:
            view.race(state, progress=(len(ar.trace.output_ids), total))
            last = time.monotonic()
    state.ar = ar.trace
    state.ar_dec = None


def finish(pair: ModelPair, state: LiveState) -> None:
    """Compare with the baseline and add the run to the history (once)."""
    if state.recorded:
        return
    history = st.session_state["history"]
    run_no = (history[-1]["run"] + 1) if history else 1
    speedup = identical = None
    if state.ar is not None:
        state.comparison = compare(state.ar, state.trace, pair.tokenizer)
        speedup, identical = state.comparison.speedup, state.comparison.identical
        if state.ar_reused_from is None:
            st.session_state["baselines"][_baseline_key(state.trace.config)] = (state.ar, run_no)
    history.append(F.history_row(state.trace, run_no, state.kind, state.ar, speedup, identical))
    state.run_no = run_no
    state.recorded = True


def advance(pair: ModelPair, view: RunView, state: LiveState, speed: float, animate: bool) -> bool:
    """One unit of progress: a round, the race, or the wrap-up. False once the run has ended."""
    try:
        if not state.dec.done:
            rnd = _next_round(state)
            if rnd is not None and animate:
                animate_round(view, state.trace, rnd, speed)
            return True
        if state.race and state.ar is None:
            run_race(pair, view, state)
            return True
        finish(pair, state)
        return False
    except Exception as exc:  # engine failures are shown, never raised at the user
        _fail(state, exc)
        return False


def play(pair: ModelPair, view: RunView, state: LiveState, speed: float) -> None:
    """Keep going while Run or Autoplay is on. A click on any widget interrupts this loop
    (Streamlit reruns); the state survives and the next script run picks it up."""
    last = last_charts = time.monotonic()
    while state.playing:
        animate = state.playing == "autoplay" and speed > 0
        if not advance(pair, view, state, speed, animate):
            state.playing = None
            break
        now = time.monotonic()
        if not animate and now - last > RENDER_EVERY_S:
            tr = state.trace
            view.status(f"Running at full speed: round {len(tr.rounds)}, {len(tr.output_ids)} tokens",
                        "live", "sv-live")
            view.strip(tr.rounds)
            view.stats(tr)
            if now - last_charts > CHARTS_EVERY_S:
                view.charts(tr)
                last_charts = now
            last = now
    st.rerun()  # one clean redraw of the whole page: history, buttons, final numbers


def step(pair: ModelPair, view: RunView, state: LiveState, speed: float) -> None:
    """Exactly one round (then, after the last one, the race and the wrap-up)."""
    state.stopped = False
    if not state.dec.done:
        try:
            rnd = _next_round(state)
        except Exception as exc:
            _fail(state, exc)
            st.rerun()
        if rnd is not None:
            animate_round(view, state.trace, rnd, speed)
    if state.dec.done:
        while advance(pair, view, state, speed, animate=False):
            pass
    st.rerun()  # redraw the page in its new state (after the last round: with its history row)


def handle_command(pair: ModelPair, state: LiveState, cfg: RunConfig, errors: dict[str, str]) -> str | None:
    """Apply the button pressed (if any) to the state; returns the command to carry out."""
    cmd = st.session_state.pop("_cmd", None)
    if cmd is None:
        return None
    if cmd == "stop":
        if state.playing or (state.dec is not None and not state.finished):
            state.stopped = state.dec is not None and not state.sd_done
        state.playing = None
        return "stop"
    if errors:
        return None  # the errors are already shown next to their widgets
    try:
        if cmd == "run" or not can_continue(state, cfg):
            start_run(pair, state, cfg)
    except BadInput as exc:
        errors[field_of(exc)] = _sentence(str(exc))
        return None
    except Exception as exc:  # never a traceback on the page
        errors["general"] = f"The run could not start: {type(exc).__name__}: {exc}"
        return None
    state.stopped = False
    state.error = None
    state.playing = {"run": "run", "autoplay": "autoplay"}.get(cmd)
    return cmd


# --- run history --------------------------------------------------------------------------


def clear_history() -> None:
    st.session_state["history"] = []
    st.session_state["baselines"] = {}


def history_section(state: LiveState) -> None:
    rows = st.session_state.get("history", [])
    st.subheader("Run history", anchor=False)
    if not rows:
        st.caption("Every finished run adds a row: move the γ slider, run again, and compare.")
        return
    df = pd.DataFrame(rows, columns=list(F.HISTORY_COLUMNS))
    shown = df.iloc[::-1].assign(acceptance=df["acceptance"].iloc[::-1] * 100)
    table, chart = st.columns([2.1, 1])
    with table:
        st.dataframe(
            shown,
            hide_index=True,
            height=min(38 + 35 * len(df), 330),
            column_order=["run", "prompt kind", "gamma", "temperature", "tok/s", "acceptance",
                          "mean acceptance length", "speedup", "identical"],
            column_config={
                "run": st.column_config.NumberColumn("#", width=40),
                "prompt kind": st.column_config.TextColumn("prompt", width=80),
                "gamma": st.column_config.NumberColumn("γ", width=40),
                "temperature": st.column_config.NumberColumn("temp", format="%.2f", width=60),
                "tok/s": st.column_config.NumberColumn("tok/s", format="%.1f", width=65),
                "acceptance": st.column_config.ProgressColumn("acceptance", min_value=0.0, max_value=100.0,
                                                              format="%.0f%%", width=100),
                "mean acceptance length": st.column_config.NumberColumn(
                    "tok/round", format="%.2f", width=75, help="mean acceptance length"),
                "speedup": st.column_config.NumberColumn("speedup", format="×%.2f", width=75,
                                                         help="vs the target alone"),
                "identical": st.column_config.CheckboxColumn("same", width=55,
                                                             help="identical to the target-alone output"),
            },
        )
        c = st.columns([1, 1, 1])
        c[0].download_button("History CSV", df.to_csv(index=False).encode("utf-8"), "specviz-history.csv",
                             "text/csv", icon=":material/download:", key="dl_history")
        tr = state.trace
        if tr is not None and state.sd_done:
            c[1].download_button("Last run JSON", tr.to_json(indent=1).encode("utf-8"),
                                 f"specviz-run-{state.run_no or 'last'}.json", "application/json",
                                 icon=":material/data_object:", key="dl_trace",
                                 help="The full trace: replay it on the Replay page, with no model loaded.")
        c[2].button("Clear", icon=":material/delete:", on_click=clear_history, key="clear_history",
                    type="tertiary")
    with chart:
        st.plotly_chart(F.history_figure(rows), key="history_chart", config={"displayModeBar": False})


# --- replay of a recorded trace ---------------------------------------------------------------


def load_trace_file(data: bytes | str) -> Trace:
    """A Trace from JSON bytes or text (BadInput with a readable message otherwise)."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise BadInput("the file is not UTF-8 text: a specviz trace is a JSON file") from None
    return Trace.from_json(data)


def render_replay(view: RunView, trace: Trace, pos: int) -> None:
    """Draw a recorded trace as it stood after round ``pos``."""
    n = len(trace.rounds)
    upto = F.trace_upto(trace, pos)
    cfg = trace.config
    where = f"recorded on {cfg.device} in {cfg.dtype}"
    if pos == 0:
        view.status(f"Replay: round 0 of {n}. Step ({SHORTCUTS['step']}) or Play to watch it.", "replay",
                    "sv-done", where)
    elif pos < n:
        view.status(F.round_caption(trace.rounds[pos - 1], total=n), "replay", "sv-done", where)
    else:
        s = F.live_summary(trace)
        view.status(f"Replay: all {n} rounds, {s['new_tokens']} tokens in {F.fmt_ms(trace.wall_ms)}",
                    "replay", "sv-done", where)
    view.strip(upto.rounds, plain=trace.output_text if pos == n else None)
    view.stats(upto)
    view.charts(upto)


def replay_play(view: RunView, trace: Trace, speed: float, pos_key: str) -> None:
    """Animate the rounds after the current position, one by one, keeping the position in state."""
    ss = st.session_state
    while ss.get("replay_playing") and ss[pos_key] < len(trace.rounds):
        rnd = trace.rounds[ss[pos_key]]
        if speed > 0:
            animate_round(view, trace, rnd, speed)
        ss[pos_key] += 1
        if speed <= 0:
            render_replay(view, trace, ss[pos_key])
    ss["replay_playing"] = False
    st.rerun()
