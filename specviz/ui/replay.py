"""Replay of a recorded trace, round by round, with no model loaded.

A trace is read from a JSON file (``load_trace_file``, a readable ``BadInput`` when it
is not one), drawn on a ``RunView`` as it stood after a given round
(``render_replay``), and played forward in slow motion from there, one round per
script run (``replay_play``).
The timings shown are the ones recorded. The text is translated when shown (``_``).
"""

from __future__ import annotations

import streamlit as st

from specviz import figures as F
from specviz.record import schema as trace_schema
from specviz.record.errors import BadInput
from specviz.record.i18n import N_, Translator
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Trace, trace_upto
from specviz.ui.chrome import SHORTCUTS
from specviz.ui.lang import _
from specviz.ui.state import draft_head_label
from specviz.ui.view import Badge, RunView, animate_round


def load_trace_file(data: bytes | str) -> Trace:
    """A Trace from JSON bytes or text, checked against the trace schema (specviz.record.schema);
    otherwise a BadInput in the page's language naming the field at fault and its value."""
    try:
        return Trace.from_json(trace_schema.decode(data) if isinstance(data, bytes) else data)
    except BadInput as exc:
        raise BadInput(trace_schema.translate(str(exc), _), exc.field) from None


def render_replay(view: RunView, trace: Trace, pos: int, ar: Trace | None = None,
                  race_caption: str | None = None) -> None:
    """Draw a recorded trace as it stood after round ``pos``; once replayed to the end, a
    speculative run's race against ``ar``, the target-alone run that matches it (``race_caption``
    says where it came from: the Live run's own race, or a recorded one). The token strip
    follows the newest round while the replay builds up, and opens at the first line once the
    whole run is on screen."""
    n = len(trace.rounds)
    upto = trace_upto(trace, pos)
    cfg = trace.config
    where = _("recorded on {device} in {dtype}").format(device=cfg.device, dtype=cfg.dtype)
    badge = _("replay")
    if pos == 0:
        view.status(_("Replay: round 0 of {n}. Step ({key}) or Play to watch it.").format(n=n, key=SHORTCUTS["step"]),
                    badge, Badge.REPLAY, where)
    elif pos < n:
        view.status(F.round_caption(trace.rounds[pos - 1], total=n, tr=_), badge, Badge.REPLAY, where)
    else:
        s = F.live_summary(trace)
        view.status(_("Replay: all {n} rounds, {tokens} tokens in {time}").format(
            n=n, tokens=s["new_tokens"], time=F.fmt_ms(trace.wall_ms, _)), badge, Badge.REPLAY, where)
    view.strip(upto.rounds, plain=trace.output_text if pos == n else None, follow=pos < n)
    view.stats(upto)
    view.charts(upto)
    if trace.config.mode == "speculative":
        if pos == n:
            view.recorded_race(trace, ar, caption=race_caption)
        else:
            view.race_ph.caption(_("The race against the target alone appears when the replay reaches the end."))
            view.race_fig_ph.empty()


def replay_play(view: RunView, trace: Trace, speed: float, pos_key: str) -> None:
    """Animate the round after the current position, then rerun the page for the next one.

    One round per script run: each rerun redraws the whole page, so the sidebar's round
    slider (drawn before this) follows the played position. A click on Stop, Step or the
    slider interrupts the animation; its callback has already set the position."""
    ss = st.session_state
    if ss.get("replay_playing") and ss[pos_key] < len(trace.rounds):
        animate_round(view, trace, trace.rounds[ss[pos_key]], speed)  # nothing to animate at speed 0
        ss[pos_key] += 1
        ss["replay_playing"] = ss[pos_key] < len(trace.rounds)
        st.rerun()
    ss["replay_playing"] = False


def draft_description(config: RunConfig, tr: Translator = _) -> str:
    """What the draft was, beyond its name: int8 weights, a head cut to the top N tokens
    (FR-Spec), an n-gram lookup instead of a model; "" for the plain full draft."""
    if config.drafter == "ngram":
        return tr(N_("an n-gram lookup, no draft model"))
    parts = []
    if config.draft_quant == "int8":
        parts.append(tr(N_("int8 weights")))
    if config.draft_vocab:
        parts.append(tr(N_("its head cut to the {head}")).format(head=draft_head_label(config.draft_vocab, tr)))
    return ", ".join(parts)
