"""The engine in a process of its own: the models run in a worker, the app's UI talks to it.

A timing the app draws must never be slowed by the app itself. In one process, Streamlit's own
work (serialising a figure, rerunning a script, serving another tab) shares the interpreter's
lock and the cores with the forward passes it times. So the UI starts one worker process per
loaded pair (``client.EngineClient``, ``python -m specviz.worker``): the worker loads the same
pair from the same cache (its weights are the same file-backed pages: about 0.5 GB more, not a
second copy), and runs every timed pass; the UI only asks and draws.

* ``protocol``: what travels between them (pickled tuples over a local socket);
* ``server``: the worker's loop. Requests are served one at a time in the order they came
  (the engine's FIFO turn queue: a waiting session is told how many turns are ahead of it);
* ``client``: the UI's side: start, hello, requests, turns, stop, and a worker that died;
* ``races``: a live race run in the worker (``RaceSession``) and its mirror in the UI
  (``RemoteRace``), which the Live page drives as it drove a ``Race``.

The worker's busy meter counts the UI's process as the app's own page work
(``specviz.models.busy.count_app_process``), so what is left unmarked is only the engine.
"""
