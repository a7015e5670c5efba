"""specviz: watch speculative decoding run, round by round, on a real model pair."""

from specviz.engine import Decoding, autoregressive, speculative
from specviz.errors import BadInput, ModelError, SpecvizError
from specviz.models import ModelPair, load_pair
from specviz.trace import Event, Round, RunConfig, Trace

__all__ = [
    "BadInput",
    "Decoding",
    "Event",
    "ModelError",
    "ModelPair",
    "Round",
    "RunConfig",
    "SpecvizError",
    "Trace",
    "autoregressive",
    "load_pair",
    "speculative",
]
__version__ = "0.2.0"
