"""visionbench.stats.sequential: the group-sequential decision rule, tested by simulation (docs/report.md, "Sequential seeds")."""

import math

import numpy as np
import pytest
from scipy import stats

from visionbench.stats import sequential

N_SWEEPS = 20_000
LOOKS = (3, 5, 7, 10)


def test_spending_function_is_obrien_fleming_type():
    t = np.array([0.3, 0.5, 0.7, 1.0])
    expected = 2 - 2 * stats.norm.cdf(stats.norm.ppf(0.975) / np.sqrt(t))
    assert np.allclose(sequential.spent_alpha(t), expected)
    assert sequential.spent_alpha(1.0) == pytest.approx(0.05)
    levels = sequential.nominal_alphas(LOOKS)
    assert levels.sum() == pytest.approx(0.05) and np.all(np.diff(levels) > 0)


@pytest.mark.parametrize("margin", [None, 1.0])
def test_type_one_error_at_most_alpha(margin):
    res = sequential.simulate(0.0, n_sweeps=N_SWEEPS, looks=LOOKS, margin=margin, seed=1)
    mc = 3 * math.sqrt(0.05 * 0.95 / N_SWEEPS)
    assert res["p_reject"] <= 0.05 + mc


@pytest.mark.parametrize("d", [1.5, 2.0])
def test_stops_early_under_an_effect(d):
    res = sequential.simulate(d, n_sweeps=N_SWEEPS, looks=LOOKS, seed=2)
    assert res["mean_seeds"] < LOOKS[-1] - 1
    assert res["p_better"] > 0.8


def test_decisions():
    rng = np.random.default_rng(0)
    base = rng.standard_normal(10)
    assert sequential.decide(base[:5] + 10, base[:5], looks=LOOKS) == "better"
    assert sequential.decide(base[:5] - 10, base[:5], looks=LOOKS) == "worse"
    assert sequential.decide(base[:5] - 10, base[:5], looks=LOOKS, higher_is_better=False) == "better"
    assert sequential.decide(base[:3] + 0.1, base[:3], looks=LOOKS) == "continue"
    assert sequential.decide(base + 0.1, base[::-1], looks=LOOKS) == "inconclusive"
    b = rng.standard_normal(10) * 0.01
    assert sequential.decide(b[:5], b[5:], looks=LOOKS, margin=1.0) == "equivalent"
    with pytest.raises(ValueError, match="looks"):
        sequential.decide(base[:4], base[:4], looks=LOOKS)
