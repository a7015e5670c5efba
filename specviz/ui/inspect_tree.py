"""A tree round's steps on Inspect a round (specviz.ui.inspect_page; a chain round's are in
specviz.ui.inspect_steps): one step per draft pass, the tree growing a depth at a time; the one
verify pass over every node, with the tree attention mask; the walk down the tree; the target's
own token; the caches keeping the accepted path. The numbers are the round's own
(specviz.analysis.tree_story); the tree is figures.tree's, the drawing the Live page grows."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from specviz.analysis import tree_story as tst
from specviz.figures import round_story as FI
from specviz.figures import tree as FT
from specviz.ui.inspect_page import Walk
from specviz.ui.inspect_parts import dur, in_short, near_tie_note, num, round_timeline, say
from specviz.ui.lang import _
from specviz.ui.markdown import token_span

LISTED = 12  # tokens named in a sentence; the rest counted
CHART = {"displayModeBar": False}


def _root(walk: Walk) -> str:
    """The root, the last verified token: its text, or the prompt's end in the first round."""
    prev = walk.trace.rounds[walk.index - 1] if walk.index > 0 else None
    text = FT.root_text(prev)
    return token_span(text) if text else _("the prompt's end")


def _node(walk: Walk, v: int) -> str:
    return _root(walk) if v < 0 else token_span(walk.rnd.tree[v].text)


def _listed(items: list[str]) -> str:
    if len(items) <= LISTED:
        return ", ".join(items)
    return ", ".join(items[:LISTED]) + " " + _("and {n} more").format(n=len(items) - LISTED)


def _with_q(walk: Walk, nodes: list[int]) -> str:
    """Nodes with the draft's q of each (under its parent's row)."""
    return _listed([f"{token_span(walk.rnd.tree[i].text)} (q {num(walk.rnd.tree[i].q)})" for i in nodes])


def _with_qp(walk: Walk, nodes: list[int]) -> str:
    """Nodes with the draft's q and the target's p of each (both under the parent's rows)."""
    tree = walk.rnd.tree
    return _listed([f"{token_span(tree[i].text)} (q {num(tree[i].q)}, p {num(tree[i].p)})" for i in nodes])


def _tree(walk: Walk, upto: int | None) -> None:
    """The round's tree (figures.tree) at ``upto`` (None: the verdict), and its caption."""
    prev = walk.trace.rounds[walk.index - 1] if walk.index > 0 else None
    st.plotly_chart(FT.tree_figure(walk.rnd, upto, root_text=FT.root_text(prev), tr=_),
                    key=f"inspect_tree_{walk.step}", config=CHART)
    st.caption(FT.tree_caption(walk.rnd, upto, _))


