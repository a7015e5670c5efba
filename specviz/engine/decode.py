"""Autoregressive and speculative decoding as generators of timed Rounds.

Invariant at the start of every round: ``ids`` is prompt + output; the target's
cache holds ids[:-1] (the last token is fed with the round's pass); the draft's
cache holds a prefix of ids. There is no separate prefill: each model's first
pass reads the whole prompt and does its first job in the same forward (event
kind ``prefill``), as Hugging Face's assisted generation does. One round:

1. draft: the drafter proposes x_1..x_g (g = gamma, cut so the round cannot
   overshoot the token budget), each with its draft distribution q_i;
2. verify: the target runs ONE forward pass over [ids[-1], x_1..x_g] and gets
   p_1..p_{g+1};
3. accept: the acceptance rule keeps x_1..x_k and adds the target's own token;
4. both caches roll back to the new ids (crop, no recomputation).

Autoregressive decoding is the same loop with g = 0 and no drafter: one target
pass per token.

The clock runs only for the engine's own work: forward passes, the acceptance
rule, rollbacks. It stops while a caller holds a yielded round, and while the
engine does display work (the text of each token, probabilities and margins for
the record, stop strings), which is incremental and off the clock, as a serving
engine's detokenizer runs off its critical path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import torch

from specviz.engine.acceptance import (
    Sampling,
    greedy_accept,
    sampling_accept,
    top_tokens,
    warp,
)
from specviz.engine.detokenize import RunText
from specviz.engine.drafters import Proposal, draft_compiled, make_drafter
from specviz.engine.tree import DraftTree, TreeDrafter, TreeShape, TreeVerdict, accept_tree, best_line, verify_tree
from specviz.models import busy
from specviz.models.kv import Clock, KVModel
from specviz.models.pair import ModelPair
from specviz.record import stopping
from specviz.record.limits import MAX_TREE_NODES
from specviz.record.policies import make_policy
from specviz.record.run_config import RunConfig
from specviz.record.run_trace import Event, Round, Trace, TreeNode
from specviz.record.validate import check

TOP_F = 8  # draft candidates recorded per output position (for replays under other schedules)
TOP_K = 10  # tokens recorded per distribution and verified position (for the p/q inspector)
DIGITS = 4  # significant digits of the probabilities recorded for the inspector


@dataclasses.dataclass
class Verdict:
    """What the acceptance rule decided for one round."""

    accepted: int  # k: draft tokens kept
    token: int  # the target's own token: a correction (k < g) or a bonus (k == g)
    logits: torch.Tensor  # the target's logits [g+1, V]
    p: torch.Tensor | None = None  # warped target rows [g+1, V] (None when greedy: not needed)
    u: torch.Tensor | None = None  # sampling: the uniform draw of each judged draft token
    row: torch.Tensor | None = None  # sampling: the row the target's token was drawn from [V]
    residual: bool = False  # sampling: that row is norm(max(0, p_k - q_k)) (a correction)


def verify(target: KVModel, ids: list[int], prop: Proposal, clock: Clock, kind: str) -> tuple[torch.Tensor, Event]:
    """One target pass over the pending tokens and the proposal: logits [g+1, V]."""
    target.rollback(min(target.common_prefix(ids), len(ids) - 1))
    if not target.tokens:
        kind = "prefill"  # the first pass also reads the prompt
    feed = ids[len(target.tokens):] + prop.tokens
    logits, t0, t1 = target.timed_forward(feed, len(prop.tokens) + 1, clock)
    return logits, Event("target", kind, t0, t1, list(feed))


def accept(logits: torch.Tensor, prop: Proposal, sampling: Sampling, gen: torch.Generator) -> Verdict:
    """The acceptance rule: greedy match on the logits, or speculative sampling on the
    warped p and q."""
    if sampling.greedy:
        k, tok = greedy_accept(logits, prop.tokens)
        return Verdict(k, tok, logits)
    p = warp(logits, sampling)
    a = sampling_accept(p, prop.q_rows, prop.tokens, gen)
    return Verdict(a.accepted, a.token, logits, p, a.u, a.row, a.residual)


def record_round(index: int, gamma: int, prop: Proposal, verdict: Verdict, emitted: list[int],
                 text: RunText, inspect: bool = True) -> Round:
    """The Round for a verdict, before its tokens are committed to ``text``: each token's
    text, the draft's and target's probability of each proposal, the target's top-1
    minus top-2 margin at every verified position up to its own token, and (``inspect``)
    what the p/q inspector shows (``record_candidates``)."""
    n, k = len(prop.tokens), verdict.accepted
    p = verdict.p if verdict.p is not None else verdict.logits.softmax(-1)  # greedy: p at temperature 1
    rnd = Round(index=index, gamma=gamma, proposed=list(prop.tokens), accepted=k,
                rejected=list(prop.tokens[k:]), correction=verdict.token,
                bonus=n > 0 and k == n, emitted=list(emitted), draft_stop=prop.stopped)
    rnd.proposed_text = text.pieces(prop.tokens)
    rnd.correction_text = text.pieces([verdict.token], after=prop.tokens[:k])[0]
    if n:
        rows, cols = torch.arange(n), torch.tensor(prop.tokens)
        rnd.draft_probs = prop.q_rows[rows, cols].tolist()
        rnd.target_probs = p[rows, cols].tolist()
    top2 = p[: k + 1].topk(min(2, p.shape[-1]), dim=-1).values
    rnd.margin = (top2[:, 0] - top2[:, -1]).tolist()
    if inspect:
        record_candidates(rnd, prop, verdict, p, text)
    return rnd


def _sig(x: float) -> float:
    return float(f"{x:.{DIGITS}g}")


def record_candidates(rnd: Round, prop: Proposal, verdict: Verdict, p: torch.Tensor, text: RunText) -> None:
    """For the p/q inspector, at every verified position i (each proposal's, then the
    target's own token's when it follows them all): the candidates (the top TOP_K ids
    under the draft's q_i, under the target's p_i and, at a sampling rejection, under the
    residual row the correction was drawn from; and the proposed token), ordered by p,
    with each one's q, p and text; in sampling mode also the draws u_i."""
    n, k = len(prop.tokens), verdict.accepted
    positions = n + 1 if k == n else n
    p = p[:positions].float().cpu()
    q = prop.q_rows.float().cpu() if n else None
    p_top, q_top = top_tokens(p, TOP_K), (top_tokens(q, TOP_K) if n else [])
    correction = verdict.row is not None and verdict.residual and k < n
    for i in range(positions):
        found = set(p_top[i])
        if i < n:
            found |= {*q_top[i], prop.tokens[i]}
        if correction and i == k:
            found |= set(top_tokens(verdict.row, TOP_K)[0])
        cols = torch.tensor(sorted(found))
        order = torch.sort(p[i, cols], descending=True, stable=True).indices  # by p, ties by the lower id
        cols = cols[order]
        ids = cols.tolist()
        rnd.candidates.append(ids)
        rnd.candidate_p.append([_sig(x) for x in p[i, cols].tolist()])
        rnd.candidate_q.append([_sig(x) for x in q[i, cols].tolist()] if i < n else [])
        # each token on its own (one batched decode, no stream steps); in context for the
        # proposed token and the target's own, as the strip shows them
        known = {verdict.token: rnd.correction_text} if i == k else {}
        if i < n:
            known[prop.tokens[i]] = rnd.proposed_text[i]
        alone = text.alone(ids)
        rnd.candidate_text.append([known.get(t, piece) for t, piece in zip(ids, alone)])
        if correction and i == k:
            rnd.residual_probs = [_sig(x) for x in verdict.row.float().cpu()[cols].tolist()]
    if verdict.u is not None:
        rnd.draws = verdict.u.tolist()


