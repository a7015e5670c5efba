"""The Live page in Chinese and in English, through AppTest on the tiny pair: ``?lang=zh``
shows Chinese labels, metrics and status lines and no English label leaks; ``?lang=en``
(and no choice at all) shows the English ones; the switch changes the language and
writes it into the URL.

The engine, the comparison and the loader speak English (the CLI prints their words);
the app says them again in the page's language from English templates. The tests at the
end hold those templates to the library's own messages, so a rewording there cannot
quietly fall back to English."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path

import pytest
from babel.messages.pofile import read_po
from helpers import ACTION_TIMEOUT_MS, VIEWPORT, expect
from streamlit.testing.v1 import AppTest

from specviz import BadInput, RunConfig
from specviz.analysis.compare import compare
from specviz.record.i18n import N_, catalog_path, gettext_for, translate_known
from specviz.record.run_trace import Round, Trace

pytestmark = pytest.mark.usefixtures("app_tiny_only")  # every test runs the app on the tiny pair
ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
TIMEOUT = 90
ZH = gettext_for("zh_CN")


def _english_only() -> set[str]:
    """Every message whose Chinese differs from its English: none may show in Chinese."""
    with catalog_path("zh_CN").open("rb") as f:
        catalog = read_po(f)
    return {m.id for m in catalog if m.id and m.string and m.string != m.id}


def _live(lang: str | None, run: bool = True) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    if lang:
        at.query_params["lang"] = lang
    at.run()
    assert not at.exception, at.exception
    at.select_slider(key="speed").set_value("Instant")
    at.number_input(key="max_new_tokens").set_value(24)
    at.run()
    if run:
        at.button(key="run").click().run()
        assert not at.exception, at.exception
        assert at.session_state["live"].finished
    return at


def _labels(at: AppTest) -> list[str]:
    """The labels a viewer reads: buttons, widgets, metrics, the language switch excluded."""
    out = [b.label for b in at.button] + [m.label for m in at.metric]
    for kind in ("text_area", "toggle", "slider", "select_slider", "selectbox", "number_input", "expander"):
        out += [w.label for w in at.get(kind)]
    return out


def _texts(at: AppTest) -> list[str]:
    """The sentences a viewer reads: captions, messages, headings, status line, legend."""
    out = [c.value for c in at.caption] + [m.value for m in at.markdown]
    for kind in ("success", "warning", "info", "error"):
        out += [e.value for e in at.get(kind)]
    out += [h.value for h in at.html if not h.value.startswith("<style")
            and ("sv-status" in h.value or "sv-legend" in h.value or "sv-strip" in h.value)]
    return out


def _status(at: AppTest) -> str:
    return "".join(h.value for h in at.html if "sv-status" in h.value)


def _figures(at: AppTest) -> str:
    """The page's plotly figures as decoded text: plotly writes non-ASCII as \\uXXXX escapes
    unless orjson is installed, so the JSON is parsed and written again unescaped."""
    return " ".join(json.dumps(json.loads(c.proto.spec), ensure_ascii=False) for c in at.get("plotly_chart"))


def test_live_page_in_chinese():
    at = _live("zh")
    labels = _labels(at)
    for label in ("运行", "单步", "自动播放", "停止", "提示词", "慢动作速度", "γ · 草稿长度", "与目标模型单独解码赛跑",
                  "词元 / 秒", "接受率", "词元 / 轮", "成本比 c", "轮数", "草稿空闲", "目标空闲", "加速比", "模型对"):
        assert label in labels, (label, labels)
    leaked = sorted(set(labels) & _english_only())
    assert not leaked, f"English labels on the Chinese page: {leaked}"
    assert at.select_slider(key="speed").value == "Instant"  # the stored choice is the key, shown as 即时
    assert "即时" in at.select_slider(key="speed").options
    assert "代码" in at.pills(key="example").options

    status = _status(at)
    assert "完成：" in status and ">完成<" in status and "Done" not in status, status
    text = " ".join(_texts(at))
    for phrase in ("赛跑：推测解码对目标模型单独解码", "完全一致：推测解码复现了目标模型自己的输出。", "基线刚刚测得", "理论：",
                   "已接受", "已拒绝", "运行历史"):
        assert phrase in text, phrase
    for english in ("Done:", "Identical:", "Race:", "Baseline", "Theory:", "accepted", "rejected", "Run history",
                    "round 1", "Ready"):
        assert english not in text, english
    figures = _figures(at)
    assert "草稿前向" in figures and "目标前向" in figures and "本轮中的草稿位置" in figures
    for english in ("Draft pass", "Target pass", "draft position", "Speculative, γ", "real engine time", "idle "):
        assert english not in figures, english
    (history,) = at.dataframe
    headers = {c.get("label") for c in json.loads(history.proto.columns).values()} - {None}
    assert {"示例", "温度", "词元 / 秒", "接受率", "加速比", "一致", "基线"} <= headers, headers
    assert not headers & _english_only(), headers
    shown = history.value.iloc[0]
    assert shown["example"] == "代码" and shown["identical"] == "是" and shown["baseline"] == "实测", shown


ENGLISH_UNIT = re.compile(r"\d\s?(ms|s)\b|tok/s")  # "12 ms", "1.24 s", "19 tok/s"


def _numbers(at: AppTest) -> list[str]:
    """The texts that carry a run's durations: the stats' values, the status line, captions
    and messages, the history table's cells."""
    return ([m.value for m in at.metric] + _texts(at)
            + [str(v) for t in at.dataframe for v in t.value.to_numpy().ravel()])


