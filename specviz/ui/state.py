"""The live run's session state and the settings that feed it.

``LiveState`` is one live run (a ``Race``: the speculative run, then the target alone and
the comparison; whether it is in the history yet), kept in ``st.session_state`` with the
run history and the measured baselines. Beside it: the control widgets' seeding, their
values read into a ``RunConfig`` and checked the way the engine would check them, the
callbacks of the buttons and example pills, and this machine's prefill rate (the last
prompt each model read, ``PREFILL_READS``) that estimates how long the next prompt takes
to read (``LiveState.next_read``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import streamlit as st

from specviz.analysis import metrics as M
from specviz.analysis.compare import Comparison
from specviz.measure.race import Race, baseline_key, why_not_reuse
from specviz.models.draft_head import SIZES
from specviz.models.pair import ModelPair
from specviz.record.errors import BadInput
from specviz.record.i18n import N_, Translator, translate_known
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Round, Trace
from specviz.record.validate import check, encode_prompt
from specviz.ui import links, server_mode
from specviz.ui.chrome import DEFAULTS, EXAMPLES
from specviz.ui.lang import _
from specviz.ui.pair import pair_key
from specviz.worker.races import RemoteRace

CUSTOM = N_("custom")  # a prompt that is none of the examples (stored in English, shown as _(CUSTOM))


def example_of(prompt: str) -> str:
    """The name of the example prompt this is, or "custom"."""
    for name, text in EXAMPLES.items():
        if prompt.strip() == text:
            return name
    return CUSTOM


@dataclass
class LiveState:
    """One live run (a ``Race``: speculative, then the target alone) and what the page
    needs to redraw it."""

    race: RemoteRace | Race | None = None  # the app's: in the engine worker
    sig: tuple = ()
    example: str = "custom"
    playing: str | None = None  # "run" | "autoplay" while the loop should keep going
    stopped: bool = False
    recorded: bool = False
    run_no: int | None = None
    error: str | None = None
    engine_died: bool = False  # the error is the engine's process stopping: the page offers a fresh start

    @property
    def trace(self) -> Trace | None:
        return self.race.sd.trace if self.race is not None else None

    @property
    def with_race(self) -> bool:
        return self.race is not None and self.race.against_target

    @property
    def sd_done(self) -> bool:
        return self.race is not None and self.race.sd.done

    @property
    def ar(self) -> Trace | None:
        """The target-alone run: the finished baseline, or the one being measured."""
        if self.race is None:
            return None
        if self.race.baseline is not None:
            return self.race.baseline.trace
        return self.race.ar.trace if self.race.ar is not None else None

    @property
    def comparison(self) -> Comparison | None:
        return self.race.comparison if self.race is not None else None

    @property
    def finished(self) -> bool:
        return self.race is not None and self.race.done and self.recorded

    @property
    def next_read(self) -> PromptRead | None:
        """The prompt reading the race's next round starts with (``PromptRead``), or None: the
        speculative run's first round (the draft and the target read the prompt), or the
        target-alone run's (the target reads it again) unless a stored baseline stands in."""
        race = self.race
        if race is None or race.done:
            return None
        sd = race.sd.trace
        if not race.sd.done:
            return prompt_read(sd.config, ("draft", "target"), len(sd.prompt_ids)) if not sd.rounds else None
        if not race.against_target or race.ar is not None:
            return None
        stored = race.baselines.get(baseline_key(sd.config))
        if race.reuse and stored is not None and why_not_reuse(stored, sd, time.time()) is None:
            return None
        return prompt_read(sd.config, ("target",), len(sd.prompt_ids))


# --- reading the prompt: how long it takes on this machine ----------------------------------

# The last prompt each model read in this process: (tokens, ms) by model_key. One process runs
# on one machine, so every session's runs measure the same prefill rate.
PREFILL_READS: dict[tuple[str, ...], tuple[int, float]] = {}


