"""The noise section's guards on its own assumptions (stats/noise.py), by simulation: the test-set part's jackknife
interval over runs at 95 % when runs differ in overall quality (where an interval over the images as independent
draws falls far short), deterministic, with its edge cases; and the outlier flag that names the arms whose seeds
are not normal enough for the χ² intervals — its false flags under normal seeds, its power, and the committed
hermite runs it names.

`pytest -s tests/test_noise_assumptions.py` prints the measured figures (docs/report.md, "Validated by simulation")."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit, logit

from visionbench.stats import noise as nz

from .test_noise import DESIGNS, report_rates


# ---- the test-set part's interval: runs, not images, are the sampled units ---------------------------------
def quality_runs(rng, q_logit: np.ndarray, n: int, quality: float) -> np.ndarray:
    """(n × N) correctness of runs on a fixed test set (image i right with logit q_logit_i) whose overall quality
    differs by a logit shift u_r ~ N(0, quality): every image's chance moves with the run drawn."""
    return rng.random((n, q_logit.size)) < expit(q_logit[None, :] + rng.normal(0, quality, (n, 1)))


def true_tau(q_logit: np.ndarray, quality: float) -> float:
    """Σ_i q_i(1 − q_i)/N² with q_i the image's chance over the runs (Gauss–Hermite over u), fractions²."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(40)
    q = expit(q_logit[:, None] + quality * nodes[None, :]) @ (weights / weights.sum())
    return float(np.sum(q * (1 - q)) / q.size**2)


def normal_over_images(correct: np.ndarray) -> tuple[float, float]:
    """The interval that treats the images as independent draws, τ̂² ± 1.96·sd_i(v_i)/(N√N): for comparison."""
    v = correct.astype(float).var(axis=0, ddof=1)
    n_img = v.size
    half = 1.96 * v.std(ddof=1) / (n_img * np.sqrt(n_img))
    return v.sum() / n_img**2 - half, v.sum() / n_img**2 + half


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_test_set_interval_covers_95_percent_when_runs_differ_in_quality(n):
    rng = np.random.default_rng(50 + n)
    q_logit = logit(np.clip(rng.beta(4, 1, 360), 1e-4, 1 - 1e-4))  # digits' 360 test images, ≈ 80 % right
    figures = {}
    for name, quality in (("images flip independently", 0.0), ("runs differ in quality", 0.5)):
        truth = true_tau(q_logit, quality)
        runs = [quality_runs(rng, q_logit, n, quality) for _ in range(1000)]
        parts = [nz.test_set_part(c) for c in runs]
        jackknife = 100 * np.mean([p["low"] <= truth <= p["high"] for p in parts])
        images = 100 * np.mean([lo <= truth <= hi for lo, hi in map(normal_over_images, runs)])
        assert 92 <= jackknife <= 99, (name, jackknife)
        if quality:  # what treating the images as independent misses: the runs drawn move every image together
            assert images < 85, images
        figures[name] = f"jackknife {jackknife:.1f} %, normal over images {images:.1f} %"
    report_rates("test-set part's 95 % interval, 360 images", n, figures)


def test_the_test_set_interval_is_deterministic_and_has_edge_cases():
    rng = np.random.default_rng(5)
    c = quality_runs(rng, logit(np.clip(rng.beta(4, 1, 500), 1e-4, 1 - 1e-4)), 5, 0.5)
    part = nz.test_set_part(c)
    assert nz.test_set_part(c) == part and nz.test_set_part(c[::-1]) == pytest.approx(part)  # no draw, no run order
    assert 0 < part["low"] < part["var"] < part["high"]
    two = nz.test_set_part(c[:2])  # one pair of runs: an estimate, no interval
    assert two["var"] > 0 and np.isnan(two["low"]) and np.isnan(two["high"])
    assert nz.test_set_part(np.stack([c[0]] * 3)) == {"var": 0.0, "low": 0.0, "high": 0.0}  # identical runs
    tied = nz.test_set_part(np.stack([c[0], c[0], c[1]]))  # without run 2 the others agree: linear scale
    assert tied["var"] > 0 and tied["low"] == 0.0 and tied["high"] > tied["var"]


# ---- the outlier flag: the χ² intervals assume normal seeds ----------------------------------------------
HERMITE = {"all": [94.44, 97.22, 78.33, 95.56, 95.83], "order": [94.17, 93.61, 76.11, 92.78, 93.33]}  # results/noise
RELU = {
    "all": [96.67, 98.61, 96.11, 97.5, 97.22],
    "order": [97.5, 95.0, 98.33, 98.33, 97.5],
    "aug": [95.28, 95.28, 95.28, 96.39, 95.83],
}  # the same design's relu: three seeds tied on 360 images


def flag_rate(arms: np.ndarray, resolution: float = 0.0) -> float:
    return 100 * np.mean([bool(nz.outlier_runs(x, resolution=resolution)) for x in arms])


@pytest.mark.parametrize("n", [5, 10])
def test_the_outlier_flag_names_few_normal_arms_and_most_hermite_like_ones(n):
    rng = np.random.default_rng(70 + n)
    normal = rng.normal(0, 1, (DESIGNS * 2, n))
    figures = {"false flags, normal seeds": flag_rate(normal)}
    for step in (0.5, 1.0):  # a coarse metric (accuracy on few images): ties, the step passed as the resolution
        figures[f"false flags, values on a grid of {step} sd"] = flag_rate(np.round(normal / step) * step, step)
    assert all(rate <= nz.OUTLIER_ALPHA * 100 + 0.5 for rate in figures.values()), figures  # ≤ 1.5 %: under 5 %
    for far in (6, 10, 15):  # one run `far` sds below the others (hermite's seed 2: 15 and 30 of them)
        planted = rng.normal(0, 1, (DESIGNS, n))
        planted[:, 0] -= far
        figures[f"flags a run {far} sd off"] = flag_rate(planted)
    assert figures["flags a run 15 sd off"] >= (75 if n == 5 else 99), figures
    report_rates("outlier flag per arm, α = 1 %", n, {k: f"{v:.1f} %" for k, v in figures.items()})


def test_the_outlier_flag_names_hermites_runs_and_not_relus():
    step = 100 / 360  # one image of digits' test set, in points
    assert all(nz.outlier_runs(v, resolution=step) == [2] for v in HERMITE.values())
    assert not any(nz.outlier_runs(v, resolution=step) for v in RELU.values())
    assert nz.outlier_runs([90.0, 91.0, 92.0]) == []  # 3 runs: not tested
    assert nz.outlier_runs([95.0] * 4 + [50.0], resolution=step) == [4]  # the others tied: the step is their spread
    assert nz.outlier_runs([95.0] * 4 + [95.0 + step], resolution=step) == []  # one image apart: no outlier
