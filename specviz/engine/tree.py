"""Token trees: draft a tree of continuations, verify every node in ONE target pass.

A chain drafts one guess per position; a tree spends the verify pass's spare width on the
second and third guesses where the draft is unsure (SpecInfer, Miao et al., ASPLOS 2024;
EAGLE-2, Li et al., EMNLP 2024). A chain of gamma tokens is the static tree of widths
[1] * gamma and gives the same tokens here as through the chain drafter (tests/test_tree.py),
though a run drafts a chain with ``specviz.engine.drafters``.

The root is the last verified token (not a node). Nodes are numbered in drafting order,
parents before children; node i sits at position len(ids) - 1 + depth(i) and may attend to
the prefix, its ancestors and itself (``allowed``), never to a sibling's branch.

Drafting, one forward pass per depth, over the frontier (``TreeDrafter.propose``):

* static shape [w_1..w_D]: every node at depth d-1 gets w_d children;
* dynamic (EAGLE-2's expansion, ``Li et al. 2024, §4``): at each depth the ``width``
  frontier nodes with the highest cumulative draft probability (the product of q along
  the path) are expanded, each with ``width`` children; greedy runs then keep the ``nodes``
  best nodes of all drafted (a node's score never exceeds its parent's, so they form a
  tree). Sampling runs keep every drafted node and spend the budget before the draws
  (a rerank after the draws would pick children by their values and bias them).
  Greedy runs do not read a frontier node already outside the best ``nodes`` drafted so
  far: the final cut would drop it and its subtree. The tree is the same, the draft passes
  narrower, and drafting stops once no frontier node can make the cut.

Children: greedy, the draft's top-w tokens (ties to the lower id, as argmax breaks them);
sampling, w independent draws from q (a token drawn twice is one node, drawn twice). Under the
confidence policy (``sure`` = τ) a dynamic tree spends width only where the draft is unsure: a
node whose row's top probability is at least τ gets one child, its top token (EAGLE-2's use of
the draft's confidence, Li et al. 2024, §4: a sure draft's second guess is rarely the target's).
The count is decided from q before any draw, so sampling stays exact.

Verifying (``verify_tree``): the target reads the pending tokens and all N nodes in one
pass with a tree attention mask; row 0 is the root's distribution, row 1 + i node i's.

Accepting (``accept_tree``):

* greedy: from the root, follow the child whose token is the target's argmax while there
  is one; the target's argmax at the last accepted node is the correction (or the bonus
  when that node is a leaf). The output is the target's own greedy output.
* sampling: SpecInfer's multi-step speculative sampling (Miao et al. 2024, §4.2,
  Algorithm 2, "VerifyStochastic"; Theorem 4.2: the output follows p). At a node with
  target row p and draft row q, take its draws x_1..x_w (i.i.d. from q) in order: accept
  x_j with probability min(1, p(x_j) / q(x_j)) and descend; on a rejection p becomes
  norm(max(0, p - q)) and the next draw is tried against it. When every draw is
  rejected, or the node is a leaf, the token is drawn from the current p. Each step is
  Leviathan et al.'s rule against a residual, so by induction the token follows p.

After the round both caches keep only the accepted path (``KVModel.keep_only``: gathered,
not recomputed), as a chain that emitted the same tokens would have them.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from specviz.engine.acceptance import Sampling, residual_row, warp
from specviz.engine.drafters import sync_cache
from specviz.models.kv import Clock, KVModel
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Event


@dataclasses.dataclass(frozen=True)
class TreeShape:
    """How to grow a tree: static ``widths`` per depth, or dynamic (``nodes``, ``depth``, ``width``)."""

    widths: tuple[int, ...] = ()
    nodes: int = 0
    depth: int = 0
    width: int = 0

    @classmethod
    def of(cls, config: RunConfig) -> "TreeShape":
        if config.tree_shape:
            return cls(widths=tuple(config.tree_shape))
        return cls(nodes=config.tree_nodes, depth=config.tree_depth, width=config.tree_width)

    @property
    def max_depth(self) -> int:
        return len(self.widths) if self.widths else self.depth


@dataclasses.dataclass
class DraftTree:
    """A drafted tree. ``rows[v]`` is the draft's warped row at node v (-1: the root) for every
    node that was read by a draft pass; ``draws[v]`` are v's children in the order they were
    drawn (sampling: with repeats), as node indices."""

    tokens: list[int] = dataclasses.field(default_factory=list)
    parents: list[int] = dataclasses.field(default_factory=list)
    steps: list[int] = dataclasses.field(default_factory=list)
    score: list[float] = dataclasses.field(default_factory=list)  # log of the cumulative q
    rows: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)
    draws: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    events: list[Event] = dataclasses.field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tokens)

    def children(self, v: int) -> list[int]:
        """v's children (v = -1: the root's), each once, in drawing order."""
        return list(dict.fromkeys(self.draws.get(v, [])))

    def depth(self, i: int) -> int:
        return self.steps[i]

    def ancestors(self, i: int) -> list[int]:
        """i and its ancestors, i first."""
        out = []
        while i >= 0:
            out.append(i)
            i = self.parents[i]
        return out

    def q(self, i: int) -> float:
        """The draft's probability of node i's token under its parent's row."""
        return float(self.rows[self.parents[i]][self.tokens[i]])

    def add(self, parent: int, token: int, step: int) -> int:
        """Node index of ``token`` under ``parent``: a new node, or the one a repeated draw hit."""
        for c in self.draws.get(parent, []):
            if self.tokens[c] == token:
                self.draws[parent].append(c)
                return c
        self.tokens.append(token)
        self.parents.append(parent)
        self.steps.append(step)
        base = self.score[parent] if parent >= 0 else 0.0
        self.score.append(base + math.log(max(float(self.rows[parent][token]), 1e-30)))
        self.draws.setdefault(parent, []).append(len(self.tokens) - 1)
        return len(self.tokens) - 1

    def subset(self, keep: list[int]) -> "DraftTree":
        """The tree of the nodes in ``keep`` (closed under parents), renumbered in order."""
        keep = sorted(keep)
        new = {old: i for i, old in enumerate(keep)}
        new[-1] = -1
        out = DraftTree(events=self.events)
        out.tokens = [self.tokens[i] for i in keep]
        out.parents = [new[self.parents[i]] for i in keep]
        out.steps = [self.steps[i] for i in keep]
        out.score = [self.score[i] for i in keep]
        out.rows = {new[v]: row for v, row in self.rows.items() if v in new}
        out.draws = {new[v]: [new[c] for c in cs if c in new] for v, cs in self.draws.items() if v in new}
        return out