def model_key(cfg: RunConfig, lane: str) -> tuple[str, ...]:
    """What one model's prefill rate depends on: the model, device and dtype (and for the
    draft its quantization; for a remote target the server)."""
    if lane == "draft":
        return ("draft", cfg.draft, cfg.device, cfg.dtype, cfg.draft_quant)
    return ("target", cfg.target, cfg.device, cfg.dtype, cfg.target_url)


def remember_prefill(cfg: RunConfig, rnd: Round) -> None:
    """Keep the prompt reads timed in a run's first round (its ``prefill`` events)."""
    for lane, read in M.prefill_reads(rnd.events).items():
        PREFILL_READS[model_key(cfg, lane)] = read


@dataclass(frozen=True)
class PromptRead:
    """A prompt of ``tokens`` tokens that the models on ``lanes`` read first, and the estimated
    ms that takes on this machine (``metrics.prefill_estimate_ms`` of each model's last read;
    None until every one of them has read a prompt in this process)."""

    lanes: tuple[str, ...]
    tokens: int
    estimate_ms: float | None

    @property
    def ms_per_token(self) -> float | None:
        return self.estimate_ms / self.tokens if self.estimate_ms is not None and self.tokens else None


def prompt_read(cfg: RunConfig, lanes: tuple[str, ...], tokens: int) -> PromptRead:
    """The reading of a ``tokens``-token prompt by the models on ``lanes``, with its estimate."""
    reads = [PREFILL_READS.get(model_key(cfg, lane)) for lane in lanes]
    estimate = None if None in reads else sum(M.prefill_estimate_ms(tokens, r) for r in reads)
    return PromptRead(lanes, tokens, estimate)


def live_state() -> LiveState:
    ss = st.session_state
    if "live" not in ss:
        ss["live"] = LiveState()
    ss.setdefault("history", [])
    ss.setdefault("baselines", {})
    return ss["live"]


def init_controls() -> None:
    """Seed the control widgets' values once per session (within server mode's cap)."""
    ss = st.session_state
    for k, v in DEFAULTS.items():
        ss.setdefault(k, v)
    cap = server_mode.current().max_new_tokens
    if isinstance(ss.get("max_new_tokens"), int) and ss["max_new_tokens"] > cap:
        ss["max_new_tokens"] = cap


def control_defaults() -> dict:
    """The controls' starting values, as this server allows them."""
    cap = server_mode.current().max_new_tokens
    return {**DEFAULTS, "max_new_tokens": min(DEFAULTS["max_new_tokens"], cap)}


# --- the share link ------------------------------------------------------------------------


def link_limits(pair: ModelPair) -> links.Limits:
    """What a link may set on this server, for this pair."""
    s = server_mode.current()
    chars = links.MAX_PROMPT_CHARS if s.max_prompt_chars is None else min(links.MAX_PROMPT_CHARS, s.max_prompt_chars)
    return links.Limits(examples=EXAMPLES, max_new_tokens=s.max_new_tokens, max_prompt_chars=chars,
                        draft_heads=tuple(draft_head_choices(pair)), device=pair.device.type)


def apply_draft_choice(pair: ModelPair) -> None:
    """Once per session and pair, before a share link is read (which still wins): the draft
    variant this machine's measurement picked (``pair.draft_choice``,
    specviz.measure.draft_choice) as the int8 switch's and the draft head's starting values."""
    ss = st.session_state
    choice = pair.draft_choice
    key = pair_key()
    if choice is None or ss.get("_draft_choice_for") == key:
        return
    ss["_draft_choice_for"] = key
    ss["draft_int8"] = choice.variant.quant == "int8"
    ss["draft_vocab"] = choice.variant.vocab


