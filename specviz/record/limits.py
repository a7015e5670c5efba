"""What a run may ask for: one list of names and bounds for the engine, the replays, the
schema, the CLI and the app, and the two checks that need no model (sampling settings, draft
quantization). Pure: no torch here, so the record layer can name a dtype it cannot load.
"""

from __future__ import annotations

from specviz.record.errors import BadInput

# The longest draft: one constant for the engine, the CLI and the app. 32 because the
# heuristic policy (+2 per fully accepted block) climbs that far on predictable text
# (counting, boilerplate), where theory's best gamma for alpha ~ 0.95 and a cheap draft
# is in the twenties; and a 33-position verify pass is where the cost curve is measured.
MAX_GAMMA = 32
MAX_NEW_TOKENS = 4096
# Token trees (specviz/engine/tree.py): the verify pass reads every node at once, so the budget is
# the verify pass's width; 64 is past the cost curve's knee on every machine measured.
MAX_TREE_NODES = 64
MAX_TREE_DEPTH = 16
MAX_TREE_WIDTH = 8  # the draft's candidates a trace records per position (engine.decode.TOP_F)
MODES = ("speculative", "autoregressive")
DRAFTER_NAMES = ("model", "ngram")  # specviz.engine.drafters.DRAFTERS
POLICY_NAMES = ("constant", "heuristic", "confidence")  # specviz.record.policies.POLICIES
# The confidence policy's threshold τ: stop drafting after a token the draft gave q < τ
# (bench/bench.py --thresholds measures others; docs/design.md has the table).
DEFAULT_CONFIDENCE = 0.6
# What the app drafts with by default: the confidence policy with this cap on γ, and the draft
# variant this machine's measurement picks (specviz.measure.draft_choice.default_config).
DEFAULT_POLICY = "confidence"
DEFAULT_GAMMA = 10
DTYPE_NAMES = ("float32", "bfloat16", "float16")  # specviz.models.pair.DTYPES
DEVICES = ("auto", "cpu", "cuda", "mps")
PAIRS = ("default", "tiny")
QUANTS = ("none", "int8")  # "none": the draft as loaded (the pair's dtype)
MAX_REPEATS = 20  # runs per point a sweep takes (measure.sweep)
MAX_BRANCHES = 32  # SSD's default cap on the branches it prepares, B (measure.ssd_real, the replay)
DRAFT_HEAD_SIZES = (8192, 16384, 32768, 65536)  # the FR-Spec cuts the CLI and the app offer (models.draft_head)
UNKNOWN_TOKEN = -1  # a draft token a replay cannot know: after a wrong token in its block, or past the run
MAX_TEMPERATURE = 100


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """Raise BadInput for settings outside 0 <= temperature <= 100, top_k >= 0, 0 < top_p <= 1."""
    if not isinstance(temperature, (int, float)) or temperature != temperature or temperature < 0:
        raise BadInput(f"temperature must be >= 0 (0 means greedy); got {temperature!r}", "temperature")
    if temperature > MAX_TEMPERATURE:
        raise BadInput(f"temperature must be at most {MAX_TEMPERATURE}; got {temperature!r}", "temperature")
    if not isinstance(top_k, int) or top_k < 0:
        raise BadInput(f"top-k must be a whole number >= 0 (0 turns it off); got {top_k!r}", "top_k")
    if not isinstance(top_p, (int, float)) or not (0 < top_p <= 1):
        raise BadInput(f"top-p must be in (0, 1]; got {top_p!r}", "top_p")


def check_quant(quant: str, device: object = None) -> None:
    """BadInput unless ``quant`` names a known draft quantization (that runs on ``device``: a
    torch.device or its name, e.g. ``"cuda:0"``)."""
    if quant not in QUANTS:
        raise BadInput(f"draft quantization must be one of {', '.join(QUANTS)}; got {quant!r}", "draft_quant")
    if device is not None and quant == "int8" and str(device).split(":")[0] != "cpu":
        raise BadInput("the int8 draft runs on the CPU only (PyTorch's dynamic int8 kernels): "
                       "use draft quantization none on this device", "draft_quant")


def tree_size(shape: list[int]) -> int:
    """Nodes of the static tree whose nodes at depth d-1 each have shape[d-1] children:
    sum over d of w_1 * .. * w_d (the root, the last verified token, is not a node)."""
    total, level = 0, 1
    for w in shape:
        level *= w
        total += level
    return total
