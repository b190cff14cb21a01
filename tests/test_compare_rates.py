"""The error rates of `visionbench compare`'s verdicts, by simulation (stats/reproduction.py; docs/reproducing.md,
"How often compare is wrong"): a verdict is a test, and these are its sizes and powers.

Each simulated compare has four activations with their own means and seed sds (the digits default's); B is drawn
from A's distribution, or shifted by a number of seed sds, and every activation goes through the code `compare`
runs: `compare_runs` per activation, then `family_verdicts` (Holm over the activations). `pytest -s` prints the
rates; the slow test runs enough compares for the figures in the docs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate
from scipy import stats as sps

from visionbench.stats import reproduction

ACTS = {"relu": (98.80, 0.64), "gelu": (98.43, 0.70), "hermite": (96.94, 0.28), "rational": (98.24, 0.32)}
ALPHA = 0.05


def simulate(compares: int, n: int, shift_sd: float = 0.0, seed: int = 0) -> dict:
    """Rates over `compares` simulated compares of the four ACTS at `n` seeds per tree, B shifted by `shift_sd`
    seed sds: `any_differs` (≥ 1 `differs` in a compare: its exit code 1), `reproduced` (per activation)."""
    rng = np.random.default_rng(seed)
    any_differs = reproduced = 0
    for _ in range(compares):
        rows = [
            reproduction.compare_runs(rng.normal(mu, sd, n), rng.normal(mu + shift_sd * sd, sd, n))
            for mu, sd in ACTS.values()
        ]
        _, verdicts = reproduction.family_verdicts(rows, [False] * len(rows), ALPHA)
        any_differs += reproduction.DIFFERS in verdicts
        reproduced += verdicts.count(reproduction.REPRODUCED)
    return {"any_differs": any_differs / compares, "reproduced": reproduced / (compares * len(ACTS))}


def bound(rate: float, trials: int) -> float:
    """`rate` plus three Monte Carlo standard errors: what a simulated rate of a test of size `rate` stays under."""
    return rate + 3 * math.sqrt(rate * (1 - rate) / trials)


@pytest.mark.parametrize("n", [3, 5, 10])
def test_a_rerun_that_changed_nothing_reads_differs_in_at_most_5_percent_of_compares(n):
    rates = simulate(300, n, seed=n)
    print(
        f"\nsame distribution, {n} seeds/tree, 300 compares of 4 acts: ≥ 1 differs {rates['any_differs']:.1%}, "
        f"reproduced per act {rates['reproduced']:.1%}"
    )
    assert rates["any_differs"] <= bound(ALPHA, 300)


def test_the_seeds_the_table_asks_for_make_reproduced_80_percent_likely_and_2_sd_off_is_not_reproduced():
    n = int(reproduction.seeds_for_equivalence(reproduction.DEFAULT_MARGIN_SD))
    assert n == 18
    same, off = simulate(150, n, seed=1), simulate(150, n, shift_sd=2.0, seed=2)
    off_small = simulate(150, 5, shift_sd=2.0, seed=3)
    print(
        f"\n{n} seeds/tree: reproduced per act {same['reproduced']:.1%} (same distribution), "
        f"{off['reproduced']:.1%} (2 sd off); 5 seeds, 2 sd off: {off_small['reproduced']:.1%}"
    )
    assert same["reproduced"] >= 0.80 - 3 * math.sqrt(0.8 * 0.2 / 600)
    assert off["reproduced"] <= bound(ALPHA, 600) and off_small["reproduced"] <= bound(ALPHA, 600)


@pytest.mark.slow
@pytest.mark.parametrize("n", [3, 5, 10, 18])
def test_the_documented_rates(n):
    """docs/reproducing.md's table: 2,000 compares (8,000 activations) per cell."""
    same, off1, off2 = (simulate(2000, n, shift, seed=10 + n) for shift in (0.0, 1.0, 2.0))
    print(
        f"\n| {n} | {same['any_differs']:.1%} | {same['reproduced']:.1%} | {off1['reproduced']:.1%} | "
        f"{off2['reproduced']:.1%} | {reproduction.equivalence_power(1.0, n):.1%} |"
    )
    assert same["any_differs"] <= bound(ALPHA, 2000)
    assert off1["reproduced"] <= bound(ALPHA, 8000) and off2["reproduced"] <= bound(ALPHA, 8000)
    assert same["reproduced"] == pytest.approx(reproduction.equivalence_power(1.0, n), abs=4 * math.sqrt(0.25 / 8000))


# ---- the exact equivalence test against an independent computation ---------------------------------------


def rejection_probability(c: float, n: int, theta: float) -> float:
    """P(|T| < c) by integration, T = (Z + δ) / √(V/ν), V ~ χ²(ν), δ = θ/√(2/n): not scipy's noncentral t."""
    df, delta = 2 * n - 2, theta / math.sqrt(2 / n)

    def given(v: float) -> float:
        half = c * math.sqrt(v / df)
        return (sps.norm.cdf(half - delta) - sps.norm.cdf(-half - delta)) * sps.chi2.pdf(v, df)

    return integrate.quad(given, 0, np.inf, limit=200)[0]


@pytest.mark.parametrize("n, k", [(3, 1.0), (5, 1.0), (18, 1.0), (5, 1.5), (10, 0.5)])
def test_the_equivalence_bound_holds_alpha_exactly_at_the_margin(n, k):
    c = reproduction.equivalence_bound(k, n, n)
    assert rejection_probability(c, n, k) == pytest.approx(ALPHA, abs=1e-6)
    assert reproduction.equivalence_power(k, n) == pytest.approx(rejection_probability(c, n, 0.0), abs=1e-6)


def test_the_equivalence_p_is_the_smallest_alpha_that_rejects():
    a, b = np.array([98.1, 98.9, 98.4, 98.6, 98.0]), np.array([98.3, 98.5, 98.2, 98.7, 98.4])
    sd = math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2)
    t = (b.mean() - a.mean()) / (sd * math.sqrt(2 / 5))
    p = reproduction.equivalence_sd_p(a, b, 1.0)
    assert p == pytest.approx(rejection_probability(abs(t), 5, 1.0), abs=1e-6)
    assert abs(t) < reproduction.equivalence_bound(1.0, 5, 5, alpha=p + 1e-6) and abs(
        t
    ) >= reproduction.equivalence_bound(1.0, 5, 5, alpha=p - 1e-6)
    assert math.isnan(reproduction.equivalence_sd_p([98.0, 98.0], [98.0, 98.0]))  # no spread: no σ


@pytest.mark.parametrize("k, seeds", [(0.5, 69), (1.0, 18), (1.5, 9), (2.0, 5)])
def test_seeds_for_equivalence_is_the_first_n_with_80_percent_power(k, seeds):
    assert reproduction.seeds_for_equivalence(k) == seeds
    assert reproduction.equivalence_power(k, seeds) >= 0.8 > reproduction.equivalence_power(k, seeds - 1)


def test_holm_keeps_one_small_p_among_four_from_reading_differs():
    rows = [{"welch_p": p, "equivalence_p": 0.5} for p in (0.03, 0.4, 0.6, 0.9)]
    holm_p, verdicts = reproduction.family_verdicts(rows, [False] * 4)
    assert holm_p[0] == pytest.approx(0.12) and verdicts == ["undecided"] * 4  # 0.03 alone would have read differs
    holm_p, verdicts = reproduction.family_verdicts(rows, [False, True, True, True])  # the identical ones: no test
    assert holm_p[0] == pytest.approx(0.03) and verdicts == ["differs", "identical", "identical", "identical"]
