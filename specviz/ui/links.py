"""Share links: the Live page's settings in the URL's query string, and back.

    http://host:8501/?example=json&gamma=6&temperature=0.7&seed=3&lang=zh

``format_query`` writes the settings that differ from the page's defaults as query
parameters (an example prompt by its name, any other prompt as text); ``parse_query``
reads them back. Every value is checked where the app checks it: its type here, its
range by the engine's own ``validate.check_settings`` (γ up to ``limits.MAX_GAMMA``, max
new tokens up to ``limits.MAX_NEW_TOKENS``) and by the narrower ranges of the page's
widgets and of server mode (``Limits``). What passes comes back as session-state values;
each value that does not comes back as a ``Problem`` naming the parameter and the value,
and the page keeps a valid value in its place.

Pure: no Streamlit. The reasons are English (the engine's messages, or the templates
below, marked with N_): the page shows them translated.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from specviz.record.errors import BadInput
from specviz.record.i18n import N_
from specviz.record.limits import MAX_GAMMA, MAX_NEW_TOKENS, MAX_TREE_NODES, MAX_TREE_WIDTH, check_quant
from specviz.record.run_config import RunConfig
from specviz.record.validate import check_settings
from specviz.ui.markdown import code_span  # noqa: F401  (links.code_span: the settings' messages use it)

# The parameters, in the order a link lists them; each is the session-state key of its
# widget, except ``example``, which names an example prompt and sets ``prompt``.
PARAMS = ("example", "prompt", "gamma", "temperature", "top_p", "max_new_tokens", "seed", "draft_vocab",
          "draft_int8", "draft_shape", "tree_nodes", "tree_width", "draft_stop", "confidence")
SETTINGS = tuple(p for p in PARAMS if p != "example")  # what parse_query returns
# Parameters the Live page does not read but must leave alone: the language, Streamlit's own.
OTHER_PARAMS = frozenset({"lang", "embed", "embed_options"})

# The Live page's widget ranges (its sliders are narrower than the engine allows).
TEMPERATURE_RANGE = (0.0, 2.0)
TOP_P_RANGE = (0.05, 1.0)
MAX_SEED = 2**31 - 1
CONFIDENCE_RANGE = (0.05, 0.95)  # the confidence policy's τ on the Live page's slider
MAX_PROMPT_CHARS = 2000  # the longest prompt a link carries (in characters)
SHOWN_CHARS = 40  # a bad value is quoted up to this many characters

# The reasons a value is refused before the engine sees it (English; shown translated).
NOT_WHOLE = N_("not a whole number")
NOT_NUMBER = N_("not a number")
NOT_SWITCH = N_("not 1 or 0 (on or off)")
OUT_OF_RANGE = N_("outside this page's range, {low} to {high}")
NOT_ONE_OF = N_("not one of {choices}")
PROMPT_TOO_LONG = N_("{chars} characters, more than the {most} a link can carry")
UNKNOWN = N_("not a setting of the Live page")
TEMPLATES = (NOT_WHOLE, NOT_NUMBER, NOT_SWITCH, OUT_OF_RANGE, NOT_ONE_OF, PROMPT_TOO_LONG, UNKNOWN)

_WHOLE = re.compile(r"[+-]?\d{1,30}")
_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"0", "false", "no", "off"})
_SLUGS = {"中文": "chinese"}  # an example's name in a link, where its own name is not plain ASCII


@dataclass(frozen=True)
class Limits:
    """What a link may set: the widgets' ranges, server mode's caps, the pair's choices."""

    examples: Mapping[str, str] = field(default_factory=dict)  # name -> prompt (chrome.EXAMPLES)
    max_gamma: int = MAX_GAMMA
    max_new_tokens: int = MAX_NEW_TOKENS  # lower in server mode
    max_prompt_chars: int = MAX_PROMPT_CHARS
    temperature: tuple[float, float] = TEMPERATURE_RANGE
    top_p: tuple[float, float] = TOP_P_RANGE
    max_seed: int = MAX_SEED
    draft_heads: tuple[int, ...] | None = None  # the pair's draft-head choices; None: any whole number >= 0
    device: str = "cpu"  # where the pair runs (the int8 draft needs the CPU)


