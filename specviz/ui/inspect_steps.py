"""The six steps of Inspect a round (specviz.ui.inspect_page): what each says about the round
shown, and its charts (a tree round's steps: specviz.ui.inspect_tree; what both share:
specviz.ui.inspect_parts). ``token_span`` is this page's code span for a token (ui.view's
``md_code`` and ui.links's ``code_span`` do the same elsewhere)."""

from __future__ import annotations

import streamlit as st

from specviz.analysis import round_story as insp
from specviz.analysis.marks import printable
from specviz.figures import round_story as FI
from specviz.ui import inspect_tree
from specviz.ui.inspect_page import Walk, step_kind
from specviz.ui.inspect_parts import dur, in_short, near_tie_note, num, round_timeline, say, stamp
from specviz.ui.lang import _
from specviz.ui.markdown import token_span


def why_rejected(rej: insp.Rejection) -> str:
    """Why the target rejected a greedy guess, in the chart's own numbers: another wording the
    target finds nearly as good (open text), or a wrong guess."""
    said = _("The draft wrote {draft}, the target {target}: to the target, {draft} has p = {p_draft} against "
             "{p_target} for its own (the blue bars).").format(
        draft=token_span(rej.draft.text), target=token_span(rej.target.text), p_draft=num(rej.draft.p), p_target=num(rej.target.p))
    if rej.plausible:
        return said + " " + _("{share:.0%} as likely: another wording, about as plausible as the target's. Open "
                              "prose allows many continuations and a small draft picks one of them, but greedy "
                              "verification keeps only the target's exact choice. In code and JSON, syntax and keys "
                              "pin the next token down, so the two models agree far more often.").format(
            share=rej.ratio)
    return said + " " + _("{factor:.0f} times less likely: here the draft guessed wrong.").format(factor=1 / rej.ratio)


def early_stop_sentence(rnd, threshold: float) -> str:
    """Why the draft proposed fewer than γ tokens: the confidence policy stopped it."""
    q = rnd.draft_probs[-1] if rnd.draft_probs else 0.0
    return _("It stopped after {n} of at most γ = {gamma}: it gave its last guess {token} a probability of "
             "q = {q}, below the confidence threshold τ = {tau}. A guess it is that unsure of is likely to be "
             "rejected, so another draft pass would more likely waste time than save it: the target checks "
             "now.").format(n=len(rnd.proposed), gamma=rnd.gamma, q=f"{q:.2f}", tau=f"{threshold:.2f}",
                            token=token_span(rnd.proposed_text[-1]) if rnd.proposed_text else "")


def draft_step(walk: Walk) -> None:
    """1. The draft proposes."""
    S, rnd, cfg = walk.story, walk.rnd, walk.cfg
    tokens = " ".join(token_span(t) for t in rnd.proposed_text)
    if S.lookup:
        say(_("No draft model in this run: an n-gram lookup found the last tokens earlier in the text and "
              "proposed what followed them there, {tokens}, in {ms}.").format(tokens=tokens, ms=dur(S.draft_ms)),
            _("What the draft produces: guesses of the next tokens, each with the distribution q it came from "
              "(here certain: q = 1 for each)."))
    else:
        passes = ", ".join(_("{token} in {ms}").format(token=token_span(p.text), ms=dur(p.ms)) for p in S.drafts)
        say(_("The draft model makes its guesses one at a time, one forward pass each, because each guess must "
              "follow the one before: {passes}; {total} in all.").format(passes=passes, total=dur(S.draft_ms)),
            _("Its first pass also read the whole prompt, so it took longer.")
            if S.drafts and S.drafts[0].event.kind == "prefill" else "",
            _("What the draft produces: for each position a probability distribution q over the vocabulary, "
              "and a token drawn from it (its top token when greedy). Cheap guesses, not yet output."))
        if rnd.draft_stop == "confidence":
            say(early_stop_sentence(rnd, cfg.confidence))
    say(_("Meanwhile the target sits idle for those {ms}: there is nothing to check until the guesses exist.").format(
        ms=dur(S.draft_ms)))
    round_timeline(walk)


