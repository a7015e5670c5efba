"""The run history: one row per finished run, and the same rows as the table shows them.

A row stores each number as measured (no rounding): the CSV keeps it whole, and the
table shows it through the metric's one formatter (``specviz.analysis.metrics``), the same one
the Live stats and the race use, so a run reads the same everywhere.

A row also keeps what competed with the run (``contention``, specviz.record.contention's entries
in English) and whether its race was fair (its two runs under the same load:
``specviz.measure.race.same_load``); the table marks such a tok/s or speedup with ``BUSY_MARK``.
A run's numbers are compared only with a run of the same pair, prompt and settings (γ
aside), both timed with nothing else competing (``compared_row``); a token tree's with the
best chain run of them (``best_chain_row``), which the table shows in its "vs chain" column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specviz.analysis.metrics import (
    DASH,
    HISTORY_METRICS,
    METRICS,
    fmt_speedup,
    live_summary,
    percent,
)
from specviz.record.contention import describe
from specviz.record.i18n import N_, Translator
from specviz.record.run_trace import Trace

CONFIG_COLUMNS = ("run", "pair", "dtype", "example", "prompt", "draft", "gamma", "policy", "tree", "temperature",
                  "top_p", "max new tokens", "seed")
HISTORY_COLUMNS = (*CONFIG_COLUMNS, *(METRICS[k].column for k in HISTORY_METRICS), "identical", "baseline",
                   "contention", "fair race")
# What two runs must share for their numbers to be compared: all but the run number, the example's
# name (the prompt itself is here) and γ (the knob a class moves between runs).
LIKE_COLUMNS = ("pair", "dtype", "prompt", "draft", "temperature", "top_p", "max new tokens", "seed")
TPS = METRICS["tokens_per_second"].column
VS_CHAIN = "vs chain"  # the table's column of a tree run against the best chain (computed, not stored)
BUSY_MARK = "⚠"  # beside a tok/s timed under contention, or a speedup whose two runs saw different load


def draft_label(cfg) -> str:
    """The draft as a run used it: its head ("full" or "32k", FR-Spec) and, when not as
    loaded, its weights ("int8")."""
    n = cfg.draft_vocab
    head = "full" if not n else (f"{n // 1024}k" if n % 1024 == 0 else str(n))
    return head if cfg.draft_quant == "none" else f"{head} · {cfg.draft_quant}"


def tree_label(cfg) -> str:
    """A run's token tree as the history shows it: "" for a chain, "16×3" for a dynamic tree of
    16 nodes and width 3 (its depth is γ), "4,2,2,1" for a static shape."""
    if cfg.mode != "speculative" or not cfg.is_tree:
        return ""
    return ",".join(map(str, cfg.tree_shape)) if cfg.tree_shape else f"{cfg.tree_nodes}×{cfg.tree_width}"


def policy_label(cfg) -> str:
    """A run's draft-length policy as the history keeps it: "" for a constant γ, "τ 0.6" for the
    confidence policy (γ then the most it drafts), "heuristic"."""
    if cfg.mode != "speculative" or cfg.policy == "constant":
        return ""
    return f"τ {cfg.confidence:g}" if cfg.policy == "confidence" else cfg.policy


def history_row(trace: Trace, run: int, example: str = "custom", ar: Trace | None = None,
                speedup: float | None = None, identical: bool | None = None,
                baseline: str | None = None, fair: bool | None = None) -> dict[str, Any]:
    """One row of the run history for a finished (or stopped) run.

    ``example``: the example prompt's name, or "custom"; ``ar``: the target-alone run
    raced against it; ``baseline``: "measured" or "reused from run N" (None: no race),
    stored in English (MEASURED, REUSED) and shown through ``baseline_text``; ``fair``:
    whether the race's two runs saw the same load (None: no race)."""
    s = live_summary(trace)
    cfg = trace.config
    values = {**s, "ar_tokens_per_second": live_summary(ar)["tokens_per_second"] if ar is not None else None,
              "speedup": speedup}
    return {
        "run": run,
        "pair": f"{cfg.draft} → {cfg.target}",
        "dtype": cfg.dtype,
        "example": example,
        "prompt": cfg.prompt,
        "draft": "" if cfg.mode != "speculative" else draft_label(cfg),
        "gamma": cfg.gamma if not cfg.tree_shape else len(cfg.tree_shape),
        "policy": policy_label(cfg),
        "tree": tree_label(cfg),
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "max new tokens": cfg.max_new_tokens,
        "seed": cfg.seed,
        **{METRICS[k].column: values.get(k) for k in HISTORY_METRICS},
        "identical": identical,
        "baseline": baseline,
        "contention": describe(trace.contention),
        "fair race": fair,
    }