View = tuple[list[int], list[list[int]], list[float]]  # ranks, top TOP_F ids, top-1 probabilities


def real_rows_view(prop: Proposal, verdict: Verdict, emitted: list[int]) -> View:
    """The draft's view of this round's emitted positions that have a real draft row on the
    correct prefix: the k accepted ones and the correction's (not a bonus token's)."""
    m = min(verdict.accepted + 1, len(prop.tokens), len(emitted))
    if not m:
        return [], [], []
    return draft_view(prop.q_rows[:m], emitted[:m])


def draft_view(q_rows: torch.Tensor, tokens: list[int]) -> View:
    """For draft distributions q_rows [n, V] and the tokens emitted at those positions:
    each token's rank under its row (0 = the draft's top choice), the top TOP_F ids, and the
    draft's probability of its top choice (what the confidence policy compares with τ).

    Ties (common in bf16) are broken as argmax breaks them, by the lower id first, so a
    token has rank 0 exactly when the greedy draft would have proposed it."""
    q_rows = q_rows.cpu()
    picked = torch.tensor(tokens).unsqueeze(1)
    value = q_rows.gather(1, picked)
    ids = torch.arange(q_rows.shape[-1]).unsqueeze(0)
    ranks = ((q_rows > value) | ((q_rows == value) & (ids < picked))).sum(-1).tolist()
    order = torch.sort(q_rows, dim=-1, descending=True, stable=True).indices
    return ranks, order[:, :TOP_F].tolist(), q_rows.max(-1).values.float().tolist()


