"""The expected-maximum curve (visionbench/stats/expected_max.py; docs/tuning.md, "The expected-maximum curve"):
both estimators against brute-force enumeration, ties, the ends of the curve, NaN trials, losses, the unbiasedness
of Tang et al.'s estimator (and the low bias of Dodge et al.'s) in simulation against numerical integration, the
tidy curve, crossings and their sentence, refusals.

The simulation's figures in docs/tuning.md come from `simulate` here:
    python -c "from tests.test_expected_max import bias_table; print(bias_table())"
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, stats

from visionbench.stats import expected_max as em


def brute_with_replacement(values, n, higher_is_better=True):
    """Mean and variance of the best of n draws with replacement, every one of the B^n ordered draws enumerated;
    NaN is never the best and draws that are all NaN are left out (returned: their share)."""
    values = np.asarray(values, float)
    pick = max if higher_is_better else min
    bests, failed, total = [], 0, 0
    for draw in itertools.product(range(values.size), repeat=n):
        total += 1
        finite = [values[j] for j in draw if not math.isnan(values[j])]
        if finite:
            bests.append(pick(finite))
        else:
            failed += 1
    bests = np.array(bests)
    return bests.mean(), bests.var(), failed / total


def brute_subsets(values, n, higher_is_better=True):
    """The same over all n-subsets of the B trials (draws without replacement)."""
    values = np.asarray(values, float)
    pick = max if higher_is_better else min
    bests, failed, total = [], 0, 0
    for subset in itertools.combinations(range(values.size), n):
        total += 1
        finite = [values[j] for j in subset if not math.isnan(values[j])]
        if finite:
            bests.append(pick(finite))
        else:
            failed += 1
    bests = np.array(bests)
    return bests.mean(), bests.var(), failed / total


BRUTE = {"dodge": brute_with_replacement, "unbiased": brute_subsets}


def small_samples():
    """Continuous values and values with ties (integers out of 3), B = 2..5."""
    rng = np.random.default_rng(20191103)
    for B in range(2, 6):
        yield rng.normal(90.0, 2.0, B)
        yield rng.integers(0, 3, B).astype(float)
    yield np.array([1.0, 1.0, 1.0, 2.0, 2.0])
    yield np.array([0.5, 0.5, 0.5])


@pytest.mark.parametrize("method", ["dodge", "unbiased"])
def test_matches_brute_force_enumeration(method):
    for values in small_samples():
        B = values.size
        r = em.expected_max(values, method=method)
        assert r.B == B and list(r.n) == list(range(1, B + 1))
        for n in range(1, min(B, 4) + 1):
            mean, var, _ = BRUTE[method](values, n)
            assert r.mean[n - 1] == pytest.approx(mean, abs=1e-12, rel=0)
            assert r.var[n - 1] == pytest.approx(var, abs=1e-12, rel=0)
            assert r.sd[n - 1] == pytest.approx(math.sqrt(var), abs=1e-7)


@pytest.mark.parametrize("method", ["dodge", "unbiased"])
def test_weights_are_probabilities(method):
    for B in (2, 5, 16, 200):
        w = em.weights(B, B, method)
        assert w.shape == (B, B)
        assert (w >= 0).all()
        np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12)


@pytest.mark.parametrize("method", ["dodge", "unbiased"])
def test_ties_are_exact(method):
    # the order among equal values does not matter, and a run of ties carries the probability that the max is it
    values = np.array([3.0, 1.0, 3.0, 2.0, 1.0])
    r = em.expected_max(values, method=method)
    for perm in itertools.permutations(values):
        np.testing.assert_allclose(em.expected_max(perm, method=method).mean, r.mean, rtol=0, atol=1e-15)
    flat = em.expected_max([7.25] * 6, method=method)
    np.testing.assert_array_equal(flat.mean, 7.25)
    np.testing.assert_array_equal(flat.var, 0.0)
    # P(max of 2 draws = 3) = 1 − (3/5)², P(= 2) = (3/5)² − (2/5)², P(= 1) = (2/5)²
    if method == "dodge":
        expected = 3 * (1 - 0.36) + 2 * (0.36 - 0.16) + 1 * 0.16
        assert r.mean[1] == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize("method", ["dodge", "unbiased"])
def test_ends_of_the_curve(method):
    rng = np.random.default_rng(7)
    values = rng.normal(size=9)
    r = em.expected_max(values, method=method)
    # n = 1: the mean, and the spread of one trial (the population sd of the B scores)
    assert r.mean[0] == pytest.approx(values.mean(), abs=1e-14)
    assert r.var[0] == pytest.approx(values.var(), abs=1e-14)
    assert (np.diff(r.mean) >= -1e-15).all()  # more trials never lower the expected best
    if method == "dodge":
        assert r.mean[-1] < values.max()  # n = B draws with replacement miss the best with probability (1−1/B)^B
    else:
        assert r.mean[-1] == values.max()  # all B trials: exactly the best seen, with no spread
        assert r.var[-1] == 0.0
    n3 = em.expected_max(values, 3, method=method)
    np.testing.assert_array_equal(n3.n, [1, 2, 3])
    np.testing.assert_allclose(n3.mean, r.mean[:3], rtol=0, atol=1e-15)


@pytest.mark.parametrize("method", ["dodge", "unbiased"])
def test_losses_give_the_expected_minimum(method):
    values = np.array([0.42, 0.31, 0.55, 0.31, 0.6])
    r = em.expected_max(values, method=method, higher_is_better=False)
    neg = em.expected_max(-values, method=method)
    np.testing.assert_allclose(r.mean, -neg.mean, atol=1e-15)
    np.testing.assert_allclose(r.var, neg.var, atol=1e-15)
    for n in range(1, 5):
        mean, var, _ = BRUTE[method](values, n, higher_is_better=False)
        assert r.mean[n - 1] == pytest.approx(mean, abs=1e-12)
        assert r.var[n - 1] == pytest.approx(var, abs=1e-12)
    assert (np.diff(r.mean) <= 1e-15).all()


@pytest.mark.parametrize("method", ["dodge", "unbiased"])
@pytest.mark.parametrize("higher", [True, False])
def test_diverged_trials_count_and_are_never_the_best(method, higher):
    values = np.array([0.9, np.nan, 0.7, np.nan, 0.95])
    r = em.expected_max(values, method=method, higher_is_better=higher)  # nan="worst"
    assert r.B == 5 and r.n_failed == 2
    for n in range(1, 5):
        mean, var, failed = BRUTE[method](values, n, higher_is_better=higher)
        assert r.mean[n - 1] == pytest.approx(mean, abs=1e-12)  # given at least one finished
        assert r.var[n - 1] == pytest.approx(var, abs=1e-12)
        assert r.p_all_failed[n - 1] == pytest.approx(failed, abs=1e-15)
    dropped = em.expected_max(values, method=method, higher_is_better=higher, nan="drop")
    clean = em.expected_max(values[~np.isnan(values)], method=method, higher_is_better=higher)
    assert dropped.B == 3 and dropped.n_failed == 2
    np.testing.assert_array_equal(dropped.mean, clean.mean)
    np.testing.assert_array_equal(dropped.p_all_failed, 0.0)
    with pytest.raises(ValueError, match="2 of 5 scores are NaN"):
        em.expected_max(values, nan="raise")


def test_refusals():
    with pytest.raises(ValueError, match="none given"):
        em.expected_max([])
    with pytest.raises(ValueError, match="at least 2 trials, got B = 1"):
        em.expected_max([0.9])
    with pytest.raises(ValueError, match="at least 2 trials, got B = 1"):
        em.expected_max([0.9, np.nan], nan="drop")
    with pytest.raises(ValueError, match="B = 3"):
        em.expected_max([0.1, 0.2, 0.3], n_max=4)
    with pytest.raises(ValueError, match="at least 1"):
        em.expected_max([0.1, 0.2, 0.3], n_max=0)
    with pytest.raises(ValueError, match="all 2 scores are NaN"):
        em.expected_max([np.nan, np.nan])
    with pytest.raises(ValueError, match="inf"):
        em.expected_max([0.1, np.inf])
    with pytest.raises(ValueError, match="method"):
        em.expected_max([0.1, 0.2], method="bootstrap")
    with pytest.raises(ValueError, match="nan must be"):
        em.expected_max([0.1, 0.2], nan="zero")
    with pytest.raises(ValueError, match="B = 4"):
        em.weights(4, 5)


# --- unbiasedness in simulation ----------------------------------------------------------------------------

B_SIM, REPS, SEED = 16, 4000, 2020
POPULATIONS = {"normal": stats.norm(), "lognormal": stats.lognorm(s=1.0)}


@functools.cache
def true_expected_max(name: str, n: int) -> float:
    """E[max of n] = ∫ x n F(x)^(n−1) f(x) dx, by quadrature."""
    dist = POPULATIONS[name]
    lo, hi = dist.support()
    value, _ = integrate.quad(lambda x: x * n * dist.cdf(x) ** (n - 1) * dist.pdf(x), lo, hi, limit=200)
    return value


@functools.cache
def simulate(name: str, B: int = B_SIM, reps: int = REPS, seed: int = SEED):
    """{method: (mean over reps of the estimate at n = 1..B, its Monte-Carlo standard error, the estimate's sd over
    reps)}, and the truth at n = 1..B."""
    rng = np.random.default_rng(seed)
    samples = POPULATIONS[name].rvs(size=(reps, B), random_state=rng)
    out = {}
    for method in em.METHODS:
        estimates = np.array([em.expected_max(s, method=method).mean for s in samples])
        sd = estimates.std(axis=0, ddof=1)
        out[method] = (estimates.mean(axis=0), sd / math.sqrt(reps), sd)
    truth = np.array([true_expected_max(name, n) for n in range(1, B + 1)])
    return out, truth


def bias_table(ns=(1, 4, 8, 16)) -> pd.DataFrame:
    """The figures of docs/tuning.md: per population and n, the truth and, per estimator, its bias (with the Monte-Carlo
    se of that bias), its sd over samples of B trials, and its root-mean-square error."""
    rows = []
    for name in POPULATIONS:
        out, truth = simulate(name)
        for n in ns:
            row = {"population": name, "n": n, "true E[max]": truth[n - 1]}
            for method, (mean, se, sd) in out.items():
                bias = mean[n - 1] - truth[n - 1]
                row[f"{method} bias"] = bias
                row[f"{method} bias se"] = se[n - 1]
                row[f"{method} sd"] = sd[n - 1]
                row[f"{method} rmse"] = math.sqrt(bias**2 + sd[n - 1] ** 2)
            rows.append(row)
    return pd.DataFrame(rows)


def test_true_expected_max_by_quadrature():
    assert true_expected_max("normal", 1) == pytest.approx(0.0, abs=1e-10)
    assert true_expected_max("normal", 2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-10)  # E max of 2 N(0,1)
    assert true_expected_max("lognormal", 1) == pytest.approx(math.exp(0.5), abs=1e-8)


@pytest.mark.parametrize("name", list(POPULATIONS))
def test_unbiased_estimator_is_unbiased(name):
    out, truth = simulate(name)
    mean, se, _ = out["unbiased"]
    z = (mean - truth) / se
    assert np.abs(z).max() < 4, z


def test_dodge_estimator_is_biased_low_at_n_equal_B():
    # Tang et al. 2020: the plug-in (with-replacement) estimate falls short of E[max of n] as n nears B
    out, truth = simulate("normal")
    mean, se, _ = out["dodge"]
    assert mean[0] == pytest.approx(truth[0], abs=4 * se[0])  # n = 1: the sample mean, unbiased
    assert mean[-1] < truth[-1] - 4 * se[-1]
    bias = mean - truth
    assert (np.diff(bias) < 0).all()  # the shortfall grows with n
    # the price of unbiasedness (Dodge et al. 2021): the unbiased estimate varies more from one search to the next
    assert out["unbiased"][2][-1] > out["dodge"][2][-1]


# --- the tidy curve, crossings, the sentence -----------------------------------------------------------------

RATIONAL = [0.905, 0.91, 0.915, 0.92, 0.908, 0.912, 0.918, 0.91]  # steady
RELU = [0.80, 0.85, 0.94, 0.87, 0.95, 0.83, 0.86, 0.96]  # erratic, with the best trials


def trials_frame():
    rows = [{"act": "rational", "val": v, "train_time_s": 20.0 + i} for i, v in enumerate(RATIONAL)]
    rows += [{"act": "relu", "val": v, "train_time_s": 10.0} for v in RELU]
    rows += [{"act": "relu", "val": np.nan, "train_time_s": 4.0}]  # a diverged trial: B = 9, cost counted
    return pd.DataFrame(rows)


def test_expected_max_curve():
    trials = trials_frame()
    curve = em.expected_max_curve(trials, score="val", by="act", cost="train_time_s")
    assert list(curve.columns) == ["act", *em.CURVE_COLUMNS]
    assert curve.groupby("act")["n"].max().to_dict() == {"rational": 8, "relu": 9}
    relu = curve[curve.act == "relu"]
    r = em.expected_max(trials.loc[trials.act == "relu", "val"])
    np.testing.assert_array_equal(relu.expected_max, r.mean)
    np.testing.assert_array_equal(relu.sd, r.sd)
    assert (relu.n_failed == 1).all() and (relu.B == 9).all()
    np.testing.assert_allclose(relu.expected_cost, relu.n * (8 * 10.0 + 4.0) / 9)
    rational = curve[curve.act == "rational"]
    np.testing.assert_allclose(rational.expected_cost, rational.n * 23.5)
    dropped = em.expected_max_curve(trials, nan="drop")
    np.testing.assert_allclose(dropped[dropped.act == "relu"].expected_cost, np.arange(1, 9) * 10.0)
    assert "expected_cost" not in em.expected_max_curve(trials, cost=None).columns
    single = em.expected_max_curve(trials[trials.act == "rational"], by=None, n_max=4)
    assert list(single.columns) == em.CURVE_COLUMNS and len(single) == 4
    with pytest.raises(ValueError, match=r"B = 8: .* \(act = 'rational'\)"):
        em.expected_max_curve(trials, n_max=9)
    with pytest.raises(ValueError, match="no column"):
        em.expected_max_curve(trials, score="val_top1")


def test_crossing_and_sentence():
    curve = em.expected_max_curve(trials_frame(), nan="drop")
    rational, relu = curve[curve.act == "rational"], curve[curve.act == "relu"]
    ahead = rational.expected_max.to_numpy() > relu.expected_max.to_numpy()
    first_swap = int(np.argmin(ahead)) + 1
    assert ahead[0] and not ahead.all() and not ahead[first_swap - 1 :].any()
    assert em.crossing(rational, relu) == first_swap == em.crossing(relu, rational)
    sentence = em.leads(curve, "rational", "relu")
    assert sentence == f"rational leads relu from n = 1 to {first_swap - 1} trials; from n = {first_swap} relu leads"
    # the same curves as arrays and as ExpectedMax results; a loss reverses who leads
    a, b = em.expected_max(RATIONAL), em.expected_max(RELU)
    assert em.crossing(a, b) == em.crossing(a.mean, b.mean) == first_swap
    assert em.crossing(a.mean, b.mean, higher_is_better=False) == first_swap
    # the plug-in's low bias is larger for the erratic arm: the unbiased curves cross earlier (docs/tuning.md)
    assert first_swap == 3
    unbiased = em.crossing(em.expected_max(RATIONAL, method="unbiased"), em.expected_max(RELU, method="unbiased"))
    assert unbiased == 2


def test_crossing_edge_cases():
    assert em.crossing([1, 2, 3], [0, 1, 2]) is None
    assert em.crossing([1, 2, 3], [1, 2, 3]) is None
    assert em.crossing([1, 2, 3, 4], [1, 2, 3.5, 3]) == 4  # ties first: the order is set where they first differ
    assert em.crossing([2, 2, 3], [1, 2, 4]) == 3  # a tie at n = 2 is not a swap
    assert em.crossing([1, 2, 3], [0, 1, 2, 9]) is None  # compared where both curves have n
    assert em.lead_sentence([1, 2, 3], [0, 1, 2], "x", "y") == "x leads y at every n from 1 to 3 trials"
    assert em.lead_sentence([1, 2], [1, 2], "x", "y") == "x and y are tied at every n from 1 to 2 trials"
    assert (
        em.lead_sentence([1, 2, 2, 5, 6], [0, 3, 2, 4, 7], "x", "y")
        == "x leads y at n = 1; at n = 2 y leads; at n = 3 they are tied; at n = 4 x leads; at n = 5 y leads"
    )
    with pytest.raises(ValueError, match="share no n"):
        em.crossing(pd.Series([1.0], index=[1]), pd.Series([1.0], index=[2]))
