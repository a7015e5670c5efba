"""The trace file format, checked: every trace read from a file or an upload.

Pydantic models mirror specviz.record.run_trace's dataclasses (Event, Round, RunConfig, Trace, and
specviz.record.contention's Contention; ``schema_version`` 3, v1 and v2 dicts upgraded by
``migrate`` first) with each field's type
and range, the config's limits taken from the registries ``validate.check_settings`` uses.
Checked in strict mode: no text for a number, no ``true`` for a count, no NaN or infinity,
and a field the format does not know is an error, not dropped. What JSON Schema cannot say
is checked after: ``0 <= accepted <= len(proposed)``, ``start_ms <= end_ms``, the output
equal to the rounds' emitted tokens, and the config as ``check_settings`` would take it.
A file over ``MAX_TRACE_BYTES`` is refused before it is parsed. The summary in a file is
never used: a finished run's is recomputed from its rounds (``Trace.finish``).

Every refusal is a ``BadTrace`` (a ``BadInput``) whose ``field`` is the path at fault, such
as ``rounds[3].accepted``, and whose message names that path and the value found there;
``problems`` lists every problem found. The messages are English templates marked with
``N_``; ``translate`` says one in a page's language.

The published schema, ``assets/trace.schema.json``, is what ``schema_json()`` writes:

    python -m specviz.record.schema > assets/trace.schema.json
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specviz.record.errors import BadInput
from specviz.record.i18n import N_, Translator, translate_known
from specviz.record.limits import (
    DEFAULT_CONFIDENCE,
    DRAFTER_NAMES,
    DTYPE_NAMES,
    MAX_GAMMA,
    MAX_TREE_DEPTH,
    MAX_TREE_NODES,
    MAX_TREE_WIDTH,
    MAX_NEW_TOKENS,
    MAX_TEMPERATURE,
    MODES,
    POLICY_NAMES,
    QUANTS,
    UNKNOWN_TOKEN,
)
from specviz.record.run_config import EVENT_KINDS, LANES, SCHEMA_VERSION, SUMMARY_KEYS, RunConfig
from specviz.record.validate import check_settings

# The largest shipped trace (assets/traces/) is 120 KB for 64 new tokens with the inspector's rows,
# about 2 KB a token; a run of the longest allowed output (MAX_NEW_TOKENS, 4096) is about 8 MB at
# that rate. Twice that, so no run specviz records is refused, and a stray upload is stopped early.
MB = 1024 * 1024
MAX_TRACE_BYTES = 16 * MB
MAX_TOKEN_ID = 2**31 - 1  # token ids index a vocabulary; none is anywhere near this
TOP = "(top level)"  # the field of a problem with the whole file
FILE = "file"  # the field of a problem with the bytes: their size, their encoding, their JSON

# --- messages: English templates (N_), shown translated by the app (``translate``) -----------------

TOO_BIG = N_("the file is {size}, more than the {limit} a trace may be")
NOT_UTF8 = N_("the file is not UTF-8 text: a specviz trace is a JSON file")
NOT_JSON = N_("the file is not valid JSON: {error}")
TOO_DEEP = N_("the file is not valid JSON: its lists and objects are nested too deep")
NOT_OBJECT = N_("not a specviz trace: expected a JSON object; got {value}")
VERSION = N_("the trace's schema_version is {value}; this specviz reads version {version}")
MISSING = N_("{field} is missing")
UNKNOWN = N_("{field} is not a field of a specviz trace (unknown fields are refused); got {value}")
WHOLE = N_("{field} must be a whole number; got {value}")
NUMBER = N_("{field} must be a finite number; got {value}")
TEXT = N_("{field} must be text; got {value}")
BOOL = N_("{field} must be true or false; got {value}")
LIST = N_("{field} must be a list; got {value}")
OBJECT = N_("{field} must be a JSON object; got {value}")
CHOICE = N_("{field} must be one of {choices}; got {value}")
AT_LEAST = N_("{field} must be at least {limit}; got {value}")
AT_MOST = N_("{field} must be at most {limit}; got {value}")
ABOVE = N_("{field} must be more than {limit}; got {value}")
BELOW = N_("{field} must be less than {limit}; got {value}")
EMPTY = N_("{field} must not be empty; got {value}")
ACCEPTED = N_("{field} must be at most the {limit} tokens proposed; got {value}")
END = N_("{field} must not be before the event's start_ms of {limit}; got {value}")
PARENT = N_("{field} must name an earlier node (at most {limit}, or -1 for the root); got {value}")
OUTPUT = N_("{field} must be the rounds' emitted tokens in order; got {value}")
SETTING = N_("{field} is not a setting specviz runs: {reason}; got {value}")
INVALID = N_("{field} is not valid ({reason}); got {value}")

# the specific before the general: ``translate`` says a message with the first template it matches
MESSAGES = (TOO_BIG, NOT_UTF8, TOO_DEEP, NOT_JSON, NOT_OBJECT, VERSION, ACCEPTED, END, PARENT, OUTPUT, SETTING, UNKNOWN,
            EMPTY, CHOICE, AT_LEAST, AT_MOST, ABOVE, BELOW, WHOLE, NUMBER, TEXT, BOOL, LIST, OBJECT, INVALID,
            MISSING)

# pydantic's error types -> the template that says it
_BY_TYPE = {
    "missing": MISSING, "extra_forbidden": UNKNOWN,
    "int_type": WHOLE, "int_parsing": WHOLE, "int_from_float": WHOLE,
    "float_type": NUMBER, "float_parsing": NUMBER, "finite_number": NUMBER,
    "string_type": TEXT, "bool_type": BOOL, "list_type": LIST,
    "model_type": OBJECT, "model_attributes_type": OBJECT, "dict_type": OBJECT,
    "literal_error": CHOICE, "greater_than_equal": AT_LEAST, "less_than_equal": AT_MOST,
    "greater_than": ABOVE, "less_than": BELOW, "string_too_short": EMPTY,
}
_LIMIT = {"greater_than_equal": "ge", "less_than_equal": "le", "greater_than": "gt", "less_than": "lt"}


def translate(message: str, tr: Translator) -> str:
    """A message of this module in ``tr``'s language (one it did not write comes back as is)."""
    return translate_known(message, MESSAGES, tr)


