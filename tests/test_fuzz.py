"""Fuzzing every way in, bounded in count and time: random prompts (any unicode, control
characters, right-to-left text, very long strings) and random settings, far outside the
valid ranges too.

* The library either runs or raises BadInput naming a known field: never another error.
* Whatever it accepts at temperature 0 is exact: speculative == the target alone.
* A share link's query parameters, however odd, give values the checks accept or a named
  problem: never an exception.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specviz import BadInput, RunConfig, autoregressive, speculative
from specviz.record.run_config import RunConfig as TraceConfig
from specviz.record.validate import check
from specviz.ui import links
from specviz.ui.chrome import EXAMPLES

pytestmark = pytest.mark.usefixtures("single_thread")

FIELDS = {"mode", "prompt", "gamma", "max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop", "drafter",
          "policy", "draft_vocab", "draft_quant", "sampling"}
RTL = "مرحبا بالعالم שלום עולם \u202eevil\u202c \u200f"
CONTROL = "".join(chr(c) for c in [*range(0, 32), 127, *range(0x80, 0xA0)])

prompts = st.one_of(
    st.text(max_size=80),  # any code point hypothesis can draw, surrogates excluded
    st.text(alphabet=st.sampled_from(list(CONTROL + RTL + "a é中🙂\n\t")), max_size=80),
    st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=8), st.integers(200, 3000)),  # very long
)
numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10), st.none(),
                    st.sampled_from(["0.5", True]))
wholes = st.one_of(st.integers(-5, 40), st.sampled_from([0, 2**40, -2**31, 1.5, "4", None, True]))
BOUNDED = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@BOUNDED
@given(prompt=prompts, gamma=wholes, max_new=wholes, temperature=numbers, top_p=numbers, top_k=wholes, seed=wholes)
def test_any_input_runs_or_is_refused_by_name(tiny_pair, prompt, gamma, max_new, temperature, top_p, top_k, seed):
    cfg = RunConfig(prompt=prompt, gamma=gamma, max_new_tokens=max_new, temperature=temperature, top_p=top_p,
                    top_k=top_k, seed=seed)
    try:
        check(tiny_pair, cfg)
    except BadInput as exc:
        assert exc.field in FIELDS, exc
        assert str(exc)
        return
    cfg.max_new_tokens = min(cfg.max_new_tokens, 12)  # bounded in time; the checks saw the real value
    sd = speculative(tiny_pair, cfg).run()
    assert sd.output_ids and len(sd.output_ids) <= cfg.max_new_tokens
    assert sum(len(r.emitted) for r in sd.rounds) == len(sd.output_ids)
    if cfg.temperature == 0:
        assert sd.output_ids == autoregressive(tiny_pair, cfg).run().output_ids


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(prompt=prompts.filter(lambda s: s.strip()), gamma=st.integers(1, 12))
def test_greedy_exactness_holds_on_hostile_prompts(tiny_pair, prompt, gamma):
    cfg = RunConfig(prompt=prompt, gamma=gamma, max_new_tokens=16)
    try:
        check(tiny_pair, cfg)
    except BadInput as exc:  # only a prompt beyond the context may be refused here
        assert exc.field == "prompt" and "context" in str(exc)
        return
    sd, ar = speculative(tiny_pair, cfg).run(), autoregressive(tiny_pair, cfg).run()
    assert sd.output_ids == ar.output_ids
    assert sd.output_text == ar.output_text


query_values = st.one_of(st.text(max_size=30), st.lists(st.text(max_size=10), max_size=3),
                         st.sampled_from(["nan", "inf", "-0", "1e309", "0x10", " 4 ", "４", "٤"]))


@BOUNDED
@given(query=st.dictionaries(st.one_of(st.sampled_from(links.PARAMS + ("lang",)), st.text(max_size=8)),
                             query_values, max_size=6))
def test_any_share_link_gives_usable_values_or_named_problems(query):
    limits = links.Limits(examples=EXAMPLES, draft_heads=(0, 8192, 16384, 32768, 65536))
    values, problems = links.parse_query(query, limits)
    assert {p.param for p in problems} <= set(query)
    assert all(p.reason for p in problems)
    for key, value in values.items():
        assert key in links.SETTINGS
        if isinstance(value, float):
            assert math.isfinite(value)
    settings_only = {k: v for k, v in values.items() if k in {f.name for f in TraceConfig.__dataclass_fields__.values()}}
    cfg = RunConfig(**settings_only)
    if cfg.prompt.strip():
        from specviz.record.validate import check_settings

        check_settings(cfg)  # what a link sets, the engine accepts
