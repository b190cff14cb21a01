"""The suite view's post-hoc (stats/posthoc.py; docs/report.md, "Across recipes"): each post-hoc is a test with a
family-wise error, measured by simulation through `ranking.friedman`, the function the report calls; and the
reason the default is pairwise: Nemenyi's verdict on a pair depends on the other activations in the pool
(Benavoli, Corani & Mangili 2016, JMLR 17(5)). `pytest -s` prints the rates."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from visionbench.stats import posthoc, ranking


def scores(means: np.ndarray) -> pd.DataFrame:
    """The long frame ranking.friedman reads, one seed per (task, act): `means` is tasks × acts."""
    rows = [
        {
            "task": f"t{i}",
            "act": f"a{j}",
            "seed": 0,
            "value": float(v),
            "metric": "acc",
            "higher_better": True,
            "baseline": "a0",
        }
        for i, row in enumerate(means)
        for j, v in enumerate(row)
    ]
    return pd.DataFrame(rows)


def family_wise(test: str, draws: int, tasks: int = 10, acts: int = 5, seed: int = 0) -> float:
    """P(some pair declared different) when every activation is the same (task effects, no activation effect)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(draws):
        means = rng.normal(0, 3, (tasks, 1)) + rng.normal(0, 1, (tasks, acts))
        hits += bool(ranking.friedman(scores(means), 0.05, test)["pairs"]["differ"].any())
    return hits / draws


@pytest.mark.parametrize("test", ["wilcoxon", "nemenyi"])
def test_no_difference_is_found_in_at_most_5_percent_of_suites(test):
    rate = family_wise(test, 100)
    print(f"\n{test}: some pair differs in {rate:.1%} of suites of 5 equal activations × 10 recipes")
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 100)


@pytest.mark.slow  # 9 s of pools
def test_nemenyi_decides_a_pair_by_the_pool_and_wilcoxon_does_not():
    """a0 beats a1 by a little on every one of 12 recipes. Alone with a middling third activation, Nemenyi's mean
    ranks put them far apart; add activations that win and lose elsewhere and the same pair's ranks move: its
    verdict changes. The Wilcoxon test of a0 vs a1 reads the pair's own 12 differences in both pools."""
    rng = np.random.default_rng(3)
    n = 12
    base = rng.normal(90, 2, n)
    pair = np.column_stack([base + 0.3, base])
    small = np.column_stack([pair, base - 5])
    others = rng.normal(0, 3, (n, 5)) + base[:, None]  # five activations scattered around the pair
    large = np.column_stack([pair, base - 5, others])
    verdicts = {}
    for name, means in (("small", small), ("large", large)):
        for test in ("wilcoxon", "nemenyi"):
            pairs = ranking.friedman(scores(means), 0.05, test)["pairs"].set_index(["a", "b"])
            verdicts[name, test] = bool(pairs.loc[("a0", "a1"), "differ"])
    print(f"\na0 vs a1 differ? {verdicts}")
    assert verdicts["small", "nemenyi"] != verdicts["large", "nemenyi"]
    w_small, w_large = (
        ranking.friedman(scores(m), 0.05, "wilcoxon")["pairs"].set_index(["a", "b"]).loc[("a0", "a1"), "p"]
        for m in (small, large)
    )
    assert w_small == w_large  # the pair's own test: the same p whatever else is in the pool


def test_groups_are_the_runs_no_test_separates_and_few_recipes_cannot_separate_any():
    pairs = pd.DataFrame({"a": ["x", "x", "y"], "b": ["y", "z", "z"], "differ": [False, True, False]})
    assert posthoc.groups(["x", "y", "z"], pairs) == [["x", "y"], ["y", "z"]]
    assert posthoc.smallest_p(4) == 0.125 and posthoc.smallest_p(6) == pytest.approx(0.03125)
    means = np.arange(20.0).reshape(4, 5)  # a perfect ordering over 4 recipes: Wilcoxon's p cannot go below 0.125
    assert not ranking.friedman(scores(means), 0.05, "wilcoxon")["pairs"]["differ"].any()


@pytest.mark.rates
@pytest.mark.parametrize("test", ["wilcoxon", "nemenyi"])
def test_the_documented_family_wise_rates(test):
    rate = family_wise(test, 1000, seed=7)
    print(f"\n{test}: {rate:.1%} (1,000 suites)")
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 1000)