def teacher_forced_view(pair: ModelPair, config: RunConfig, prompt_ids: list[int],
                        output_ids: list[int]) -> View:
    """The draft's view of every output position from ONE pass over prompt + output: the
    positions a run had no draft row for (a bonus token's) are filled from it."""
    head = pair.cut_head(config.draft_vocab, config.draft_quant) if config.draft_vocab else None
    draft = pair.draft_model(config.draft_quant)
    n = len(output_ids)
    ids = torch.tensor([prompt_ids + output_ids[:-1]], dtype=torch.long, device=pair.device)
    with torch.inference_mode():  # no cache: one pass, thrown away
        if head is None:
            logits = draft(input_ids=ids, use_cache=False, logits_to_keep=n).logits[0, -n:]
        else:
            logits = head.logits(draft.base_model(input_ids=ids, use_cache=False).last_hidden_state[0, -n:])
    q = logits.float().cpu().softmax(-1)
    if head is not None:
        q = head.spread(q)
    return draft_view(q, output_ids)


def tree_round(target: KVModel, drafter: TreeDrafter, ids: list[int], depth: int, eos: set[int],
               sampling: Sampling, gen: torch.Generator, clock: Clock):
    """One tree round (specviz/engine/tree.py): draft the tree, verify it in one pass, walk it,
    and keep only the accepted path in both caches. Returns the strip's line as a Proposal and
    a Verdict (so a tree round is recorded as a chain round is), the tree and its verdict,
    and the target's events (verify, sample, cache compaction)."""
    tree = drafter.propose(ids, depth, eos)
    logits, verify_event = verify_tree(target, ids, tree, clock)
    s0 = clock.now()
    tv = accept_tree(tree, logits, sampling, gen)
    events = [verify_event, Event("target", "sample", s0, clock.now(), [tv.token])]
    r0 = clock.now()
    target.keep_only(list(range(len(ids))) + [len(ids) + i for i in tv.path])
    events.append(Event("target", "rollback", r0, clock.now(), []))
    if (kept := drafter.keep_path(tv.path)) is not None:
        events.append(kept)
    line = best_line(tree, tv.path)
    rows = [0] + [1 + i for i in line]
    prop = Proposal([tree.tokens[i] for i in line],
                    torch.stack([tree.rows[tree.parents[i]] for i in line]) if line else None, list(tree.events))
    verdict = Verdict(len(tv.path), tv.token, logits[rows], None if sampling.greedy else tv.p[rows])
    return prop, verdict, tree, tv, events


def record_tree(rnd: Round, tree: DraftTree, tv: TreeVerdict, text: RunText) -> None:
    """Every node of the round's tree, for the tree figure: token, parent, q and p under the
    parent's rows, on the accepted path or not, its text after its own ancestors."""
    on_path = set(tv.path)
    for i, tok in enumerate(tree.tokens):
        parent = tree.parents[i]
        before = [tree.tokens[a] for a in reversed(tree.ancestors(parent))] if parent >= 0 else []
        rnd.tree.append(TreeNode(
            token=tok, parent=parent, q=_sig(tree.q(i)), p=_sig(float(tv.p[parent + 1, tok])),
            accepted=i in on_path, text=text.pieces([tok], after=before)[0], step=tree.steps[i]))


