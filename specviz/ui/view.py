"""The run view: placeholders laid out once and updated in place, live or in replay.

``RunView`` holds the status line, the token strip, the output as plain text (whole,
scrollable, with a copy button), the timeline, the numbers (and the counts behind them),
the per-position acceptance chart and the race section, and redraws each on its own;
``reading_prompt`` holds the status line on the prompt's reading while the engine reads it.
``animate_round`` plays one round already computed (or recorded) in slow motion on a
view; the engine's clock stops while a round is held, so the animation never touches
the timings shown: they are the real ones.
``export_buttons`` offers a run as files (trace JSON, timeline HTML and PNG), on the Live
page and on Replay; ``md_code`` (``specviz.ui.markdown.code_span``) puts model or file text into Markdown
as written.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from specviz import figures as F
from specviz.analysis import metrics as M
from specviz.analysis import theory
from specviz.analysis.compare import compare, explain, stop_reason_text  # noqa: F401  (stop_reason_text: the controller's)
from specviz.figures import exports
from specviz.figures import tree as FT
from specviz.figures.history import delta_label
from specviz.record.i18n import N_, Translator, translate_known
from specviz.record.run_trace import Trace, rounds_text, trace_at, trace_upto
from specviz.ui.lang import _
from specviz.ui.markdown import code_span
from specviz.ui.state import LiveState, PromptRead, set_cmd


class Badge:
    """The status badge's classes, one per state; assets/specviz.css gives each its colour. A test or
    a script finds a state by its class, in any language (``.sv-badge.sv-finished``: a finished run)."""

    READY = "sv-ready"  # nothing run yet, or the prompt read and the first round next
    STARTING = "sv-starting"
    LIVE = "sv-live"  # running at full speed, or reading the prompt
    SLOW = "sv-slow"  # a round in slow motion
    PAUSED = "sv-paused"  # between steps
    WAITING = "sv-waiting"  # the speculative run done, the target-alone race next
    STOPPED = "sv-stopped"
    QUEUED = "sv-queued"  # waiting for the model behind other sessions' runs
    FINISHED = "sv-finished"
    REPLAY = "sv-replay"


def _status_html(text: str, badge: str | None = None, badge_cls: str = Badge.LIVE, note: str | None = None,
                 note_html: str | None = None, run: int | None = None) -> str:
    """The status line: badge, text, note (``note_html``: a note already in HTML). ``run``: the
    history's number of the run the line is about, as the badge's ``data-run``."""
    run_attr = f' data-run="{int(run)}"' if run is not None else ""
    b = f'<span class="sv-badge {badge_cls}"{run_attr}>{html.escape(badge)}</span>' if badge else ""
    n = note_html if note_html is not None else html.escape(note) if note else ""
    n = f'<span class="sv-note">{n}</span>' if n else ""
    return f'<div class="sv-status" role="status">{b}<span>{html.escape(text)}</span>{n}</div>'


md_code = code_span  # the pages' name for it


COUNTS_LABEL = N_("Drafted → accepted → emitted")  # metrics.LIVE_COUNTS in one tile


class RunView:
    """Placeholders for one run's view, laid out once, updated in place.

    Chart keys carry a per-view counter, so redrawing a chart several times in one
    script run never repeats an element id."""

    def __init__(self, race_section: bool = True):
        self.n = 0
        self.status_ph = st.empty()
        st.html(F.legend_html(tr=_))
        self.strip_ph = st.empty()
        self.tree_ph = st.empty()  # a tree round's tree, under the strip
        with st.container(key="sv-output"):  # the key gives CSS and the browser test a handle
            self.output_ph = st.empty()
        tl, stats = st.columns([3, 1.45], vertical_alignment="top")
        with tl:
            self.timeline_ph = st.empty()
        with stats, st.container(key="sv-stats"):  # the key gives CSS a handle: compact metrics
            self.metrics_ph = st.empty()
            self.chain_ph = st.empty()  # a tree run with no chain to set it against: the offer of one
        left, right = st.columns([2, 3])
        with left:
            self.accept_ph = st.empty()
        with right:
            self.race_ph = st.empty()
        self.race_fig_ph = st.empty() if race_section else None

    def _key(self, name: str) -> str:
        self.n += 1
        return f"{name}-{self.n}"

    def status(self, text: str, badge: str | None = None, badge_cls: str = Badge.LIVE, note: str | None = None,
               run: int | None = None) -> None:
        self._status = _status_html(text, badge, badge_cls, note, run=run)
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

    def engine_died(self, text: str) -> None:
        """The engine's process stopped mid-run: what happened, and one click that runs the same
        settings again in a fresh one (Run would too; the button says that it can)."""
        with self.status_ph.container():
            st.error(text, icon=":material/error:")
            st.button(_("Start the engine again and run"), key="restart_engine", icon=":material/restart_alt:",
                      on_click=set_cmd, args=("run",), type="primary",
                      help=_("A fresh engine process loads the pair again (seconds), then the run starts over."))

    def strip(self, rounds, live=None, phase="done", shown=None, plain=None, follow=True) -> None:
        """The marked tokens, and below them the output so far as plain text (``plain``
        overrides the text joined from the rounds' pieces). ``follow``: a long strip opens
        scrolled to its newest tokens; False, at its first line."""
        self.strip_ph.html(F.token_strip_html(rounds, live, phase, shown, tr=_, follow=follow))
        self.output(plain if plain is not None else rounds_text(rounds))

    def tree(self, trace: Trace | None, rnd=None, upto_step: int | None = None) -> None:
        """The token tree of ``rnd`` (default: the trace's last round) at ``upto_step`` (figures.tree),
        or nothing when that round drafted a chain."""
        rounds = trace.rounds if trace is not None else []
        rnd = rnd if rnd is not None else (rounds[-1] if rounds else None)
        if rnd is None or not rnd.tree:
            self.tree_ph.empty()
            return
        prev = rounds[rnd.index - 1] if 0 < rnd.index <= len(rounds) else None
        with self.tree_ph.container():
            st.plotly_chart(FT.tree_figure(rnd, upto_step, root_text=FT.root_text(prev), tr=_),
                            key=self._key("tree"), config={"displayModeBar": False})
            st.caption(FT.tree_caption(rnd, upto_step, _))

    def output(self, text: str) -> None:
        """The whole output as plain text: wrapped, scrollable past a bounded height, with a copy button."""
        if not text:
            self.output_ph.empty()
            return
        self.output_ph.code(text, language=None, wrap_lines=True, height=F.output_height(text))

    def stats(self, trace: Trace | None, prev: dict | None = None, note: str | None = None,
              compared: str | None = None) -> None:
        """The numbers (``metrics.LIVE_STATS``), two by two beside the timeline, the counts
        behind them (``metrics.LIVE_COUNTS``: drafted, accepted, emitted) in one tile, and
        the line that tells the acceptance rate from the theory's α; ``prev``, an earlier run's
        history row, gives the changes once this run has ended; ``note``, a warning under them
        (the run was timed under contention). A tree run's ``prev`` is the best chain run
        (``figures.history.compared_row``); ``compared`` says what ``prev`` was, under the numbers."""
        s = M.live_summary(trace) if trace is not None and trace.rounds else {}
        spec = trace is None or trace.config.mode == "speculative"
        if s:
            s = {**s, **M.token_counts(trace)}
        ended = bool(prev and trace is not None and trace.summary)
        with self.metrics_ph.container():
            for i in range(0, len(M.LIVE_STATS), 2):
                cols = st.columns(2, gap="small")
                for col, key in zip(cols, M.LIVE_STATS[i: i + 2], strict=False):
                    m = M.metric(key)
                    value = s.get(key) if spec or not key.startswith("draft_") else None
                    delta = m.delta(value, prev.get(m.column), _) if ended else None
                    if delta is not None and key == "tokens_per_second":
                        delta = delta_label(delta, prev, _)
                    col.metric(_(m.label), m.text(value, _), delta=delta, help=_(m.help))
            if compared and ended:
                st.caption(compared)
            if spec:
                counts = [M.metric(key) for key in M.LIVE_COUNTS]
                st.metric(_(COUNTS_LABEL), " → ".join(m.text(s.get(m.key), _) for m in counts),
                          help="\n\n".join(f"**{_(m.label)}**: {_(m.help)}" for m in counts))
            if trace is not None and (line := acceptance_line(trace)) is not None:
                st.caption(line)
            if note:
                st.warning(note, icon=":material/speed:")

    def timeline(self, trace: Trace) -> None:
        self.timeline_ph.plotly_chart(
            F.timeline_figure(trace, tr=_), key=self._key("timeline"), config={"displayModeBar": False},
        )

    def charts(self, trace: Trace | None) -> None:
        if trace is None or not trace.rounds:
            self.timeline_ph.caption(_("The timeline of forward passes appears here once the first round has run."))
            self.accept_ph.empty()
            return
        self.timeline(trace)
        if trace.config.mode == "speculative":
            with self.accept_ph.container():
                st.plotly_chart(F.acceptance_figure(trace, tr=_), key=self._key("acceptance"),
                                config={"displayModeBar": False})
                st.caption(positions_line(trace))

    @contextmanager
    def reading_prompt(self, read: PromptRead | None) -> Iterator[None]:
        """While the block runs (the round that reads the prompt first, ``read``; None: no
        reading, nothing drawn), the status line says how many tokens are read and how long
        that should take here, with the seconds so far counting up in the browser: the
        script waits on the engine meanwhile and sends nothing. The status line as it was
        comes back after the block (after an exception the page is drawn afresh anyway)."""
        if read is None:
            yield
            return
        before = getattr(self, "_status", None)
        badge = _("reading the prompt")
        counter = html.escape(_("{seconds} s so far")).replace("{seconds}", '<span class="sv-elapsed"></span>')
        self.status_ph.html(_status_html(reading_text(read), badge, Badge.LIVE, note_html=counter))
        yield
        if before is not None:
            self.status_ph.html(before)

    def race(self, state: LiveState | None, progress: tuple[int, int] | None = None,
             best_chain: dict | None = None) -> None:
        """The race against the target alone: progress while it runs, then the speedup
        (one stored value, one formatter: specviz.analysis.metrics), a tree run against
        ``best_chain`` (a history row: ``chain_line``), the exactness verdict, and where the
        baseline came from."""
        if self.race_fig_ph is None:
            return
        if state is None or state.trace is None:
            self.race_ph.empty()
            self.race_fig_ph.empty()
            return
        if not state.with_race:
            self.race_ph.info(
                _("Turn on **Race the target alone** to time the target decoding by itself on the same "
                  "prompt: speedup, same-scale timelines and an exactness check."), icon=":material/sports_score:")
            self.race_fig_ph.empty()
            return
        sd, ar, cmp, race = state.trace, state.ar, state.comparison, state.race
        with self.race_ph.container():
            st.markdown("##### " + _("Race: speculative vs the target alone"))
            if progress is not None:
                done, total = progress
                st.progress(min(done / max(total, 1), 1.0),
                            text=_("Timing the target alone, right after the speculative run: {done} of up to "
                                   "{total} tokens").format(done=done, total=total))
            elif cmp is None:
                st.caption(_("The target-alone run starts when the speculative run ends."))
            else:
                fair = cmp.speedup if race.fair is not False and not sd.contention else None
                self._race_result(sd, ar, cmp, getattr(race.pair, "tokenizer", None), baseline_line(race),
                                  chain_line(sd, fair, best_chain))
        self._race_figure(sd, ar)

    def recorded_race(self, sd: Trace, ar: Trace | None, upto: Trace | None = None, caption: str | None = None
                      ) -> None:
        """The race of a recorded speculative run against a recorded target-alone run of the
        same prompt and settings (Replay); ``upto``, the run as far as it is replayed;
        ``caption``, where the target-alone run came from (default: both recorded)."""
        if self.race_fig_ph is None:
            return
        if ar is None:
            self.race_ph.caption(_("No recorded target-alone run matches this run's prompt and settings, so there "
                                   "is no race to show."))
            self.race_fig_ph.empty()
            return
        with self.race_ph.container():
            st.markdown("##### " + _("Race: speculative vs the target alone"))
            self._race_result(sd, ar, compare(ar, sd), None, caption or _(
                "Both runs recorded: the target alone on the same prompt and settings, on the same machine."))
        self._race_figure(upto if upto is not None else sd, ar)

    def _race_result(self, sd: Trace, ar: Trace, cmp, tokenizer, caption: str, chain: str | None = None) -> None:
        speedup = M.metric("speedup")
        tps = M.metric("tokens_per_second")
        c = st.columns(3)
        c[0].metric(_(speedup.label), speedup.text(cmp.speedup), help=_(speedup.help))
        c[1].metric(_("Speculative"), tps.text(M.live_summary(sd)["tokens_per_second"]))
        c[2].metric(_("Target alone"), tps.text(M.live_summary(ar)["tokens_per_second"]))
        if chain:
            st.markdown(chain)
        explanation = comparison_text(ar, sd, tokenizer, _)
        if cmp.identical:
            st.success(explanation, icon=":material/check_circle:")
        else:
            st.warning(explanation, icon=":material/compare_arrows:")
        if (line := theory_line(sd)) is not None:
            st.caption(line)
        st.caption(caption)

    def _race_figure(self, sd: Trace, ar: Trace | None) -> None:
        if sd.rounds:
            self.race_fig_ph.plotly_chart(
                F.race_figure(sd, ar, tr=_), key=self._key("race"), config={"displayModeBar": False},
            )
        else:
            self.race_fig_ph.empty()


# specviz.measure.race's reasons for not reusing a stored baseline (English), shown translated.
NOT_REUSED = (N_("it is {minutes} min old"), N_("no draft passes to compare the machine's speed by"),
              N_("draft passes now take {now} ms against {then} ms then"))
def baseline_line(race) -> str:
    """Where the target-alone run of a finished race came from, in one sentence."""
    b = race.baseline
    if race.reused:
        age = max(0.0, time.time() - b.measured_at)
        return _("Baseline reused from run {run}, measured {minutes:.0f} min ago with the same pair, prompt and "
                 "settings; the machine's draft passes still take the same time (γ does not change the "
                 "target-alone run).").format(run=b.run, minutes=age / 60)
    if race.fair is False:  # not "the same conditions": specviz.measure.race.same_load
        return _("Baseline measured just now, right after the speculative run, but the machine's load changed "
                 "between the two runs.")
    if race.not_reused_because and race.reuse:
        reason = translate_known(race.not_reused_because, NOT_REUSED, _)
        return _("Baseline measured just now, right after the speculative run, under the same conditions (a stored "
                 "one was not reused: {reason}).").format(reason=reason)
    return _("Baseline measured just now, right after the speculative run, under the same conditions.")


def chain_line(sd: Trace, speedup: float | None, best: dict | None) -> str | None:
    """A tree run against ``best``, the best chain run's history row, in one sentence: the ratio
    of the two speedups, each over a target-alone run right beside it (``F.tree_vs_chain``);
    ``speedup`` is this race's, None when it was not fair. None for a chain run, a tree with no
    chain to set it against, or no fair speedup."""
    if best is None or not sd.config.is_tree or not speedup or not best.get("speedup"):
        return None
    text = M.metric("speedup").text
    return _("Against the best chain: **{ratio}**. Each run was timed against the target alone right beside it: "
             "this tree {tree}, the best chain run of this prompt and settings, #{run} at γ = {gamma}, "
             "{chain}.").format(ratio=text(speedup / best["speedup"]), tree=text(speedup), run=best["run"],
                                gamma=best["gamma"], chain=text(best["speedup"]))


def comparison_text(ar: Trace, sd: Trace, tokenizer=None, tr: Translator = N_) -> str:
    """The race's exactness verdict in the page's language: ``specviz.analysis.compare.explain``, the
    CLI's own words (English with the default ``tr``)."""
    return explain(ar, sd, tokenizer, tr)


def theory_line(trace: Trace) -> str | None:
    """What the closed form says about this run's measured α and c, in one sentence."""
    s = F.live_summary(trace)
    c, gamma = s.get("cost_ratio_c"), M.model_gamma(trace)
    alpha = M.alpha_estimate(trace)
    if not c or alpha is None:
        return None
    if trace.config.is_tree:
        return _("Theory prices chains: this tree's {length:.2f} tokens per round is what a chain of γ = {gamma} "
                 "would emit at a per-token α ≈ {alpha:.2f}, and c = {c:.2f} would give that chain ×{speedup:.2f}. "
                 "A tree's round costs more than that chain's (a wider verify, a draft pass per depth over its "
                 "frontier): the race and the best chain measure what it buys.").format(
            length=s["mean_acceptance_length"], gamma=gamma, alpha=alpha, c=c,
            speedup=theory.expected_speedup(alpha, gamma, c))
    predicted = theory.expected_speedup(alpha, gamma, c)
    best = theory.best_gamma(alpha, c, max_gamma=16)
    head = _("Theory: a per-token α ≈ {alpha:.2f} (what {length:.2f} tokens per round implies) and c = {c:.2f} "
             "give an expected ×{speedup:.2f} at γ = {gamma}").format(
        alpha=alpha, length=s["mean_acceptance_length"], c=c, speedup=predicted, gamma=gamma)
    if alpha <= c:
        return _("{head}; with α ≤ c the draft costs more than it saves, and no γ can win.").format(head=head)
    if best != gamma:
        return _("{head}; the best γ for these numbers is {best} (×{speedup:.2f}).").format(
            head=head, best=best, speedup=theory.expected_speedup(alpha, best, c))
    return _("{head}, the best γ for these numbers.").format(head=head)


SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def acceptance_line(trace: Trace) -> str | None:
    """The acceptance rate and the theory's α told apart, with this run's numbers (None
    before a round with a draft): the rate is counted, accepted ÷ drafted; α is the per-token
    probability the closed form assumes, estimated from the tokens per round
    (``metrics.alpha_estimate``)."""
    counts = M.token_counts(trace)
    alpha = M.alpha_estimate(trace)
    if alpha is None or not counts["drafted_tokens"]:
        return None
    s = F.live_summary(trace)
    if trace.config.is_tree:
        return _("Acceptance {rate} = {accepted} accepted ÷ {drafted} on the strip's lines (the draft's likeliest "
                 "path through each tree, {nodes} nodes drafted in all). A chain of γ = {gamma} would need a "
                 "per-token α ≈ {alpha:.2f} to emit the {length:.2f} tokens per round this tree did: "
                 "(1 − α{power}) ÷ (1 − α) = {length:.2f}.").format(
            rate=M.text("acceptance_rate", s["acceptance_rate"]), accepted=counts["accepted_tokens"],
            drafted=counts["drafted_tokens"], nodes=sum(len(r.tree) for r in trace.rounds), gamma=trace.config.gamma,
            alpha=alpha, power=str(trace.config.gamma + 1).translate(SUPERSCRIPT), length=s["mean_acceptance_length"])
    line = _("Acceptance {rate} = {accepted} accepted ÷ {drafted} drafted. The theory's α ≈ {alpha:.2f} is a "
             "per-token probability, the same at every position: the α for which (1 − α{power}) ÷ (1 − α) "
             "= the {length:.2f} tokens per round measured.").format(
        rate=M.text("acceptance_rate", s["acceptance_rate"]), accepted=counts["accepted_tokens"],
        drafted=counts["drafted_tokens"], alpha=alpha, power=str(M.model_gamma(trace) + 1).translate(SUPERSCRIPT),
        length=s["mean_acceptance_length"])
    return line + M.varying_gamma_note(trace.config.policy, trace.config.is_tree, _)




def positions_line(trace: Trace) -> str:
    """How the per-position bars are counted, and whether they may rise, from this run."""
    how = _("Bar i: the rounds that kept draft position i ÷ the rounds that drafted it (the counts below), as "
            "vLLM counts per position. A round stops at its first rejection: the positions after it count as "
            "not kept.")
    short, rounds, gamma = M.short_drafts(trace), len(trace.rounds), trace.config.gamma
    if short and trace.config.policy == "confidence" and not trace.config.is_tree:
        why = _("{short} of the {rounds} rounds drafted fewer than γ = {gamma} tokens (the draft stopped where it "
                "was unsure, the token budget ran out, or the draft proposed the end of the text): they count only "
                "where they drafted, so a later bar can stand higher.").format(short=short, rounds=rounds,
                                                                                 gamma=gamma)
    elif short:
        why = _("{short} of the {rounds} rounds drafted fewer than γ = {gamma} tokens (the token budget ran out, "
                "or the draft proposed the end of the text): they count only where they drafted, so a later bar "
                "can stand higher.").format(short=short, rounds=rounds, gamma=gamma)
    elif rounds == 1:
        why = _("The round drafted γ = {gamma} tokens.").format(gamma=gamma)
    else:
        why = _("All {rounds} rounds drafted γ = {gamma} tokens, so the bars can only fall from left to "
                "right.").format(rounds=rounds, gamma=gamma)
    return _("{how} {why}").format(how=how, why=why)


def _seconds(ms: float) -> str:
    """Seconds for a time said in a sentence: 0.4, 2.5, 58."""
    return f"{ms / 1000:.0f}" if ms >= 9950 else f"{ms / 1000:.1f}"


def reading_text(read: PromptRead) -> str:
    """What the status line says while ``read``'s models read the prompt: its tokens, and the
    time that takes here, estimated from the last prompt they read (metrics.prefill_estimate_ms)."""
    tokens = f"{read.tokens:,}"
    if read.lanes == ("target",):
        if read.estimate_ms is None:
            return _("Timing the target alone: it reads the prompt first, {tokens} tokens (no prompt has been "
                     "timed since the app started, so no estimate yet).").format(tokens=tokens)
        return _("Timing the target alone: it reads the prompt first, {tokens} tokens: about {seconds} s here, "
                 "at the {rate} ms per token measured on the last prompt it read.").format(
            tokens=tokens, seconds=_seconds(read.estimate_ms), rate=f"{read.ms_per_token:.1f}")
    if read.estimate_ms is None:
        return _("Starting: the draft and the target read the prompt, {tokens} tokens (no prompt has been timed "
                 "since the app started, so no estimate yet).").format(tokens=tokens)
    return _("Starting: the draft and the target read the prompt, {tokens} tokens: about {seconds} s here, at "
             "the {rate} ms per token measured on the last prompt they read.").format(
        tokens=tokens, seconds=_seconds(read.estimate_ms), rate=f"{read.ms_per_token:.1f}")


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
    badge = _("slow motion ×{factor}").format(factor=f"{max(1, round(total * 1000 / real_ms)):,}")
    note = _("this round took {time} of real engine time; all timings shown are real").format(time=F.fmt_ms(real_ms, _))
    if rnd.tree:  # a tree grows one draft pass at a time, then the verify lights, then the path
        view.status(F.round_caption(rnd, "draft", tr=_), badge, Badge.SLOW, note)
        steps = FT.tree_steps(rnd)
        for s in range(1, steps - 1):
            view.tree(trace, rnd, s)
            view.wait(per_tok)
    elif n:
        view.status(F.round_caption(rnd, "draft", tr=_), badge, Badge.SLOW, note)
        for i in range(1, n + 1):
            view.strip(prior, rnd, "draft", i)
            view.wait(per_tok)
        view.timeline(trace_at(trace, rnd.index, "draft"))  # the draft's bars; the target waits
    view.status(F.round_caption(rnd, "verify", tr=_) if n else F.round_caption(rnd, tr=_), badge, Badge.SLOW, note)
    view.strip(prior, rnd, "verify")
    if rnd.tree:
        view.tree(trace, rnd, FT.tree_steps(rnd) - 1)
    view.timeline(trace_at(trace, rnd.index, "verify"))  # the one verify pass; the draft waits
    view.wait(verify_s)
    view.status(F.round_caption(rnd, tr=_), badge, Badge.SLOW, note)
    view.strip(prior + [rnd])
    view.tree(trace, rnd)
    view.stats(upto)
    view.charts(upto)
    view.wait(hold_s)


# --- downloads ---------------------------------------------------------------------------

JSON_HELP = N_("The full trace: replay it on the Replay page, with no model loaded.")


def export_buttons(trace: Trace, key: str, stem: str, json_label: str | None = None, row: bool = False) -> None:
    """A run as files: its trace as JSON (the button named ``json_label``; None: no JSON),
    its timeline as an interactive HTML page that works offline (plotly.js inside), and as
    a PNG drawn by plotly's exporter, Kaleido, on the installed Chromium.

    The page (4.7 MB) and the PNG (a browser starts: seconds) are made only when their
    button is clicked: Streamlit calls ``data`` then, in a thread of its own, so the page
    goes on (a Live run too; the clicks do not rerun the script). With no Chromium the PNG
    button is off and says why. Keys: ``{key}_trace``, ``{key}_timeline_html``,
    ``{key}_timeline_png``; files: ``{stem}.json``, ``{stem}-timeline.html|png``. ``row``:
    side by side, else one under the other, each the container's width."""
    fig = F.timeline_export_figure(trace, tr=_)  # built here: the deferred calls run without the page's language
    title = F.export_title(trace, tr=_)
    why_no_png = exports.png_unavailable()
    slots = iter(st.columns(3 if json_label else 2)) if row else None

    def slot():
        return next(slots) if slots is not None else st

    if json_label:
        slot().download_button(json_label, exports.trace_json(trace), f"{stem}.json", "application/json",
                               icon=":material/data_object:", key=f"{key}_trace", width="stretch",
                               on_click="ignore", help=_(JSON_HELP))
    slot().download_button(_("Timeline HTML"), lambda: exports.figure_html(fig, title), f"{stem}-timeline.html",
                           "text/html", icon=":material/web:", key=f"{key}_timeline_html", width="stretch",
                           on_click="ignore",
                           help=_("The timeline as a web page of its own: zoom, hover for every pass; it needs "
                                  "no network."))
    slot().download_button(_("Timeline PNG"), lambda: exports.figure_png(fig), f"{stem}-timeline.png", "image/png",
                           icon=":material/image:", key=f"{key}_timeline_png", width="stretch", on_click="ignore",
                           disabled=why_no_png is not None,
                           help=(_("The timeline as an image for slides, drawn by Chromium when you click "
                                   "(a few seconds).") if why_no_png is None
                                 else translate_known(why_no_png, exports.UNAVAILABLE, _)))