def is_chain(row: dict[str, Any]) -> bool:
    """Whether a history row is a speculative chain run (not a token tree, not the target alone)."""
    return bool(row.get("draft")) and not row.get("tree")


def _like(r: dict[str, Any], row: dict[str, Any]) -> bool:
    """Same pair, prompt and settings (``LIKE_COLUMNS``), timed with nothing competing."""
    return not r.get("contention") and all(r.get(k) == row.get(k) for k in LIKE_COLUMNS)


def fair_speedup(row: dict[str, Any]) -> float | None:
    """A row's speedup over the target alone when it is a ratio of two runs measured side by side
    under the same load (a race, fair, with nothing competing); None otherwise."""
    if row.get("speedup") is None or row.get("fair race") is False or row.get("contention"):
        return None
    return row["speedup"]


def best_chain_row(rows: list[dict[str, Any]], row: dict[str, Any]) -> dict[str, Any] | None:
    """The chain run a tree run ``row`` is set against: the chain run of the same pair, prompt
    and settings, at any γ, earlier or later than ``row``, with the highest ``fair_speedup``.
    Two runs made minutes apart may see a machine at different speeds; each speedup is taken
    against a target-alone run right beside it, so their ratio,

        tree ÷ chain = (tree tok/s ÷ its target alone) ÷ (chain tok/s ÷ its target alone),

    compares the two at the same load. Ties: the earlier run. None when there is none."""
    chains = [r for r in rows if r["run"] != row["run"] and is_chain(r) and fair_speedup(r) and _like(r, row)]
    return max(chains, key=lambda r: (r["speedup"], -r["run"]), default=None)


def tree_vs_chain(row: dict[str, Any], best: dict[str, Any]) -> float | None:
    """A tree run's gain over its best chain run (``best_chain_row``): the ratio of their fair
    speedups; None when the tree has none (no race, an unfair one, or timed busy)."""
    tree = fair_speedup(row)
    return tree / best["speedup"] if tree and best.get("speedup") else None


def compared_row(rows: list[dict[str, Any]], row: dict[str, Any]) -> dict[str, Any] | None:
    """The row ``row``'s numbers are compared with. A tree run: the best chain run of the same
    pair, prompt and settings (``best_chain_row``). A chain run: the latest earlier run of the
    same pair, prompt and settings (``LIKE_COLUMNS``; γ and the shape may differ). Both timed
    with nothing competing: None when there is none, or when ``row`` itself was timed under
    contention."""
    if row["contention"]:
        return None
    if row.get("tree"):
        return best_chain_row(rows, row)
    like = [r for r in rows if r["run"] < row["run"] and _like(r, row)]
    return like[-1] if like else None


def chain_gamma_to_try(row: dict[str, Any]) -> int:
    """The γ of the chain run offered beside a tree run ``row`` that has no chain to be set
    against: the tree's depth. A chain that deep makes the same draft passes a round as the
    tree, and one verify pass as it does, so the two differ only in the tree's width: what the
    tree buys is what the comparison shows. The chain's own best γ for this prompt is unknown
    until chains are run (the history knows no like chain yet; a Tune sweep runs other settings),
    and once the class runs chains at other γ the comparison takes the fastest of them."""
    return row["gamma"]


