"""Exceptions with messages meant for a person: the CLI prints them and exits 2,
the app shows them next to the widget concerned."""


class SpecvizError(Exception):
    """Base class: every error specviz raises on purpose."""


class BadInput(SpecvizError, ValueError):
    """A setting or prompt outside what the engine accepts.

    ``field`` names the setting at fault (a RunConfig field such as "gamma" or
    "prompt"), so a UI can show the message next to the right widget."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class ModelError(SpecvizError):
    """A model that cannot be found, verified or loaded, or a pair that does not fit."""


class RemoteError(ModelError):
    """A remote target or metrics endpoint that cannot be reached or does not answer as
    vLLM does; the message names the URL."""
