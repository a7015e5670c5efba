"""The model pair: loaded once per server process, in a background thread, with progress.

``PairLoader`` loads a pair off the script thread and reports a monotonic overall
fraction; ``_loader`` keeps one per (pair, dtype) with ``st.cache_resource``. Each loader also
starts the pair's engine worker (``specviz.worker``: the same pair in a process of its own, where
the Live page's and the real PEARL/SSD runs are timed, away from this process's page work) and
is ready once both are; ``engine_client()`` is the pages' way to it.
``require_pair`` waits for it with a progress bar, or, where it cannot be loaded, says
why and how to fix it and offers the tiny pair. ``sidebar_pair`` draws the pair choice
and the pair card (names, device, dtype, memory) at the foot of every page's sidebar. In
server mode (``specviz.ui.server_mode``) it offers only the installed pairs the server allows,
in the precision ``auto`` picks, and notes the server's limits under the card.
"""

from __future__ import annotations

import html
import os
import re
import threading
import time

import streamlit as st

from specviz.models.pair import (
    ModelPair,
    cache_dir,
    cache_usage,
    clear_model_cache,
    load_pair,
)
from specviz.record.errors import ModelError, SpecvizError
from specviz.record.i18n import N_, SECONDS, Translator, translate_known
from specviz.ui import server_mode
from specviz.ui.chrome import keep_choices, recorded_traces, translator
from specviz.ui.lang import _
from specviz.worker.client import EngineClient
from specviz.worker.protocol import Spec

PAIRS = {"default": "Qwen2.5-Coder 0.5B → 1.5B", "tiny": N_("Tiny test pair (random weights)"),
         "remote": N_("Default draft → a vLLM server (remote target)")}  # shown as _(name)
REMOTE_URL = os.environ.get("SPECVIZ_TARGET_URL", "http://127.0.0.1:8000")
PAIR_DTYPES = {
    "auto": N_("auto (bf16 where the CPU has it)"),
    "float32": N_("float32 (token-exact)"),
    "bfloat16": N_("bfloat16 (faster)"),
}
# What loading says as it goes (specviz.models.pair and specviz.models.default_parts, English), shown translated.
LOAD_MESSAGES = (
    N_("Starting"),
    N_("Assembling {role} GGUF: part {part}/{parts}"),
    N_("Assembled and verified {role} GGUF ({mb} MB)"),
    N_("Converting {role} GGUF (first run only): tokenizer"),
    N_("Converting {role} GGUF (first run only): dequantising weights"),
    N_("Converting {role} GGUF (first run only): saving safetensors"),
    N_("Checking that the tokenizers match"),
    N_("Loading draft weights"),
    N_("Loading target weights"),
    N_("Pair ready in {seconds} s ({dtype} on {device})"),
    N_("Checking the remote target at {url}"),
    N_("Draft ready in {seconds} s ({dtype} on {device}); target at {url}"),
    N_("Fetching {model} (safetensors only)"),
    N_("Saving a {dtype} copy of {folder} (first {dtype} run only)"),
    N_("Measuring which draft pays on this machine (first start only)"),
    N_("Starting the engine's own process"),
)
ROLES = {"draft": N_("the draft"), "target": N_("the target")}  # {role} in LOAD_MESSAGES


def load_message(message: str) -> str:
    """A loading step's message in the page's language."""
    return translate_known(message, LOAD_MESSAGES, _, {"role": lambda r: _(ROLES[r]) if r in ROLES else r})


def pair_label(name: str, tr: Translator = _) -> str:
    """A pair's name in the sidebar's choice and the page's messages."""
    return tr(PAIRS[name])


_STAGES = (  # (message start, overall fraction before, span) for a monotonic overall bar
    ("assembling draft", 0.00, 0.06), ("assembled and verified draft", 0.06, 0.0),
    ("converting draft gguf (first run only): tokenizer", 0.08, 0.0),
    ("converting draft gguf (first run only): dequantising", 0.12, 0.0),
    ("converting draft gguf (first run only): saving", 0.25, 0.0),
    ("assembling target", 0.30, 0.10), ("assembled and verified target", 0.40, 0.0),
    ("converting target gguf (first run only): tokenizer", 0.42, 0.0),
    ("converting target gguf (first run only): dequantising", 0.48, 0.0),
    ("converting target gguf (first run only): saving", 0.68, 0.0),
    ("checking that the tokenizers match", 0.75, 0.0),
    ("loading draft weights", 0.80, 0.0), ("loading target weights", 0.88, 0.0),
    ("checking the remote target", 0.9, 0.0), ("pair ready", 0.95, 0.0), ("draft ready", 1.0, 0.0),
    ("measuring which draft pays", 0.96, 0.0), ("starting the engine's own process", 0.97, 0.0),
)