def draft_pass_step(walk: Walk, s: int) -> None:
    """Draft pass s: what it read, which nodes it expanded (with their cumulative q), what it added."""
    T, rnd = walk.tree, walk.rnd
    p, setup, greedy = T.passes[s - 1], T.setup or tst.TreeSetup(), walk.story.greedy
    total = len(T.passes)
    w = setup.width_at(s)
    if s == 1 and not setup.static and not greedy:  # sampling spends the budget before the draws
        w = min(w, setup.nodes)
    if s == 1:
        read = (_("the prompt, {n} tokens, whose last is the root") if p.prefill else
                _("the {n} tokens not yet in its cache, the last of them the root {root}")).format(
            n=p.read, root=_root(walk))
        say(_("Draft pass 1 of {total} reads {read}, in {ms}, and gives the draft's distribution q after the "
              "root (the last verified token).").format(total=total, read=read, ms=dur(p.ms)))
    else:
        cumq = tst.cumulative_q(rnd.tree)
        nodes = _listed([f"{token_span(rnd.tree[v].text)} (Q {num(cumq[v])})" for v in p.expanded]) or "—"
        if setup.static:
            say(_("Draft pass {s} of {total} reads the {n} nodes at depth {d}, in one forward pass of {ms}: each at "
                  "its own position and seeing only its ancestors, the mask the target will use too. Their "
                  "cumulative q (Q, the product of q along the path from the root) is {nodes}.").format(
                s=s, total=total, n=p.read, d=s - 1, ms=dur(p.ms), nodes=nodes))
        else:
            say(_("Draft pass {s} of {total} expands the nodes at depth {d} with the highest cumulative q (Q, the "
                  "product of q along the path from the root: the draft's probability of the whole line), at most "
                  "{k} of them. It reads {n} in one forward pass of {ms}, each at its own position and seeing only "
                  "its ancestors, the mask the target will use too; those whose children stayed in the tree: "
                  "{nodes}.").format(s=s, total=total, d=s - 1, k=setup.width, n=p.read, ms=dur(p.ms), nodes=nodes))
            frontier = (1 if s == 2 else T.passes[s - 2].read) * setup.width_at(s - 1)
            if greedy and p.read < min(setup.width, frontier):  # engine.tree: the frontier pruned
                say(_("Fewer than {m} this time: a frontier node already outside the best {N} drafted so far is "
                      "not read, since the last cut would drop it and everything below it (nor is a node that "
                      "ends the text).").format(m=min(setup.width, frontier), N=setup.nodes))
    if setup.static:
        width = (_("The static shape {widths} gives the root {w} children.") if s == 1 else
                 _("The static shape {widths} gives each node at depth {d} {w} children.")).format(
            widths="·".join(map(str, setup.widths)), d=s - 1, w=w)
    else:
        width = _("Each expanded node gets {w} children (the tree's width).").format(w=w)
    how = (_("Greedy: the draft's {w} most probable tokens.").format(w=w) if greedy else
           _("Sampling: {w} draws from q (a token drawn twice is one node).").format(w=w))
    added = (_("New at depth {s}: {nodes}.").format(s=s, nodes=_with_q(walk, p.added)) if p.added else
             _("None of the nodes this pass drew stayed in the tree."))
    say(width, how, added)
    drawn = (1 if s == 1 else p.read) * w
    if not setup.static and greedy and drawn > len(p.added):
        say(_("After the last pass the budget of {N} nodes kept the {N} with the highest Q over the whole tree: "
              "{kept} of the {drawn} this pass drew.").format(N=setup.nodes, kept=len(p.added), drawn=drawn))
    elif not setup.static and not greedy and s == 1:
        say(_("In a sampled run the budget of {N} nodes is spent before the draws: a pass expands only as many "
              "nodes as the budget still has room for.").format(N=setup.nodes))
    if s < total:
        say(_("Meanwhile the target sits idle: there is nothing to check until the tree exists."))
    else:
        say(_("In all, {S} draft passes drafted {N} nodes in {ms}, one pass per depth. Meanwhile the target sat "
              "idle: there is nothing to check until the tree exists.").format(
            S=total, N=T.nodes, ms=dur(walk.story.draft_ms)))
    _tree(walk, min(s, FT.tree_steps(rnd) - 2))
    if s == total:
        round_timeline(walk)


def verify_step(walk: Walk, s: int = 0) -> None:
    """The one target pass over every node: the mask, the positions, the time against a chain's reading."""
    T, S, rnd = walk.tree, walk.story, walk.rnd
    if S.prefill:
        pending = _("the prompt's {n} tokens").format(n=T.pending)
    elif T.pending == 1:
        pending = _("the root {root}").format(root=_root(walk))
    else:
        pending = _("the {n} tokens not yet in its cache, ending in the root {root}").format(
            n=T.pending, root=_root(walk))
    say(_("The target reads {pending} and all {N} nodes, {read} tokens, in ONE forward pass of {ms}, and gets a "
          "distribution p after the root and after every node: what it needs to judge every child in the "
          "tree.").format(pending=pending, N=T.nodes, read=T.read, ms=dur(S.verify_ms)))
    say(_("The tree attention mask makes that one pass exact: the nodes sit side by side in the input, but each "
          "sees only the prefix, its ancestors and itself, never a sibling's branch, and takes the position it "
          "would have in a chain. With {P} tokens before this round the root sits at position {r} (counting from "
          "0), so a node at depth d sits at position {r} + d: siblings share a position.").format(
        P=T.prefix, r=T.root_position))
    say(_("A chain as deep as this tree ({D}) would read {c} tokens in its verify pass; this one read {read}, "
          "{ratio:.1f} times as many, in {ms}. Extra tokens cost little while a pass is memory-bound (loading "
          "the weights dominates) and more once it is compute-bound: the Cost curve page measures both on this "
          "machine.").format(D=T.depth, c=T.chain_read, read=T.read, ratio=T.read / max(T.chain_read, 1),
                             ms=dur(S.verify_ms)))
    say(_("Meanwhile the draft sits idle for those {ms}: it cannot guess on until it knows which of its "
          "guesses survive.").format(ms=dur(S.verify_ms)))
    cols = st.columns([3, 2])
    with cols[0]:
        _tree(walk, FT.tree_steps(rnd) - 1)
    with cols[1]:
        st.plotly_chart(FT.tree_mask_figure(rnd, tr=_), key="inspect_mask", config=CHART)
        st.caption(_("The mask: row by row, what each node reads (●). Every node reads the prefix; among the "
                     "nodes, only its ancestors and itself."))
    round_timeline(walk)


