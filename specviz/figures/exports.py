"""Exports: a run as files to take away (a trace as JSON, a figure as an offline HTML page
or as a PNG). Pure functions that return bytes: no Streamlit, no file kept (Kaleido's
browser uses a temporary folder while it draws).

The PNG goes through plotly's own exporter, Kaleido, which draws the figure in a headless
Chromium. specviz never downloads a browser: ``find_chromium`` looks for one already
installed (``BROWSER_PATH`` first, the variable Kaleido's browser driver, choreographer,
reads; then Debian's /usr/bin/chromium and the usual names on the PATH), and
``figure_png`` hands Kaleido that path. With none, it raises ``ExportUnavailable``, a
sentence a person can act on.
"""

from __future__ import annotations

import html
import os
import shutil

import plotly.graph_objects as go

from specviz.record.errors import SpecvizError
from specviz.record.i18n import N_
from specviz.record.run_trace import Trace

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome",
                  "/usr/bin/google-chrome-stable")
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
PNG_WIDTH = 1200  # layout px: a slide's width; the PNG is this times the scale
PNG_HEIGHT = 450  # when the figure sets no height
PNG_SCALE = 2  # sharp on a projector and in print
PNG_TIMEOUT_S = 60
HTML_CONFIG = {"displaylogo": False, "responsive": True}


class ExportError(SpecvizError):
    """An export that could not be made; the message says why."""


class ExportUnavailable(ExportError):
    """An export this machine cannot make (no Kaleido, or no Chromium to draw with)."""


def trace_json(trace: Trace) -> bytes:
    """The whole trace as UTF-8 JSON: the Replay page and ``Trace.from_json`` read it back."""
    return trace.to_json(indent=1).encode("utf-8")


def figure_html(fig: go.Figure, title: str | None = None) -> bytes:
    """``fig`` as a standalone interactive page (zoom, hover) that works offline: plotly.js
    is embedded (about 4.7 MB), no script comes from a network. ``title`` names the page."""
    page = fig.to_html(include_plotlyjs=True, full_html=True, include_mathjax=False, config=HTML_CONFIG)
    if title:
        page = page.replace("</head>", f"    <title>{html.escape(title)}</title>\n</head>", 1)
    return page.encode("utf-8")


def _executable(path: str | None) -> bool:
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def find_chromium() -> str | None:
    """An installed Chromium or Chrome to draw PNGs with, or None: ``BROWSER_PATH`` when
    set (and only it then), else the usual paths and names. Never downloads one."""
    if (env := os.environ.get("BROWSER_PATH")) is not None:
        return env if _executable(env) else None
    for path in CHROMIUM_PATHS:
        if _executable(path):
            return path
    for name in CHROMIUM_NAMES:
        if _executable(path := shutil.which(name)):
            return path
    return None


# Why no PNG can be made (English, marked for translation: the app says them in its language
# through specviz.record.i18n.translate_known).
NO_KALEIDO = N_("PNG export needs the kaleido package: pip install -r requirements.txt")
NOT_A_PROGRAM = N_("PNG export needs Chromium or Chrome: {path} is not a program")
NO_BROWSER = N_("PNG export needs Chromium or Chrome, and none was found (looked for /usr/bin/chromium, and for "
                "chromium and google-chrome on the PATH): install one, or set BROWSER_PATH to its program")
UNAVAILABLE = (NO_KALEIDO, NOT_A_PROGRAM, NO_BROWSER)


def png_unavailable(browser: str | None = None) -> str | None:
    """Why a PNG cannot be made here (one of UNAVAILABLE, formatted), or None when it can.
    ``browser``: a Chromium to use instead of the one ``find_chromium`` finds."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return NO_KALEIDO
    if browser is None and (env := os.environ.get("BROWSER_PATH")) is not None:
        browser = env
    if browser is not None:
        return None if _executable(browser) else NOT_A_PROGRAM.format(path=browser)
    return None if find_chromium() is not None else NO_BROWSER


def figure_png(fig: go.Figure, width: int = PNG_WIDTH, height: int | None = None, scale: float = PNG_SCALE,
               browser: str | None = None, timeout: float = PNG_TIMEOUT_S) -> bytes:
    """``fig`` drawn as a PNG by plotly's exporter (Kaleido) in an installed Chromium
    (``browser``, else ``find_chromium``'s): ``width`` × ``height`` layout px (height: the
    figure's own, else PNG_HEIGHT), times ``scale`` in pixels. Takes a few seconds (a
    browser starts). Raises ExportUnavailable when there is no Kaleido or no browser, and
    ExportError when drawing fails."""
    if (why := png_unavailable(browser)) is not None:
        raise ExportUnavailable(why)
    path = browser or find_chromium()
    import kaleido
    from kaleido.errors import ChromeNotFoundError

    height = height or fig.layout.height or PNG_HEIGHT
    try:
        data = kaleido.calc_fig_sync(
            fig.to_dict(),
            opts=dict(format="png", width=width, height=height, scale=scale),
            # this browser, plotly.js from the plotly package, no MathJax: nothing from a network
            kopts=dict(path=path, mathjax=False, timeout=timeout),
        )
    except ChromeNotFoundError as exc:
        raise ExportUnavailable(f"PNG export could not start the browser at {path}: {exc}") from None
    except Exception as exc:  # noqa: BLE001  (Kaleido and the browser fail in many ways: say which)
        raise ExportError(f"PNG export failed in the browser at {path}: {type(exc).__name__}: {exc}") from None
    if not isinstance(data, bytes) or not data.startswith(PNG_MAGIC):
        raise ExportError("PNG export failed: the browser returned no PNG image.")
    return data
