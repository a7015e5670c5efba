"""Token trees: one tree round drawn as a tree, and a tree's what-if beside the chain on one run.

``tree_figure`` draws a Round with a ``tree`` (specviz.record.run_trace.TreeNode): the root (the
last verified token) at the left, each depth one column to its right, every node with its
token's text. The marks are the strip's (specviz.figures.strip, docs/design.md's UI
conventions), colour never the only signal:

* the accepted path: green, underlined, joined by thick green edges;
* rejected nodes (every other verified node): vermillion, struck through, faded;
* accepted but past the stop (not emitted): grey, dotted edge;
* the target's own token after the last accepted node: blue, boxed and labelled fix or bonus,
  drawn as that node's child (beside the rejected guesses it replaced);
* while drafting or verifying: grey, pending.

``upto_step`` grows the tree for step mode: step s (1..S, S the last draft pass) shows the nodes
the first s draft passes proposed, step S + 1 lights the verify pass over all of them, step
S + 2 (or None) shows the verdict: ``tree_steps(rnd)`` is S + 2. Node positions are computed on
the whole tree, so nothing moves as it grows. Each node's q (and p where recorded) is on hover.

``tree_what_if_figure`` draws ``specviz.replay.tree_what_if`` results: the accepted draft tokens
of every round, the chain's beside the tree's, each with its tokens per round and estimated
tok/s. Pure: functions of the records; ``tr`` translates (default: English).
"""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

from specviz.analysis.marks import LABELS, printable, target_label
from specviz.analysis.metrics import fmt_ms
from specviz.analysis.tree_story import sees
from specviz.figures.palette import ACCEPTED, FONT_SIZE, PENDING, REJECTED, TARGET
from specviz.figures.timeline import esc
from specviz.record.i18n import N_, Translator
from specviz.record.run_trace import Round, tree_depths

NODE_FONT = FONT_SIZE + 2  # a token reads from the back of a classroom
MAX_CHARS = 12  # a node's text is cut past this many characters (the hover has it whole)
ROW_PX, MIN_HEIGHT, MAX_HEIGHT = 34, 240, 900
FADED = 0.7  # rejected nodes and their edges
VERIFY_FILL = "rgba(0, 114, 178, 0.12)"  # the target's pass over every node, lit (TARGET at 12%)
CHIP = "rgba(255, 255, 255, 0.94)"  # a node's box: a light chip on both themes, so no edge runs through its text
KIND_TEXT = {
    "accepted": N_("accepted"),
    "rejected": N_("rejected"),
    "cut": N_("accepted, but past the stop"),
    "pending": N_("proposed, not yet checked"),
}


@dataclass(frozen=True)
class NodeMark:
    """How one node of a tree round is drawn at a step: ``kind`` is accepted, rejected, cut,
    pending or hidden; ``x`` its depth, ``y`` its row (0 at the top)."""

    index: int
    kind: str
    x: int
    y: float


def tree_steps(rnd: Round) -> int:
    """The steps of a tree round in step mode: one per draft pass, the verify, the verdict."""
    return max((n.step for n in rnd.tree), default=0) + 2


def tree_phase(rnd: Round, upto_step: int | None = None) -> tuple[str, int]:
    """("draft", s) while the first s draft passes are shown, ("verify", S) while the target
    checks all of them, ("done", S) with the verdict (``upto_step`` None or past the last)."""
    passes = tree_steps(rnd) - 2
    if upto_step is None or upto_step >= passes + 2:
        return "done", passes
    if upto_step == passes + 1:
        return "verify", passes
    return "draft", max(0, upto_step)


def _has_target_token(rnd: Round) -> bool:
    return rnd.correction is not None and len(rnd.emitted) > rnd.accepted


def _last_accepted(rnd: Round) -> int:
    """The deepest accepted node's index, -1 (the root) when none was."""
    depth = tree_depths(rnd.tree)
    accepted = [i for i, n in enumerate(rnd.tree) if n.accepted]
    return max(accepted, key=lambda i: depth[i], default=-1)


