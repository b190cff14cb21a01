"""The uncertainty of an expected-maximum curve (stats/expected_max.py), and which of two curves leads beyond it.

    >>> from visionbench.stats import expected_max_band as band
    >>> draws = band.bootstrap({"relu": relu_scores, "rational": rational_scores})   # act → (R, B) estimates
    >>> band.summary(draws["relu"])                     # per n: bootstrap sd, 95 % percentile band
    >>> band.lead_sentence(band.lead_signs(rational_scores, relu_scores), "rational", "relu")   # paired, max-T

A curve is estimated from ONE search of B trials; another search would give another curve. The bootstrap over
trials (resample the B trials with replacement, recompute the curve; Efron & Tibshirani 1993) measures that: its sd
is the "±" of the estimate, its 2.5–97.5 % percentiles the band. (The spread of the best of n draws, what Dodge et
al. shade as ±1 sd, is another thing: at n = B it shrinks to nothing while the estimate's own uncertainty does not.)
Near n = B the band
covers the true E[max of n] less often than its 95 % (a resample of B trials cannot reach above the best one seen):
92 % at n = 1, 84 % at n = 4, 70 % at n = 8, 48 % at n = 16 of B = 16 (normal scores; tests/test_expected_max_band.py).

Which activation leads is a test, not a comparison of bands: activations tuned on the same configurations (trial i
drawn once for all) make paired trials, and swapping a trial's two scores at random gives the exact distribution of
the curves' difference when the activations do not differ (`lead_signs`, a max-T permutation test, simultaneous
over n). Elsewhere the two are "not distinguishable", and equal estimates are an exact tie. Resamples and
permutations are drawn from fixed seeds: a report is reproducible to the byte.
"""

from __future__ import annotations

import numpy as np

from .expected_max import weights

RESAMPLES = 2000
SEED = 20_191  # Dodge et al.'s year, fixed: the same trials give the same band, byte for byte
LEVEL = 0.95


def _curves(values: np.ndarray, method: str) -> np.ndarray:
    """(R, B) resampled scores (NaN: a diverged trial, never the best) → (R, B) curves for n = 1..B; NaN where all
    of n trials diverged."""
    r, b = values.shape
    ordered = np.sort(np.where(np.isnan(values), -np.inf, values), axis=1)
    finite = np.isfinite(ordered)
    w = weights(b, b, method)  # (n, B)
    mass = finite.astype(float) @ w.T
    total = np.where(finite, ordered, 0.0) @ w.T
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(mass > 0, total / mass, np.nan)


def bootstrap(
    scores: dict[str, np.ndarray],
    *,
    method: str = "unbiased",
    resamples: int = RESAMPLES,
    seed: int = SEED,
    higher_is_better: bool = True,
) -> dict[str, np.ndarray]:
    """Per group, the (resamples, B) bootstrap curves of its trial scores (NaN: diverged). Groups with the same B
    are resampled with the same trial indices (paired: trial i is one configuration for all)."""
    rng = np.random.default_rng(seed)
    by_size: dict[int, np.ndarray] = {}
    out = {}
    for name, values in scores.items():
        v = np.asarray(values, float).ravel()
        v = v if higher_is_better else -v
        if v.size not in by_size:
            by_size[v.size] = rng.integers(0, v.size, (resamples, v.size))
        curves = _curves(v[by_size[v.size]], method)
        out[name] = curves if higher_is_better else -curves
    return out


def summary(draws: np.ndarray, level: float = LEVEL) -> dict[str, np.ndarray]:
    """Per n: `boot_sd` (the estimate's bootstrap sd) and the percentile band `band_low`, `band_high`."""
    tail = (1 - level) / 2 * 100
    with np.errstate(invalid="ignore"):
        return {
            "boot_sd": np.nanstd(draws, axis=0, ddof=1),
            "band_low": np.nanpercentile(draws, tail, axis=0),
            "band_high": np.nanpercentile(draws, 100 - tail, axis=0),
        }


def lead_signs(
    scores_a,
    scores_b,
    *,
    higher_is_better: bool = True,
    method: str = "unbiased",
    permutations: int = RESAMPLES,
    seed: int = SEED,
    alpha: float = 1 - LEVEL,
) -> np.ndarray:
    """Per n (1..B): +1 where a leads b beyond noise, −1 where b leads, 0 where they are not distinguishable, 2 where
    the two estimates are exactly equal (a tie). `scores_a[i]` and `scores_b[i]` are trial i of both activations,
    one configuration: under "no difference" the two scores of a trial are exchangeable, so swapping them at random
    (`permutations` sign flips, fixed seed) gives the exact null distribution of the difference of the curves. A
    lead is claimed at n where |difference| / its permutation sd exceeds the 1 − α quantile of that ratio's
    maximum over all n (max-T: simultaneous over n), so when the activations do not differ a lead is claimed
    anywhere at most α of the time. ValueError for trial lists of different lengths (not paired)."""
    a, b = np.asarray(scores_a, float).ravel(), np.asarray(scores_b, float).ravel()
    if a.size != b.size:
        raise ValueError(f"lead_signs: paired trials needed, got {a.size} and {b.size}")
    sign = 1.0 if higher_is_better else -1.0
    a, b = sign * a, sign * b
    point = _curves(a[None, :], method)[0] - _curves(b[None, :], method)[0]
    swap = np.random.default_rng(seed).random((permutations, a.size)) < 0.5
    null = _curves(np.where(swap, b, a), method) - _curves(np.where(swap, a, b), method)
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.nanstd(null, axis=0, ddof=1)
        scale = np.where(scale > 0, scale, np.inf)
        threshold = np.nanquantile(np.nanmax(np.abs(null) / scale, axis=1), 1 - alpha)
        beyond = np.abs(point) / scale > threshold
    signs = np.where(beyond, np.sign(point), 0).astype(int)
    return np.where(point == 0, 2, signs)


def lead_sentence(signs: np.ndarray, name_a: str, name_b: str) -> str:
    """The runs of `lead_signs` in words: "acon_c leads relu from n = 1 to 5 trials; from n = 6 to 15 not
    distinguishable; at n = 16 tied exactly"."""
    runs: list[list[int]] = []
    for n, s in enumerate(signs, start=1):
        if runs and runs[-1][2] == s:
            runs[-1][1] = n
        else:
            runs.append([n, n, int(s)])
    words = {
        1: f"{name_a} leads {name_b}",
        -1: f"{name_b} leads {name_a}",
        0: f"{name_a} and {name_b} are not distinguishable",
        2: f"{name_a} and {name_b} are tied exactly",
    }
    if len(runs) == 1:
        first, last, s = runs[0]
        return f"{words[s]} at every n from {first} to {last} trials" if first != last else f"{words[s]} at n = {first}"
    parts = []
    for first, last, s in runs:
        span = f"from n = {first} to {last}" if first != last else f"at n = {first}"
        parts.append(f"{span} {words[s]}")
    return "; ".join(parts)
