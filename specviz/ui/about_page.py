"""The How it works page: the idea in one page, with the marks the app uses.

For someone who has never heard of speculative decoding: what the draft produces, why one
verify pass can check many tokens, why each model waits, why acceptance depends on the text
(with the recorded runs' own rates and tokens), what α and c are, why γ has a best value,
why the output is the target's own, when it does not help, what PEARL and SSD change, and why
token trees pay here (``tree_cost_text``, ``render_trees``).

``about_state`` gathers what the page quotes (this machine's verify curve, the recorded runs of
the default pair); the pure functions write the paragraphs that quote it (``fp32_text``,
``why_text_paragraphs``), and ``render_left`` / ``render_right`` draw the two columns. Every
sentence is translated at render time; the formulas are not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import streamlit as st

from specviz import figures as F
from specviz.analysis import round_story as insp
from specviz.analysis import theory
from specviz.analysis.metrics import fmt_ms
from specviz.record.i18n import N_, Translator
from specviz.record.run_trace import Round, Trace
from specviz.replay.latency import LatencyModel
from specviz.ui.chrome import SHORTCUTS
from specviz.ui.lang import _
from specviz.ui.markdown import token_span
from specviz.ui.pair import loaded_pair
from specviz.ui.sources import recorded_run, verify_curve

KINDS = {"code": N_("code"), "json": "JSON", "prose": N_("prose"), "chinese": N_("Chinese")}
SYNTAX = set('()[]{}<>"\':,;=\n')


@dataclass
class AboutState:
    """What the page quotes: the loaded pair's measured verify curve (None before it is measured
    or loaded), and the default pair's recorded runs per kind of text (γ = 4, greedy)."""

    curve: LatencyModel | None = None
    runs: dict[str, Trace] = field(default_factory=dict)


def about_state() -> AboutState:
    runs = {kind: recorded_run(f"{kind}-gamma4-greedy") for kind in KINDS}
    return AboutState(curve=verify_curve(loaded_pair()),
                      runs={kind: t for kind, t in runs.items() if t is not None and t.rounds})


# --- the paragraphs that quote numbers: pure ------------------------------------------------------

def fp32_text(curve: LatencyModel | None, tr: Translator = _) -> str:
    """When a verify pass is no longer nearly free, with the reference machine's numbers (the
    machine named in docs/design.md's Measured timings), and this machine's when its verify-cost
    curve is measured for the loaded pair."""
    ref = theory.REFERENCE_TARGET_MS
    text = tr(N_("**fp32 on a CPU.** There arithmetic, not memory, is the limit, so a verify pass over k tokens costs "
                 "several one-token passes, more as k grows: on the reference machine of docs/design.md (a 2-core AMD "
                 "EPYC with AVX512-BF16) the default pair's target took {f5:.0f} ms for 5 tokens against {f1:.0f} ms "
                 "for 1 in float32, and {b5:.0f} ms against {b1:.0f} ms in bfloat16. The check is no longer nearly "
                 "free, and it eats the gain.")).format(f5=ref["float32"][5], f1=ref["float32"][1],
                                                        b5=ref["bfloat16"][5], b1=ref["bfloat16"][1])
    if curve is not None:
        text += " " + tr(N_("On this machine ({dtype}, measured on the Cost curve page): {t5} for 5 tokens against "
                            "{t1} for 1.")).format(dtype=curve.meta.get("dtype", "?"), t5=fmt_ms(curve.verify(5), tr),
                                                   t1=fmt_ms(curve.verify(1), tr))
    return text


def syntax_round(trace: Trace) -> Round | None:
    """The round accepted whole whose tokens hold the most syntax (brackets, quotes, colons,
    newlines): where the text itself pinned the draft down. None when no round was."""
    whole = [r for r in trace.rounds if r.proposed and r.accepted == len(r.proposed)]
    return max(whole, key=lambda r: sum(ch in SYNTAX for ch in "".join(r.proposed_text)), default=None)