class BadTrace(BadInput):
    """A trace that is not one: ``field`` the path of the first problem (``rounds[3].accepted``),
    ``problems`` every (path, message) found, the first one the message."""

    def __init__(self, problems: list[tuple[str, str]]):
        super().__init__(problems[0][1], problems[0][0])
        self.problems = problems


def _fail(field: str, template: str, **values: Any) -> BadTrace:
    return BadTrace([(field, template.format(field=field, **values))])


# --- showing a path and a value --------------------------------------------------------------------


def path(loc: tuple[str | int, ...]) -> str:
    """``("rounds", 3, "accepted")`` -> ``rounds[3].accepted``; a key that is no name is quoted."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            out += f".{part}" if out else part
        else:
            out += f"[{show(part, 40)}]"
    return out or TOP


def _short(value: Any, depth: int = 0) -> str:
    if isinstance(value, list):
        if depth >= 2:
            return "[…]" if value else "[]"
        items = [_short(v, depth + 1) for v in value[:6]]
        return "[" + ", ".join(items + (["…"] if len(value) > 6 else [])) + "]"
    if isinstance(value, dict):
        if depth >= 2:
            return "{…}" if value else "{}"
        items = [f"{_short(str(k), depth + 1)}: {_short(v, depth + 1)}" for k, v in list(value.items())[:4]]
        return "{" + ", ".join(items + (["…"] if len(value) > 4 else [])) + "}"
    if isinstance(value, str) and len(value) > 80:
        value = value[:80]
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def show(value: Any, width: int = 60) -> str:
    """``value`` as JSON writes it (``null``, ``true``, ``"text"``), cut to about ``width`` characters."""
    # escaped, so that no control character of a file reaches a terminal
    text = "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in _short(value))
    return text if len(text) <= width else text[: width - 1] + "…"


def size_text(n: int) -> str:
    """A size in MB: ``16 MB``, ``17.5 MB``."""
    return f"{n // MB} MB" if n % MB == 0 else f"{n / MB:.1f} MB"


# --- the models -------------------------------------------------------------------------------------

TokenId = Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]
# a token the draft proposed or a pass read: -1 in a schedule replayed from ranks (specviz.record.limits.UNKNOWN_TOKEN)
# where the replay cannot know the draft's token
DraftToken = Annotated[int, Field(ge=UNKNOWN_TOKEN, le=MAX_TOKEN_ID)]
Prob = Annotated[float, Field(ge=0.0, le=1.0)]
Ms = Annotated[float, Field(ge=0.0, description="milliseconds since the run started")]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


class EventModel(_Strict):
    """One timed step on one lane (specviz.record.run_trace.Event). A forward kind is a model forward pass.
    start_ms <= end_ms (checked after the schema)."""

    lane: Literal[LANES]
    kind: Literal[tuple(sorted(EVENT_KINDS))]
    start_ms: Ms
    end_ms: Ms
    tokens: list[DraftToken] = []


class TreeNodeModel(_Strict):
    """One node of a round's draft tree (specviz.record.run_trace.TreeNode); parents come before their
    children (checked after the schema)."""

    token: TokenId
    parent: int = Field(ge=-1, description="index of the parent node in the round's tree; -1: a child of the root")
    q: Prob = 0.0
    p: Prob = 0.0
    accepted: bool = False
    text: str = ""
    step: int = Field(1, ge=1, le=MAX_TREE_DEPTH)


class RoundModel(_Strict):
    """One draft-then-verify round, or one plain target step at gamma 0 (specviz.record.run_trace.Round).
    0 <= accepted <= len(proposed) (checked after the schema)."""

    index: int = Field(ge=0)
    gamma: int = Field(ge=0, le=MAX_GAMMA)
    proposed: list[DraftToken] = []
    proposed_text: list[str] = []
    draft_probs: list[Prob] = []
    target_probs: list[Prob] = []
    accepted: int = Field(0, ge=0, description="how many of the proposed tokens were kept (at most all)")
    rejected: list[DraftToken] = []
    correction: TokenId | None = None
    correction_text: str = ""
    bonus: bool = False
    emitted: list[TokenId] = []
    emitted_text: str = ""
    margin: list[Prob] = []
    candidates: list[list[TokenId]] = []
    candidate_q: list[list[Prob]] = []
    candidate_p: list[list[Prob]] = []
    candidate_text: list[list[str]] = []
    draws: list[Prob] = []
    residual_probs: list[Prob] = []
    tree: list[TreeNodeModel] = Field([], max_length=MAX_TREE_NODES)
    draft_stop: Literal["", "confidence"] = Field("", description=(
        "why the draft stopped before gamma: 'confidence', its last proposal's q below the policy's threshold"))
    events: list[EventModel] = []


class RunConfigModel(_Strict):
    """The settings of the run (specviz.record.run_config.RunConfig), in the ranges specviz.record.validate.check_settings
    accepts."""

    mode: Literal[MODES] = "speculative"
    draft: str = ""
    target: str = ""
    device: str = "cpu"
    dtype: Literal[DTYPE_NAMES] = "float32"
    gamma: int = Field(4, ge=1, le=MAX_GAMMA)
    temperature: float = Field(0.0, ge=0.0, le=MAX_TEMPERATURE, description="0 = greedy")
    top_k: int = Field(0, ge=0, description="0 = off")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int = Field(0, ge=0)
    prompt: str = ""
    chat: bool = True
    max_new_tokens: int = Field(64, ge=1, le=MAX_NEW_TOKENS)
    stop: list[Annotated[str, Field(min_length=1)]] = []
    drafter: Literal[DRAFTER_NAMES] = "model"
    policy: Literal[POLICY_NAMES] = "constant"
    confidence: float = Field(DEFAULT_CONFIDENCE, ge=0.0, le=1.0, description=(
        "the confidence policy's threshold: stop drafting after a token the draft gave a lower probability"))
    draft_vocab: int = Field(0, ge=0, description="> 0: the draft's head cut to this many most frequent ids")
    draft_quant: Literal[QUANTS] = "none"
    target_url: str = Field("", max_length=2048, description="a remote target's server (specviz/models/remote.py); '' = local")
    compiled: bool = Field(False, description="static KV caches and a compiled one-token pass (CUDA graphs on a GPU)")
    tree_nodes: int = Field(0, ge=0, le=MAX_TREE_NODES, description="a dynamic tree's node budget; 0 = a chain")
    tree_depth: int = Field(4, ge=1, le=MAX_TREE_DEPTH)
    tree_width: int = Field(2, ge=1, le=MAX_TREE_WIDTH)
    tree_shape: list[Annotated[int, Field(ge=1, le=MAX_TREE_WIDTH)]] = Field(
        [], max_length=MAX_TREE_DEPTH, description="a static tree's widths per depth")


class ContentionModel(_Strict):
    """What competed with the run's timed work (specviz.record.contention.Contention): a heavy job in the
    app's own process, or other processes on its cores."""

    label: str = Field(min_length=1)
    cpu_share: Annotated[float, Field(ge=0.0)] | None = Field(None, description=(
        "cores other processes took on average during the timed work; null for a job in this process"))