def draft_choice_note(pair: ModelPair, tr: Translator = _) -> str | None:
    """What the measurement picked and why, for the sidebar; None where nothing was measured."""
    choice = pair.draft_choice
    if choice is None:
        return None
    v = choice.variant
    if v.quant == "int8" and v.vocab:
        name = tr(N_("the int8 draft with its head cut to the {head}")).format(head=draft_head_label(v.vocab, tr))
    elif v.quant == "int8":
        name = tr(N_("the int8 draft"))
    elif v.vocab:
        name = tr(N_("the draft with its head cut to the {head}")).format(head=draft_head_label(v.vocab, tr))
    else:
        name = tr(N_("the full draft"))
    if v.quant == "none" and not v.vocab:
        others = [k for k in choice.costs if k.variant != v]
        best = min(others, key=lambda k: k.c) if others else None
        if best is None:
            return tr(N_("Picked for this machine: {name}, c = {c} (measured here).")).format(
                name=name, c=f"{choice.c:.2f}")
        return tr(N_("Picked for this machine: {name}, c = {c}; no cheaper variant pays more here "
                     "(the best, c = {other}; measured here).")).format(name=name, c=f"{choice.c:.2f}",
                                                                         other=f"{best.c:.2f}")
    return tr(N_("Picked for this machine: {name}, c = {c} against {plain} for the full draft (measured "
                 "here: the smaller c, the more a round can gain).")).format(
        name=name, c=f"{choice.c:.2f}", plain=f"{choice.plain_c:.2f}")


def apply_link(pair: ModelPair) -> None:
    """Once per session, when the Live page first runs (before its widgets are drawn): the
    settings in the URL's query string into the widgets' state. Each value that cannot be
    used is kept, with the valid value used instead, for ``link_problems`` to show.

    Only once: later the page writes the URL itself (``sync_link``); a link opened again,
    or edited in the address bar, loads the page afresh, in a new session."""
    ss = st.session_state
    if ss.get("_link_read"):
        return
    ss["_link_read"] = True
    try:
        values, problems = links.parse_query(st.query_params.to_dict(), link_limits(pair))
    except Exception as exc:  # never a traceback on the page
        values, problems = {}, [links.Problem("?", "", f"{type(exc).__name__}: {exc}")]
    ss.update(values)
    ss["_link_problems"] = [
        (p, links.format_value(p.param, ss[p.param]) if p.param in links.SETTINGS and p.param != "prompt"
         and p.param in ss else None)
        for p in problems
    ]


def _dismiss_link_problems() -> None:
    st.session_state["_link_problems"] = []


def link_problems() -> None:
    """The link's values that could not be used, each with its parameter, its value and
    why, and the value used instead; until dismissed."""
    found = st.session_state.get("_link_problems")
    if not found:
        return
    lines = []
    for p, used in found:
        reason = _sentence(translate_known(p.reason, LINK_REASONS, _)).rstrip(".")
        said = links.code_span(links.shown(p.param) + "=" + p.value)
        if used is None:
            lines.append(f"- {said}: " + _("{reason}.").format(reason=reason))
        else:
            lines.append(f"- {said}: " + _("{reason}. Using {setting}.").format(
                reason=reason, setting=links.code_span(f"{p.param}={used}")))
    with st.container(key="link_problems"):
        st.warning(_("Some settings in this link could not be used, so the page uses valid ones instead:")
                   + "\n\n" + "\n".join(lines), icon=":material/link_off:")
        st.button(_("Dismiss"), key="link_dismiss", type="tertiary", icon=":material/close:",
                  on_click=_dismiss_link_problems)


def sync_link(pair: ModelPair) -> tuple[str, int | None]:
    """Write the current settings into the URL's query string (only those that differ from
    the defaults; the language and Streamlit's own parameters stay, anything else goes).
    Returns the share link, and the most characters a link's prompt may have when this
    prompt has more (None when it fits)."""
    ss = st.session_state
    limits = link_limits(pair)
    settings = {k: ss.get(k) for k in links.SETTINGS}
    wanted = links.format_query(settings, control_defaults(), limits)
    now = st.query_params.to_dict()
    kept = {k: v for k, v in now.items() if k in links.OTHER_PARAMS}
    if now != {**wanted, **kept}:
        st.query_params.from_dict({**wanted, **kept})
    try:
        base = st.context.url or ""
    except Exception:  # no browser context (AppTest, bare mode)
        base = ""
    if base and not urlsplit(base).path:
        base += "/"  # the Live page is the app's root: http://host:8501/?gamma=6
    too_long = None if links.prompt_fits(settings.get("prompt") or "", limits) else limits.max_prompt_chars
    return links.share_url(base or "/", {**wanted, **kept}), too_long