def test_durations_read_in_the_pages_units():
    """Chinese: 毫秒 / 秒 after a number, never ms / s / tok/s (docs/glossary.md); English
    keeps ms / s."""
    zh = _numbers(_live("zh"))
    assert [x for x in zh if re.search(r"\d (毫秒|秒)", x)], zh  # the overhead stat, the Done line
    assert not [x for x in zh if ENGLISH_UNIT.search(x)], [x for x in zh if ENGLISH_UNIT.search(x)]
    en = _live("en")
    (overhead,) = [m.value for m in en.metric if m.label == "Overhead"]
    assert re.fullmatch(r"[\d.]+ (ms|s)", overhead), overhead
    assert re.search(r"Done: .*\d (ms|s) \(", _status(en)), _status(en)


def test_live_page_in_english_by_default_and_by_url():
    for lang in (None, "en"):
        at = _live(lang)
        labels = _labels(at)
        for label in ("Run", "Step", "Autoplay", "Stop", "Prompt", "Tokens / s", "Acceptance", "Speedup", "Model pair"):
            assert label in labels, (lang, label)
        assert not [x for x in labels if re.search(r"[\u4e00-\u9fff]", x)], labels  # no Chinese label
        assert "Done: " in _status(at)
        assert any("Identical: speculative decoding" in s.value for s in at.success)
        assert "Draft pass" in _figures(at)


def test_the_switch_changes_the_language_and_the_url():
    at = _live("zh", run=False)
    assert at.button(key="run").label == "运行"
    assert "就绪" in _status(at)
    head = at.selectbox(key="draft_vocab").options[-1]
    at.slider(key="gamma").set_value(6)
    at.select_slider(key="speed").set_value("Slow")
    at.selectbox(key="draft_vocab").select(at.selectbox(key="draft_vocab").options[-1]).run()
    vocab = at.session_state["draft_vocab"]
    assert vocab > 0 and head.startswith("最常见的")
    for lang, run in (("en", "Run"), ("zh_CN", "运行"), ("en", "Run")):
        at.segmented_control(key="lang_pick").set_value(lang).run()
        assert not at.exception, at.exception
        assert at.query_params["lang"] in (lang[:2], [lang[:2]])  # shared in the URL
        assert at.button(key="run").label == run
        # the settings survive a language change (the browser's side of it: test_switch_in_chromium)
        assert at.slider(key="gamma").value == 6
        assert at.select_slider(key="speed").value == "Slow"
        assert at.session_state["draft_vocab"] == vocab and at.selectbox(key="draft_vocab").value == vocab
        assert at.selectbox(key="pair_name").value == "tiny"
    assert "Ready" in _status(at)
    assert at.selectbox(key="draft_vocab").options[-1].startswith("top ")


