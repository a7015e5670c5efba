"""Server mode: the limits of a public classroom server, read from the environment.

    SPECVIZ_SERVER_MODE=1 streamlit run app.py

- ``SPECVIZ_SERVER_MODE``: ``1``, ``true``, ``yes`` or ``on`` turns it on. Any value but
  ``0``, ``false``, ``no``, ``off`` or empty does too (a typo fails safe) and is reported.
- ``SPECVIZ_MAX_NEW_TOKENS``: the most new tokens a run may ask for; 256 in server mode,
  else 4096 (``validate.MAX_NEW_TOKENS``; the variable counts in both modes).
- ``SPECVIZ_MAX_PROMPT_CHARS``: the longest prompt, in characters; 4000 in server mode,
  else no limit beyond the models' context.
- ``SPECVIZ_MAX_UPLOAD_MB``: the largest upload (a trace JSON), in MB; 5 in server mode,
  else Streamlit's ``server.maxUploadSize``.
- ``SPECVIZ_SERVER_PAIRS``: the named pairs a server offers, comma-separated; default
  ``default,tiny``, and of those only the installed ones.

In server mode the app offers only named, installed pairs (never a model id or a path:
the app has no way to enter one anyway), in the precision ``auto`` picks, and says so in
the sidebar. Whatever the mode, models load from safetensors or GGUF only (pickle
checkpoints are refused) and ``trust_remote_code`` is never set (``specviz/models/pair.py``).

Pure: ``from_env(mapping)`` reads any mapping, so tests need no environment; ``current()``
reads ``os.environ``. A value that cannot be read falls back to the mode's default and
is reported in ``ServerSettings.problems`` (the sidebar shows them). ``check_config``
refuses what the caps forbid, as a ``BadInput`` naming its field, the way
``validate.check_settings`` does; the Live page runs it beside that check.
Other pages call ``upload_limit_mb()`` for ``st.file_uploader(max_upload_size=...)``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from specviz.record.errors import BadInput, SpecvizError
from specviz.record.i18n import N_
from specviz.record.limits import MAX_NEW_TOKENS, PAIRS
from specviz.record.run_config import RunConfig

ENV_ON = "SPECVIZ_SERVER_MODE"
ENV_MAX_NEW_TOKENS = "SPECVIZ_MAX_NEW_TOKENS"
ENV_MAX_PROMPT_CHARS = "SPECVIZ_MAX_PROMPT_CHARS"
ENV_MAX_UPLOAD_MB = "SPECVIZ_MAX_UPLOAD_MB"
ENV_PAIRS = "SPECVIZ_SERVER_PAIRS"

SERVER_MAX_NEW_TOKENS = 256
SERVER_MAX_PROMPT_CHARS = 4000
SERVER_UPLOAD_MB = 5
MAX_PROMPT_CHARS = 1_000_000  # the most SPECVIZ_MAX_PROMPT_CHARS may say
MAX_UPLOAD_MB = 10_000

OFF_WORDS = frozenset({"0", "false", "no", "off", ""})
ON_WORDS = frozenset({"1", "true", "yes", "on"})

# English, as the CLI and the logs say them; the app shows them translated (translate_known).
NOT_A_NUMBER = N_("{name}={value} is not a whole number from {low} to {high}; using {used}")
NOT_A_SWITCH = N_("{name}={value} is neither on nor off (1 or 0); server mode is on")
NO_SUCH_PAIR = N_("{name}={value} names no known pair ({known}); using {used}")
PROMPT_TOO_LONG = N_("the prompt is {chars} characters long; this server takes at most {most}")
TEMPLATES = (NOT_A_NUMBER, NOT_A_SWITCH, NO_SUCH_PAIR, PROMPT_TOO_LONG)


@dataclass(frozen=True)
class ServerSettings:
    """What the app allows. The defaults are the app off server mode."""

    on: bool = False
    max_new_tokens: int = MAX_NEW_TOKENS
    max_prompt_chars: int | None = None  # None: no limit beyond the models' context
    upload_mb: int | None = None  # None: Streamlit's server.maxUploadSize
    pairs: tuple[str, ...] = PAIRS  # the named pairs the app may offer
    problems: tuple[str, ...] = ()  # environment values that could not be read, in English


def _whole(env: Mapping[str, str], name: str, default: int | None, low: int, high: int,
           problems: list[str]) -> int | None:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    text = raw.strip()
    if text.isdigit() and len(text) <= 12 and low <= int(text) <= high:
        return int(text)
    used = "none" if default is None else str(default)
    problems.append(NOT_A_NUMBER.format(name=name, value=raw[:40], low=low, high=high, used=used))
    return default


def from_env(env: Mapping[str, str]) -> ServerSettings:
    """The settings ``env`` (an environment mapping) asks for."""
    problems: list[str] = []
    raw_on = env.get(ENV_ON, "")
    word = raw_on.strip().lower()
    on = word not in OFF_WORDS
    if on and word not in ON_WORDS:
        problems.append(NOT_A_SWITCH.format(name=ENV_ON, value=raw_on[:40]))
    tokens = _whole(env, ENV_MAX_NEW_TOKENS, SERVER_MAX_NEW_TOKENS if on else MAX_NEW_TOKENS, 1, MAX_NEW_TOKENS,
                    problems)
    chars = _whole(env, ENV_MAX_PROMPT_CHARS, SERVER_MAX_PROMPT_CHARS if on else None, 1, MAX_PROMPT_CHARS,
                   problems)
    upload = _whole(env, ENV_MAX_UPLOAD_MB, SERVER_UPLOAD_MB if on else None, 1, MAX_UPLOAD_MB, problems)
    pairs = PAIRS
    if on and (raw_pairs := env.get(ENV_PAIRS, "").strip()):
        names = [n.strip().lower() for n in raw_pairs.split(",") if n.strip()]
        unknown = [n for n in names if n not in PAIRS]
        known = tuple(dict.fromkeys(n for n in names if n in PAIRS))
        pairs = known or PAIRS
        if unknown:
            problems.append(NO_SUCH_PAIR.format(name=ENV_PAIRS, value=raw_pairs[:60], known=", ".join(PAIRS),
                                                used=",".join(pairs)))
    return ServerSettings(on=on, max_new_tokens=tokens, max_prompt_chars=chars, upload_mb=upload, pairs=pairs,
                          problems=tuple(problems))


def current() -> ServerSettings:
    """The settings of this process's environment (read afresh: it is cheap)."""
    return from_env(os.environ)


