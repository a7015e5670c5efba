"""A tree run against the best chain run of the history: which row that is, how the Live stats
and the history table say it (pure: rows made by hand, no model)."""

from __future__ import annotations

from specviz import figures as F
from specviz.figures.history import (
    TABLE_COLUMNS,
    best_chain_row,
    chain_gamma_to_try,
    compared_line,
    compared_row,
    delta_label,
    vs_chain_text,
)

BASE = {"pair": "d → t", "dtype": "float32", "example": "Code", "prompt": "p", "draft": "full", "temperature": 0.0,
        "top_p": 1.0, "max new tokens": 32, "seed": 0, "contention": "", "fair race": True}


AR = 10.0  # the target alone's tok/s in every race below, unless a test says otherwise


def row(run: int, tps: float | None, gamma: int = 4, tree: str = "", **kw) -> dict:
    speedup = tps / AR if tps is not None else None
    return {**BASE, "run": run, "gamma": gamma, "tree": tree, "tok/s": tps, "speedup": speedup, **kw}


def test_the_best_chain_is_the_fastest_like_chain_at_any_gamma():
    rows = [row(1, 10.0, 2), row(2, 12.5, 6), row(3, 11.0, 4), row(4, 14.0, 5, "16×3")]
    assert best_chain_row(rows, rows[-1])["run"] == 2
    assert compared_row(rows, rows[-1])["run"] == 2  # not the latest (#3): the fastest
    # a later chain counts too (the one-click chain run comes after the tree)
    rows.append(row(5, 13.0, 5))
    assert best_chain_row(rows, rows[3])["run"] == 5


def test_ties_go_to_the_earlier_run():
    rows = [row(1, 12.0, 3), row(2, 12.0, 6), row(3, 13.0, 4, "8×2")]
    assert best_chain_row(rows, rows[-1])["run"] == 1


def test_contention_other_prompts_settings_and_trees_are_left_out():
    tree = row(9, 14.0, 5, "16×3")
    rows = [
        row(1, 30.0, 4, contention="other processes (1.4 cores)"),  # timed on a busy machine
        row(2, 29.0, 4, prompt="another prompt"),
        row(3, 28.0, 4, temperature=0.7),
        row(4, 27.0, 4, draft="full · int8"),
        row(5, 26.0, 5, "12×2"),  # another tree is no chain
        row(6, 25.0, 0, draft=""),  # the target alone is no chain either
        row(7, 9.0, 3),  # the one like chain: slow, but the only one
        tree,
    ]
    assert best_chain_row(rows, tree)["run"] == 7
    assert best_chain_row([r for r in rows if r["run"] != 7], tree) is None


def test_no_chain_yet_and_a_busy_tree_compare_with_nothing():
    tree = row(1, 14.0, 5, "16×3")
    assert compared_row([tree], tree) is None
    busy = row(3, 14.0, 5, "16×3", contention="other processes (1.4 cores)")
    assert compared_row([row(2, 10.0, 4), busy], busy) is None  # a like chain, but the tree was timed busy


def test_a_chain_still_compares_with_the_latest_earlier_like_run():
    rows = [row(1, 20.0, 6), row(2, 14.0, 5, "16×3"), row(3, 10.0, 2)]
    assert compared_row(rows, rows[-1])["run"] == 2  # the latest, a tree, not the fastest (#1)
    assert compared_row(rows[:1], rows[0]) is None


def test_the_chain_offered_is_as_deep_as_the_tree():
    assert chain_gamma_to_try(row(1, 14.0, 5, "16×3")) == 5
    assert chain_gamma_to_try(row(1, 14.0, 7, "24×4")) == 7