def why_text_paragraphs(runs: dict[str, Trace], tr: Translator = _) -> list[str]:
    """Why acceptance depends on the text, with the recorded runs' own rates and tokens; no
    paragraph without a recorded run."""
    if not runs:
        return []
    rates = ", ".join(tr(N_("{kind} {rate:.0%}")).format(kind=tr(KINDS[kind]),
                                                         rate=t.summary.get("acceptance_rate") or 0)
                      for kind, t in runs.items())
    paragraphs = [tr(N_("How often the draft writes what the target would depends on the text more than on the "
                        "models. Acceptance in the recorded runs of the default pair (γ = 4, greedy, float32): "
                        "{rates}.")).format(rates=rates)]
    pinned = [(kind, r) for kind in ("code", "json") if kind in runs and (r := syntax_round(runs[kind]))]
    if pinned:
        examples = "; ".join(tr(N_("in the {kind} run, {tokens}")).format(
            kind=tr(KINDS[kind]), tokens=" ".join(token_span(t) for t in r.proposed_text)) for kind, r in pinned)
        paragraphs.append(tr(N_("**Code and JSON are pinned down.** Syntax and keys leave few choices: a bracket "
                                "opened is closed, a key is written as the format asks, a docstring follows a "
                                "signature. A small draft knows these rules as well as the target, so the two "
                                "agree, often for a whole round: {examples}, each drafted and accepted "
                                "whole.")).format(examples=examples))
    open_text = [(kind, insp.rejections(runs[kind])) for kind in ("prose", "chinese") if kind in runs]
    shown = [(kind, found[0]) for kind, found in open_text if found]
    if shown:
        examples = "; ".join(tr(N_("in the {kind} run the draft wrote {draft} where the target wrote {target} (to "
                                   "the target, p = {p_draft:.2f} against {p_target:.2f})")).format(
            kind=tr(KINDS[kind]), draft=token_span(r.draft.text), target=token_span(r.target.text), p_draft=r.draft.p,
            p_target=r.target.p) for kind, r in shown)
        paragraphs.append(tr(N_("**Open prose has many right answers.** Several wordings fit, and a small draft "
                                "often picks another one, about as plausible as the target's: {examples}. Greedy "
                                "verification keeps only the target's exact choice, so such a token still ends the "
                                "round. A Chinese token is often a whole word, so each position offers more such "
                                "choices.")).format(examples=examples))
    paragraphs.append(tr(N_("The Inspect page shows every rejected token this way: the draft's choice and the "
                            "target's, with both probabilities.")))
    return paragraphs


def tree_cost_text(curve: LatencyModel | None, tr: Translator = _) -> str:
    """Why a token tree pays in bfloat16 here and not in float32: the verify pass's cost at 1 and 9
    tokens on the reference machine of docs/design.md, and on this machine at 1 and 17 tokens
    (a tree of 16 nodes and its root) when its verify-cost curve is measured."""
    ref = theory.REFERENCE_TARGET_MS
    text = tr(N_("**Why it pays in bfloat16 here, and not in float32.** In bfloat16 the verify pass is memory-bound: "
                 "on the reference machine of docs/design.md the default pair's target took {b1:.0f} ms for 1 token "
                 "and {b9:.0f} ms for 9, so a tree's extra nodes ride along almost free. In float32 the same pass is "
                 "compute-bound: {f1:.0f} ms for 1 token, {f5:.0f} ms for 5, {f9:.0f} ms for 9 ({ratio:.1f} times "
                 "one), and a tree of 16 nodes costs several one-token passes: its extra guesses rarely win back "
                 "what they cost.")).format(b1=ref["bfloat16"][1], b9=ref["bfloat16"][9], f1=ref["float32"][1],
                                            f5=ref["float32"][5], f9=ref["float32"][9],
                                            ratio=ref["float32"][9] / ref["float32"][1])
    if curve is not None:
        text += " " + tr(N_("On this machine ({dtype}, measured on the Cost curve page): {t17} for 17 tokens, a "
                            "tree of 16 nodes and its root, against {t1} for 1.")).format(
            dtype=curve.meta.get("dtype", "?"), t17=fmt_ms(curve.verify(17), tr), t1=fmt_ms(curve.verify(1), tr))
    return text


