"""The expected-max curve's own uncertainty and the lead rule (stats/expected_max_band.py; docs/tuning.md, "The
expected-maximum curve"), by simulation through the functions the tuning report calls: how often the 95 %
bootstrap band covers the true E[max of n], and how often a lead is claimed between two activations whose trials
come from the same distribution. `pytest -s` prints the rates; the slow tests run enough searches for the docs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate
from scipy import stats as sps

from visionbench.stats import expected_max_band as band


def true_max(n: int) -> float:
    """E[max of n] of the standard normal, by integration."""
    return integrate.quad(lambda x: x * n * sps.norm.pdf(x) * sps.norm.cdf(x) ** (n - 1), -12, 12)[0]


def coverage(searches: int, b: int = 16, ns=(1, 4, 8, 16), resamples: int = 500, seed: int = 0) -> dict[int, float]:
    rng = np.random.default_rng(seed)
    hits = dict.fromkeys(ns, 0)
    truth = {n: true_max(n) for n in ns}
    for k in range(searches):
        draws = band.bootstrap({"x": rng.normal(size=b)}, resamples=resamples, seed=k)["x"]
        s = band.summary(draws)
        for n in ns:
            hits[n] += s["band_low"][n - 1] <= truth[n] <= s["band_high"][n - 1]
    return {n: h / searches for n, h in hits.items()}


def false_leads(searches: int, b: int = 16, resamples: int = 500, seed: int = 1) -> tuple[float, float]:
    """(P(some lead claimed at some n), P("leads at every n")) for two activations on one response surface: trial i
    is one configuration for both (its quality shared), each trial's score adds its own noise."""
    rng = np.random.default_rng(seed)
    some = every = 0
    for k in range(searches):
        quality = rng.normal(0, 1.0, b)
        a, c = quality + rng.normal(0, 0.5, b), quality + rng.normal(0, 0.5, b)
        signs = band.lead_signs(a, c, permutations=resamples, seed=k)
        some += bool(np.isin(signs, (1, -1)).any())
        every += bool((signs == 1).all() or (signs == -1).all())
    return some / searches, every / searches


def test_the_band_covers_the_true_expected_max_except_near_n_equal_b():
    rates = coverage(120)
    print(f"\ncoverage of the 95 % band, B = 16, 120 searches: {rates}")
    assert rates[1] >= 0.85 and rates[4] >= 0.8  # the mean and small n: near nominal
    assert rates[16] < rates[1]  # the best of all B: a bootstrap of a maximum cannot reach above the best seen


def test_a_lead_at_every_n_is_rarely_claimed_when_the_activations_do_not_differ():
    some, every = false_leads(150)
    print(f"\nsame distribution, B = 16: some lead claimed {some:.1%}, 'leads at every n' {every:.1%}")
    assert some <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 150)  # max-T: a lead anywhere at most α of the time


def test_the_band_is_reproducible_and_paired():
    x, y = np.arange(16.0), np.arange(16.0) + 0.5
    one, two = band.bootstrap({"x": x, "y": y}), band.bootstrap({"x": x, "y": y})
    assert np.array_equal(one["x"], two["x"])  # fixed seed: the same report, byte for byte
    assert np.allclose(one["y"] - one["x"], 0.5)  # resampled together: a constant difference stays constant


def test_ties_and_leads_in_words():
    assert band.lead_sentence(np.array([1, 1, 0, 2]), "x", "y") == (
        "from n = 1 to 2 x leads y; at n = 3 x and y are not distinguishable; at n = 4 x and y are tied exactly"
    )
    assert (
        band.lead_sentence(np.array([0, 0]), "x", "y")
        == "x and y are not distinguishable at every n from 1 to 2 trials"
    )
    assert (band.lead_signs(np.full(8, 98.61), np.full(8, 98.61)) == 2).all()  # equal estimates: a tie, never a lead
    rng = np.random.default_rng(2)
    quality = rng.normal(0, 1, 16)
    better = band.lead_signs(quality + 3.0, quality + rng.normal(0, 0.1, 16))
    assert (better == 1).all()  # a clear edge on every configuration: a lead at every n


def test_diverged_trials_never_win_in_a_resample():
    scores = np.array([np.nan, 90.0, 91.0, np.nan, 92.0, 93.0])
    draws = band.bootstrap({"x": scores}, resamples=200)["x"]
    assert np.nanmax(draws) <= 93.0 and np.nanmin(draws[:, -1]) >= 90.0


@pytest.mark.slow
def test_the_documented_rates():
    rates = coverage(1000, resamples=1000, seed=5)
    some, every = false_leads(1000, resamples=1000, seed=6)
    print(f"\ncoverage {rates}; same distribution: some lead {some:.1%}, leads at every n {every:.1%}")
    assert rates[1] >= 0.9 and some <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 1000)