def layout(rnd: Round) -> tuple[list[float], float, float | None]:
    """Rows for the nodes, the root and the target's token (None when the round emitted none):
    leaves on consecutive rows in the nodes' order, each parent in the middle of its children;
    the target's token is the first child of the last accepted node."""
    n = len(rnd.tree)
    children: dict[int, list[int]] = {i: [] for i in range(-1, n)}
    for i, node in enumerate(rnd.tree):
        children[node.parent if 0 <= node.parent < i else -1].append(i)
    target = n if _has_target_token(rnd) else None
    if target is not None:
        children[_last_accepted(rnd)].insert(0, target)
        children[target] = []
    rows: dict[int, float] = {}
    next_row = 0.0

    def place(i: int) -> float:
        nonlocal next_row
        if not children[i]:
            rows[i] = next_row
            next_row += 1
        else:
            kids = [place(c) for c in children[i]]
            rows[i] = (kids[0] + kids[-1]) / 2
        return rows[i]

    place(-1)
    return [rows[i] for i in range(n)], rows[-1], rows[target] if target is not None else None


def node_marks(rnd: Round, upto_step: int | None = None) -> list[NodeMark]:
    """Each node's mark at ``upto_step`` (``tree_phase``), in the nodes' order."""
    phase, shown = tree_phase(rnd, upto_step)
    depth = tree_depths(rnd.tree)
    rows, _, _ = layout(rnd)
    marks = []
    for i, node in enumerate(rnd.tree):
        if phase == "draft" and node.step > shown:
            kind = "hidden"
        elif phase != "done":
            kind = "pending"
        elif node.accepted:
            kind = "accepted" if depth[i] <= len(rnd.emitted) else "cut"
        else:
            kind = "rejected"
        marks.append(NodeMark(i, kind, depth[i], rows[i]))
    return marks


def _short(text: str) -> str:
    shown = printable(text)
    return esc(shown if len(shown) <= MAX_CHARS else shown[: MAX_CHARS - 1] + "…")


def _node_text(kind: str, text: str) -> str:
    body = _short(text)
    if kind == "accepted":
        return f"<b><u>{body}</u></b>"
    if kind == "rejected":
        return f"<s>{body}</s>"
    return body


STYLE = {  # kind -> (text colour, border colour, border width, opacity)
    "accepted": (ACCEPTED, ACCEPTED, 2, 1.0),
    "rejected": (REJECTED, REJECTED, 1, FADED),
    "cut": (PENDING, PENDING, 1, 1.0),
    "pending": (PENDING, PENDING, 1, 1.0),
}


def root_text(previous: Round | None) -> str:
    """The root's text for ``tree_figure``: the last token the round before emitted (its fix or
    bonus, else its last accepted token); "" for the first round (the prompt's end)."""
    if previous is None or not previous.emitted:
        return ""
    if len(previous.emitted) > previous.accepted and previous.correction is not None:
        return previous.correction_text
    return previous.proposed_text[len(previous.emitted) - 1] if len(previous.emitted) <= len(previous.proposed_text) \
        else ""