class PairLoader:
    """Loads one pair in a background thread; pages poll ``done``/``message``/``fraction``."""

    def __init__(self, name: str, dtype: str, remote: tuple[str, str] = ()):
        self.name, self.dtype, self.remote = name, dtype, remote
        self.message = "Starting"
        self.fraction = 0.0
        self.cold = False
        self.pair: ModelPair | None = None
        self.client: EngineClient | None = None
        self.error: Exception | None = None
        self.started = time.monotonic()
        self.finished: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"specviz-load-{name}", daemon=True)
        self._thread.start()

    def _progress(self, message: str, fraction: float | None) -> None:
        self.message = message
        low = message.lower()
        if low.startswith(("assembling", "converting")):
            self.cold = True
        for start, before, span in _STAGES:
            if low.startswith(start):
                self.fraction = max(self.fraction, before + span * (fraction or 0.0))
                break

    def _run(self) -> None:
        try:
            dtype = "float32" if self.name == "tiny" else self.dtype
            remote = self.name == "remote"
            url, model = self.remote if remote else (None, None)
            # the worker loads its copy meanwhile (its imports and reads overlap this load's)
            self.client = EngineClient(Spec(None if remote else self.name, dtype, "auto", url, model or None))
            if remote:
                self.pair = load_pair(device="auto", dtype=dtype, progress=self._progress, target_url=url,
                                      target_model=model or None)
            else:
                self.pair = load_pair(self.name, device="auto", dtype=dtype, progress=self._progress)
            self._greet_worker()
        except Exception as exc:  # shown to the user; SpecvizError carries a fix-it message
            self.error = exc
            if self.client is not None:
                self.client.stop()
        finally:
            self.finished = time.monotonic()

    def _greet_worker(self) -> None:
        """Wait for the worker's copy of the pair; take which draft pays here from it
        (``specviz.measure.draft_choice``: cached per machine, else measured there now, before the
        page is ready, so no run's clock holds it). The tiny pair's random weights pick nothing."""
        choose = self.name != "tiny" and self.pair.remote is None
        if choose:
            from specviz.measure import draft_choice

            if not draft_choice.cached(self.pair):
                self._progress("Measuring which draft pays on this machine (first start only)", None)
        if not self.client.info:
            self._progress("Starting the engine's own process", None)
        hello = self.client.hello(choose_draft=choose)
        self.pair.draft_choice = hello.draft_choice
        self.pair.notes.extend(n for n in hello.notes if n not in self.pair.notes)

    @property
    def done(self) -> bool:
        return self.finished is not None

    @property
    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started


def _release(loader: PairLoader) -> None:
    """A loader dropped from the cache (another precision chosen, Try again): its worker ends."""
    if loader.client is not None:
        loader.client.stop()


@st.cache_resource(show_spinner=False, max_entries=4, on_release=_release)
def _loader(name: str, dtype: str, remote: tuple[str, str] = ()) -> PairLoader:
    return PairLoader(name, dtype, remote)


def pair_key() -> tuple[str, str, tuple[str, str]]:
    """(pair name, dtype, (server URL, model) of a remote target or ()) chosen in the
    sidebar (or by SPECVIZ_PAIR). In server mode only an offered pair, in the precision
    ``auto`` picks; a remote target only once the user pressed Connect."""
    ss = st.session_state
    name = ss.get("pair_name") or env_pair()
    if name not in offered_pairs():
        name = env_pair()
    if name == "remote":
        return name, ss.get("pair_dtype", "auto"), tuple(ss.get("remote_target") or ())
    if name != "default":
        return name, "float32", ()
    return name, "auto" if server_mode.current().on else ss.get("pair_dtype", "auto"), ()


def offered_pairs() -> tuple[str, ...]:
    """The pairs the sidebar offers: every named pair; in server mode, the installed ones
    the server allows (server_mode.allowed_pairs)."""
    server = server_mode.current()
    if not server.on:
        return tuple(PAIRS)
    # a remote target is never offered on a public server: its users would make it fetch any address
    return tuple(n for n in server_mode.allowed_pairs(server) if n in PAIRS) or ("default", "tiny")


def env_pair() -> str:
    env = os.environ.get("SPECVIZ_PAIR", "default").strip().lower() or "default"
    offered = offered_pairs()
    if env in offered:
        return env
    return "default" if "default" in offered else offered[0]


