"""The fixtures shared by the test modules: the tiny pair (fp32, CPU), a recorder of the
KV-cached models a run creates, the app on the tiny pair only, a fresh model cache, one
Chromium and one app server for the browser tests, real vLLM servers (the default target, for the real pair
against vLLM; a tiny speculating one for the protocol, the faults and the Server page). Plain helpers (runs, ports, the chi-square machinery, browser steps) are in helpers.py.
And which phase of tests/run.sh each test runs in: SERIAL_MODULES and ``--phase`` below.

Nothing here may reach a model hub: HF_HUB_OFFLINE is set before anything imports
huggingface_hub.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from helpers import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    app_server_running,
    drop_app_engines,
    free_port,
    other_share_now,
    recording_kv,
    stop_process,
)

from specviz import load_pair  # noqa: E402


# The modules that run in the serial phase (tests/run.sh), alone on the machine, first: the ones that
# time runs against the clock or measure the machine's load (the busy meter, contention marks,
# forward-pass costs, the race's speeds, the real overlap's threads pinned to cores). Every test marked
# ``serial`` runs there too. Everything else, the browser tests (they accept a run marked busy) and a new
# test module included, runs in the parallel phase: parallel-safe by default.
SERIAL_MODULES = frozenset({
    "test_busy.py", "test_busy_browser.py", "test_clock.py", "test_costs.py", "test_overlap.py", "test_race.py",
})


# The browser tests' second xdist group: the navigation tests (app servers of their own, cold starts) and
# the eight sessions at once (the heaviest minute and a half of the phase: kept apart from the other
# browser tests' waits, and after the tours on their worker)
BROWSER_NAV_MODULES = frozenset({"test_nav_browser.py", "test_load_browser.py"})


def is_serial(item) -> bool:
    """Whether a test runs in the serial phase (above)."""
    return item.path.name in SERIAL_MODULES or item.get_closest_marker("serial") is not None


def pytest_addoption(parser):
    parser.addoption(
        "--phase", choices=("all", "parallel", "serial"), default="all",
        help="specviz: run only the parallel-safe tests, or only the serial ones (tests/run.sh runs the "
             "parallel phase under pytest-xdist, then the serial one); default: all, in one process")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks added here
def pytest_collection_modifyitems(session, config, items):
    """The phase's tests only (``--phase``), in xdist groups and the rest. The real default
    pair's tests in one group, so one worker runs them one after another (one real pair in memory
    at a time), the vLLM server's first (it stops before the fp32 pair loads: 11 GB, then 8); the
    browser tests in two (BROWSER_NAV_MODULES and the rest), so one worker's Chromium and app server
    (session fixtures) serve each; the tiny vLLM server's
    tests in one (tests/test_vllm_server.py); every other test goes to whichever worker is free
    (tests/run.sh). And the ``slow``
    mark (the quick loop is ``pytest -m "not slow"``) on every test of a kind that is always slow."""
    phase = config.getoption("--phase")
    if phase != "all":
        keep = [item for item in items if is_serial(item) == (phase == "serial")]
        dropped = [item for item in items if is_serial(item) != (phase == "serial")]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    # stable: each module's tests stay together and in order, so its module fixtures start once
    items.sort(key=lambda item: (item.get_closest_marker("default_pair") is None,
                                 item.get_closest_marker("vllm") is None,
                                 item.get_closest_marker("browser") is not None))
    for item in items:
        # every browser, default-pair and vLLM test takes over 5 s: slow, out of the quick loop
        if any(item.get_closest_marker(name) for name in ("browser", "default_pair", "vllm")):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("default_pair"):
            item.add_marker(pytest.mark.xdist_group("default_pair"))
        elif item.get_closest_marker("browser"):  # two groups, a Chromium each: about 4 minutes each
            apart = item.path.name in BROWSER_NAV_MODULES
            item.add_marker(pytest.mark.xdist_group("browser_nav" if apart else "browser"))


def pytest_configure(config):
    """Under pytest-xdist (tests/run.sh's parallel phase): one torch thread per worker, so the
    workers' threads never outnumber the cores by more than the one worker that mostly waits."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)


def pytest_runtest_logfinish(nodeid, location):
    """``SPECVIZ_TEST_TIMELINE=file``: one line per test appended to the file (worker, wall-clock
    start and end in seconds since the epoch, node id), to see what each xdist worker ran when:
    what the parallel phase waits for (tests/run.sh)."""
    if path := os.environ.get("SPECVIZ_TEST_TIMELINE"):
        import time

        started = _STARTED.pop(nodeid, None)
        with open(path, "a") as f:
            f.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')} {started or 0:.1f} {time.time():.1f} {nodeid}\n")


_STARTED: dict[str, float] = {}


def pytest_runtest_logstart(nodeid, location):
    if os.environ.get("SPECVIZ_TEST_TIMELINE"):
        import time

        _STARTED[nodeid] = time.time()


@pytest.fixture(autouse=True)
def _return_memory_after_the_real_pair(request):
    """After a test of the real pair: collect, and hand the freed heap back to the system
    (glibc keeps it otherwise). An fp32 pair loaded and dropped left 2.3 GB resident, 0.45 GB
    once trimmed; with the browser tests' worker and the others beside it, the machine had no
    room for that: 17-19 of its 23.5 GB were taken while the vLLM server ran."""
    yield
    if request.node.get_closest_marker("default_pair") is not None:
        import ctypes
        import gc

        gc.collect()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc: nothing to hand back this way
            pass


TEST_DEVICE = os.environ.get("SPECVIZ_TEST_DEVICE", "cpu")


@pytest.fixture(scope="session")
def tiny_pair():
    """The tiny Qwen2 pair in fp32, on the CPU unless SPECVIZ_TEST_DEVICE names another device
    (``SPECVIZ_TEST_DEVICE=cuda`` runs the engine's tests on a GPU). Never mutate it in a test."""
    return load_pair("tiny", device=TEST_DEVICE, dtype="float32")


@pytest.fixture(scope="module")
def single_thread():
    """One intra-op thread for a module's tests: on the tiny models it is several times
    faster than two (no thread hand-off per small kernel), above all on a busy machine.
    Restored afterwards, so tests of real models elsewhere keep every core.
    Use it with ``pytestmark = pytest.mark.usefixtures("single_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def kv_recorder():
    with recording_kv() as rec:
        yield rec


@pytest.fixture
def app_tiny_only(monkeypatch):
    """The app on the tiny pair; asking for any other pair (minutes, ~10 GB) fails loudly."""
    from specviz.ui import pair as ui_pair

    real = ui_pair.load_pair

    def guarded(name, **kw):
        assert name == "tiny", f"a test asked for the {name!r} pair"
        return real(name, **kw)

    monkeypatch.setattr(ui_pair, "load_pair", guarded)
    monkeypatch.setenv("SPECVIZ_PAIR", "tiny")


@pytest.fixture
def specviz_cache(tmp_path, monkeypatch):
    """An empty specviz cache (SPECVIZ_CACHE_DIR) for one test: converted models, measured costs."""
    cache = tmp_path / "specviz-cache"
    cache.mkdir()
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(cache))
    drop_app_engines()  # the app's engine worker reads the cache folder it started with: a fresh one
    yield cache
    drop_app_engines()  # for the next test: this cache folder goes



@pytest.fixture
def quiet_machine():
    """Skip when other programs already take cores: the machine is shared (other test runs)."""
    from specviz.models import busy

    share = other_share_now()
    if share >= busy.BUSY_CORES / 2:
        pytest.skip(f"the machine is busy: other processes take {share:.2f} cores (load {os.getloadavg()})")


# --- the app in Chromium: one browser and one app server for the session ---------------------------------


@pytest.fixture(scope="session")
def app_server():
    """One app server for every browser test that does not need to see a cold start
    (tests/test_nav_browser.py starts its own). Each test opens its own session on it."""
    with app_server_running() as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    """One Chromium for the session; a test opens a fresh context (helpers.open_session) and closes it."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip("needs Debian's Chromium at /usr/bin/chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


# --- the real default pair ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def default_bf16_folders():
    """The default pair's converted bf16 cache folders (draft, target), as the app's bf16 start
    writes them: converted once on a machine (a couple of minutes), then read from the cache.
    The fp32 tests load these folders in fp32 (the loader casts) instead of converting the
    GGUFs a second time into an fp32 copy (~8 GB, about 2.5 minutes on 2 cores): what they
    check, exactness and acceptance in fp32, holds for any fp32 weights of the pair."""
    from specviz.models.pair import materialize

    return tuple(materialize(source, lambda message, fraction: None, "bfloat16")
                 for source in ("default-draft", "default-target"))


# --- a real vLLM server, the remote target ---------------------------------------------------------------


def _die_with_parent() -> None:
    """In the server's process before it starts: SIGTERM when the test process that started it
    dies (a pytest-xdist worker killed, a CI timeout), so no 10 GB server is left behind when
    the fixture's teardown never runs. Linux only; elsewhere nothing."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@contextlib.contextmanager
def _vllm_serving(port: int, cmd: list[str], log: Path):
    """Run vLLM's server ``cmd`` on ``port`` (its output to ``log``) until it answers; yield its URL; stop it."""
    from specviz.models import vllm_local

    if not vllm_local.installed():
        pytest.fail(f"vLLM is not installed in {vllm_local.venv()}: run  python -m specviz.models.vllm_local install  "
                    "(tests/run.sh does)")
    url = f"http://127.0.0.1:{port}"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=vllm_local.serve_env(), stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent)
    try:
        try:
            took = vllm_local.wait_ready(url, proc, timeout_s=900)
        except RuntimeError as exc:
            pytest.fail(f"{exc}\n--- the server's log ---\n{log.read_text(errors='replace')[-4000:]}")
        print(f"\nvLLM served {url} after {took:.0f} s", file=sys.stderr)
        yield url
    finally:
        stop_process(proc, 60)