class SummaryModel(_Strict):
    """The summary statistics as written; never read back: a finished run's are recomputed from its rounds."""

    new_tokens: Any = None
    rounds: Any = None
    wall_ms: Any = None
    tokens_per_second: Any = None
    acceptance_rate: Any = None
    mean_acceptance_length: Any = None
    per_position_acceptance: Any = None
    draft_forward_ms_median: Any = None
    target_forward_ms_median: Any = None
    cost_ratio_c: Any = None
    draft_idle_fraction: Any = None
    target_idle_fraction: Any = None
    overhead_ms: Any = None
    ttft_ms: Any = None


class TraceModel(_Strict):
    """A recorded specviz run (specviz.record.run_trace.Trace): its config, its rounds, its output. The rounds'
    emitted tokens, in order, are the output_ids (checked after the schema)."""

    model_config = ConfigDict(title="specviz trace")

    config: RunConfigModel
    rounds: list[RoundModel] = []
    prompt_ids: list[TokenId] = []
    output_ids: list[TokenId] = []
    output_text: str = ""
    wall_ms: Ms = 0.0
    stop_reason: str = ""
    contention: list[ContentionModel] = []
    draft_ranks: list[Annotated[int, Field(ge=0)]] = Field(
        [], description="the draft's rank of each output token (0 = its top choice)")
    draft_top: list[list[TokenId]] = []
    draft_top_q: list[Prob] = Field([], description="the draft's probability of its top choice at each output position")
    eos_ids: list[TokenId] = []
    summary: SummaryModel = Field(default_factory=SummaryModel, description=(
        "recomputed from the rounds when a trace is read; empty while a run is in progress"))
    schema_version: Literal[SCHEMA_VERSION]


