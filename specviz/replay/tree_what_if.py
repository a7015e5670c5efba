"""A token tree's what-if from any greedy run, with no model re-run.

A greedy model-drafter trace records, for every output position j, the rank r_j of the
target's token in the draft's distribution given the correct prefix (``Trace.draft_ranks``,
0 = the draft's top choice). A *static* tree of widths w_1..w_D gives every node at depth
d - 1 its top w_d children (the draft's most probable tokens under that node). Greedy
verification walks it from the root (the last verified token) while a child is the target's
token, so a round that starts at output position j0 accepts position j0 + i (i = 0..D-1)
while r_{j0+i} < w_{i+1}: the target's token is among the children of the node before it.
A round that accepts k then emits the target's own token at j0 + k (a correction, or a bonus
when k == D), and the next round starts at j0 + k + 1. A chain of γ is the tree [1] * γ, and
then this is the serial replay (``specviz.replay.schedules.serial``) exactly: the same rounds
and the same wall time (tests/test_tree_whatif.py checks both on the shipped runs).

Costs, on the conventions of the serial replay and read from a ``LatencyModel``
(``specviz.replay.latency``: the run's own passes, or this machine's measured grid or
cost curve):

* the draft makes one pass per depth: pass 1 reads the root (two tokens after a bonus: the
  last accepted node, never fed to the draft, and the bonus; ``draft_read(2)``), pass d >= 2
  reads the frontier, the n_{d-1} nodes of depth d - 1, in one sequence with a tree mask
  (``draft_read(n_{d-1})``, and never more than n_{d-1} one-token passes: where the costs
  stretch a read past what was timed, e.g. from a float32 run's slow two-token pass, that bound
  holds it); the first pass of the run is the draft's prefill;
* the target verifies all N nodes and the root in one pass: ``verify(N + 1)`` (the prefill
  in the first round), after ``network_ms`` for a remote target;
* ``overhead_ms`` of bookkeeping per round.

N = ``tree_size(shape)`` (``specviz.record.limits``). Near the token budget the tree is cut
to the depth left (as the serial replay cuts γ), and a node the draft writes as an
end-of-sequence token gets no children: that is known for the draft's most probable line
only (the greedy chain from the root, ``schedules._Replay.draft``), so a tree loses the
subtree below an EOS there; an EOS elsewhere in the tree is not known and the tree is
charged in full. Dynamic trees (EAGLE-2's expansion by cumulative probability) depend on
the draft's probabilities, which a trace keeps only on the correct path: they are not
replayed here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from specviz.record.errors import BadInput
from specviz.record.i18n import N_, Translator
from specviz.record.limits import MAX_TREE_DEPTH, MAX_TREE_NODES, MAX_TREE_WIDTH, tree_size
from specviz.record.run_trace import Trace
from specviz.replay import schedules
from specviz.replay import what_if
from specviz.replay.latency import LatencyModel

# Shapes worth trying on a run, besides the run's own chain: narrow trees that spend the verify
# pass's spare width where the draft is least sure (its first guesses), and wide shallow ones.
PRESETS: tuple[tuple[int, ...], ...] = (
    (2, 1, 1, 1),
    (2, 2, 1, 1),
    (3, 1, 1, 1, 1),
    (2, 2, 2, 1, 1),
    (4, 2, 1, 1),
    (4, 2, 2, 1),
    (3, 3, 1, 1, 1),
    (8, 1, 1),
    (2, 2, 2, 2),
    (4, 4, 2),
)


@dataclass(frozen=True)
class TreeRound:
    """One replayed round: it starts at output position ``start``, drafts a tree of ``depth``
    levels and ``nodes`` nodes, accepts ``accepted`` of them (the path from the root), then
    the target's own token (``bonus`` when the path reached the last level); ``emitted`` tokens
    in all (fewer at the end of the run). ``ranks`` are the draft's ranks of the target's tokens
    at the round's positions (one per level, fewer at the end); the ms are the round's costs."""

    index: int
    start: int
    depth: int
    nodes: int
    accepted: int
    emitted: int
    bonus: bool
    ranks: tuple[int, ...]
    draft_ms: float
    verify_ms: float
    overhead_ms: float

    @property
    def ms(self) -> float:
        return self.draft_ms + self.verify_ms + self.overhead_ms


@dataclass(frozen=True)
class TreeWhatIf:
    """A run replayed under one static tree shape: its rounds and its estimated wall time (the
    two prefills included, in the first round's costs)."""

    shape: tuple[int, ...]
    rounds: tuple[TreeRound, ...]
    tokens: int
    wall_ms: float
    extrapolated: bool  # a verify pass or a draft read wider than any the costs hold: stretched (LatencyModel)

    @property
    def nodes(self) -> int:
        """N, the full tree's nodes (rounds near the budget or an EOS draft fewer)."""
        return tree_size(list(self.shape))

    @property
    def depth(self) -> int:
        return len(self.shape)

    @property
    def is_chain(self) -> bool:
        return all(w == 1 for w in self.shape)

    @property
    def tokens_per_round(self) -> float:
        return self.tokens / len(self.rounds) if self.rounds else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.wall_ms * 1000.0 if self.wall_ms > 0 else 0.0

    @property
    def accepted(self) -> list[int]:
        """Accepted draft tokens per round."""
        return [r.accepted for r in self.rounds]

    def label(self, tr: Translator = N_) -> str:
        """"chain γ=4" or "tree 4,2,2,1 (30 nodes)"."""
        if self.is_chain:
            return tr(N_("chain γ={gamma}")).format(gamma=self.depth)
        return tr(N_("tree {shape} ({nodes} nodes)")).format(shape=shape_text(self.shape), nodes=self.nodes)


# --- shapes -------------------------------------------------------------------------------------


def chain(gamma: int) -> tuple[int, ...]:
    """A chain of γ draft tokens: the tree of width 1 at every depth."""
    return (1,) * gamma


def shape_text(shape: Iterable[int]) -> str:
    return ",".join(str(w) for w in shape)


SHAPE_ERRORS = {
    "empty": N_("Type the tree's width at each depth, separated by commas: e.g. 4,2,2,1."),
    "not_numbers": N_("{text} is not a list of whole numbers: type widths separated by commas, e.g. 4,2,2,1."),
    "width": N_("Each width must be from 1 to {most} (the draft's top candidates a run records); got {width}."),
    "depth": N_("A tree is at most {most} levels deep; {text} has {depth}."),
    "nodes": N_("The shape {text} has {nodes} nodes, more than one verify pass takes here ({most}): narrow it."),
}


def parse_shape(text: str, tr: Translator = N_) -> tuple[int, ...]:
    """Widths per depth from text such as ``4,2,2,1`` (spaces, ``x`` or ``×`` also separate);
    BadInput with a message in ``tr``'s language when it is not a shape the engine takes."""
    stripped = text.strip()
    if not stripped:
        raise BadInput(tr(SHAPE_ERRORS["empty"]), "tree_shape")
    parts = [p for p in re.split(r"[\s,，x×*]+", stripped) if p]
    if not parts or not all(p.isascii() and p.isdigit() for p in parts):
        raise BadInput(tr(SHAPE_ERRORS["not_numbers"]).format(text=repr(stripped[:40])), "tree_shape")
    shape = tuple(int(p) for p in parts)
    return check_shape(shape, tr)


def check_shape(shape: Sequence[int], tr: Translator = N_) -> tuple[int, ...]:
    """``shape`` as a tuple, or BadInput: widths 1..MAX_TREE_WIDTH, at most MAX_TREE_DEPTH
    levels, at most MAX_TREE_NODES nodes (``specviz.record.limits``, the engine's bounds)."""
    shape = tuple(int(w) for w in shape)
    if not shape:
        raise BadInput(tr(SHAPE_ERRORS["empty"]), "tree_shape")
    if (bad := next((w for w in shape if not 1 <= w <= MAX_TREE_WIDTH), None)) is not None:
        raise BadInput(tr(SHAPE_ERRORS["width"]).format(most=MAX_TREE_WIDTH, width=bad), "tree_shape")
    if len(shape) > MAX_TREE_DEPTH:
        raise BadInput(tr(SHAPE_ERRORS["depth"]).format(most=MAX_TREE_DEPTH, text=shape_text(shape),
                                                        depth=len(shape)), "tree_shape")
    if (nodes := tree_size(list(shape))) > MAX_TREE_NODES:
        raise BadInput(tr(SHAPE_ERRORS["nodes"]).format(text=shape_text(shape), nodes=nodes, most=MAX_TREE_NODES),
                       "tree_shape")
    return shape


def levels(shape: Sequence[int], eos_depth: int | None = None) -> list[int]:
    """Nodes at each depth 1..D: w_1, w_1 w_2, ...; with ``eos_depth`` e, less the subtree
    below the draft's most probable line's node at depth e (an EOS: no children)."""
    out, level, lost = [], 1, 0
    for d, w in enumerate(shape, start=1):
        level *= w
        if eos_depth is not None and d > eos_depth:
            lost = w if d == eos_depth + 1 else lost * w
        out.append(level - lost)
    return out


# --- the replay ---------------------------------------------------------------------------------


def replay_tree(recorded: schedules.ReplayInput, shape: Sequence[int], costs: LatencyModel,
                max_new_tokens: int, eos_ids: Iterable[int] = ()) -> TreeWhatIf:
    """The recorded greedy run (its tokens, the draft's ranks of them, its draft's chains)
    replayed under the static tree ``shape`` (module docstring)."""
    shape = check_shape(shape)
    settings = schedules.Settings(gamma=max(1, min(len(shape), schedules.MAX_GAMMA)), max_new_tokens=max_new_tokens,
                                  eos_ids=frozenset(eos_ids))
    run = schedules._Replay.of(recorded, costs, settings)  # the draft's greedy line: its EOS stops
    widest, reads = max(costs.verify_ms, default=0), max([1, *costs.draft_read_ms])
    rounds: list[TreeRound] = []
    p, wall, beyond, bonus, started = 0, 0.0, False, False, False
    while p < run.n:
        depth = max(0, min(len(shape), max_new_tokens - p - 1))
        line = run.draft(p, p, depth)  # the top line, cut right after an EOS
        eos = len(line) if len(line) < depth else None
        counts = [n for n in levels(shape[:depth], eos) if n > 0]
        k = 0
        while k < len(counts) and p + k < run.n and run.ranks[p + k] < shape[k]:
            k += 1
        emitted = min(k + 1, run.n - p)
        draft_ms = 0.0
        for d in range(len(counts)):
            if d == 0 and not started:
                draft_ms += costs.draft_prefill_ms
                started = True
            elif d == 0:
                draft_ms += costs.draft_read(2) if bonus else costs.draft(1)
            else:
                draft_ms += min(costs.draft_read(counts[d - 1]), counts[d - 1] * costs.draft(1))
                beyond = beyond or counts[d - 1] > reads
        width = 1 + sum(counts)
        if rounds:
            verify_ms = costs.network_ms + costs.verify(width)
            beyond = beyond or width > widest
        else:
            verify_ms = costs.network_ms + costs.target_prefill_ms
        bonus = bool(counts) and k == len(counts)
        rnd = TreeRound(index=len(rounds), start=p, depth=len(counts), nodes=sum(counts), accepted=k,
                        emitted=emitted, bonus=bonus, ranks=tuple(run.ranks[p:p + len(counts)]),
                        draft_ms=draft_ms, verify_ms=verify_ms, overhead_ms=costs.overhead_ms)
        rounds.append(rnd)
        wall += rnd.ms
        p += emitted
    return TreeWhatIf(shape=shape, rounds=tuple(rounds), tokens=run.n, wall_ms=wall, extrapolated=beyond)


def tree_what_if(trace: Trace, shape: Sequence[int], costs: LatencyModel) -> TreeWhatIf:
    """``trace`` (a greedy model-drafter run with its draft ranks) replayed under the static tree
    ``shape``, timed by ``costs`` (``specviz.ui.sources.schedule_costs``, or
    ``specviz.replay.latency.from_trace``); BadInput when the run cannot be replayed."""
    if (why := what_if.why_not_replayable(trace)) is not None:
        raise BadInput(f"this run cannot be replayed as a tree: {what_if.NOT_REPLAYABLE[why]}", "trace")
    return replay_tree(what_if.replay_input(trace), shape, costs, trace.config.max_new_tokens, trace.eos_ids)


@dataclass(frozen=True)
class Comparison:
    """The run's own chain (its γ) and a tree on the same run, both replayed with the same costs."""

    chain: TreeWhatIf
    tree: TreeWhatIf

    @property
    def speedup(self) -> float:
        """The tree's estimated tok/s over the chain's."""
        return self.chain.wall_ms / self.tree.wall_ms if self.tree.wall_ms > 0 else 0.0


def compare(trace: Trace, shape: Sequence[int], costs: LatencyModel, gamma: int | None = None) -> Comparison:
    """The chain of ``gamma`` (default: the run's own γ) against the tree ``shape`` on ``trace``."""
    return Comparison(tree_what_if(trace, chain(gamma or trace.config.gamma), costs),
                      tree_what_if(trace, shape, costs))


def best_shapes(trace: Trace, costs: LatencyModel,
                candidates: Iterable[Sequence[int]] | None = None) -> list[TreeWhatIf]:
    """``trace`` under each candidate shape (default: ``PRESETS`` and the chains of γ = 1..8),
    fastest first (estimated wall time; ties: fewer nodes). The first is the best static shape
    for this run among them."""
    shapes = list(candidates) if candidates is not None else [*PRESETS, *(chain(g) for g in range(1, 9))]
    seen, results = set(), []
    for shape in shapes:
        shape = check_shape(shape)
        if shape not in seen:
            seen.add(shape)
            results.append(tree_what_if(trace, shape, costs))
    return sorted(results, key=lambda r: (r.wall_ms, r.nodes))


def check_static_tree(trace: Trace, costs: LatencyModel) -> what_if.SerialCheck:
    """A real run with a static tree (``RunConfig.tree_shape``; a chain run counts as the tree
    [1] * γ) against its what-if under the same shape, round by round: the same accepted and
    emitted counts (``rounds_match``) and the wall time (``wall_error``). For the engine's tests:
    on the tiny pair in float32 the rounds must match exactly."""
    cfg = trace.config
    if cfg.tree_nodes and not cfg.tree_shape:
        raise BadInput("a dynamic tree (tree_nodes) is not a static shape: the what-if replays static shapes",
                       "tree_shape")
    shape = tuple(cfg.tree_shape) or chain(cfg.gamma)
    sim = tree_what_if(trace, shape, costs)
    real = [(r.accepted, len(r.emitted)) for r in trace.rounds]
    replayed = [(r.accepted, r.emitted) for r in sim.rounds]
    return what_if.SerialCheck(len(trace.rounds), len(sim.rounds), real == replayed, trace.wall_ms, sim.wall_ms)


def with_curve(costs: LatencyModel, curve: LatencyModel) -> LatencyModel:
    """``costs`` (a run's own passes) with the passes it never made, wider than its widest verify
    and draft read, taken from ``curve`` (this machine's measured cost curve for the pair, at
    another context) as ratios to the curve's pass at that widest point, scaled to the run's own:
    the curve's shape, the run's level."""
    out = dataclasses.replace(costs, verify_ms=dict(costs.verify_ms), draft_read_ms=dict(costs.draft_read_ms))
    top = max(costs.verify_ms)
    for k in sorted(curve.verify_ms):
        if k > top:
            out.verify_ms[k] = costs.verify(top) * curve.verify(k) / curve.verify(top)
    reads = max(costs.draft_read_ms, default=1)
    for k in sorted(curve.draft_read_ms):
        if k > reads:
            out.draft_read_ms[k] = costs.draft_read(reads) * curve.draft_read(k) / curve.draft_read(reads)
    return out