def delta_label(delta: str, prev: dict[str, Any], tr: Translator = N_) -> str:
    """A change as the Live stats show it under a number: "+2.3 vs #5" (short: the tile is
    narrow; ``compared_line`` says what #5 was)."""
    return tr(N_("{delta} vs #{run}")).format(delta=delta, run=prev["run"])


def compared_line(prev: dict[str, Any], gamma: int, tree: bool = False, tr: Translator = N_) -> str | None:
    """What the run a Live run is compared with was, when more than its number says: the best
    chain for a tree run (``tree``: "vs #4: the best chain, γ = 6, …"), a tree for a chain
    ("vs #5: a token tree, γ = 5 · 16×3"), or the γ when it differs ("vs #5: γ = 2", the only
    setting two like chains may not share); None when #5 is a like chain at the same γ."""
    if tree:
        return tr(N_("vs #{run}: the best chain, γ = {gamma}: of this prompt and settings, the chain run with the "
                     "highest speedup over the target alone, raced on a quiet machine.")).format(
            run=prev["run"], gamma=prev["gamma"])
    if prev.get("tree"):
        return tr(N_("vs #{run}: a token tree, γ = {gamma} · {tree}.")).format(
            run=prev["run"], gamma=prev["gamma"], tree=prev["tree"])
    if prev["gamma"] != gamma:
        return tr(N_("vs #{run}: the same prompt and settings at γ = {gamma}.")).format(
            run=prev["run"], gamma=prev["gamma"])
    return None


def best_chains(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any] | None]:
    """Each tree run's best chain row (``compared_row``), by run number: found once per table."""
    return {r["run"]: compared_row(rows, r) for r in rows if r.get("tree")}


def vs_chain_text(rows: list[dict[str, Any]], row: dict[str, Any], tr: Translator = N_,
                  bests: dict[int, dict[str, Any] | None] | None = None) -> str:
    """The history's "vs chain" cell: for a tree run, its gain over the best chain
    (``tree_vs_chain``) and that run ("×1.12 #4"; "no chain" when the history has none, "–" when
    the tree has no fair speedup of its own); for the chain run that is some tree run's best
    chain, a star ("★ best"); else empty."""
    bests = best_chains(rows) if bests is None else bests
    if row.get("tree"):
        best = bests[row["run"]]
        if best is None:
            return DASH if row.get("contention") else tr(N_("no chain"))
        ratio = tree_vs_chain(row, best)
        return DASH if ratio is None else f"{fmt_speedup(ratio)} #{best['run']}"
    if is_chain(row) and any(best is row for best in bests.values()):
        return tr(N_("★ best"))
    return ""


@dataclass(frozen=True)
class Column:
    """A column of the history table as shown: row key, header, width in px, help, and
    whether it is drawn as a bar (a whole percentage) rather than text."""

    key: str
    label: str
    width: int
    help: str = ""
    bar: bool = False


def _metric_column(key: str, width: int, bar: bool = False) -> Column:
    m = METRICS[key]
    return Column(m.column, m.label, width, m.help, bar)