def drop_other_precisions() -> None:
    """Callback of the precision choice: forget the default pair in other dtypes, so two
    copies of ~2 GB of weights (9 GB in fp32) do not stay resident side by side."""
    keep = st.session_state.get("pair_dtype", "auto")
    for dtype in PAIR_DTYPES:
        if dtype != keep:
            _loader.clear("default", dtype)


def use_tiny() -> None:
    st.session_state["pair_name"] = "tiny"


def current_loader() -> PairLoader | None:
    """The chosen pair's loader (starting it), or None for a remote target not yet connected."""
    name, dtype, remote = pair_key()
    if name == "remote" and not remote:
        return None
    return _loader(name, dtype, remote)


def retry_load() -> None:
    _loader.clear(*pair_key())


def connect_remote() -> None:
    """The Connect button: check the address, then (re)start the remote pair's loader."""
    from specviz.models.remote import normalise_url

    ss = st.session_state
    try:
        url = normalise_url(ss.get("remote_url") or REMOTE_URL)
    except SpecvizError as exc:
        ss["remote_error"] = str(exc)
        return
    ss.pop("remote_error", None)
    ss["remote_target"] = (url, (ss.get("remote_model") or "").strip())
    _loader.clear(*pair_key())  # a fresh connection, even to the same address


def _install_command(message: str) -> str | None:
    for line in message.splitlines():
        if "Fix:" in line:
            cmd = line.split("Fix:", 1)[1].strip()
            return cmd.split("  (")[0].strip()
    return None


def engine_client() -> EngineClient | None:
    """The chosen pair's engine worker once the pair is loaded, else None (never loads, never waits)."""
    loader = current_loader()
    return loader.client if loader is not None and loader.done and loader.error is None else None


def running_client() -> EngineClient:
    """The chosen pair's engine worker, started again (and waited for, with a spinner) if it died;
    SpecvizError before the pair is loaded."""
    client = engine_client()
    if client is None:
        raise SpecvizError(_("The model pair is not loaded yet."))
    if client.ensure_running():  # it died: a fresh one loads the pair again (seconds)
        with st.spinner(_("Starting the engine's own process again…")):
            client.hello(choose_draft=False)
    return client


def loaded_pair() -> ModelPair | None:
    """The chosen pair if it is loaded already, else None (never loads, never waits)."""
    loader = current_loader()
    return loader.pair if loader is not None and loader.done and loader.error is None else None


def require_pair() -> ModelPair | None:
    """The chosen pair, loading it (with progress) if needed. Where it cannot be loaded,
    say why and how to fix it, offer the tiny pair, and return None."""
    name, dtype, remote = pair_key()
    if name == "remote" and not remote:
        sidebar_pair(divider=False)
        st.info(_("Give the vLLM server's address in the sidebar and press **Connect**: the draft runs here, "
                  "the target there (greedy only). README: Bigger models."), icon=":material/dns:")
        return None
    loader = _loader(name, dtype, remote)
    if loader.done and loader.error is None:
        return loader.pair
    card = sidebar_pair(divider=False)  # the page waits or stops here: show the pair choice now
    if not loader.done:
        box = st.container(border=True)
        box.markdown("#### " + _("Loading the model pair: {pair}").format(pair=pair_label(name)))
        bar = box.progress(0.0, text=_("Starting"))
        note = box.empty()
        while not loader.done:
            bar.progress(min(loader.fraction, 1.0), text=f"{load_message(loader.message)} · " + _(SECONDS).format(s=f"{loader.elapsed:.0f}"))
            card.html(_card_html(loader))
            if loader.cold:
                note.caption(_(
                    "First start on this machine: the GGUF weights are assembled, checked and converted "
                    "once (about 1 to 2 minutes). Later starts load the converted copy in seconds."
                ))
            time.sleep(0.25)
    if loader.error is None:
        # redraw the whole app with the pair in hand, even when it came in just after the check
        # above: the card and its pair choice are drawn, and the page would draw them again
        st.rerun()
    err = loader.error
    message = str(err) if isinstance(err, SpecvizError) else f"{type(err).__name__}: {err}"
    cmd = _install_command(message) if isinstance(err, ModelError) else None
    said = "\n\n".join(line for line in message.splitlines() if not (cmd and "Fix:" in line))
    head = _("The {pair} pair could not be loaded.").format(pair=pair_label(name))
    st.error(f"**{head}**\n\n{said}", icon=":material/error:")
    if cmd:
        st.markdown(_("Install or repair it with:"))
        st.code(cmd, language="bash", wrap_lines=True)
        if "requirements.txt" in message:
            st.caption(_("or install the whole pair at once: `pip install -r requirements.txt`"))
    cols = st.columns([1, 1, 2])
    if name != "tiny" and "tiny" in offered_pairs():
        cols[0].button(_("Use the tiny test pair"), icon=":material/science:", on_click=use_tiny,
                       type="primary", key="use_tiny")
    cols[1].button(_("Try again"), icon=":material/refresh:", on_click=retry_load, key="retry_load")
    if recorded_traces():
        st.page_link("pages/replay.py", label=_("Or replay a recorded run (no model needed)"),
                     icon=":material/replay:")
    return None


