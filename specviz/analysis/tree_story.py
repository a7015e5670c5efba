"""The walkthrough of one token-tree round (pages/inspect_round.py on a tree run): what each
draft pass grew, the one verify pass over every node, and the walk down the tree.

Pure: reads Rounds, Traces and RunConfigs only (no model, no Streamlit, no plotting). The
round's ``tree`` (specviz.record.run_trace.TreeNode, parents first) is what the engine drafted
(specviz/engine/tree.py); the numbers here are read off it and the round's events:

* draft pass s (1..S) reads the frontier and draws the children of the nodes it expands: pass 1
  reads the uncached prefix (its last token is the root, the last verified token), pass s ≥ 2
  the depth s − 1 nodes it expands; every new node sits at depth s. A node's cumulative q is
  the product of q along its path, Q(v) = q(v) · Q(parent(v)) (Q(root) = 1): the draft's
  probability of the whole line, the score a dynamic tree expands by (EAGLE-2);
* the verify pass reads the pending tokens and all N nodes at once: with P tokens before the
  round (the root at position P − 1, counting from 0), a node at depth d sits at position
  P − 1 + d and attends to the prefix, its ancestors and itself, never a sibling's branch;
* the walk: at each node from the root, the child that is the target's own choice (greedy: its
  argmax; sampling: SpecInfer's multi-step rule) is accepted and the walk goes on below it;
  where no child is, the target's token ends the round: a correction, or a bonus at a leaf.
"""

from __future__ import annotations

from dataclasses import dataclass

from specviz.analysis.round_story import Story, story
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Event, Round, Trace, TreeNode, is_draft_step, tree_depths


@dataclass(frozen=True)
class TreeSetup:
    """How the run grew its trees: static ``widths`` per depth, or dynamic (EAGLE-2): at most
    ``nodes`` nodes, ``depth`` passes, the ``width`` best frontier nodes expanded with ``width``
    children each."""

    widths: tuple[int, ...] = ()
    nodes: int = 0
    depth: int = 0
    width: int = 0

    @property
    def static(self) -> bool:
        return bool(self.widths)

    def width_at(self, step: int) -> int:
        """Children per expanded node at draft pass ``step`` (1-based)."""
        return self.widths[step - 1] if self.static and step <= len(self.widths) else self.width


def tree_setup(cfg: RunConfig) -> TreeSetup | None:
    """The run's tree settings; None for a chain."""
    if cfg.tree_shape:
        return TreeSetup(widths=tuple(cfg.tree_shape))
    if cfg.tree_nodes:
        return TreeSetup(nodes=cfg.tree_nodes, depth=cfg.tree_depth, width=cfg.tree_width)
    return None


def children(nodes: list[TreeNode]) -> dict[int, list[int]]:
    """Each node's children (key -1: the root's), in drafting order."""
    kids: dict[int, list[int]] = {i: [] for i in range(-1, len(nodes))}
    for i, n in enumerate(nodes):
        kids[n.parent if 0 <= n.parent < i else -1].append(i)
    return kids


def cumulative_q(nodes: list[TreeNode]) -> list[float]:
    """Q(v) = q(v) · Q(parent(v)), Q(root) = 1: the draft's probability of the line from the
    root down to v (each q to the 4 digits the trace keeps)."""
    out: list[float] = []
    for n in nodes:
        out.append(n.q * (out[n.parent] if n.parent >= 0 else 1.0))
    return out


@dataclass(frozen=True)
class TreePass:
    """Draft pass ``step`` (1-based) of a tree round: its event, the tokens it read, the nodes
    it expanded (their children are in the tree; -1: the root) and the nodes it added."""

    step: int
    event: Event
    read: int  # tokens the pass read: the uncached prefix at pass 1, the expanded frontier after
    expanded: list[int]
    added: list[int]

    @property
    def ms(self) -> float:
        return self.event.duration_ms

    @property
    def prefill(self) -> bool:
        return self.event.kind == "prefill"


