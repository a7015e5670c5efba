"""The run view: placeholders laid out once and updated in place, live or in replay.

``RunView`` holds the status line, the token strip, the timeline, the numbers, the
per-position acceptance chart and the race section, and redraws each on its own.
``animate_round`` plays one round already computed (or recorded) in slow motion on a
view; the engine's clock stops while a round is held, so the animation never touches
the timings shown: they are the real ones.
"""

from __future__ import annotations

import html
import time

import streamlit as st

from specviz import Trace
from specviz import figures as F
from specviz.trace import trace_at, trace_upto
from specviz.ui.state import LiveState


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
        if trace is None or not trace.rounds:
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


def animate_round(view: RunView, trace: Trace, rnd, speed: float) -> None:
    """Slow-motion replay of a round already computed (or recorded): the draft's tokens
    appear one by one, the verify pass runs, the verdict lands. ``trace`` holds the round."""
    if speed <= 0:
        return
    prior = trace.rounds[: rnd.index]
    upto = trace_upto(trace, rnd.index + 1)
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
        view.timeline(trace_at(trace, rnd.index, "draft"))  # the draft's bars; the target waits
    view.status(F.round_caption(rnd, "verify") if n else F.round_caption(rnd), badge, "sv-slow", note)
    view.strip(prior, rnd, "verify")
    view.timeline(trace_at(trace, rnd.index, "verify"))  # the one verify pass; the draft waits
    view.wait(verify_s)
    view.status(F.round_caption(rnd), badge, "sv-slow", note)
    view.strip(prior + [rnd])
    view.stats(upto)
    view.charts(upto)
    view.wait(hold_s)