def verify_step(walk: Walk) -> None:
    """2. The target checks them all in one pass."""
    S, rnd = walk.story, walk.rnd
    tokens = " ".join(token_span(t) for t in rnd.proposed_text)
    g = len(rnd.proposed)
    say(_("The target reads the output's last token and the guesses, {tokens}, in ONE forward pass of {ms}, "
          "and gets {m} distributions p at once: one to check each guess, and one past the last.").format(
            tokens=tokens, ms=dur(S.verify_ms), m=g + 1),
        _("This was the target's first pass, so it also read the prompt.") if S.prefill else "",
        _("Why one pass can check many tokens: a transformer computes the next-token distribution at every "
          "position of its input in the same pass, as when it reads a prompt. Reading {m} positions usually costs "
          "little more than reading one, because such a pass is mostly spent loading the weights from "
          "memory.").format(m=g + 1))
    say(_("Meanwhile the draft sits idle for those {ms}: it cannot guess on until it knows which of its "
          "guesses survive.").format(ms=dur(S.verify_ms)))
    round_timeline(walk)


def accept_step(walk: Walk) -> None:
    """3. Accept while they agree."""
    ss = st.session_state
    S, rnd, cfg = walk.story, walk.rnd, walk.cfg
    g, k = len(rnd.proposed), rnd.accepted
    lines = []
    if S.greedy:
        say(_("Greedy decoding: a guess is kept when it is the target's own top token (argmax of p), position "
              "by position, until the first disagreement."))
    else:
        say(_("Speculative sampling: a guess x is kept with probability min(1, p(x) / q(x)). A uniform draw u "
              "decides: u < p/q keeps it. A guess the target likes at least as much as the draft did is always "
              "kept."))
    for pos in S.positions:
        if not pos.judged:
            continue
        at = pos.index + 1
        if S.greedy:
            if pos.verdict == "accepted":
                line = _("Position {i}: the draft's {draft} is the target's top token too → accepted.")
            else:
                line = _("Position {i}: the draft's {draft}, but the target's top token is {target} → rejected.")
            lines.append(line.format(i=at, draft=token_span(pos.text), target=token_span(pos.target_top_text)))
        elif pos.u is not None:
            if pos.verdict == "accepted":
                line = _("Position {i}: {draft}, p = {p}, q = {q}, min(1, p/q) = {r}; the draw u = {u} < {r} → accepted.")
            else:
                line = _("Position {i}: {draft}, p = {p}, q = {q}, min(1, p/q) = {r}; the draw u = {u} ≥ {r} → rejected.")
            lines.append(line.format(i=at, draft=token_span(pos.text), p=num(pos.p), q=num(pos.q), r=num(pos.ratio),
                                     u=num(pos.u)))
        else:
            lines.append(_("Position {i}: {draft}, min(1, p/q) = {r} → {verdict} (this trace holds no draws).").format(
                i=at, draft=token_span(pos.text), r=num(pos.ratio),
                verdict=_("accepted") if pos.verdict == "accepted" else _("rejected")))
    if S.unjudged:
        rest = " ".join(token_span(p.text) for p in S.positions if p.verdict == "unjudged")
        lines.append(_("Thrown away unchecked, as guessed after a wrong token: {tokens}.").format(tokens=rest))
    if k == g:
        lines.append(_("Every guess accepted."))
    st.markdown("\n".join(f"- {line}" for line in lines))
    if S.sample is not None:
        st.caption(_("The acceptance rule itself took {ms}.").format(ms=dur(S.sample.duration_ms)))

    judged = [p for p in S.positions if p.judged]
    default = S.rejected.index if S.rejected is not None else judged[-1].index
    if ss.get("inspect_pos") not in [p.index for p in judged]:
        ss["inspect_pos"] = default
    marks = {"accepted": "✓", "rejected": "✗"}
    st.segmented_control(_("Position"), [p.index for p in judged], key="inspect_pos", required=True,
                         format_func=lambda i: f"{i + 1} {marks[S.positions[i].verdict]} {printable(S.positions[i].text)}")
    pos = S.positions[ss["inspect_pos"]]
    cols = st.columns([3, 1.2])
    with cols[0]:
        if not pos.recorded:
            st.caption(_("This trace was recorded before the top-10 rows were kept: only the proposed token's "
                         "q and p are shown."))
        if S.greedy:
            st.caption(_("A greedy run: q and p are drawn at temperature 1; the rule compares only their top "
                         "tokens."))
        st.plotly_chart(FI.pq_figure(pos, tr=_), key="inspect_pq", config={"displayModeBar": False})
        if S.greedy and pos.verdict == "rejected" and (rej := insp.rejection(rnd)) is not None:
            st.info(why_rejected(rej), icon=":material/translate:")
        if S.greedy and (tie := near_tie_note(rnd, pos.index, cfg)):
            st.caption(tie)
        if not S.greedy and pos.u is not None and pos.ratio is not None:
            st.plotly_chart(FI.draw_figure(pos.ratio, pos.u, tr=_), key="inspect_draw",
                            config={"displayModeBar": False})
    with cols[1]:
        c = st.columns(2)
        c[0].metric(_("q (draft)"), num(pos.q))
        c[1].metric(_("p (target)"), num(pos.p))
        if S.greedy:
            c = st.columns(2)
            c[0].metric(_("draft's top"), printable(pos.text))
            c[1].metric(_("target's top"), printable(pos.target_top_text) if pos.target_top is not None else "—")
        else:
            c = st.columns(2)
            c[0].metric(_("min(1, p/q)"), num(pos.ratio))
            c[1].metric(_("draw u"), num(pos.u))
        st.metric(_("verdict"), _("accepted") if pos.verdict == "accepted" else _("rejected"))