def tree_figure(rnd: Round, upto_step: int | None = None, root_text: str = "", height: int | None = None,
                tr: Translator = N_) -> go.Figure:
    """One tree round (``rnd.tree`` not empty) as a tree, at ``upto_step`` (module docstring).
    ``root_text``: the last verified token's text, shown at the root (else a dot)."""
    if not rnd.tree:
        raise ValueError("the round drafted no tree")
    phase, _ = tree_phase(rnd, upto_step)
    marks = node_marks(rnd, upto_step)
    rows, root_row, target_row = layout(rnd)
    depth_max = max(m.x for m in marks)
    target = phase == "done" and target_row is not None
    leaves = int(max([*rows, root_row, target_row or 0])) + 1
    fig = go.Figure()

    # the verify pass, lit: one band over every node, the target reading them all at once
    if phase == "verify":
        fig.add_shape(type="rect", x0=0.55, x1=depth_max + 0.45, y0=-0.6, y1=leaves - 0.4, layer="below",
                      fillcolor=VERIFY_FILL, line=dict(color=TARGET, width=2, dash="dot"))
        fig.add_annotation(x=(depth_max + 1) / 2, y=-0.6, yanchor="bottom", showarrow=False,
                           font=dict(size=13, color=TARGET),
                           text=esc(tr(N_("the target checks all {n} nodes in one pass")).format(n=len(rnd.tree))))

    # edges: the accepted path thick and green, the rest thin and faded
    edges: dict[str, tuple[list, list]] = {}
    for m in marks:
        if m.kind == "hidden":
            continue
        parent = rnd.tree[m.index].parent
        px, py = (marks[parent].x, marks[parent].y) if parent >= 0 else (0, root_row)
        group = m.kind if m.kind in ("accepted", "cut") else "other"
        xs, ys = edges.setdefault(group, ([], []))
        xs += [px, m.x, None]
        ys += [py, m.y, None]
    if target:
        last = _last_accepted(rnd)
        px, py = (marks[last].x, marks[last].y) if last >= 0 else (0, root_row)
        edges["target"] = ([px, px + 1, None], [py, target_row, None])
    edge_style = {"accepted": dict(color=ACCEPTED, width=4), "cut": dict(color=PENDING, width=2, dash="dot"),
                  "other": dict(color=PENDING, width=1.5), "target": dict(color=TARGET, width=2, dash="dash")}
    for group, (xs, ys) in edges.items():
        faded = group == "other" and phase == "done"
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=edge_style[group], hoverinfo="skip",
                                 showlegend=False, opacity=FADED if faded else 1.0, name=f"edges-{group}"))

    # the nodes: text boxes (annotations), and invisible markers that carry the hover
    hover_x, hover_y, hover_text = [0], [root_row], [esc(tr(N_("the root: the last verified token")))]
    fig.add_annotation(x=0, y=root_row, showarrow=False, text=_short(root_text) if root_text else "●",
                       font=dict(size=FONT_SIZE, color=TARGET), bgcolor=CHIP, borderpad=4,
                       bordercolor=TARGET, borderwidth=1)
    sampling = any(n.p > 0 for n in rnd.tree)
    for m in marks:
        if m.kind == "hidden":
            continue
        node = rnd.tree[m.index]
        colour, border, width, opacity = STYLE[m.kind]
        fig.add_annotation(x=m.x, y=m.y, showarrow=False, text=_node_text(m.kind, node.text),
                           font=dict(size=NODE_FONT, color=colour), opacity=opacity, borderpad=4,
                           bordercolor=border, borderwidth=width, bgcolor=CHIP, name=f"node-{m.kind}")
        probs = tr(N_("draft q={q:.3f}")).format(q=node.q)
        if sampling:
            probs += ", " + tr(N_("target p={p:.3f}")).format(p=node.p)
        hover_x.append(m.x)
        hover_y.append(m.y)
        hover_text.append(esc(f"{printable(node.text)} · " + tr(N_("depth {d}, draft pass {s}")).format(
            d=m.x, s=node.step) + f" · {probs} · {tr(KIND_TEXT[m.kind])}"))
    if target:
        label = target_label(rnd)
        fig.add_annotation(x=marks[_last_accepted(rnd)].x + 1 if _last_accepted(rnd) >= 0 else 1, y=target_row,
                           showarrow=False, font=dict(size=NODE_FONT, color=TARGET), borderpad=4, bordercolor=TARGET,
                           borderwidth=2, bgcolor=CHIP, name=f"node-{label}",
                           text=f"<b>{_short(rnd.correction_text)}</b> <sup>{esc(tr(LABELS[label]))}</sup>")
        hover_x.append(marks[_last_accepted(rnd)].x + 1 if _last_accepted(rnd) >= 0 else 1)
        hover_y.append(target_row)
        hover_text.append(esc(f"{printable(rnd.correction_text)} · {tr(LABELS[label])}"))
    fig.add_trace(go.Scatter(x=hover_x, y=hover_y, mode="markers", marker=dict(size=28, opacity=0),
                             hovertext=hover_text, hoverinfo="text", showlegend=False, name="nodes"))

    columns = depth_max + (1 if target and _last_accepted(rnd) >= 0 and marks[_last_accepted(rnd)].x == depth_max
                           else 0)
    ticks = [esc(tr(N_("root")))] + [str(d) for d in range(1, columns + 1)]
    fig.update_layout(
        height=height or max(MIN_HEIGHT, min(MAX_HEIGHT, 70 + ROW_PX * leaves)),
        margin=dict(l=8, r=8, t=28 if phase == "verify" else 8, b=48),
        font=dict(size=FONT_SIZE), showlegend=False, hovermode="closest",
        plot_bgcolor=CHIP,  # a light panel on both themes: the chips and the Okabe-Ito marks read on it
    )
    fig.update_xaxes(range=[-0.5, columns + 0.5], tickvals=list(range(columns + 1)), ticktext=ticks,
                     showgrid=False, zeroline=False, title=dict(text=esc(tr(N_("depth: one draft pass each"))),
                                                                font=dict(size=13)))
    fig.update_yaxes(range=[leaves - 0.4, -0.8], visible=False)
    return fig