def share_box(url: str, too_long: int | None = None) -> None:
    """The share link, with a copy button (st.code's), in a sidebar expander (drawn only
    while it is open)."""
    box = st.expander(_("Share these settings"), icon=":material/share:", key="share_box", on_change="rerun")
    if not box.open:
        return
    with box:
        st.code(url, language=None, wrap_lines=True)
        st.caption(_("This link opens the Live page with the same prompt and settings: copy it with the "
                     "button at its top right. The address bar holds the same link."))
        if too_long:
            st.caption(_("The prompt is too long for a link (more than {most} characters): the link leaves "
                         "it out.").format(most=too_long))


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
        draft_vocab=ss.get("draft_vocab", 0),
        draft_quant="int8" if ss.get("draft_int8") else "none",
        chat=True,
        **policy_settings(ss),
        **tree_settings(ss),
    )


def policy_settings(ss) -> dict:
    """The RunConfig policy fields: a chain stops where the draft is unsure (the confidence
    policy, γ its cap) while the switch is on; a tree's shape is fixed (constant)."""
    if ss.get("draft_shape") == "tree" or not ss.get("draft_stop", DEFAULTS["draft_stop"]):
        return {}
    return dict(policy="confidence", confidence=float(ss.get("confidence", DEFAULTS["confidence"])))


def tree_settings(ss) -> dict:
    """The RunConfig tree fields of the Live page's draft shape: a chain, or a dynamic tree
    of tree_nodes nodes and tree_width, γ deep."""
    if ss.get("draft_shape") != "tree":
        return {}
    return dict(tree_nodes=ss.get("tree_nodes", DEFAULTS["tree_nodes"]), tree_depth=ss.get("gamma", DEFAULTS["gamma"]),
                tree_width=ss.get("tree_width", DEFAULTS["tree_width"]))


def signature(cfg: RunConfig) -> tuple:
    """What a run's settings are, to tell whether they changed since (the draft's shape included)."""
    return (pair_key(), cfg.prompt, cfg.gamma, cfg.temperature, cfg.top_p, cfg.max_new_tokens, cfg.seed,
            cfg.draft_vocab, cfg.draft_quant, cfg.tree_nodes, cfg.tree_depth, cfg.tree_width, tuple(cfg.tree_shape),
            cfg.policy, cfg.confidence)


SAMPLING_FIELDS = frozenset({"temperature", "top_p", "top_k", "seed"})


def field_of(exc: BadInput) -> str:
    """Which widget group a BadInput is about: prompt, gamma, max_new_tokens, draft_vocab,
    sampling, general."""
    if exc.field in ("prompt", "gamma", "max_new_tokens", "draft_vocab"):
        return exc.field
    if exc.field == "tree_depth":
        return "gamma"  # a tree's depth is γ
    if exc.field in ("tree_nodes", "tree_width", "tree_shape"):
        return "tree"
    if exc.field == "draft_quant":
        return "draft_vocab"  # one slot under the draft's two settings
    return "sampling" if exc.field in SAMPLING_FIELDS else "general"


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:]