TABLE_COLUMNS = (  # 858 px in all: the main column's width at 1280 px with the sidebar open
    Column("run", "#", 40, N_("Run number")),
    Column("example", N_("Example"), 72, N_("The example prompt, or custom")),
    Column("draft", N_("Draft"), 68, N_("The draft's head (full, or its N most frequent tokens: FR-Spec) and "
                                        "weights (int8 when quantized)")),
    Column("gamma", N_("γ · tree"), 70, N_("Draft length (≤ γ: the confidence policy, which stops early where the "
                                           "draft is unsure; its τ is in the CSV); for a token tree, its depth · its "
                                           "node budget × width (or its widths per depth)")),
    Column("temperature", N_("Temp"), 48, N_("Sampling temperature (0 = greedy)")),
    _metric_column("tokens_per_second", 84),
    _metric_column("acceptance_rate", 90, bar=True),
    _metric_column("mean_acceptance_length", 100),
    _metric_column("speedup", 70),
    Column(VS_CHAIN, N_("vs chain"), 76, N_("A token tree's speedup ÷ the best chain run's (the highest of the same "
                                           "prompt and settings at any γ), each measured against the target alone "
                                           "right beside it on a quiet machine, and that run's number; ★ marks "
                                           "that chain")),
    Column("identical", N_("Identical"), 68, N_("Identical to the target-alone output")),
    Column("baseline", N_("Baseline"), 72, N_("The target-alone run: measured for this run, or reused from an "
                                               "earlier one with the same pair, prompt and settings")),
)
_METRIC_BY_COLUMN = {m.column: m for m in METRICS.values()}


MEASURED, REUSED = N_("measured"), N_("reused from run {run}")  # a row's "baseline", as stored (English)


def baseline_text(baseline: str | None, tr: Translator = N_) -> str | None:
    """A row's "baseline" in the page's language: "measured" or "reused from run N"."""
    if baseline == MEASURED:
        return tr(MEASURED)
    head = REUSED.split("{")[0]
    if baseline and baseline.startswith(head) and baseline[len(head):].isdigit():
        return tr(REUSED).format(run=baseline[len(head):])
    return baseline


def busy_mark(row: dict[str, Any], key: str) -> bool:
    """Whether the table marks a row's value: its tok/s when the run was timed under contention,
    its speedup when the race's two runs saw different load."""
    if key == "tok/s":
        return bool(row.get("contention"))
    return key == "speedup" and row.get("fair race") is False


def _shown(key: str, value: Any, bar: bool, tr: Translator = N_) -> Any:
    if bar:
        return percent(value)
    if key in _METRIC_BY_COLUMN:
        return _METRIC_BY_COLUMN[key].text(value, tr)
    if value is None:
        return DASH
    if key == "identical":
        return tr(N_("yes")) if value else tr(N_("no"))
    if key == "temperature":
        return f"{value:g}"
    if key == "draft":
        return tr(N_("full")) + value[4:] if value.startswith("full") else value
    if key == "example":
        return tr(value)  # the example's name (marked in specviz.ui.chrome), or "custom"
    if key == "baseline":
        return baseline_text(value, tr)
    return str(value)


def history_table(rows: list[dict[str, Any]], tr: Translator = N_) -> list[dict[str, Any]]:
    """The rows as the table shows them, newest first: text through each metric's
    formatter, the bar columns as whole percentages, a tree beside its depth ("5 · 16×3"),
    a tree run against the best chain (``vs_chain_text``); ``tr`` translates the words."""
    bests = best_chains(rows)
    return [{c.key: vs_chain_text(rows, r, tr, bests) if c.key == VS_CHAIN else _marked(r, c, tr)
             for c in TABLE_COLUMNS} for r in reversed(rows)]


def _marked(row: dict[str, Any], c: Column, tr: Translator) -> Any:
    if c.key == "gamma":
        gamma = f"≤{row['gamma']}" if str(row.get("policy", "")).startswith("τ") else str(row["gamma"])
        # a tree: its depth, then its shape (tree_label)
        return f"{gamma} · {row['tree']}" if row.get("tree") else gamma
    shown = _shown(c.key, row.get(c.key), c.bar, tr)
    return f"{shown} {BUSY_MARK}" if busy_mark(row, c.key) else shown


def busy_runs(rows: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """The run numbers the table marks: those timed under contention, and the races not fair."""
    return ([r["run"] for r in rows if busy_mark(r, "tok/s")], [r["run"] for r in rows if busy_mark(r, "speedup")])