def render_trees(state: AboutState) -> None:
    """Token trees: why a tree, why it pays in bf16 and at batch 1, what EAGLE, Medusa and Sequoia add."""
    section(_("Token trees: more than one guess per position"),
            _("**Why a tree.** A chain spends the verify pass on one guess per position: when the draft's first "
              "choice is wrong, the round ends there, even if its second choice was right. A **token tree** gives "
              "each position several guesses where the draft is unsure: every node gets the draft's most probable "
              "tokens as children, and the target checks all the nodes in its one verify pass, each node seeing "
              "only its own ancestors (a tree attention mask). The target then follows its own choice down the tree "
              "as long as a child matches: one path is accepted, the other branches are thrown away. The verify "
              "pass had spare width, and the tree fills it. A chain of γ is the tree of width 1."),
            tree_cost_text(state.curve),
            _("**Why at batch 1, and less on a busy server.** The spare width is there because one sequence's few "
              "tokens do not fill the machine: the verify-cost curve stays flat up to a knee, then climbs (the Cost "
              "curve page draws it). At batch 1 a tree of tens of nodes sits below the knee. A busy server already "
              "verifies many sequences in each pass; batch × nodes passes the knee sooner, every node then costs "
              "real compute, and trees must shrink to pay."),
            _("**What EAGLE, Medusa and Sequoia add.** **Medusa** puts extra decoding heads on the target itself, "
              "each guessing one position further ahead, and verifies their combinations in a fixed tree. "
              "**EAGLE** drafts with a light learned head that reads the target's own hidden states, far more often "
              "right than a separate small model; **EAGLE-2** grows the tree as it drafts, expanding the nodes with "
              "the highest cumulative draft probability. **Sequoia** chooses the tree's shape by dynamic "
              "programming, from the acceptance measured at each position and the hardware's cost curve. specviz "
              "builds its trees from the plain draft model, as SpecInfer and EAGLE-2 do; the Replay page shows what "
              "a tree of any shape would have accepted on a greedy run."))
    st.page_link("pages/replay.py", label=_("Replay: what a token tree would have accepted on your run"),
                 icon=":material/account_tree:")


# --- drawing -----------------------------------------------------------------------------------

def section(title: str, *paragraphs: str) -> None:
    """A heading and its paragraphs (each already translated)."""
    st.markdown("#### " + title)
    for text in paragraphs:
        st.markdown(text)


def render(state: AboutState) -> None:
    """The title and the two columns."""
    st.markdown("## " + _("How speculative decoding works"))
    left, right = st.columns([3, 2], gap="large")
    with left:
        render_left(state)
    with right:
        render_right(state)


def render_left(state: AboutState) -> None:
    """The idea step by step: draft, verify, accept; why one pass checks many tokens; the serial
    wait; why the output is the target's; why acceptance depends on the text; PEARL and SSD."""
    st.markdown(_("A large **target** model writes one token per forward pass, and each pass costs about the "
                  "same whether it reads one new token or several. Speculative decoding spends that slack:"))
    steps = [
        _("**Draft.** A small, fast **draft** model guesses the next γ tokens, one cheap pass each."),
        _("**Verify.** The target checks all γ guesses in **one** forward pass."),
        _("**Accept.** Guesses are kept up to the first one the target disagrees with. The target's own "
          "token replaces it (a **fix**); if every guess survives, the same pass yields one **bonus** token."),
    ]
    st.markdown("\n".join(f"{i}. {step}" for i, step in enumerate(steps, 1)))
    st.markdown(_("Each round costs γ draft passes plus one target pass, and wins between 1 and γ+1 tokens."))

    section(_("What the draft produces"), _(
        "A guess, nothing more: the next γ tokens, written one cheap forward pass at a time, each pass "
        "reading the draft's own previous guess. With sampling it also keeps q, the probability it gave each "
        "guess, for the target's check. None of it reaches the output until the target has checked it."))

    section(_("Why one pass can check many tokens"), _(
        "A forward pass reads every weight of the model from memory and does little arithmetic with each. "
        "While that reading is the limit (the pass is memory-bound), a pass over k tokens costs about as much "
        "as a pass over one: the extra tokens reuse the weights already at hand. So the target scores all γ "
        "guesses, and the position after them, for about the price of one token."))

    section(_("The serial wait"), _(
        "Drafting and verifying run strictly one after the other: **the target sits idle while the draft "
        "guesses, and the draft sits idle while the target checks.** The target cannot check guesses that do "
        "not exist yet, and the draft cannot start its next guess until it knows where the kept text ends. "
        "The timeline on the Live page draws that waiting as hatched bars, and the idle share of each model sits "
        "beside it. That wait is the ceiling on what plain speculative decoding can gain."))

    section(_("Why the output is exactly the target's"),
            _("**Greedy** (temperature 0): a guess is accepted if and only if it equals the target's argmax, "
              "the token the target itself would pick there; at the first mismatch the target's token is "
              "emitted instead. Every token is the target's own choice, so the text is the target's own."),
            _("**Sampling**: a guess x is accepted with probability min(1, p(x)/q(x)), where p is the "
              "target's probability and q the draft's; after a rejection the token is resampled from the "
              "leftover, the residual max(0, p − q) renormalised. Together the two steps keep the target's "
              "exact distribution."))

    if paragraphs := why_text_paragraphs(state.runs):
        section(_("Why acceptance depends on the text"), *paragraphs)

    section(_("Beyond the serial wait: PEARL and SSD"), _(
        "Both overlap drafting and verifying, so neither model waits for the other as long. **PEARL** "
        "pre-verifies the first draft token while drafting, and drafts the next block while the target "
        "post-verifies the previous one. **SSD**, speculative speculative decoding (Saguaro), pre-drafts a "
        "continuation for each likely verification outcome while the target verifies; on a hit the next "
        "block is ready at once. The Parallel page shows both on your own run."))
    st.page_link("pages/parallel.py", label=_("Parallel: PEARL and SSD on your own run"),
                 icon=":material/view_week:")

    render_trees(state)

    st.markdown("#### " + _("At the projector"))
    keys = SHORTCUTS
    st.markdown("\n".join("- " + item for item in (
        _("**{run}** Run · **{step}** Step · **{autoplay}** Autoplay · **{stop}** Stop (shortcuts work "
          "whenever the cursor is not in a text box)").format(**keys),
        _("Step and Autoplay replay each round in slow motion *after* it ran at full speed, and say so; "
          "every time shown is the engine's real time."),
        _("The theme (light or dark) follows your system; change it in the ⋮ menu, top right."),
    )))