class Decoding:
    """A run in progress. Iterate it for Rounds; ``trace`` grows as they come and is
    summarised when the run ends. ``run()`` drives it to the end and returns the trace.

    ``inspect=False`` skips what only the inspector reads (the top-10 candidate rows, the
    draft's rank of every output token): the decoding and its clock are the same, but a
    wall clock around the whole call (the benchmark's) no longer pays for that work."""

    def __init__(self, pair: ModelPair, config: RunConfig, inspect: bool = True):
        config = dataclasses.replace(config, stop=list(config.stop))  # the caller's stays as it was
        prompt_ids = check(pair, config)
        self.pair = pair
        config.draft, config.target = pair.draft_name, pair.target_name
        config.device, config.dtype = str(pair.device), pair.dtype
        config.target_url = pair.remote.url if pair.remote is not None else ""
        self.trace = Trace(config=config, prompt_ids=prompt_ids, eos_ids=list(pair.eos_ids))
        self.eos = set(pair.eos_ids)
        self.done = False
        self.inspect = inspect
        if config.mode == "speculative" and config.drafter == "model":  # built once per pair, before the clock
            pair.draft_model(config.draft_quant)
            if config.draft_vocab:
                pair.cut_head(config.draft_vocab, config.draft_quant)
        self.cache_length = 0
        if config.compiled:  # static caches: compiled and warmed up here, before the clock
            self.cache_length = self._warm_compiled()
        self._gen = self._rounds()

    def _warm_compiled(self) -> int:
        """The static caches' size for this run, and each compiled model warmed up at it."""
        from specviz.models import static_kv

        cfg, pair = self.trace.config, self.pair
        need = len(self.trace.prompt_ids) + cfg.max_new_tokens + MAX_TREE_NODES + 2
        length = static_kv.cache_length(need, pair.context_length)
        models = [pair.target]
        if cfg.mode == "speculative" and draft_compiled(cfg):
            models.append(pair.draft)
        for model in models:
            static_kv.warm(model, pair.device, length)
        return length

    def __iter__(self) -> Iterator[Round]:
        return self

    def __next__(self) -> Round:
        try:
            return next(self._gen)
        except StopIteration:
            self.done = True
            raise

    def run(self) -> Trace:
        for _ in self:
            pass
        return self.trace

    def _rounds(self) -> Iterator[Round]:
        cfg, pair, trace = self.trace.config, self.pair, self.trace
        speculative = cfg.mode == "speculative"
        sampling = Sampling(cfg.temperature, cfg.top_k, cfg.top_p)
        gen = torch.Generator().manual_seed(cfg.seed)
        clock = Clock(others=not busy.served_here(cfg.target_url))
        target = pair.target_kv(cfg.compiled, self.cache_length)
        shape = TreeShape.of(cfg) if speculative and cfg.is_tree else None
        if shape is not None:  # a token tree: the draft model, full head
            kv = pair.kv(pair.draft_model(cfg.draft_quant), compiled=draft_compiled(cfg), length=self.cache_length)
            drafter = TreeDrafter(kv, sampling, gen, clock, shape,
                                  sure=cfg.confidence if cfg.policy == "confidence" else None)
        else:
            drafter = make_drafter(pair, cfg, sampling, gen, clock, self.cache_length) if speculative else None
        policy = make_policy(cfg.policy, cfg.gamma, cfg.confidence)
        text = RunText(pair.tokenizer, trace.prompt_ids)
        ids = list(trace.prompt_ids)
        last: Round | None = None
        views = self.inspect and speculative and cfg.drafter == "model" and sampling.greedy
        seen: dict[int, tuple[int, list[int], float]] = {}  # output position -> (rank, top, top q), real rows
        while True:
            left = min(cfg.max_new_tokens - len(trace.output_ids), pair.context_length - len(ids))
            gamma = min(shape.max_depth if shape else policy.next(last), left - 1) if drafter else 0
            tree = None
            if shape is not None and gamma > 0:
                prop, verdict, tree, tree_verdict, target_events = tree_round(
                    target, drafter, ids, gamma, self.eos, sampling, gen, clock)
                waits = []
            else:
                prop = drafter.propose(ids, gamma, self.eos, policy.stop_after) if gamma > 0 else Proposal()
                logits, verify_event = verify(target, ids, prop, clock,
                                              "verify_forward" if speculative else "target_forward")
                waits = target.take_waits()  # a remote target: the request's time outside the server's compute
                s0 = clock.now()
                verdict = accept(logits, prop, sampling, gen)
                if target.logprob_rows:  # a remote target's rows are log-probs, -inf where it said nothing
                    verdict.p = logits.exp()
                target_events = [verify_event, Event("target", "sample", s0, clock.now(), [verdict.token])]
            with clock.off():  # display work: the text of each token, the record, stop strings
                produced = len(trace.output_ids)
                emitted, stop = stopping.cut(prop.tokens[: verdict.accepted] + [verdict.token], produced,
                                             produced + left, cfg.max_new_tokens, self.eos,
                                             lambda toks: text.stop_cut(toks, cfg.stop))
                rnd = record_round(len(trace.rounds), gamma, prop, verdict, emitted, text,
                                   self.inspect and pair.remote is None)  # a server's top-2 rows inspect nothing
                if tree is not None:
                    record_tree(rnd, tree, tree_verdict, text)
                rnd.emitted_text = text.commit(emitted)
                if views:
                    at = len(trace.output_ids)
                    for i, view in enumerate(zip(*real_rows_view(prop, verdict, emitted))):
                        seen[at + i] = view
            ids += emitted
            rollback = self._rollback(target, drafter, ids, clock, rnd.rejected)
            rnd.events = [*prop.events, *waits, *target_events, *rollback]
            clock.check()
            trace.rounds.append(rnd)
            trace.output_ids += emitted
            trace.output_text = text.text
            trace.wall_ms = clock.now()
            last = rnd
            if stop:
                trace.contention = clock.contention()  # its one CPU sample after the last timing
                trace.stop_reason = stop
                if views:
                    self._fill_views(seen)
                trace.finish()
                self.done = True
                yield rnd
                return
            clock.pause()
            trace.contention = clock.contention()
            yield rnd
            clock.resume()

    def _fill_views(self, seen: dict[int, tuple[int, list[int], float]]) -> None:
        """The draft's view of every output position, after the run (off the clock): real
        rows where the run has them; one teacher-forced pass for the rest (bonus tokens).
        Real rows first: in bf16 a multi-token pass can round a near-tie differently."""
        trace = self.trace
        n = len(trace.output_ids)
        if not n:
            return
        if len(seen) < n:
            forced = teacher_forced_view(self.pair, trace.config, trace.prompt_ids, trace.output_ids)
            for j in range(n):
                seen.setdefault(j, (forced[0][j], forced[1][j], forced[2][j]))
        trace.draft_ranks = [seen[j][0] for j in range(n)]
        trace.draft_top = [seen[j][1] for j in range(n)]
        trace.draft_top_q = [seen[j][2] for j in range(n)]

    @staticmethod
    def _rollback(target: KVModel, drafter, ids: list[int], clock: Clock, rejected: list[int]) -> list[Event]:
        """Roll both caches back to a prefix of the new sequence (crop, no recomputation)."""
        events = []
        r0 = clock.now()
        if target.rollback(len(ids) - 1):
            events.append(Event("target", "rollback", r0, clock.now(), list(rejected)))
        if drafter:
            events.extend(drafter.sync(ids))
        return events


def autoregressive(pair: ModelPair, config: RunConfig, inspect: bool = True) -> Decoding:
    """The target alone, one forward pass per token. ``config`` is copied, not changed."""
    return Decoding(pair, dataclasses.replace(config, mode="autoregressive"), inspect)


def speculative(pair: ModelPair, config: RunConfig, inspect: bool = True) -> Decoding:
    """Draft gamma tokens, verify them in one target pass, keep the accepted prefix.
    ``config`` is copied, not changed."""
    return Decoding(pair, dataclasses.replace(config, mode="speculative"), inspect)