def allowed(tree: DraftTree, nodes: list[int], prefix: int, columns: dict[int, int], total: int,
            pending: int = 0) -> torch.Tensor:
    """The attention mask [pending + len(nodes), total]: ``pending`` causal rows for the
    uncached tokens before the tree (cached columns, then themselves), then one row per node
    in ``nodes``: the ``prefix`` columns and the columns of its ancestors and itself (each
    node's column is ``columns[node]``)."""
    first = total - pending - len(nodes)  # cached columns before the pending tokens
    mask = torch.zeros(pending + len(nodes), total, dtype=torch.bool)
    for r in range(pending):
        mask[r, : first + r + 1] = True
    for r, i in enumerate(nodes, start=pending):
        mask[r, :prefix] = True
        mask[r, [columns[a] for a in tree.ancestors(i)]] = True
    return mask


TIE_ROOM = 8  # how far past the w-th a top-k looks for ties with it


def _top_children(q: torch.Tensor, w: int) -> list[int]:
    """The draft's w most probable tokens, ties to the lower id (as argmax breaks them).
    A top-k a little wider than w holds every token tied with the w-th unless the ties run
    past it (then, rarely, a full stable sort): a full sort of the vocabulary took ~10 ms a node."""
    k = min(w + TIE_ROOM, q.numel())
    values, ids = torch.topk(q, k)
    if k < q.numel() and values[-1] >= values[min(w, k) - 1]:
        order = torch.sort(q, descending=True, stable=True).indices[:w].tolist()
    else:
        order = [t for _v, t in sorted(zip((-values).tolist(), ids.tolist()))[:w]]
    return [t for t in order if q[t] > 0]


def _best_nodes(tree: DraftTree, n: int) -> list[int]:
    """The n best nodes by cumulative q (ties: shallower, then older). Closed under parents, since
    a child's score never exceeds its parent's and it is deeper."""
    return sorted(range(len(tree)), key=lambda i: (-tree.score[i], tree.steps[i], i))[:n]