def _rss_mb() -> float | None:
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except Exception:
        return None


GGUF_QUANT = re.compile(r"-(I?Q\d+(?:_[0-9A-Z]+)*|BF16|F16)$", re.IGNORECASE)  # Q4_K_M, Q8_0, IQ4_XS, F16


def gguf_quant(name: str) -> str | None:
    """The quantisation a GGUF model's name ends with (Qwen2.5-Coder-0.5B-Instruct-Q4_K_M ->
    Q4_K_M), or None."""
    m = GGUF_QUANT.search(name)
    return m.group(1) if m else None


def dequantised_note(d: dict) -> str | None:
    """For the pair card (``ModelPair.describe()``'s dict): a model named after its GGUF
    quantisation runs dequantised, in the dtype the card shows; None when neither is."""
    quants = sorted({q for name in (d["draft"], d["target"]) if (q := gguf_quant(name))})
    if not quants:
        return None
    return _("{quant} GGUF weights, dequantised to {dtype} to run here").format(quant=" / ".join(quants),
                                                                               dtype=d["dtype"])


def _card_html(loader: PairLoader | None) -> str:
    """The pair card. Its ``data-sv-pair`` attribute holds the pair's state (``pair_state``)
    for a browser test to wait on: while the pair loads, the page's script state reads "not
    running" for a moment (as the page reruns with the pair), so it cannot tell loading from ready."""
    e = html.escape
    state = pair_state(loader)
    if loader is None:
        title, how = _("Not connected"), _("give the server's address and press Connect")
        body = f"<b>{e(title)}</b><br><span class='sv-dim'>{e(how)}</span>"
    elif not loader.done:
        loading = _("Loading…")
        body = (f"<b>{e(loading)}</b> {int(100 * loader.fraction)}% · {_(SECONDS).format(s=f'{loader.elapsed:.0f}')}<br>"
                f"<span class='sv-dim'>{e(load_message(loader.message))}</span>")
    elif loader.error is not None:
        title, how = _("Not available"), _("the page says how to fix it")
        body = f"<b>{e(title)}</b><br><span class='sv-dim'>{e(how)}</span>"
    else:
        d = loader.pair.describe()
        rss = _rss_mb()
        mem = _("weights {mb} MB").format(mb=f"{d['weights_mb']:,}")
        if rss:
            mem += " · " + _("process {gb:.1f} GB").format(gb=rss / 1024)
        draft, target = _("Draft"), _("Target")
        loaded = _("loaded in {seconds:.1f} s").format(seconds=d["load_ms"] / 1000)
        where = f"<br><span class='sv-dim'>{e(d['target_url'])}</span>" if "target_url" in d else ""
        dequant = f"<br>{e(note)}" if (note := dequantised_note(d)) else ""
        body = (
            f"<b>{e(draft)}</b> {e(d['draft'])}<br><b>{e(target)}</b> {e(d['target'])}{where}<br>"
            f"<span class='sv-dim'>{e(d['device'])} · {e(d['dtype'])} · {e(mem)}{dequant}<br>{e(loaded)}</span>"
        )
    return f"<div class='sv-card' data-sv-pair='{state}'>{body}</div>"


def pair_state(loader: PairLoader | None) -> str:
    """"unconnected" (a remote target not yet connected), "loading", "failed" or "ready"."""
    if loader is None:
        return "unconnected"
    if not loader.done:
        return "loading"
    return "failed" if loader.error is not None else "ready"