@dataclass(frozen=True)
class Problem:
    """One value a link gave that the page cannot use."""

    param: str
    value: str  # as the link gave it, shortened to SHOWN_CHARS
    reason: str  # English: one of TEMPLATES formatted, or the engine's BadInput message


def example_slug(name: str) -> str:
    """An example's name as a link writes it: ``code``, ``json``, ``chinese``."""
    return _SLUGS.get(name, name).lower()


def shown(value: str) -> str:
    """A value quoted in a message: one line, at most SHOWN_CHARS characters."""
    one_line = " ".join(str(value).split())
    return one_line if len(one_line) <= SHOWN_CHARS else one_line[: SHOWN_CHARS - 1] + "…"


def _engine(**setting) -> str | None:
    """The engine's refusal of one setting (the others at their defaults), or None."""
    try:
        check_settings(RunConfig(prompt=setting.pop("prompt", "x"), **setting))
    except BadInput as exc:
        return str(exc)
    return None


def _fmt(x: float) -> str:
    return format(x, "g")


class _Refused(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _whole(text: str, _limits: Limits | None = None) -> int:
    if not _WHOLE.fullmatch(text.strip()):
        raise _Refused(NOT_WHOLE)
    return int(text)


def _number(text: str, _limits: Limits | None = None) -> float:
    try:
        x = float(text.strip())
    except ValueError:
        raise _Refused(NOT_NUMBER) from None
    if not math.isfinite(x) or len(text.strip()) > 30:
        raise _Refused(NOT_NUMBER)
    return round(x, 6)


def _switch(text: str, _limits: Limits | None = None) -> bool:
    word = text.strip().lower()
    if word not in _ON | _OFF:
        raise _Refused(NOT_SWITCH)
    return word in _ON


def _text(text: str, _limits: Limits | None = None) -> str:
    return text


def _example(text: str, limits: Limits) -> str:
    """The prompt of the example ``text`` names (its slug or its name)."""
    wanted = text.strip().lower()
    for name, prompt in limits.examples.items():
        if wanted in (example_slug(name), name.lower()):
            return prompt
    raise _Refused(NOT_ONE_OF.format(choices=", ".join(example_slug(n) for n in limits.examples)))


def _shape(text: str, _limits: Limits | None = None) -> str:
    """``chain`` or ``tree``."""
    word = text.strip().lower()
    if word not in ("chain", "tree"):
        raise _Refused(NOT_ONE_OF.format(choices="chain, tree"))
    return word


Check = Callable[[Any, Limits], str | None]  # a value's reason to be refused, or None


def _engine_on(name: str) -> Check:
    """The engine's refusal of the value as setting ``name``."""
    return lambda value, limits: _engine(**{name: value})


def _range(bounds: Callable[[Limits], tuple], fmt: Callable[[Any], str] = str) -> Check:
    """OUT_OF_RANGE unless low <= value <= high, (low, high) = ``bounds(limits)``."""
    def check(value, limits: Limits) -> str | None:
        low, high = bounds(limits)
        return None if low <= value <= high else OUT_OF_RANGE.format(low=fmt(low), high=fmt(high))
    return check


def _max_new_tokens(value: int, limits: Limits) -> str | None:
    """The engine's wording, with the cap in force (server mode's may be lower)."""
    most = min(limits.max_new_tokens, MAX_NEW_TOKENS)
    if _engine(max_new_tokens=value) or value > most:
        return f"max new tokens must be from 1 to {most}; got {value}"
    return None


def _draft_head(value: int, limits: Limits) -> str | None:
    """One of the pair's draft-head choices (0, the full head, first); without them, the engine's check."""
    if limits.draft_heads is None:
        return _engine(draft_vocab=value)
    return None if value in limits.draft_heads else NOT_ONE_OF.format(choices=", ".join(map(str, limits.draft_heads)))


def _int8_here(value: bool, limits: Limits) -> str | None:
    """The int8 draft, where the pair's device has it."""
    if value:
        try:
            check_quant("int8", limits.device)
        except BadInput as exc:
            return str(exc)
    return None


def _prompt_length(text: str, limits: Limits) -> str | None:
    if len(text) > limits.max_prompt_chars:
        return PROMPT_TOO_LONG.format(chars=len(text), most=limits.max_prompt_chars)
    return None


# What a link may set: parameter -> (how its text is read, then the checks in order; the
# first that gives a reason refuses the value). A temperature above the slider's range
# gets the range, not the engine's word; below 0 the engine says why.
_FIELDS: dict[str, tuple[Callable[[str, Limits], Any], tuple[Check, ...]]] = {
    "gamma": (_whole, (_engine_on("gamma"), _range(lambda lim: (1, lim.max_gamma)))),
    "max_new_tokens": (_whole, (_max_new_tokens,)),
    "seed": (_whole, (_engine_on("seed"), _range(lambda lim: (0, lim.max_seed)))),
    "temperature": (_number, (lambda value, lim: _engine(temperature=value) if value <= lim.temperature[1] else None,
                              _range(lambda lim: lim.temperature, _fmt))),
    "top_p": (_number, (_engine_on("top_p"), _range(lambda lim: lim.top_p, _fmt))),
    "draft_vocab": (_whole, (_draft_head,)),
    "draft_int8": (_switch, (_int8_here,)),
    "draft_shape": (_shape, ()),
    "draft_stop": (_switch, ()),
    "confidence": (_number, (_engine_on("confidence"), _range(lambda lim: CONFIDENCE_RANGE, _fmt))),
    "tree_nodes": (_whole, (_range(lambda lim: (2, MAX_TREE_NODES)),)),
    "tree_width": (_whole, (_range(lambda lim: (1, MAX_TREE_WIDTH)),)),
    "prompt": (_text, (_prompt_length, _engine_on("prompt"))),
    "example": (_example, ()),
}


def _check(param: str, text: str, limits: Limits) -> Any:
    """The value ``text`` sets ``param`` to; _Refused with the reason when it cannot."""
    if param not in _FIELDS:
        raise _Refused(UNKNOWN)
    read, checks = _FIELDS[param]
    value = read(text, limits)
    for check in checks:
        if reason := check(value, limits):
            raise _Refused(reason)
    return value


def _last(value: str | Sequence[str]) -> str:
    """A parameter given twice counts once: the last one, as ``st.query_params`` reads it."""
    if isinstance(value, str):
        return value
    return str(value[-1]) if len(value) else ""


def parse_query(query: Mapping[str, str | Sequence[str]], limits: Limits) -> tuple[dict[str, Any], list[Problem]]:
    """The settings a link's query parameters set ({session-state key: value}) and one
    Problem per value that cannot be used. A prompt given as text wins over an example
    (and the example stands in for it when the text cannot be used)."""
    values: dict[str, Any] = {}
    problems: list[Problem] = []
    for param, raw in query.items():
        if param in OTHER_PARAMS:
            continue
        text = _last(raw)
        try:
            value = _check(param, text, limits)
        except _Refused as refused:
            problems.append(Problem(param, shown(text), refused.reason))
            continue
        if param == "example":
            values.setdefault("prompt", value)
        else:
            values[param] = value
    return values, problems


def format_value(param: str, value: Any) -> str:
    """One setting as a link writes it."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return _fmt(round(value, 6))
    return str(value)


def prompt_fits(prompt: str, limits: Limits) -> bool:
    return len(prompt) <= limits.max_prompt_chars


def format_query(settings: Mapping[str, Any], defaults: Mapping[str, Any], limits: Limits) -> dict[str, str]:
    """The query parameters of a link to ``settings``: those that differ from ``defaults``,
    in PARAMS order. A prompt that is one of the examples goes by the example's name; a
    prompt too long for a link is left out (``prompt_fits`` says so)."""
    out: dict[str, str] = {}
    prompt = settings.get("prompt")
    if isinstance(prompt, str) and prompt != defaults.get("prompt"):
        name = next((n for n, text in limits.examples.items() if text == prompt), None)
        if name is not None:
            out["example"] = example_slug(name)
        elif prompt_fits(prompt, limits):
            out["prompt"] = prompt
    for param in SETTINGS:
        if param == "prompt" or param not in settings:
            continue
        value = settings[param]
        if value != defaults.get(param) and value is not None:
            out[param] = format_value(param, value)
    return out


def share_url(base: str, query: Mapping[str, str]) -> str:
    """``base`` (the page's address, without a query) with ``query`` appended."""
    text = urlencode(dict(query))
    return f"{base}?{text}" if text else base