def target_token_step(walk: Walk) -> None:
    """4. The target's own token."""
    S, rnd, trace = walk.story, walk.rnd, walk.trace
    k = rnd.accepted
    at = k + 1
    target = token_span(S.target_text)
    if S.emitted <= k:
        reasons = {"eos": _("an end-of-sequence token"), "stop_string": _("a stop string"),
                   "max_new_tokens": _("the token budget"), "context": _("the context length")}
        say(_("The output ended inside the accepted tokens ({reason}), so the target's {token} is not "
              "emitted.").format(reason=reasons.get(trace.stop_reason, _("the stop")), token=target))
    elif S.target_kind == "bonus":
        say(_("Every guess was accepted, so the verify pass's last distribution, p after {last}, gives one "
              "more token for free: the bonus {token}. No extra forward pass.").format(
                last=token_span(rnd.proposed_text[-1]), token=target),
            _("It is the target's top token there.") if S.greedy else
            _("It is drawn from that p, exactly as the target alone would draw it."))
        bonus = S.positions[-1]
        if bonus.recorded:
            st.plotly_chart(FI.pq_figure(bonus, tr=_), key="inspect_bonus", config={"displayModeBar": False})
    elif S.greedy:
        say(_("At position {i} the target's own top token {token} replaces the rejected {rejected}. It comes "
              "from the same verify pass: no extra forward pass.").format(
                i=at, token=target, rejected=token_span(rnd.proposed_text[k])))
    else:
        pos = S.positions[k]
        say(_("At position {i} the correction {token} replaces the rejected {rejected}. It is drawn from "
              "norm(max(0, p − q)): the part of the target's distribution the draft's guesses under-covered. "
              "It comes from the same verify pass: no extra forward pass.").format(
                i=at, token=target, rejected=token_span(rnd.proposed_text[k])))
        if pos.residual:
            st.plotly_chart(FI.residual_figure(pos, tr=_), key="inspect_residual",
                            config={"displayModeBar": False})
        elif pos.recorded:
            st.caption(_("Here p and q agree, which leaves no residual: the correction is drawn from p itself."))
    if S.emitted > k and k:
        say(_("This round emits {e} tokens: {accepted} accepted, and the target's {token}.").format(
            e=S.emitted, accepted=" ".join(token_span(t) for t in rnd.proposed_text[:k]), token=target))
    elif S.emitted > k:
        say(_("This round emits one token, the target's {token}: no guess was accepted.").format(token=target))
    say(_("Why the output is identical to the target's own: every token emitted is a guess the target agreed "
          "with or the target's own token. Greedy, that is exactly the target's greedy output; sampling, the "
          "min(1, p/q) test and the residual together give exactly the target's distribution."))