def sidebar_pair(divider: bool = True):
    """Pair choice and the pair card (names, device, dtype, memory) at the foot of the
    sidebar. Every page calls it once, after its own sidebar widgets. Returns the card's
    placeholder, so a wait for the pair can keep it current."""
    ss = st.session_state
    tr = translator()  # bound now: the choices' format_func may run outside the script run
    keep_choices("pair_name", "pair_dtype")
    offered = list(offered_pairs())
    server = server_mode.current()
    if "pair_name" in ss and ss["pair_name"] not in offered:
        del ss["pair_name"]  # not offered here (server mode): the selectbox starts on env_pair()
    with st.sidebar:
        if divider:
            st.divider()
        st.selectbox(_("Model pair"), offered, index=offered.index(env_pair()),
                     format_func=lambda name: tr(PAIRS[name]),
                     key="pair_name", persist_state="session",
                     help=_("Set SPECVIZ_PAIR=tiny|default to choose at start-up."))
        if ss["pair_name"] == "remote":
            remote_fields()
        if ss["pair_name"] in ("default", "remote") and not server.on:
            st.selectbox(_("Precision"), list(PAIR_DTYPES), format_func=lambda d: tr(PAIR_DTYPES[d]),
                         key="pair_dtype",
                         persist_state="session", on_change=drop_other_precisions,
                         help=_("bf16 is about 2.5× faster on CPUs that compute it natively; float32 makes "
                                "greedy speculative output token-exact against the target alone."))
        card = st.empty()
        card.html(_card_html(current_loader()))
        if server.on:
            server_note(server)
        else:
            cache_control(current_loader())
    return card


def remote_fields() -> None:
    """The remote target's address, model name and Connect button (never in server mode)."""
    ss = st.session_state
    st.text_input(_("Server address"), value=REMOTE_URL, key="remote_url",
                  help=_("A vLLM server (OpenAI-compatible API) serving a target that shares the draft's "
                         "tokenizer. Greedy only: a server returns its top log-probabilities, not whole "
                         "distributions."))
    st.text_input(_("Served model name"), key="remote_model", placeholder=_("the one model it serves"))
    st.button(_("Connect"), key="remote_connect", icon=":material/link:", on_click=connect_remote,
              type="primary" if not ss.get("remote_target") else "secondary")
    if err := ss.get("remote_error"):
        st.error(err, icon=":material/error:")


@st.cache_data(ttl=60, show_spinner=False)
def _cache_usage() -> dict[str, int]:
    """``cache_usage`` at most once a minute: every page's every rerun draws the card."""
    return cache_usage()


def _clear_cache(keep: tuple) -> None:
    freed = clear_model_cache(keep)
    _cache_usage.clear()
    st.session_state["cache_freed"] = freed


def cache_control(loader: PairLoader | None) -> None:
    """The model cache's size on disk, and a button that deletes the converted copies the
    loaded pair does not use (another precision's, an older conversion's)."""
    usage = _cache_usage()
    if not usage:
        return
    total = sum(usage.values())
    ready = loader is not None and loader.done and loader.error is None and loader.pair is not None
    keep = tuple(loader.pair.folders) if ready else ()
    kept = {p.name for p in keep}
    spare = sum(v for k, v in usage.items() if k not in kept)
    with st.popover(_("Model cache: {gb:.1f} GB").format(gb=total / 2**30), icon=":material/storage:",
                    width="stretch"):
        st.caption(_("Converted model weights in {folder}. The loaded pair uses {used:.1f} GB; other copies "
                     "(another precision's) take {spare:.1f} GB and are converted again when needed (a minute "
                     "or two).").format(folder=cache_dir(), used=(total - spare) / 2**30, spare=spare / 2**30))
        st.button(_("Delete the copies not in use"), key="clear_cache", icon=":material/delete:",
                  disabled=not spare or not keep, on_click=_clear_cache, args=(keep,))
        if (freed := st.session_state.pop("cache_freed", None)) is not None:
            st.success(_("Freed {gb:.1f} GB.").format(gb=freed / 2**30), icon=":material/check:")


def server_note(server: server_mode.ServerSettings) -> None:
    """What server mode allows, under the pair card (and any setting it could not read)."""
    limits = [_("installed model pairs only"),
              _("up to {tokens} new tokens per run").format(tokens=server.max_new_tokens)]
    if server.max_prompt_chars is not None:
        limits.append(_("prompts up to {chars} characters").format(chars=f"{server.max_prompt_chars:,}"))
    if server.upload_mb is not None:
        limits.append(_("uploads up to {mb} MB").format(mb=server.upload_mb))
    text = _("Server mode: {limits}.").format(limits=" · ".join(limits))
    st.caption(f":material/dns: {text}")
    for problem in server.problems:
        st.caption(":material/warning: " + translate_known(problem, server_mode.TEMPLATES, _))
