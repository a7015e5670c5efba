"""What a run was asked to do (``RunConfig``: everything needed to reproduce it), and the names
a trace uses: its schema version, its lanes, its event kinds and its summary keys. Shared by
the record (``run_trace``), its schema and validation, with no loading in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specviz.record.limits import DEFAULT_CONFIDENCE

SCHEMA_VERSION = 4

LANES = ("draft", "target")
FORWARD_KINDS = frozenset({"prefill", "draft_forward", "verify_forward", "target_forward"})
# "network": a remote target's request, outside the server's compute (specviz/models/remote.py)
EVENT_KINDS = FORWARD_KINDS | {"sample", "rollback", "lookup", "network"}

SUMMARY_KEYS = (
    "new_tokens",
    "rounds",
    "wall_ms",
    "tokens_per_second",
    "acceptance_rate",
    "mean_acceptance_length",
    "per_position_acceptance",
    "draft_forward_ms_median",
    "target_forward_ms_median",
    "cost_ratio_c",
    "draft_idle_fraction",
    "target_idle_fraction",
    "overhead_ms",
    "ttft_ms",
)


@dataclass
class RunConfig:
    """Everything needed to reproduce a run."""

    mode: str = "speculative"  # "speculative" | "autoregressive"
    draft: str = ""
    target: str = ""
    device: str = "cpu"
    dtype: str = "float32"
    gamma: int = 4
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    prompt: str = ""
    chat: bool = True
    max_new_tokens: int = 64
    stop: list[str] = field(default_factory=list)
    drafter: str = "model"
    policy: str = "constant"
    confidence: float = DEFAULT_CONFIDENCE  # the confidence policy's τ: stop after a token with q < τ
    draft_vocab: int = 0  # > 0: the draft's head cut to this many most frequent ids (FR-Spec)
    draft_quant: str = "none"  # "int8": the draft's Linears dynamic int8 (specviz/models/int8.py)
    target_url: str = ""  # the target on this vLLM server (specviz/models/remote.py); "" = a local target
    compiled: bool = False  # static KV caches and a compiled one-token pass (CUDA graphs on a GPU): models.static_kv
    # A token tree instead of a chain (specviz/engine/tree.py). tree_nodes > 0: a dynamic tree of at most
    # that many nodes, tree_depth deep, tree_width children per expanded node (EAGLE-2's expansion);
    # tree_shape [w_1, .., w_D]: a static tree, every node at depth d-1 with w_d children. A chain of
    # gamma tokens is the static tree [1] * gamma, and tree_nodes 0 with no shape means a chain.
    tree_nodes: int = 0
    tree_depth: int = 4
    tree_width: int = 2
    tree_shape: list[int] = field(default_factory=list)

    @property
    def is_tree(self) -> bool:
        return bool(self.tree_nodes or self.tree_shape)