def tree_passes(rnd: Round) -> list[TreePass]:
    """The round's draft passes, one per depth. A greedy dynamic tree keeps its best ``nodes``
    after the last pass, so a pass may keep fewer nodes than it drew (even none), and expand
    nodes whose children were all dropped: ``read`` counts what the pass really read."""
    events = [e for e in rnd.events if is_draft_step(e)]
    added: dict[int, list[int]] = {}
    for i, n in enumerate(rnd.tree):
        added.setdefault(n.step, []).append(i)
    out = []
    for s, e in enumerate(events, start=1):
        new = added.get(s, [])
        expanded = list(dict.fromkeys(rnd.tree[i].parent if rnd.tree[i].parent >= 0 else -1 for i in new))
        out.append(TreePass(s, e, len(e.tokens), expanded, new))
    return out


def sees(nodes: list[TreeNode]) -> list[list[bool]]:
    """The tree attention mask among the nodes: row i, column j is True iff node j is node i or
    one of its ancestors (every node also sees the whole prefix, not drawn here)."""
    rows = []
    for i in range(len(nodes)):
        row = [False] * len(nodes)
        j = i
        while j >= 0:
            row[j] = True
            j = nodes[j].parent
        rows.append(row)
    return rows


@dataclass(frozen=True)
class WalkStep:
    """One step of the walk down the tree: the children of node ``at`` (-1: the root), at depth
    ``depth``, and the one accepted (None: the walk stops here)."""

    depth: int
    at: int
    children: list[int]
    chosen: int | None


def tree_walk(rnd: Round) -> list[WalkStep]:
    """The walk from the root along the accepted nodes, one step per depth, down to the node
    whose children the target turned down (or a leaf: no children, the bonus)."""
    kids = children(rnd.tree)
    steps, v, depth = [], -1, 1
    while True:
        chosen = next((c for c in kids[v] if rnd.tree[c].accepted), None)
        steps.append(WalkStep(depth, v, kids[v], chosen))
        if chosen is None:
            return steps
        v, depth = chosen, depth + 1


def chain_accepts(rnd: Round, greedy: bool) -> int | None:
    """Greedy: how many tokens the chain of the draft's first choices (each node's first child:
    its top token) would have had accepted in this round: the leading depths where that child is
    on the accepted path (elsewhere the target's argmax is another token). None when sampling
    (a draw decides) or when the line ends in the tree before a rejection (a dynamic tree may not
    grow it to the full depth)."""
    if not greedy or not rnd.tree:
        return None
    kids, depth = children(rnd.tree), max(tree_depths(rnd.tree))
    v, k = -1, 0
    while kids[v]:
        first = kids[v][0]
        if not rnd.tree[first].accepted:
            return k
        v, k = first, k + 1
    return k if k == depth else None


@dataclass(frozen=True)
class TreeStory:
    """The numbers the walkthrough of tree round ``base.index`` narrates (``base``: the chain's
    story of the same round: its verify, sample and rollback events, the next round's start)."""

    base: Story
    setup: TreeSetup | None
    passes: list[TreePass]
    walk: list[WalkStep]
    nodes: int  # N: the tree's nodes
    prefix: int  # P: the tokens before the round (prompt and output so far); the root at P - 1
    depth: int  # the deepest node's depth
    chain: int | None  # chain_accepts

    @property
    def pending(self) -> int:
        """Tokens the verify pass read before the nodes (the root, or the whole prompt at first)."""
        v = self.base.verify
        return max(0, len(v.tokens) - self.nodes) if v is not None else 0

    @property
    def read(self) -> int:
        """Tokens the verify pass read: the pending ones and every node."""
        return self.pending + self.nodes

    @property
    def root_position(self) -> int:
        return self.prefix - 1

    @property
    def chain_read(self) -> int:
        """What the verify pass of a chain as deep as this tree would read: the pending tokens and
        one guess per depth."""
        return self.pending + self.depth


def tree_story(trace: Trace, index: int) -> TreeStory:
    """The walkthrough of tree round ``index`` (ValueError when that round drafted no tree)."""
    rnd = trace.rounds[index]
    if not rnd.tree:
        raise ValueError(f"round {index + 1} drafted no tree")
    before = len(trace.prompt_ids) + sum(len(r.emitted) for r in trace.rounds[:index])
    return TreeStory(
        base=story(trace, index), setup=tree_setup(trace.config), passes=tree_passes(rnd), walk=tree_walk(rnd),
        nodes=len(rnd.tree), prefix=before, depth=max(tree_depths(rnd.tree)),
        chain=chain_accepts(rnd, trace.config.temperature == 0),
    )