# The engine's refusals the Live page can meet, as English templates (the engine and the
# CLI stay English): a refusal that matches one is shown translated, with its values; any
# other is shown as the engine said it. tests/test_i18n_app.py checks each template
# against the engine's own message, so a rewording there cannot slip by unnoticed.
BAD_INPUT_TEMPLATES = (
    N_("the prompt is empty: type something for the models to continue"),
    N_("the prompt is {tokens} tokens, longer than the models' context of {context} tokens: shorten it"),
    N_("gamma (draft length) must be a whole number from 1 to {most}; got {value}"),
    N_("max new tokens must be from 1 to {most}; got {value}"),
    N_("seed must be a whole number >= 0; got {value}"),
    N_("temperature must be >= 0 (0 means greedy); got {value}"),
    N_("temperature must be at most 100; got {value}"),
    N_("top-p must be in (0, 1]; got {value}"),
    N_("draft vocabulary {n} is not smaller than the draft's {vocab} tokens: use 0 for the full head"),
    N_("the int8 draft runs on the CPU only (PyTorch's dynamic int8 kernels): use draft quantization none on "
       "this device"),
    N_("no token frequency ranking ships for this pair's tokenizer, so its draft head cannot be cut: use draft "
       "vocabulary 0, or build a ranking with tools/build_token_ranks.py (docs/token-ranks.md)"),
    N_("tree depth must be a whole number from 1 to {most}; got {value}"),
    N_("a token tree drafts with the full head: use draft vocabulary 0"),
    *server_mode.TEMPLATES,  # server mode's caps (its prompt limit; the token cap says the engine's words)
)
LINK_REASONS = (*links.TEMPLATES, *BAD_INPUT_TEMPLATES)  # why a link's value was refused


def bad_input_text(exc: BadInput) -> str:
    """The engine's refusal as a sentence in the page's language (as said when unknown)."""
    return _sentence(translate_known(str(exc), BAD_INPUT_TEMPLATES, _))


def check_inputs(pair: ModelPair, cfg: RunConfig) -> dict[str, str]:
    """{field: message} for the first setting the engine would refuse (empty when all is
    well), from the same ``check`` the engine runs; it builds no run."""
    try:
        server_mode.check_config(cfg, server_mode.current())  # first: no tokenizing a prompt over the cap
        check(pair, cfg)
    except BadInput as exc:
        return {field_of(exc): bad_input_text(exc)}
    except Exception as exc:  # never a traceback on the page
        return {"general": _("These settings cannot run: {error}").format(error=f"{type(exc).__name__}: {exc}")}
    return {}


def context_note(pair: ModelPair, cfg: RunConfig) -> str | None:
    """A warning when fewer new tokens fit in the context than asked for."""
    if not cfg.prompt.strip():
        return None
    n = len(encode_prompt(pair.tokenizer, cfg.prompt, cfg.chat))
    room = pair.context_length - n
    if 0 < room < cfg.max_new_tokens:  # room <= 0 is the prompt's own error
        return _("Only {room} new tokens fit in the models' {context}-token context after this prompt.").format(
            room=room, context=pair.context_length)
    return None


def draft_head_choices(pair: ModelPair) -> list[int]:
    """0 (the full head) and the FR-Spec cuts smaller than the draft's vocabulary; for a
    small vocabulary (the tiny pair), a quarter and a half of it."""
    vocab = pair.draft_vocab_size
    cuts = [n for n in SIZES if n < vocab] or [vocab // 4, vocab // 2]
    return [0, *cuts]


def draft_head_label(n: int, tr: Translator = _) -> str:
    """A draft head's name (``tr``: a translator bound at render time, see chrome.translator)."""
    if not n:
        return tr(N_("full vocabulary"))
    if n % 1024 == 0:
        return tr(N_("top {k}k tokens (FR-Spec)")).format(k=n // 1024)
    return tr(N_("top {n} tokens (FR-Spec)")).format(n=n)


def set_cmd(cmd: str) -> None:
    st.session_state["_cmd"] = cmd


def pick_example() -> None:
    """Callback of the example pills: fill the prompt, then clear the pick (pills act as buttons)."""
    ss = st.session_state
    name = ss.get("example")
    if name in EXAMPLES:
        ss["prompt"] = EXAMPLES[name]
    ss["example"] = None