def _walk_line(walk: Walk, w: tst.WalkStep) -> str:
    rnd, greedy = walk.rnd, walk.story.greedy
    at = _node(walk, w.at)
    if not w.children:
        return _("Depth {d}: {node} is a leaf, with no guesses below it: the walk stops.").format(d=w.depth, node=at)
    guesses = _with_qp(walk, w.children)
    if greedy:
        if w.chosen is not None:
            return _("Depth {d}: below {node}, the draft's guesses {guesses}; the target's top token is {token} → "
                     "accepted.").format(d=w.depth, node=at, guesses=guesses, token=token_span(rnd.tree[w.chosen].text))
        return _("Depth {d}: below {node}, the draft's guesses {guesses}; the target's top token is {token}, none "
                 "of them → all rejected, the walk stops.").format(
            d=w.depth, node=at, guesses=guesses, token=token_span(rnd.correction_text))
    if w.chosen is None:
        return _("Depth {d}: below {node}, the draws {guesses}, tried in the order drawn: every one rejected, the "
                 "walk stops.").format(d=w.depth, node=at, guesses=guesses)
    tried = w.children.index(w.chosen)
    if tried == 0:
        return _("Depth {d}: below {node}, the draws {guesses}, tried in the order drawn: the first, {token}, "
                 "accepted.").format(d=w.depth, node=at, guesses=guesses, token=token_span(rnd.tree[w.chosen].text))
    return _("Depth {d}: below {node}, the draws {guesses}, tried in the order drawn: {token} accepted after {m} "
             "rejected.").format(d=w.depth, node=at, guesses=guesses, token=token_span(rnd.tree[w.chosen].text),
                                 m=tried)


def accept_step(walk: Walk, s: int = 0) -> None:
    """The walk down the tree, depth by depth, and the p/q chart where it judged."""
    ss = st.session_state
    T, S, rnd, cfg = walk.tree, walk.story, walk.rnd, walk.cfg
    k = rnd.accepted
    if S.greedy:
        say(_("Greedy decoding walks down the tree from the root: at each node, the child that is the target's own "
              "top token (argmax of p there) is accepted and the walk goes on below it; where no child is, the "
              "walk stops."))
    else:
        say(_("SpecInfer's multi-step speculative sampling walks down the tree from the root: at each node the "
              "children are tried in the order they were drawn. A child x is accepted with probability "
              "min(1, p(x) / q(x)); after a rejection p becomes norm(max(0, p − q)) and the next child is tried "
              "against it. Where every child is rejected, or at a leaf, the walk stops."))
    lines = [_walk_line(walk, w) for w in T.walk]
    lines.append(_("Accepted: {k} of the {N} nodes, along one path; the other {r}, on the branches the walk left, "
                   "are thrown away.").format(k=k, N=T.nodes, r=T.nodes - k))
    if T.chain is not None:
        lines.append(_("The draft's first choice at each depth (what a chain of depth {D} drafts) would have kept "
                       "{j} here; the tree kept {k}.").format(D=T.depth, j=T.chain, k=k))
    st.markdown("\n".join(f"- {line}" for line in lines))
    if S.sample is not None:
        st.caption(_("The acceptance rule itself took {ms}.").format(ms=dur(S.sample.duration_ms)))
    _tree(walk, None)

    depths = [w.depth for w in T.walk if w.depth - 1 < len(S.positions)]
    if not depths:
        return
    if ss.get("inspect_depth") not in depths:
        ss["inspect_depth"] = depths[-1]
    marks = {w.depth: ("✓" if w.chosen is not None else "✗") for w in T.walk}
    st.segmented_control(_("Depth"), depths, key="inspect_depth", required=True,
                         format_func=lambda d: f"{d} {marks[d]}")
    d = ss["inspect_depth"]
    step, pos = T.walk[d - 1], S.positions[d - 1]
    kids = tuple(rnd.tree[c].token for c in step.children)
    st.caption(_("Depth {d}: the draft's q and the target's p below {node}, every guess drafted there marked "
                 "▼.").format(d=d, node=_node(walk, step.at)))
    if not pos.recorded:
        st.caption(_("This trace was recorded before the top-10 rows were kept: only the proposed token's "
                     "q and p are shown."))
    if S.greedy:
        st.caption(_("A greedy run: q and p are drawn at temperature 1; the walk compares only the target's top "
                     "token with the children."))
    st.plotly_chart(FI.pq_figure(pos, tr=_, drafted_ids=kids), key="inspect_pq", config=CHART)
    if S.greedy and (tie := near_tie_note(rnd, pos.index, cfg)):
        st.caption(tie)


