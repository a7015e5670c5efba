"""The terminal front end: ``specviz generate | compare | sweep | costs | schedules | …``
(``commands``), on the same engine, traces and figures as the app."""

from specviz.cli.commands import main

__all__ = ["main"]