class TreeDrafter:
    """The draft model growing a token tree, one forward pass per depth, with its own cache.

    ``propose`` leaves the cache holding the prefix and every node it read; ``keep_path``
    then gathers the accepted path's rows, and ``sync`` crops as the chain drafter does."""

    name = "model"

    def __init__(self, kv: KVModel, sampling: Sampling, gen: torch.Generator, clock: Clock, shape: TreeShape,
                 prune: bool = True, sure: float | None = None):
        self.kv, self.sampling, self.gen, self.clock, self.shape = kv, sampling, gen, clock, shape
        self.sure = sure  # dynamic trees: one child where the row's top probability is >= sure (None: off)
        self.prune = prune  # greedy dynamic trees: skip nodes the final cut drops (False: read every one)
        self.prefix = 0  # len(ids) when the tree was drafted
        self.read: dict[int, int] = {}  # node -> its column in the draft's cache

    def _children(self, tree: DraftTree, v: int, w: int, step: int) -> None:
        q = tree.rows[v]
        if self.sure is not None and not self.shape.widths and float(q.max()) >= self.sure:
            w = 1  # the draft is sure here: no second guess
        if self.sampling.greedy:
            picks = _top_children(q, w)
        else:
            picks = torch.multinomial(q, w, replacement=True, generator=self.gen).tolist()
        for tok in picks:
            tree.add(v, tok, step)

    def _widths(self, tree: DraftTree, frontier: list[int], step: int, stop_ids: set[int]) -> dict[int, int]:
        """How many children each frontier node gets at this step (decided before any draw)."""
        frontier = [i for i in frontier if tree.tokens[i] not in stop_ids]
        if self.shape.widths:
            return {i: self.shape.widths[step - 1] for i in frontier}
        best = sorted(frontier, key=lambda i: (-tree.score[i], i))[: self.shape.width]
        if not self.sampling.greedy:  # the budget is spent before the draws
            room = max(0, self.shape.nodes - len(tree)) // self.shape.width
            best = best[:room]
        elif self.prune and len(tree) > self.shape.nodes:
            # The final cut keeps the best `nodes` of all drafted; a node outside the best of those
            # drafted so far can never be among them, nor can its descendants (their scores are no
            # higher, their depth is greater): reading it would be a wasted column of the pass.
            kept = set(_best_nodes(tree, self.shape.nodes))
            best = [i for i in best if i in kept]
        return {i: self.shape.width for i in best}

    def propose(self, ids: list[int], depth: int, stop_ids: set[int]) -> DraftTree:
        """A tree at most ``depth`` deep: one pass over the uncached prefix for the root's
        row, then one pass per further depth over the nodes expanded there."""
        tree = DraftTree()
        start = min(self.kv.common_prefix(ids), len(ids) - 1)
        self.kv.rollback(start)
        feed = ids[start:]
        logits, t0, t1 = self.kv.timed_forward(feed, 1, self.clock)
        tree.events.append(Event("draft", "draft_forward" if start else "prefill", t0, t1, feed))
        tree.rows[-1] = warp(logits, self.sampling)[0].cpu()  # draws use the CPU generator
        self.prefix, self.read = len(ids), {}
        if self.shape.widths:
            first = self.shape.widths[0]
        else:  # sampling spends the budget before the draws; greedy reranks after them
            first = self.shape.width if self.sampling.greedy else min(self.shape.width, self.shape.nodes)
        self._children(tree, -1, first, 1)
        for step in range(2, depth + 1):
            frontier = [i for i in range(len(tree)) if tree.steps[i] == step - 1]
            widths = self._widths(tree, frontier, step, stop_ids)
            if not widths:
                break
            nodes = list(widths)
            base = len(self.kv.tokens)
            for r, i in enumerate(nodes):
                self.read[i] = base + r
            mask = allowed(tree, nodes, self.prefix, self.read, base + len(nodes))
            positions = [self.prefix - 1 + tree.depth(i) for i in nodes]
            toks = [tree.tokens[i] for i in nodes]
            logits, t0, t1 = self.kv.timed_forward(toks, len(nodes), self.clock, allow=mask, positions=positions)
            tree.events.append(Event("draft", "draft_forward", t0, t1, toks))
            rows = warp(logits, self.sampling).cpu()
            for r, i in enumerate(nodes):
                tree.rows[i] = rows[r]
            for i, w in widths.items():
                self._children(tree, i, w, step)
        if self.sampling.greedy and not self.shape.widths and len(tree) > self.shape.nodes:
            keep = sorted(_best_nodes(tree, self.shape.nodes))
            renumber = {old: new for new, old in enumerate(keep)}
            self.read = {renumber[i]: col for i, col in self.read.items() if i in renumber}
            tree = tree.subset(keep)
        return tree

    def keep_path(self, path: list[int]) -> Event | None:
        """Keep the prefix and the accepted path's nodes that a pass read (every path node
        but perhaps the last): the rows are gathered, not recomputed."""
        t0 = self.clock.now()
        before = len(self.kv.tokens)
        cols = list(range(self.prefix)) + [self.read[i] for i in path if i in self.read]
        self.kv.keep_only(cols)
        self.read = {}
        if len(cols) == before:
            return None
        return Event("draft", "rollback", t0, self.clock.now(), self.kv.tokens[-1:])

    def sync(self, ids: list[int]) -> list[Event]:
        return sync_cache(self.kv, ids, self.clock)