def test_an_input_error_is_shown_in_chinese():
    at = _live("zh", run=False)
    at.text_area(key="prompt").set_value("   ").run()
    assert [e.value for e in at.error] == ["提示词为空：请输入一些内容让模型续写"]


# --- the library's English, said again in the page's language --------------------------------


def _marked(template: str) -> str:
    return "<" + template + ">"


def _matches(message: str, templates) -> bool:
    """Whether ``message`` is one of ``templates`` formatted (a matched one comes back marked)."""
    return translate_known(message, templates, _marked).startswith("<")


def _refusal(**overrides) -> str:
    from specviz.record.validate import check_settings

    with pytest.raises(BadInput) as exc:
        check_settings(RunConfig(**{"prompt": "hi", **overrides}))
    return str(exc.value)


def test_the_engines_refusals_have_templates(tiny_pair):
    from specviz.models.pair import ModelPair
    from specviz.record.validate import check
    from specviz.ui.state import BAD_INPUT_TEMPLATES

    refusals = [_refusal(prompt="  "), _refusal(gamma=0), _refusal(max_new_tokens=0), _refusal(seed=-1),
                _refusal(temperature=-1.0), _refusal(temperature=101.0), _refusal(top_p=0.0),
                _refusal(tree_nodes=16, tree_depth=20), _refusal(tree_nodes=16, draft_vocab=8)]
    for cfg in (RunConfig(prompt="x " * (tiny_pair.context_length + 8)),
                RunConfig(prompt="hi", draft_vocab=tiny_pair.draft_vocab_size)):
        with pytest.raises(BadInput) as exc:
            check(tiny_pair, cfg)
        refusals.append(str(exc.value))
    with pytest.raises(BadInput) as exc:
        ModelPair.token_ranks(types.SimpleNamespace(_ranks=None))
    refusals.append(str(exc.value))
    unmatched = [r for r in refusals if not _matches(r, BAD_INPUT_TEMPLATES)]
    assert not unmatched, unmatched
    zh = translate_known(refusals[1], BAD_INPUT_TEMPLATES, ZH)
    assert zh == "γ（草稿长度）必须是 1 到 32 之间的整数；收到的是 0", zh


def test_the_races_reasons_and_the_loaders_steps_have_templates():
    from specviz.measure.race import Baseline, why_not_reuse
    from specviz.record.contention import JOBS
    from specviz.ui.pair import LOAD_MESSAGES
    from specviz.ui.view import NOT_REUSED

    sd = Trace(config=RunConfig(), summary={"draft_forward_ms_median": 30.0})
    reasons = [why_not_reuse(Baseline(sd, 1, 0.0, 10.0), sd, 3600.0),
               why_not_reuse(Baseline(sd, 1, 0.0, None), sd, 1.0),
               why_not_reuse(Baseline(sd, 1, 0.0, 10.0), sd, 1.0)]
    assert all(_matches(r, NOT_REUSED) for r in reasons), reasons
    assert _matches("loading the tiny pair (float32)", JOBS)
    for message in ("Assembling draft GGUF: part 2/5", "Converting target GGUF (first run only): tokenizer",
                    "Pair ready in 3.4 s (bfloat16 on cpu)", "Loading draft weights"):
        assert _matches(message, LOAD_MESSAGES), message
    from specviz.ui.pair import ROLES

    zh = translate_known("Assembling draft GGUF: part 2/5", LOAD_MESSAGES, ZH, {"role": lambda r: ZH(ROLES[r])})
    assert zh == "正在拼装草稿模型的 GGUF：第 2/5 部分", zh


def _run(ids, dtype="float32", temperature=0.0, margins=None, stop="max_new_tokens") -> Trace:
    rnd = Round(index=0, gamma=0, emitted=list(ids), margin=margins or [0.5] * len(ids))
    return Trace(config=RunConfig(dtype=dtype, temperature=temperature), rounds=[rnd], output_ids=list(ids),
                 stop_reason=stop)


class _Tokenizer:
    def decode(self, ids):
        return f"t{ids[0]}"