def rollback_step(walk: Walk) -> None:
    """5. Both KV caches roll back."""
    S, rnd = walk.story, walk.rnd
    k = rnd.accepted
    tr, dr = S.rollback("target"), S.rollback("draft")
    say(_("Each model keeps a KV cache: the keys and values of every token it has read, so that a pass reads "
          "only the new tokens. After the verdict both must hold a prefix of the new sequence."))
    if tr is not None:
        say(_("The target crops what it read past the accepted prefix, {tokens}, from its cache in {ms}: no "
              "recomputation.").format(tokens=" ".join(token_span(t) for t in rnd.proposed_text[k:]),
                                       ms=dur(tr.duration_ms)))
    else:
        say(_("The target's cache keeps everything it read: no guess was rejected. Its own token is not in the "
              "cache yet; the next verify pass reads it first."))
    if dr is not None:
        say(_("The draft crops its cache back to the accepted prefix in {ms}.").format(ms=dur(dr.duration_ms)))
    elif S.lookup:
        say(_("The n-gram lookup keeps no cache."))
    elif S.target_kind == "bonus":
        say(_("The draft keeps its cache: it never read its own last guess, so its next pass reads that guess "
              "and the bonus token together."))
    else:
        say(_("The draft's cache already ends within the new sequence (it has not read its own last guess "
              "yet): nothing to drop."))


def wait_step(walk: Walk) -> None:
    """6. The next round waits."""
    S, index = walk.story, walk.index
    if S.next_start_ms is not None:
        say(_("The verify pass returned at {t1}; round {r} started drafting at {t2}, {gap} later (the verdict "
              "and the rollbacks). It could not start earlier: its first guess must follow {token}, which only the "
              "verify pass decided.").format(t1=stamp(S.verify_end_ms), r=index + 2, t2=stamp(S.next_start_ms),
                                             gap=dur(S.wait_ms), token=token_span(S.target_text)))
    else:
        say(_("This was the run's last round. A next round could only have started drafting after {t1}, when "
              "the verify pass returned: its first guess must follow the target's {token}.").format(
                t1=stamp(S.verify_end_ms), token=token_span(S.target_text)))
    say(_("Why each model sits idle: in this round the target waited {d} while the draft guessed, and the draft "
          "waited {v} while the target checked. They never work at once; that serial wait is what PEARL and "
          "speculative speculative decoding overlap (see the Parallel page).").format(
            d=dur(S.draft_ms), v=dur(S.verify_ms)))
    round_timeline(walk)


STEP_RENDERERS = (draft_step, verify_step, accept_step, target_token_step, rollback_step, wait_step)


def render_step(walk: Walk) -> None:
    """The step shown, then the four ideas in short. A tree round (``walk.tree``) walks through its
    own steps (specviz.ui.inspect_tree), the last one (the wait) as a chain's."""
    if walk.tree is None:
        STEP_RENDERERS[walk.step](walk)
        render_in_short()
        return
    kind, s = step_kind(walk.step, walk.rnd)
    if kind == "wait":
        wait_step(walk)
    else:
        inspect_tree.RENDERERS[kind](walk, s)
    inspect_tree.render_in_short()


def render_in_short() -> None:
    """The four ideas, in short."""
    in_short((
        _("**What the draft produces:** γ guessed tokens, each with the distribution q it came from: cheap, and "
          "often right on predictable text."),
        _("**Why one verify pass checks many tokens:** the target computes a next-token distribution at every "
          "position of its input at once, so γ guesses cost about one pass."),
        _("**Why each model sits idle:** the target has nothing to check until the guesses exist, and the draft "
          "cannot guess on until the verdict is back."),
        _("**Why the output is the target's own:** every emitted token is one the target accepted or produced "
          "itself; when sampling, the min(1, p/q) test and the residual keep the target's distribution exactly."),
    ))