def test_the_delta_is_short_and_the_line_under_it_names_the_run():
    best = row(4, 12.5, 6)
    assert delta_label("+1.2", best) == "+1.2 vs #4"  # the tile is narrow
    assert compared_line(best, 5, tree=True) == ("vs #4: the best chain, γ = 6: of this prompt and settings, the "
                                                 "chain run with the highest speedup over the target alone, raced on "
                                                 "a quiet machine.")
    assert compared_line(row(5, 14.0, 5, "16×3"), 5) == "vs #5: a token tree, γ = 5 · 16×3."
    assert compared_line(row(5, 10.0, 2), 4) == "vs #5: the same prompt and settings at γ = 2."  # chains as before
    assert compared_line(row(5, 10.0, 4), 4) is None


def test_the_table_sets_each_tree_against_its_best_chain():
    rows = [row(1, 10.0, 2), row(2, 12.5, 6), row(3, 15.0, 5, "16×3"),
            row(4, 14.0, 5, "16×3", prompt="other"), row(5, 9.0, 4, "8×2", contention="other processes (1.1 cores)")]
    assert [vs_chain_text(rows, r) for r in rows] == ["", "★ best", "×1.20 #2", "no chain", "–"]
    table = F.history_table(rows)
    assert {t["run"]: t["vs chain"] for t in table} == {"1": "", "2": "★ best", "3": "×1.20 #2", "4": "no chain",
                                                       "5": "–"}
    assert {t["run"]: t["gamma"] for t in table} == {"1": "2", "2": "6", "3": "5 · 16×3", "4": "5 · 16×3",
                                                    "5": "4 · 8×2"}  # a tree: its depth, then its shape


def test_the_table_keeps_its_width_budget():
    assert sum(c.width for c in TABLE_COLUMNS) <= 858  # the main column at 1280 px with the sidebar open
    assert all(c.width >= 40 for c in TABLE_COLUMNS)


def test_the_history_chart_draws_trees_as_diamonds():
    rows = [row(1, 10.0, 4), row(2, 12.0, 5, "16×3")]
    rows = [{**r, "acceptance": 0.5, "AR tok/s": None} for r in rows]
    fig = F.history_figure(rows)
    symbols = {t.marker.symbol: list(t.x) for t in fig.data if t.mode == "markers" and t.x[0] is not None}
    assert symbols == {"circle": [4], "diamond": [5]}
    assert any(t.name == "token tree, at its depth" for t in fig.data)
    assert fig.layout.xaxis.title.text == "γ (draft length; a tree's depth)"
    assert F.history_figure(rows[:1]).layout.xaxis.title.text == "γ (draft length)"
    only_trees = F.history_figure(rows[1:])
    assert [t.name for t in only_trees.data if t.showlegend is not False][0] == "Code"  # the example still named


def test_the_ratio_is_of_speedups_each_raced_beside_its_own_target_alone():
    """Two runs minutes apart can see the machine at different speeds: the faster tok/s of a chain
    timed while the machine was quick (its target alone quick too) is no better chain."""
    quick_moment = row(1, 15.0, 6, speedup=15.0 / 14.0)  # its target alone ran at 14 tok/s
    slow_moment = row(2, 12.0, 4)  # ×1.20 over a target alone at 10
    tree = row(3, 15.0, 5, "16×3")  # ×1.50
    rows = [quick_moment, slow_moment, tree]
    assert best_chain_row(rows, tree)["run"] == 2
    assert vs_chain_text(rows, tree) == "×1.25 #2"  # 1.50 ÷ 1.20, not 15.0 ÷ 15.0


def test_no_fair_race_no_ratio():
    tree = row(4, 15.0, 5, "16×3")
    unraced = row(1, 20.0, 4, speedup=None)  # Race the target alone was off
    unfair = row(2, 19.0, 6, **{"fair race": False})  # its two runs saw different load
    assert best_chain_row([unraced, unfair, tree], tree) is None
    fair = row(3, 12.0, 4)
    assert vs_chain_text([unraced, unfair, fair, tree], tree) == "×1.25 #3"
    assert vs_chain_text([fair, row(4, 15.0, 5, "16×3", **{"fair race": False})], tree | {"fair race": False}) == "–"