@pytest.mark.parametrize("case", [
    dict(ar=[1, 2, 3], sd=[1, 2, 3]),
    dict(ar=[1, 2, 3], sd=[1, 9, 3], temperature=0.8),
    dict(ar=[1, 2], sd=[1, 2, 3], stop="eos"),
    dict(ar=[1, 2, 3], sd=[1, 9, 3], dtype="bfloat16", margins=[0.5, 0.001, 0.5]),
    dict(ar=[1, 2, 3], sd=[1, 9, 3], dtype="bfloat16", margins=[0.5, 0.3, 0.5]),
    dict(ar=[1, 2, 3], sd=[1, 9, 3], margins=[0.5, 0.001, 0.5]),
    dict(ar=[1, 2, 3], sd=[1, 9, 3], margins=[0.5, 0.3, 0.5]),
    dict(ar=[1, 2, 3], sd=[1, 9, 3], margins=[0.5]),
], ids=["identical", "sampling", "stops", "bf16-tie", "bf16", "fp32-tie", "fp32", "no-margin"])
@pytest.mark.parametrize("tokenizer", [None, _Tokenizer()], ids=["ids", "decoded"])
def test_the_comparison_is_said_again_word_for_word(case, tokenizer):
    """In English the app's verdict is compare's own; in Chinese it is all Chinese."""
    from specviz.ui.view import comparison_text

    kw = {k: case[k] for k in ("dtype", "temperature", "margins") if k in case}
    ar = _run(case["ar"], stop=case.get("stop", "max_new_tokens"), **kw)
    sd = _run(case["sd"], **kw)
    assert comparison_text(ar, sd, tokenizer, N_) == compare(ar, sd, tokenizer).explanation
    zh = comparison_text(ar, sd, tokenizer, ZH)
    assert re.search(r"[\u4e00-\u9fff]", zh) and not re.search(r"\b(the|target|draft|token|output)\b", zh), zh


# --- in Chromium: the browser's language, the URL, and choices that survive the switch ---------

def _open_select(page, box) -> None:
    """Open a selectbox low in the sidebar: scrolled into view first (the sidebar scrolls
    smoothly, and a click while it still moves lands beside the box), then clicked until its
    list shows."""
    box.scroll_into_view_if_needed()
    for _ in range(3):
        box.click()
        try:
            page.get_by_role("option").last.wait_for(state="visible", timeout=5_000)
            return
        except Exception:  # noqa: BLE001  (playwright's TimeoutError: click again)
            page.keyboard.press("Escape")
    raise AssertionError("the selectbox's list did not open")


@pytest.mark.browser
def test_switch_in_chromium(app_server, browser):
    """A zh-CN browser gets Chinese with no ?lang; the switch writes ?lang=en; the slow-motion
    speed and the draft head the user picked survive both switches (the browser sends a
    choice back as the text it shows, which changes with the language)."""
    ctx = browser.new_context(viewport=VIEWPORT, locale="zh-CN")
    ctx.set_default_timeout(ACTION_TIMEOUT_MS)
    try:
        page = ctx.new_page()
        page.goto(app_server)
        run = page.locator(".st-key-run button").filter(visible=True)
        expect(run).to_contain_text("运行", timeout=90_000)
        side = page.locator('[data-testid="stSidebar"]')
        head = side.locator(".st-key-draft_vocab input").first
        speed = side.locator(".st-key-speed [data-testid='stSliderThumbValue']")
        _open_select(page, head)
        page.get_by_role("option").last.click()
        expect(head).to_have_value(re.compile("^最常见的"))
        expect(speed).to_have_text("正常")
        side.get_by_text("English", exact=True).click()
        expect(run).to_contain_text("Run")
        expect(page).to_have_url(re.compile(r"[?&]lang=en(&|$)"))  # the share link's settings beside it
        expect(head).to_have_value(re.compile(r"^top \d+"))
        expect(speed).to_have_text("Normal")
        expect(side.locator(".st-key-pair_name input").first).to_have_value("Tiny test pair (random weights)")
        side.get_by_text("简体中文", exact=True).click()
        expect(run).to_contain_text("运行")
        expect(page).to_have_url(re.compile(r"[?&]lang=zh(&|$)"))
        expect(head).to_have_value(re.compile("^最常见的"))
        expect(speed).to_have_text("正常")
    finally:
        ctx.close()
