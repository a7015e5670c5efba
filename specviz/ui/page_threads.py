"""Which threads of the app's process do its page work, for the busy meter (``models.busy``).

Under ``streamlit run`` the process's main thread runs Streamlit's server (it sends every
session's page), and each session runs its script in a thread of its own named
``ScriptRunner.scriptThread``. A run's engine works in one of those script threads (and in the
pool threads of PyTorch, which are no Python threads); every other one is page work that shares
the cores and the interpreter with the engine while a pass is timed.
"""

from __future__ import annotations

import threading

SCRIPT_THREAD = "ScriptRunner.scriptThread"  # Streamlit's name for a session's script thread


def page_threads() -> list[int]:
    """Native ids of the threads doing the app's page work, seen from the thread that asks (the
    engine's, which is left out): the main thread and the other sessions' script threads."""
    me, main = threading.current_thread(), threading.main_thread()
    return [t.native_id for t in threading.enumerate()
            if t is not me and t.native_id is not None and (t is main or t.name.startswith(SCRIPT_THREAD))]
