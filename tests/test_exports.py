"""specviz.figures.exports: a trace as JSON, a figure as an offline HTML page and as a PNG (Kaleido on
the installed Chromium, never a downloaded one), and the app's markdown helpers that keep
model text literal.

On shipped traces (assets/traces/): no model is loaded. The PNG test starts Chromium and is
skipped only where /usr/bin/chromium is absent.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from helpers import png_size

from specviz import Trace
from specviz import figures as F
from specviz.figures import exports
from specviz.record.i18n import translate_known

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "assets" / "traces" / "code-gamma4-greedy.json"
CHROMIUM = "/usr/bin/chromium"
XSS = "</script><script>window.__xss=1</script>"


@pytest.fixture(scope="module")
def trace() -> Trace:
    return Trace.load(TRACE)


@pytest.fixture(scope="module")
def hostile(trace) -> Trace:
    """The shipped trace with markup in a token, the prompt and a model's name."""
    t = Trace.from_json(trace.to_json())
    t.rounds[0].proposed_text[0] = XSS
    t.rounds[0].correction_text = '<img src=x onerror="window.__xss=1">'
    t.config.prompt = XSS + " [click](http://example.com) $x^2$"
    t.config.draft = "<b>draft</b>"
    return t


def test_trace_json_round_trips(trace):
    data = exports.trace_json(trace)
    assert isinstance(data, bytes)
    back = Trace.from_json(data.decode("utf-8"))
    assert back.to_dict() == trace.to_dict()
    assert json.loads(data)["schema_version"] == trace.schema_version


def test_trace_json_keeps_text_as_written(hostile):
    back = Trace.from_json(exports.trace_json(hostile).decode("utf-8"))
    assert back.rounds[0].proposed_text[0] == XSS and back.config.prompt == hostile.config.prompt


def test_html_is_a_whole_offline_page(trace):
    page = exports.figure_html(F.timeline_export_figure(trace), title="code <γ=4>").decode("utf-8")
    assert page.lstrip().lower().startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert 'class="plotly-graph-div"' in page and "Plotly.newPlot" in page
    assert "plotly.js v" in page and len(page) > 3_000_000  # plotly.js itself is inside
    assert not re.search(r"<script[^>]*\ssrc=", page), "a script would come from elsewhere"
    assert "<title>code &lt;γ=4&gt;</title>" in page
    assert '"displaylogo": false' in page


def test_html_keeps_model_text_out_of_the_markup(hostile):
    page = exports.figure_html(F.timeline_export_figure(hostile), title=F.export_title(hostile)).decode("utf-8")
    assert "<script>window.__xss" not in page and "<img src=x" not in page and "<b>draft</b>" not in page
    assert "&lt;b&gt;draft&lt;\\u002fb&gt;" in page  # the escaped title, as plotly's JSON writes it
    head = page.split("<body>")[0]
    assert head.count("<title>") == 1 and "<title>Speculative" in head and "&lt;b&gt;draft&lt;/b&gt;" in head


def test_exported_timeline_carries_its_own_look(monkeypatch, trace):
    """In the app plotly's default template is Streamlit's bare one: the file must not depend on it."""
    import plotly.io as pio

    monkeypatch.setattr(pio.templates, "default", "none")
    fig = F.timeline_export_figure(trace)
    assert fig.layout.template.layout.plot_bgcolor == "white"
    assert fig.layout.yaxis.automargin is True  # the lane names get the margin they need
    assert fig.layout.height == 300 and fig.layout.title.text.startswith("Speculative, γ=4")