def target_step(walk: Walk, s: int = 0) -> None:
    """The target's own token below the last accepted node: a correction, or the bonus at a leaf."""
    T, S, rnd, trace = walk.tree, walk.story, walk.rnd, walk.trace
    k = rnd.accepted
    stop = T.walk[-1]
    last, target = _node(walk, stop.at), token_span(S.target_text)
    if S.emitted <= k:
        reasons = {"eos": _("an end-of-sequence token"), "stop_string": _("a stop string"),
                   "max_new_tokens": _("the token budget"), "context": _("the context length")}
        say(_("The output ended inside the accepted tokens ({reason}), so the target's {token} is not "
              "emitted.").format(reason=reasons.get(trace.stop_reason, _("the stop")), token=target))
    elif not stop.children:
        say(_("The walk reached a leaf, {last}, at depth {k}: every node on its path was accepted, and the verify "
              "pass's distribution p after that leaf gives one more token for free: the bonus {token}. No extra "
              "forward pass.").format(last=last, k=k, token=target),
            _("It is the target's top token there.") if S.greedy else
            _("It is drawn from that p, exactly as the target alone would draw it."))
        if S.positions and S.positions[-1].recorded:
            st.plotly_chart(FI.pq_figure(S.positions[-1], tr=_), key="inspect_bonus", config=CHART)
    elif S.greedy:
        say(_("Below {last}, at depth {d}, the target's own top token {token} takes the place of the rejected "
              "guesses {guesses}. It comes from the same verify pass: no extra forward pass.").format(
            last=last, d=stop.depth, token=target,
            guesses=_listed([token_span(rnd.tree[c].text) for c in stop.children])))
    else:
        say(_("Below {last}, at depth {d}, every draw was rejected, so the target's token {token} is drawn from what "
              "is left of p: norm(max(0, p − q)), taken once per rejected draw (SpecInfer's rule), the part of the "
              "target's distribution the draws under-covered. It comes from the same verify pass: no extra forward "
              "pass.").format(last=last, d=stop.depth, token=target))
    if S.emitted > k and k:
        say(_("This round emits {e} tokens: {accepted} accepted, and the target's {token}.").format(
            e=S.emitted, accepted=" ".join(token_span(t) for t in rnd.proposed_text[:k]), token=target))
    elif S.emitted > k:
        say(_("This round emits one token, the target's {token}: no guess was accepted.").format(token=target))
    say(_("Why the output is identical to the target's own: the walk accepts a node only where the target "
          "agrees with its token, and the target's own token ends every round. Greedy, that is exactly the "
          "target's greedy output; sampling, SpecInfer's rule applies min(1, p/q) draw by draw against what is "
          "left of p, which keeps exactly the target's distribution."))
    _tree(walk, None)


def rollback_step(walk: Walk, s: int = 0) -> None:
    """Both caches keep the prefix and the accepted path: gathered, not recomputed."""
    T, S, rnd = walk.tree, walk.story, walk.rnd
    k = rnd.accepted
    ms = {lane: sum(e.duration_ms for e in S.rollbacks if e.lane == lane) for lane in ("target", "draft")}
    drafted = any(e.lane == "draft" for e in S.rollbacks)
    say(_("Each model keeps a KV cache: the keys and values of every token it has read, so that a pass reads "
          "only the new tokens. After the verdict both must hold a prefix of the new sequence."))
    if k:
        say(_("The target read all {N} nodes, so its cache holds the prefix and every node's keys and values. It "
              "keeps only the prefix and the {k} accepted nodes' rows, gathered in place, not recomputed, in {ms}: "
              "the cache a chain that emitted the same tokens would hold.").format(
            N=T.nodes, k=k, ms=dur(ms["target"])))
    else:
        say(_("The target read all {N} nodes, so its cache holds the prefix and every node's keys and values. No "
              "node was accepted: it drops them all and keeps the prefix, in {ms}.").format(
            N=T.nodes, ms=dur(ms["target"])))
    if drafted:
        say(_("The draft's cache likewise keeps only the prefix and the accepted nodes it read, in {ms}.").format(
            ms=dur(ms["draft"])))
    else:
        say(_("The draft's cache already holds only the prefix and the accepted nodes it read: nothing to drop."))
    say(_("The target's own token {token} is in neither cache yet: the next round reads it first, as its new "
          "root.").format(token=token_span(S.target_text)))


RENDERERS: dict[str, Callable[[Walk, int], None]] = {
    "draft": draft_pass_step, "verify": verify_step, "accept": accept_step, "target": target_step,
    "rollback": rollback_step,
}


def render_in_short() -> None:
    """The four ideas, in short, for a tree round."""
    in_short((
        _("**What the draft produces:** a token tree, one draft pass per depth: several guesses per position "
          "where the draft is unsure, each with the q it came from."),
        _("**Why one verify pass checks the whole tree:** the tree attention mask lets each node see only the "
          "prefix and its own ancestors, so the target computes p at every node at once."),
        _("**Why each model sits idle:** the target has nothing to check until the tree exists, and the draft "
          "cannot grow the next one until the verdict is back."),
        _("**Why the output is the target's own:** the walk keeps only what the target would choose (greedy) or "
          "what SpecInfer's rule accepts (sampling); every other branch is thrown away."),
    ))