def tree_caption(rnd: Round, upto_step: int | None = None, tr: Translator = N_) -> str:
    """One line under the tree: what the step shows (plain text, not escaped)."""
    phase, shown = tree_phase(rnd, upto_step)
    if phase == "draft":
        n = sum(1 for node in rnd.tree if node.step <= shown)
        return tr(N_("Draft pass {s}: {n} nodes so far, each with its q from the draft.")).format(s=shown, n=n)
    if phase == "verify":
        return tr(N_("Verify: the target reads all {n} nodes in one pass, each seeing only its own "
                     "ancestors.")).format(n=len(rnd.tree))
    return tr(N_("{k} of {n} nodes accepted along one path; the other branches are thrown away.")).format(
        k=rnd.accepted, n=len(rnd.tree))


# --- the tree attention mask ----------------------------------------------------------------------

MASK_CELL_PX, MASK_LABELS_UPTO = 24, 24  # past this many nodes the axes name nodes by number only


def _node_label(i: int, node, depth: int, named: bool) -> str:
    return f"{i + 1} · {_short(node.text)} <sub>d{depth}</sub>" if named else str(i + 1)


def tree_mask_figure(rnd: Round, tr: Translator = N_) -> go.Figure:
    """The verify pass's tree attention mask: one row per node (the query), one column for the
    prefix and one per node (the keys); a filled cell with a dot where the row's node sees the
    column (specviz.analysis.tree_story.sees): the prefix, its ancestors and itself. Each node is
    named by its number, text and depth d (its position is the root's + d)."""
    if not rnd.tree:
        raise ValueError("the round drafted no tree")
    n = len(rnd.tree)
    depth = tree_depths(rnd.tree)
    named = n <= MASK_LABELS_UPTO
    labels = [_node_label(i, node, depth[i], named) for i, node in enumerate(rnd.tree)]
    z = [[1, *(1 if s else 0 for s in row)] for row in sees(rnd.tree)]
    text = [["●" if v else "" for v in row] for row in z]
    hover = [[esc(tr(N_("node {i} sees {what}")).format(
        i=i + 1, what=tr(N_("the prefix")) if j == 0 else str(j)) if v else
        tr(N_("node {i} does not see node {j}")).format(i=i + 1, j=j))
        for j, v in enumerate(row)] for i, row in enumerate(z)]
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(n + 1)), y=list(range(n)), text=text, texttemplate="%{text}" if named else None,
        textfont=dict(color="white", size=12), hovertext=hover, hoverinfo="text", showscale=False,
        colorscale=[[0, "#F2F2F2"], [1, TARGET]], zmin=0, zmax=1, xgap=2, ygap=2, name="mask"))
    side = MASK_CELL_PX if named else max(8, MASK_CELL_PX * MASK_LABELS_UPTO // n)
    fig.update_layout(height=min(760, 110 + side * n), margin=dict(l=8, r=8, t=8, b=8), font=dict(size=FONT_SIZE),
                      plot_bgcolor=CHIP)
    fig.update_xaxes(tickvals=list(range(n + 1)), ticktext=[esc(tr(N_("prefix")))] + [str(i) for i in range(1, n + 1)],
                     side="top", tickangle=0, showgrid=False, zeroline=False, fixedrange=True,
                     tickfont=dict(size=12))  # the rows name each node; the columns number them
    fig.update_yaxes(tickvals=list(range(n)), ticktext=labels, autorange="reversed", showgrid=False,
                     zeroline=False, fixedrange=True, tickfont=dict(size=12),
                     title=dict(text=esc(tr(N_("node (reads)"))), font=dict(size=13)))
    return fig


# --- the what-if: chain against tree, round by round ----------------------------------------------


def _rate(r, tr: Translator) -> str:
    return tr(N_("{label} · {tpr:.2f} tokens / round · ≈{tps:.2f} tok/s in {time}")).format(
        label=esc(r.label(tr)), tpr=r.tokens_per_round, tps=r.tokens_per_second, time=fmt_ms(r.wall_ms, tr))


def tree_what_if_figure(chain, tree, height: int = 360, tr: Translator = N_) -> go.Figure:
    """``chain`` and ``tree`` (``specviz.replay.tree_what_if.TreeWhatIf`` on the same run): the
    accepted draft tokens of every round, side by side by round, the chain's hatched; the legend
    gives each one's tokens per round and estimated tok/s, a note the tree's speed over the
    chain's."""
    fig = go.Figure()
    for result, colour, pattern in ((chain, PENDING, "/"), (tree, ACCEPTED, "")):
        fig.add_trace(go.Bar(
            x=[r.index + 1 for r in result.rounds], y=[r.accepted for r in result.rounds], name=_rate(result, tr),
            marker=dict(color=colour, line=dict(color=colour, width=1),
                        pattern=dict(shape=pattern, fgcolor="#FFFFFF", fillmode="overlay") if pattern else None),
            customdata=[[r.start, r.emitted, "bonus" if r.bonus else "fix"] for r in result.rounds],
            hovertemplate=esc(result.label(tr)) + "<br>" + tr(N_("round %{x}: %{y} accepted, from token "
                                                                  "%{customdata[0]}")) + "<extra></extra>",
        ))
    ratio = chain.wall_ms / tree.wall_ms if tree.wall_ms > 0 else 0.0
    fig.add_annotation(xref="paper", yref="paper", x=1, y=1, xanchor="right", yanchor="bottom", showarrow=False,
                       font=dict(size=14, color=ACCEPTED if ratio >= 1 else REJECTED),
                       text="<b>" + tr(N_("tree: ×{ratio:.2f} the chain's tok/s")).format(ratio=ratio) + "</b>")
    top = max([*chain.accepted, *tree.accepted, 1])
    fig.update_layout(
        barmode="group", bargap=0.25, height=height, font=dict(size=FONT_SIZE), hovermode="closest",
        margin=dict(l=8, r=12, t=84, b=44),
        legend=dict(orientation="v", yanchor="bottom", y=1.08, xanchor="left", x=0, font=dict(size=13)),
    )
    fig.update_xaxes(title=dict(text=tr(N_("round")), font=dict(size=13)), dtick=1 if len(chain.rounds) <= 30 else None)
    fig.update_yaxes(title=dict(text=tr(N_("accepted draft tokens")), font=dict(size=13)), range=[0, top + 0.5],
                     dtick=1 if top <= 10 else None)
    return fig