def test_png_needs_a_browser_and_says_so(monkeypatch, trace):
    fig = F.timeline_export_figure(trace)
    monkeypatch.setenv("BROWSER_PATH", "/nonexistent/chromium")
    assert exports.find_chromium() is None
    why = exports.png_unavailable()
    assert why == "PNG export needs Chromium or Chrome: /nonexistent/chromium is not a program"
    with pytest.raises(exports.ExportUnavailable, match="/nonexistent/chromium"):
        exports.figure_png(fig)
    monkeypatch.delenv("BROWSER_PATH")
    monkeypatch.setattr(exports, "find_chromium", lambda: None)
    assert exports.png_unavailable() == exports.NO_BROWSER
    with pytest.raises(exports.ExportUnavailable, match="BROWSER_PATH"):
        exports.figure_png(fig)
    # the app says each reason in its language, the path carried over
    said = translate_known(why, exports.UNAVAILABLE, lambda s: s.replace("PNG export needs", "导出 PNG 需要"))
    assert said == "导出 PNG 需要 Chromium or Chrome: /nonexistent/chromium is not a program"


def test_find_chromium_takes_browser_path_first(monkeypatch, tmp_path):
    fake = tmp_path / "my-chromium"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("BROWSER_PATH", str(fake))
    assert exports.find_chromium() == str(fake)
    monkeypatch.delenv("BROWSER_PATH")
    if os.access(CHROMIUM, os.X_OK):
        assert exports.find_chromium() == CHROMIUM


@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="needs Debian's Chromium at /usr/bin/chromium")
def test_png_is_drawn_by_the_installed_chromium(monkeypatch, hostile):
    import plotly.io as pio

    monkeypatch.delenv("BROWSER_PATH", raising=False)
    monkeypatch.setattr(pio.templates, "default", "none")  # as in the app
    assert exports.png_unavailable() is None
    fig = F.timeline_export_figure(hostile)
    data = exports.figure_png(fig, width=640, scale=2)
    assert data.startswith(exports.PNG_MAGIC)
    assert png_size(data) == (640 * 2, fig.layout.height * 2)  # the figure's own height
    assert len(data) > 10_000  # drawn, not blank
    (ROOT / "artifacts").mkdir(exist_ok=True)
    (ROOT / "artifacts" / "export-timeline.png").write_bytes(data)  # to look at


# --- Markdown that shows model text as written (specviz.ui.view) -------------------------------


def test_md_code_fences_any_backticks():
    from specviz.ui.view import md_code

    assert md_code("$x^2$") == "` $x^2$ `"
    assert md_code("a `b` c") == "`` a `b` c ``"
    assert md_code("a ``` b") == "```` a ``` b ````"
    assert md_code("two\nlines") == "` two lines `"


def test_replay_page_shows_file_text_as_written_and_offers_the_downloads(app_tiny_only, monkeypatch, tmp_path, trace):
    """The Replay page (AppTest): the pair and the prompt from the file go into the caption
    as code spans; the three downloads are there, the PNG one off, saying why, with no browser."""
    from streamlit.testing.v1 import AppTest

    from specviz.ui import chrome
    from specviz.ui.view import md_code

    t = Trace.from_json(trace.to_json())
    t.config.prompt = "[click](http://example.com) $x^2$ <script>window.__xss=1</script>"
    t.config.draft = '<img src=x onerror="window.__xss=1">'
    (tmp_path / "hostile.json").write_text(t.to_json(), encoding="utf-8")
    monkeypatch.setattr(chrome, "TRACES_DIR", tmp_path)
    monkeypatch.setenv("BROWSER_PATH", "/nonexistent/chromium")
    at = AppTest.from_file(str(ROOT / "pages" / "replay.py"), default_timeout=90)
    at.run()
    at.selectbox(key="replay_source").set_value("Recorded: hostile").run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    (caption,) = [c.value for c in at.caption if "prompt:" in c.value]
    assert md_code(repr(t.config.prompt)) in caption
    assert md_code(t.config.draft) in caption
    json_button = at.download_button(key="replay_dl_trace")
    assert json_button.label == "Trace JSON"
    assert at.download_button(key="replay_dl_timeline_html").label == "Timeline HTML"
    png = at.download_button(key="replay_dl_timeline_png")
    assert png.proto.disabled and "/nonexistent/chromium is not a program" in png.help