@pytest.fixture(scope="module")
def vllm_server(request, tmp_path_factory):
    """The base URL of a real vLLM server serving the default target in fp32, without speculation of its own
    (tests/test_remote.py's docstring); started once for the module that uses it (test_remote.py, the only one)
    and stopped after it: an idle vLLM server still takes CPU and 11 GB. Or ``SPECVIZ_TEST_VLLM_URL`` for one
    already running. No speculation: vLLM's own draft would run on every verify request too (a verify of 51
    tokens took 3.9 s with it, 2.3 s without) and take 3.5 GB more."""
    if url := os.environ.get("SPECVIZ_TEST_VLLM_URL"):
        yield url.rstrip("/")
        return
    from specviz.models import vllm_local

    _draft, target = request.getfixturevalue("default_bf16_folders")
    # the bf16 cache folder, served in fp32 (vLLM casts it): no fp32 copy of the GGUF is converted for the tests
    port = free_port()
    cmd = vllm_local.serve_command(port, target, "float32")
    with _vllm_serving(port, cmd, tmp_path_factory.mktemp("vllm") / "server.log") as url:
        yield url


@pytest.fixture(scope="module")
def tiny_vllm_server(tmp_path_factory):
    """A real vLLM server on the tiny pair, with vLLM's own speculative decoding on (4 tokens a round):
    the tiny pair at a width vLLM's CPU attention takes (heads of 32), saved to a folder, the target
    served as "tiny". For everything that needs a vLLM server but not the real pair (the remote
    target's protocol and faults, the Server page's metrics: tests/test_vllm_server.py). It starts in
    about 25 s and takes 3 GB. Yields (url, the draft's folder) as ``.url`` and ``.draft``."""
    from types import SimpleNamespace

    from specviz.models import vllm_local
    from specviz.models.tiny_pair import CONTEXT, tiny_models, tiny_tokenizer

    folder = tmp_path_factory.mktemp("tiny-vllm")
    for role, model in zip(("draft", "target"), tiny_models(hidden_size=128)):
        model.save_pretrained(folder / role)
        tiny_tokenizer().save_pretrained(folder / role)
    # the server's tokenizer from a folder of its own: beside a Qwen2 config.json, transformers 5's
    # AutoTokenizer builds Qwen's tokenizer around the saved vocabulary and drops the spaces
    # (specviz reads tokenizer.json as saved: models/pair.py's load_tokenizer)
    tiny_tokenizer().save_pretrained(folder / "tokenizer")
    port = free_port()
    cmd = vllm_local.serve_command(port, folder / "target", "float32", max_model_len=CONTEXT, name="tiny") + [
        "--tokenizer", str(folder / "tokenizer"),
        "--speculative-config", json.dumps({"model": str(folder / "draft"), "num_speculative_tokens": 4})]
    with _vllm_serving(port, cmd, folder / "server.log") as url:
        yield SimpleNamespace(url=url, draft=folder / "draft")
