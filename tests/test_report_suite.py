"""The suite view of `visionbench report` over several recipes (docs/report.md, "Across recipes"):
mean ranks, Friedman test with Iman–Davenport's F, Nemenyi CD, probability of improvement; checked
against scipy / pandas / a direct pairwise count / Demšar's worked example on a fabricated
6-recipe x 4-activation x 5-seed tree."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from visionbench.report import figures, main, suite
from visionbench.report.collect import scan_runs
from visionbench.stats import improvement, ranking

from .helpers import write_recipe, write_run

ACTS = ["relu", "gelu", "silu", "rational"]
RECIPES = [f"r{i}" for i in range(6)]


def values(recipe_index: int, act_index: int) -> list[float]:
    """5 seeds; the act effects differ by recipe so ranks are not constant, and r5 has an exact tie."""
    rng = np.random.default_rng(100 * recipe_index + act_index)
    effect = [0.0, 0.8, 0.4, 1.2][act_index] * (1 if recipe_index % 3 else -0.5)
    base = 90.0 + effect + rng.normal(0, 0.3, 5)
    if recipe_index == 5 and act_index in (1, 2):  # gelu and silu tie exactly in r5
        base = np.array([91.0, 91.2, 90.8, 91.1, 90.9])
    return [round(float(v), 6) for v in base]


@pytest.fixture
def tree(tmp_path):
    for i, recipe in enumerate(RECIPES):
        write_recipe(tmp_path, recipe, {act: values(i, j) for j, act in enumerate(ACTS)})
    write_run(tmp_path, "r0", "mish", 0, 99.0)  # an act in one recipe only: ranked there, not in the Friedman block
    return tmp_path


def per_recipe_means(tree) -> pd.DataFrame:
    runs, _ = scan_runs(tree)
    return runs.pivot_table(index="recipe", columns="act", values="val_top1_best", aggfunc="mean")


def test_friedman_equals_scipy_on_the_per_recipe_means(tree, capsys):
    assert main([str(tree)]) == 0
    md = (tree / "ranks.md").read_text()
    table = per_recipe_means(tree)[ACTS]
    ref = stats.friedmanchisquare(*[table[a].to_numpy() for a in ACTS])
    stat = float(md.split("Friedman χ² = ")[1].split(",")[0])
    p = float(md.split("p = ")[1].split(" ")[0])
    assert stat == pytest.approx(ref.statistic, abs=5e-4) and p == pytest.approx(ref.pvalue, rel=1e-3)
    assert "N = 6 recipes, k = 4 activations" in md and "mish" not in md.split("activations:")[1].split(")")[0]
    a, b = ACTS[0], ACTS[1]  # the default post-hoc: scipy's Wilcoxon on the pair's per-recipe means, Holm over 6 pairs
    ref_w = stats.wilcoxon(table[a].to_numpy() - table[b].to_numpy())
    assert "pairwise Wilcoxon signed-rank tests over the 6 recipes' means, Holm over the 6 pairs" in md
    from visionbench.stats import posthoc

    pairs = posthoc.wilcoxon_holm(table, pd.Series(True, index=table.index)).set_index(["a", "b"])
    assert pairs.loc[(a, b), "p"] == pytest.approx(ref_w.pvalue)
    assert main([str(tree), "--posthoc", "nemenyi"]) == 0
    nemenyi = (tree / "ranks.md").read_text()
    cd = stats.studentized_range.ppf(0.95, 4, np.inf) / math.sqrt(2) * math.sqrt(4 * 5 / (6 * 6))
    assert f"CD = {cd:.3f}" in nemenyi and "Nemenyi post-hoc (Demšar 2006)" in nemenyi
    f = 5 * ref.statistic / (6 * 3 - ref.statistic)  # (N−1)χ² / (N(k−1) − χ²), N = 6, k = 4
    assert f"Iman–Davenport F = {f:.3f} on (3, 15) df, p = {stats.f.sf(f, 3, 15):.4g}" in md
    for recipe in RECIPES:  # each recipe says which metric it was ranked on
        assert f"| {recipe} | val_top1_best | higher is better | relu |" in md
    assert "ranks.md" in capsys.readouterr().err


def test_mean_ranks_equal_pandas_average_ranks_with_ties(tree):
    assert main([str(tree)]) == 0
    got = pd.read_csv(tree / "ranks.csv").set_index("act")
    table = per_recipe_means(tree)
    expected = table.rank(axis=1, ascending=False, method="average")
    assert expected.loc["r5", "gelu"] == expected.loc["r5", "silu"] and expected.loc["r5", "gelu"] % 1 == 0.5  # a tie
    for act in ACTS + ["mish"]:
        assert got.loc[act, "mean_rank"] == pytest.approx(expected[act].mean())
        assert got.loc[act, "n_recipes"] == expected[act].notna().sum()
    assert got.loc["mish", "n_recipes"] == 1 and np.isnan(got.loc["mish", "rank_friedman"])
    block = table[ACTS].rank(axis=1, ascending=False, method="average").mean()
    assert got.loc[ACTS, "rank_friedman"].to_numpy() == pytest.approx(block[ACTS].to_numpy())


def test_lower_is_better_metrics_rank_the_smallest_first():
    scores = suite.scores_frame(
        [
            {
                "task": "a",
                "metric": "val_loss_best",
                "higher_better": False,
                "baseline": "relu",
                "values": {"relu": [1.0, 1.1], "gelu": [0.5, 0.6], "silu": [2.0, 2.1]},
            },
            {
                "task": "b",
                "metric": "val_top1_best",
                "higher_better": True,
                "baseline": "relu",
                "values": {"relu": [90.0], "gelu": [91.0], "silu": [89.0]},
            },
        ]
    )
    got = ranking.rank_table(scores).set_index("act")["mean_rank"]
    assert got.to_dict() == {"gelu": 1.0, "relu": 2.0, "silu": 3.0}


def test_probability_of_improvement_per_recipe_and_their_mean(tree):
    assert main([str(tree)]) == 0
    pi = pd.read_csv(tree / "improvement.csv")
    runs, _ = scan_runs(tree)
    per_recipe = {}
    for act in ["gelu", "silu", "rational"]:
        for recipe in RECIPES:
            x = runs[(runs.recipe == recipe) & (runs.act == act)]["val_top1_best"].to_numpy()
            y = runs[(runs.recipe == recipe) & (runs.act == "relu")]["val_top1_best"].to_numpy()
            pairs = list(itertools.product(x, y))
            direct = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in pairs) / len(pairs)
            row = pi[(pi.act == act) & (pi.block == recipe)].iloc[0]
            assert row["p_improve_empirical"] == pytest.approx(direct)  # rliable's count, kept beside
            pooled = math.sqrt((np.var(x, ddof=1) + np.var(y, ddof=1)) / 2)  # 5 vs 5
            assert row["p_improve"] == pytest.approx(stats.norm.cdf((x.mean() - y.mean()) / pooled / math.sqrt(2)))
            assert (row["ci_low"], row["ci_high"]) == pytest.approx(improvement.recipe_interval(x, y)[1:])
            per_recipe[(act, recipe)] = row["p_improve"]
        agg = pi[(pi.act == act) & (pi.block == "all")].iloc[0]
        assert agg["p_improve"] == pytest.approx(np.mean([per_recipe[(act, r)] for r in RECIPES]))
        assert agg["n_blocks"] == 6 and np.isnan(agg["ci_low"]) and np.isnan(agg["ci_high"])  # not estimable
    md = (tree / "ranks.md").read_text()
    assert "Probability of improvement over relu" in md and "without an interval" in md


@pytest.mark.plots
def test_report_writes_the_suite_files_and_a_single_recipe_none(tree, tmp_path_factory):
    assert main([str(tree)]) == 0
    for name in ("ranks.csv", "ranks.md", "cd_diagram.png", "improvement.csv", "improvement.png"):
        assert (tree / name).stat().st_size > 0, name
    assert (tree / "cd_diagram.png").read_bytes()[:4] == (tree / "improvement.png").read_bytes()[:4] == b"\x89PNG"
    assert {"act", "mean_rank", "n_recipes"} <= set(pd.read_csv(tree / "ranks.csv").columns)

    single = tmp_path_factory.mktemp("single")
    write_recipe(single, "r0", {act: values(0, j) for j, act in enumerate(ACTS)})
    for where in (single, single / "r0"):
        assert main([str(where)]) == 0
        assert not any(
            (where / n).exists()
            for n in ("ranks.csv", "ranks.md", "cd_diagram.png", "improvement.csv", "improvement.png")
        )

    off = tmp_path_factory.mktemp("off")
    for i in range(2):
        write_recipe(off, f"r{i}", {act: values(i, j) for j, act in enumerate(ACTS)})
    assert main([str(off), "--no-suite"]) == 0
    assert not (off / "ranks.md").exists()


def test_too_few_acts_or_recipes_give_a_note_not_a_test(tmp_path):
    write_recipe(tmp_path, "a", {"relu": [1.0, 2.0], "gelu": [2.0, 3.0]})
    write_recipe(tmp_path, "b", {"relu": [1.0, 2.0], "gelu": [3.0, 3.5]}, baseline="gelu")
    assert main([str(tmp_path)]) == 0
    md = (tmp_path / "ranks.md").read_text()
    assert "no Friedman test: it needs >= 3 activations" in md and not (tmp_path / "cd_diagram.png").exists()
    assert "| a | val_top1_best | higher is better | relu | no |" in md  # no test was run: no recipe is in one
    assert "| yes |" not in md
    assert "do not share one baseline" in md  # a: relu, b: gelu
    assert pd.read_csv(tmp_path / "ranks.csv").set_index("act")["mean_rank"].to_dict() == {"gelu": 1.0, "relu": 2.0}


def test_complete_block_drops_the_act_that_ran_least():
    scores = suite.scores_frame(
        [
            {
                "task": t,
                "metric": "m",
                "higher_better": True,
                "baseline": "relu",
                "values": {a: [float(i)] for i, a in enumerate(acts)},
            }
            for t, acts in [
                ("a", ["relu", "gelu", "silu", "x"]),
                ("b", ["relu", "gelu", "silu"]),
                ("c", ["relu", "gelu", "silu"]),
            ]
        ]
    )
    assert ranking.complete_block(scores) == (["gelu", "relu", "silu"], ["a", "b", "c"])
    assert ranking.cliques({"a": 1.0, "b": 1.5, "c": 3.0}, cd=1.0) == [["a", "b"]]


@pytest.mark.plots
def test_improvement_plot_needs_an_aggregate(tmp_path):
    frame = pd.DataFrame(
        [{"act": "gelu", "block": "r0", "p_improve": 0.7, "ci_low": 0.5, "ci_high": 0.9, "n_blocks": 1}]
    )
    assert figures.plot_improvement(frame, "relu", tmp_path / "a.png") is None
    assert not (tmp_path / "a.png").exists()
    agg = {
        "act": "gelu",
        "block": "all",
        "p_improve": 0.7,
        "ci_low": float("nan"),
        "ci_high": float("nan"),
        "n_blocks": 1,
    }
    out = figures.plot_improvement(pd.concat([frame, pd.DataFrame([agg])]), "relu", tmp_path / "b.png")
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_iman_davenport_equals_demsar_2006_worked_example():
    """Demšar (2006) Sec 3.2.2: four classifiers on N = 14 data sets, mean ranks 3.143, 2.000, 2.893, 1.964:
    χ²_F = 9.28 and F_F = 3.69 on (3, 39) df, above the critical F(3, 39) = 2.85 at α = 0.05."""
    n, k, mean_ranks = 14, 4, np.array([3.143, 2.000, 2.893, 1.964])
    chi2 = 12 * n / (k * (k + 1)) * (np.sum(mean_ranks**2) - k * (k + 1) ** 2 / 4)
    assert chi2 == pytest.approx(9.28, abs=0.01)
    f, p, df1, df2 = ranking.iman_davenport(chi2, n, k)
    assert f == pytest.approx(3.69, abs=0.005) and (df1, df2) == (3, 39)
    assert stats.f.ppf(0.95, 3, 39) == pytest.approx(2.85, abs=0.005) and p == pytest.approx(stats.f.sf(f, 3, 39))
    assert p < stats.chi2.sf(chi2, 3)  # 0.020 < 0.026: χ² is the conservative one
    assert ranking.iman_davenport(n * (k - 1), n, k)[:2] == (math.inf, 0.0)  # every task ranks alike
    with pytest.raises(ValueError, match="N >= 2 tasks and k >= 2 acts, got N = 1"):
        ranking.iman_davenport(1.0, 1, 4)
    with pytest.raises(ValueError, match=r"χ² must lie in \[0, N\(k-1\)\] = \[0, 42\], got 50"):
        ranking.iman_davenport(50, n, k)