def upload_limit_mb(env: Mapping[str, str] | None = None) -> int | None:
    """For ``st.file_uploader(max_upload_size=...)``: the largest upload in MB, or None for
    Streamlit's own ``server.maxUploadSize``."""
    return from_env(os.environ if env is None else env).upload_mb


def check_config(config: RunConfig, settings: ServerSettings) -> None:
    """Raise BadInput (naming its field) for a run the caps forbid. The engine's own rules
    are ``validate.check_settings``; this adds the server's narrower ones."""
    if settings.max_prompt_chars is not None and isinstance(config.prompt, str) \
            and len(config.prompt) > settings.max_prompt_chars:
        raise BadInput(PROMPT_TOO_LONG.format(chars=len(config.prompt), most=settings.max_prompt_chars), "prompt")
    tokens = config.max_new_tokens
    if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > settings.max_new_tokens:
        # the engine's own wording (validate.check_settings), with the server's cap
        raise BadInput(f"max new tokens must be from 1 to {settings.max_new_tokens}; got {tokens!r}",
                       "max_new_tokens")


def allowed_pairs(settings: ServerSettings, installed: Callable[[str], bool] | None = None) -> tuple[str, ...]:
    """The named pairs to offer: every one off server mode; in it, the configured ones that
    are installed (all the configured ones when none is, so the page can say how to
    install them)."""
    if not settings.on:
        return PAIRS
    installed = installed or pair_installed
    found = tuple(n for n in settings.pairs if installed(n))
    return found or settings.pairs


@functools.lru_cache(maxsize=None)
def pair_installed(name: str) -> bool:
    """Whether the named pair can load without installing anything: the tiny pair always;
    the default pair when both its models are converted already or their part packages
    are installed; the app's ``remote`` choice (the default draft, a target on a server)
    when the draft is. Cached: looking up 28 packages is not free, and installs are rare."""
    if name == "tiny":
        return True
    if name not in ("default", "remote"):
        return False
    from specviz.models.default_parts import DRAFT, TARGET, find_parts
    from specviz.models.pair import cache_dir, cache_ok

    for spec in (DRAFT, TARGET) if name == "default" else (DRAFT,):
        base = cache_dir() / "models" / f"{spec.name}-{spec.sha256[:12]}"
        if any(cache_ok(p) for p in (base, *base.parent.glob(f"{base.name}.*"))):  # converted, in any dtype
            continue
        try:
            find_parts(spec)
        except SpecvizError:
            return False
    return True