def verify_tree(target: KVModel, ids: list[int], tree: DraftTree, clock: Clock) -> tuple[torch.Tensor, Event]:
    """One target pass over the pending tokens and every node: logits [N + 1, V], row 0 the
    root's (the last pending token's), row 1 + i node i's."""
    target.rollback(min(target.common_prefix(ids), len(ids) - 1))
    kind = "verify_forward" if target.tokens else "prefill"
    cached = len(target.tokens)
    pending = ids[cached:]
    nodes = list(range(len(tree)))
    columns = {i: len(ids) + i for i in nodes}
    total = len(ids) + len(tree)
    mask = allowed(tree, nodes, len(ids), columns, total, pending=len(pending))
    positions = list(range(cached, len(ids))) + [len(ids) - 1 + tree.depth(i) for i in nodes]
    feed = pending + tree.tokens
    logits, t0, t1 = target.timed_forward(feed, len(tree) + 1, clock, allow=mask, positions=positions)
    return logits, Event("target", kind, t0, t1, list(feed))


@dataclasses.dataclass
class TreeVerdict:
    path: list[int]  # the accepted nodes, root's child first
    token: int  # the target's own token after the path: a correction, or a bonus at a leaf
    p: torch.Tensor  # the target's rows [N + 1, V] (warped; temperature 1 when greedy)
    bonus: bool


def accept_tree(tree: DraftTree, logits: torch.Tensor, sampling: Sampling, gen: torch.Generator) -> TreeVerdict:
    """Greedy: follow the target's argmax down the tree. Sampling: multi-step speculative
    sampling at each node (module docstring)."""
    p_rows = warp(logits, sampling).cpu()  # the draws use the CPU generator, on any device
    path: list[int] = []
    v = -1
    while True:
        kids = tree.children(v)
        if sampling.greedy:
            best = int(logits[v + 1].argmax())
            match = next((c for c in kids if tree.tokens[c] == best), None)
            if match is None:
                return TreeVerdict(path, best, p_rows, not kids)
            path.append(match)
            v = match
            continue
        p = p_rows[v + 1].clone()
        q = tree.rows.get(v)
        nxt = None
        for c in tree.draws.get(v, []):
            tok = tree.tokens[c]
            if float(torch.rand((), generator=gen)) < float(p[tok] / q[tok].clamp_min(1e-30)):
                nxt = c
                break
            p, _ = residual_row(p, q)
        if nxt is None:
            return TreeVerdict(path, int(torch.multinomial(p, 1, generator=gen)), p_rows, not kids)
        path.append(nxt)
        v = nxt


def best_line(tree: DraftTree, path: list[int]) -> list[int]:
    """The path, then the draft's first child at each step below its last node: the line a
    round's strip shows (accepted, then rejected)."""
    line = list(path)
    v = path[-1] if path else -1
    while kids := tree.children(v):
        v = kids[0]
        line.append(v)
    return line