def render_right(state: AboutState) -> None:
    """The marks, the numbers, α and c, why γ has a best value, when it does not help."""
    st.markdown("#### " + _("The marks"))
    st.html(F.legend_html(tr=_))
    st.markdown("#### " + _("The numbers"))
    st.markdown("\n".join("- " + item for item in (
        _("**acceptance rate**: accepted ÷ drafted tokens"),
        _("**tokens / round** (mean acceptance length): 1 + accepted ÷ rounds"),
        _("**cost ratio c**: draft pass time ÷ target pass time"),
    )))

    section(_("α and c"),
            _("**α** is the per-token acceptance probability: the chance that one draft token survives. It is "
              "not the acceptance rate: a round stops at its first rejection, so the guesses after it count as "
              "drafted without ever being judged; the app infers α from tokens / round instead."),
            _("**c** is the cost ratio: the time of one draft pass ÷ the time of one target pass. A good pair "
              "has a high α and a small c. A round then yields on average E tokens,"))
    st.latex(r"E = \frac{1-\alpha^{\gamma+1}}{1-\alpha}")
    st.markdown(_("and the expected speedup over the target alone is"))
    st.latex(r"\frac{1-\alpha^{\gamma+1}}{(1-\alpha)(\gamma c+1)}")
    st.markdown(_("Speculation can only pay off when α > c; the best γ is the whole number that maximises "
                  "the speedup."))

    section(_("Why γ has a best value"), _(
        "Each extra draft token adds one draft pass to every round: a cost of c, counted in target passes. But "
        "the i-th guess counts only if it and every guess before it survive, with probability $\\alpha^i$, so each "
        "extra token adds less than the one before. Past the best γ, what one more guess is expected to add no "
        "longer pays for its c."))

    section(_("Drafting less where the draft is unsure"), _(
        "A constant γ drafts as deep on a sentence the draft cannot predict as on boilerplate it knows by "
        "heart. The **confidence policy** (the Live page's default) lets the draft say when to stop: right after "
        "a guess it gave a probability q below a threshold τ, it hands over to the target, even before γ. A "
        "guess the draft itself doubts is likely to be rejected, and every guess after a rejected one is thrown "
        "away unchecked: stopping there saves their draft passes. Where the draft is sure it drafts on, up to "
        "γ. The rule decides only how much is proposed, never what is accepted, so the output stays exactly the "
        "target's (Hugging Face's assistant_confidence_threshold follows the same rule; SpecDec++ learns it)."))

    section(_("On a GPU"), _(
        "On a CPU a forward pass is limited by reading the weights, so the 0.5B draft costs about 0.4 of the "
        "1.5B target (int8: about 0.2). On a GPU, at one sequence in eager PyTorch, small models are "
        "**launch-bound**: a pass costs a fixed time per kernel launch, per layer, whatever the layer's size. "
        "Measured on an H200, the 24-layer draft cost 0.84 of the 28-layer target (c = 0.84), so every draft "
        "pass costs nearly a target pass and a γ 4 chain at α = 0.8 would run at 0.76 of the target alone. "
        "What pays there: a far shallower draft or a free one (the n-gram lookup), passes that launch less "
        "(CUDA graphs, a compiled model), or a bigger target, whose passes really read memory: "
        "`--target` takes any Hugging Face id or folder, or put the target on a vLLM server."))

    section(_("When it does not help"),
            fp32_text(state.curve),
            _("**High batch.** A server verifies many sequences at once, so one pass carries batch × (γ+1) "
              "tokens. Once those already fill the machine, extra guesses are no longer free to check, and "
              "the gain shrinks or vanishes."))