# each dataclass's name (specviz.record.run_trace, run_config, contention) -> its pydantic model
MODELS = {"Event": EventModel, "TreeNode": TreeNodeModel, "Round": RoundModel, "RunConfig": RunConfigModel, "Contention": ContentionModel,
          "Trace": TraceModel}
assert set(SummaryModel.model_fields) == set(SUMMARY_KEYS)


# --- reading ----------------------------------------------------------------------------------------


def _too_big(size: int) -> BadTrace:
    text = size_text(size)
    if f"{size / MB:.1f}" == f"{MAX_TRACE_BYTES / MB:.1f}":  # just over: not "16.0 MB, more than 16 MB"
        text = f"{size:,} bytes"
    return _fail(FILE, TOO_BIG, size=text, limit=size_text(MAX_TRACE_BYTES))


def decode(data: bytes) -> str:
    """The text of a trace file's bytes (BadTrace when too big or not UTF-8)."""
    if len(data) > MAX_TRACE_BYTES:
        raise _too_big(len(data))
    try:
        return data.decode("utf-8-sig")  # a byte-order mark, as some editors write, is fine
    except UnicodeDecodeError:
        raise _fail(FILE, NOT_UTF8) from None


def read_file(path: str | Path) -> str:
    """The text of a trace file, its size checked before it is read (OSError when unreadable)."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_TRACE_BYTES:
        raise _too_big(size)
    return decode(path.read_bytes())


def parse_json(text: str) -> Any:
    """The JSON value of a trace's text (BadTrace when too big or not JSON)."""
    if len(text) > MAX_TRACE_BYTES // 4:  # it may be over the limit: count its UTF-8 bytes
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_TRACE_BYTES:
            raise _too_big(size)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(FILE, NOT_JSON, error=f"{exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:
        raise _fail(FILE, TOO_DEEP) from None
    except ValueError:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise _fail(FILE, NOT_JSON, error=f"a number has more than {sys.get_int_max_str_digits()} digits") from None


def _problem(error: dict) -> tuple[str, str]:
    loc = tuple(error["loc"])
    field = path(loc)
    kind = error["type"]
    template = _BY_TYPE.get(kind, INVALID)
    ctx = error.get("ctx") or {}
    values: dict[str, Any] = {"field": field, "value": show(error.get("input")), "reason": error.get("msg", "")}
    if kind in _LIMIT:
        limit = ctx.get(_LIMIT[kind])
        values["limit"] = f"{limit:g}" if isinstance(limit, float) else limit  # 100, not 100.0
    if kind == "literal_error":
        found = re.findall(r"'([^']*)'|(-?\d+)", str(ctx.get("expected", "")))
        values["choices"] = ", ".join(json.dumps(a) if a or not b else b for a, b in found) or ctx.get("expected")
    return field, template.format(**values)


def _checks(m: TraceModel) -> list[tuple[str, str]]:
    """What the schema cannot say: accepted within the proposal, events forward in time, the output
    the rounds' emitted tokens, the config one specviz runs."""
    problems = []
    for i, r in enumerate(m.rounds):
        if r.accepted > len(r.proposed):
            f = f"rounds[{i}].accepted"
            problems.append((f, ACCEPTED.format(field=f, limit=len(r.proposed), value=show(r.accepted))))
        for j, node in enumerate(r.tree):
            if node.parent >= j:
                f = f"rounds[{i}].tree[{j}].parent"
                problems.append((f, PARENT.format(field=f, limit=j - 1, value=show(node.parent))))
        for j, e in enumerate(r.events):
            if e.end_ms < e.start_ms:
                f = f"rounds[{i}].events[{j}].end_ms"
                problems.append((f, END.format(field=f, limit=show(e.start_ms), value=show(e.end_ms))))
    emitted = [t for r in m.rounds for t in r.emitted]
    if m.output_ids != emitted:
        at = next((i for i, (a, b) in enumerate(zip(m.output_ids, emitted)) if a != b),
                  min(len(m.output_ids), len(emitted)))
        f = f"output_ids[{at}]" if at < len(m.output_ids) else "output_ids"
        value = m.output_ids[at] if at < len(m.output_ids) else m.output_ids
        problems.append((f, OUTPUT.format(field=f, value=show(value))))
    config = RunConfig(**m.config.model_dump())
    if not config.prompt.strip():  # a trace need not carry its prompt: a schedule replayed from ranks has none
        config.prompt = "(none)"
    try:
        check_settings(config)
    except BadInput as exc:
        f = f"config.{exc.field}" if exc.field else "config"
        value = getattr(m.config, exc.field, None) if exc.field else None
        problems.append((f, SETTING.format(field=f, reason=str(exc), value=show(value))))
    return problems


def checked(data: Any) -> tuple[dict[str, Any], bool]:
    """The JSON value of a trace file, migrated (``migrate``) and checked: (its fields as plain
    values, summary left out; whether it is a finished run, whose summary is then recomputed from
    its rounds, never read). BadTrace naming the path and value at fault otherwise."""
    if not isinstance(data, dict):
        raise _fail(TOP, NOT_OBJECT, value=show(data))
    data = migrate(data)
    version = data.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:
        if "schema_version" not in data:
            raise _fail("schema_version", MISSING)
        raise _fail("schema_version", VERSION, value=show(version), version=SCHEMA_VERSION)
    try:
        m = TraceModel.model_validate(data)
    except ValidationError as exc:
        raise BadTrace([_problem(e) for e in exc.errors(include_url=False)]) from None
    if problems := _checks(m):
        raise BadTrace(problems)
    return m.model_dump(exclude={"summary"}), bool(data.get("summary"))


# --- the published schema ---------------------------------------------------------------------------


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a trace file, as published in assets/trace.schema.json."""
    body = TraceModel.model_json_schema()
    body["description"] = (
        f"{body.get('description', '')} Schema version {SCHEMA_VERSION}; a file is at most {MAX_TRACE_BYTES} "
        "bytes of UTF-8 JSON. Written by specviz.record.schema: do not edit."
    ).strip()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **body}


def schema_json() -> str:
    return json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(schema_json())


# --- older files ----------------------------------------------------------------------

def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a trace dict written by an older specviz up to SCHEMA_VERSION (a new dict).

    v1 -> v2: Round.q / Round.p (the draft's and target's probability of each proposed
    token) were renamed draft_probs / target_probs.
    v2 -> v3: a contention entry, a job's label, became an object {"label", "cpu_share"}
    (cpu_share null: a job in this process, not other processes' CPU time).
    v3 -> v4: token trees: a round's ``tree`` and the config's ``tree_*`` settings, added with
    their defaults (an older run drafted a chain)."""
    if not isinstance(data, dict) or data.get("schema_version") not in (1, 2, 3):
        return data
    if data["schema_version"] == 3:
        return {**data, "schema_version": 4}
    if data["schema_version"] == 1:
        rounds = data.get("rounds")
        if isinstance(rounds, list):
            renamed = {"q": "draft_probs", "p": "target_probs"}
            rounds = [
                {renamed.get(k, k): v for k, v in r.items()} if isinstance(r, dict) else r for r in rounds
            ]
        data = {**data, "rounds": rounds, "schema_version": 2}
    found = data.get("contention")
    if isinstance(found, list):
        found = [{"label": c, "cpu_share": None} if isinstance(c, str) else c for c in found]
        data = {**data, "contention": found}
    return {**data, "schema_version": 4}
