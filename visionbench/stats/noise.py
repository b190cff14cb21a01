"""Where a metric's seed-to-seed noise comes from: the variance components of a noise design
(`visionbench run recipe=R noise=init,order,aug seeds=N`; docs/report.md, "Where the noise comes from").

    >>> parts = decompose({"all": v_all, "init": v_init, "order": v_order, "aug": v_aug},
    ...                   tau={arm: test_set_part(correct[arm]) for arm in ARMS})   # fractions² → scale first
    >>> parts["init"]["var"], parts["init"]["low"], parts["sum"]["var"], parts["sum"]["consistent"]
    >>> variance_ratio_test(v_act, v_base)["p"]     # one-sided F test: the act varies more than the baseline
    >>> outlier_runs(v_all, resolution=100 / n_images)   # runs too far from the others for normal seeds

A design runs, per activation, the arm `all` (ordinary runs: every source follows the seed) and one arm
per source (`init`: weight and activation init; `order`: the sampler's order; `aug`: augmentation and
dropout draws) in which only that source follows the seed and the others are held at one fixed seed
(train/seeds.py FIXED, which no run of the sweep takes). Every run scores
the same fixed test set of N images. Variances are in the metric's units squared (the report passes
accuracies in points: points²); `test_set_part` returns fractions², which the caller scales.

The decomposition, of one run's metric on that fixed test set, over seeds (s²: an arm's sample variance):

    s²_all ≈ σ²_init + σ²_order + σ²_aug + τ²_all          s²_k ≈ σ²_k + τ²_k   (k a source)

* σ²_k: the variance of the runs' *true* accuracy that source k causes — what an infinite test set would
  still show; estimated by s²_k − τ̂²_k (unbiased; below 0 when the source is lost in the test-set noise, and
  then counted as 0 in the shares, not in the sum);
* τ²: the test set's finite sample — the part of an arm's seed variance that comes only from which of the
  N images each run gets right: Σ_i v_i / N² (v_i: image i's variance of correctness across the arm's runs;
  per_example.variance_share's example_var; Jordan 2023). It is in every arm's s², and a chaotic training
  draws it afresh whichever source moves: it is measured and subtracted per arm, and counted once, from
  the all-vary arm (without predictions nothing is subtracted and there is no test-set component);
* the check: the sum of the components against s²_all.

Assumptions: the sources act additively on the true accuracy (no interaction: a one-source arm sees the
other sources at their fixed seed only); the metric is normal over seeds (the χ² intervals and the F test are exact
then; neither is robust to heavy tails: `outlier_runs` names the arms where a run lies too far from the others
for that). Drawing another test set would add Var_x(q_x)/N (q_x: an
image's chance of being right), which no arm's s² holds (the test set is fixed): it is not a component
(per_example.two_level_interval's example term is that part of a Δ).

Intervals (95 % by default): a source's, the χ² interval of its arm's s², [(n−1)s²/χ²(1−α/2), (n−1)s²/χ²(α/2)],
minus τ̂²_k (treated as known: it rests on N images), floored at 0; the test-set part's, a jackknife over the
arm's runs on the log scale (`test_set_part`: it holds when runs differ in overall quality, which makes the
images' v_i move together); the all-vary arm's, its χ² interval. The check, both ways:
`inside` (the sum lies in the all-vary arm's χ² interval, which ignores the sum's own noise) and
`consistent` (the normal interval of sum − s²_all, se² = Σ_arms 2s⁴/(n + 1) — the unbiased estimate of
each s²'s variance 2σ⁴/(n − 1) — holds 0; τ̂²'s own noise is left out, and so is the covariance of s²_all with a one-source arm's s²
(run k of both draws source k from seed k): positive, it makes the check conservative).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats as sps

from .per_example import image_variances, variance_share

ALL = "all"
SOURCES = ("init", "order", "aug")
ARMS = (ALL, *SOURCES)
TEST = "test"  # the test-set component's key
COMPONENTS = (*SOURCES, TEST)
LEVEL = 0.95
# the outlier flag: at 1 % per arm a noise table of 4 activations × 4 arms names some normal arm ≈ 15 % of the
# time (at 5 %: 56 %); with 3 runs two of them make the spread the third is judged against, which says nothing
OUTLIER_ALPHA = 0.01
MIN_OUTLIER_RUNS = 4


def sample_var(values: Sequence[float]) -> float:
    """The ddof-1 variance of `values`; NaN below 2 values."""
    values = np.asarray(values, float)
    return float(values.var(ddof=1)) if values.size > 1 else math.nan


@functools.cache
def _chi2_factors(n: int, level: float) -> tuple[float, float]:
    """(n−1)/χ²(1−α/2, n−1) and (n−1)/χ²(α/2, n−1): the factors of s² at the interval's ends."""
    tail = (1 - level) / 2
    return (n - 1) / sps.chi2.ppf(1 - tail, n - 1), (n - 1) / sps.chi2.ppf(tail, n - 1)


def chi2_interval(var: float, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The `level` interval of a normal population's variance from the sample variance `var` of `n` values;
    (NaN, NaN) below 2 values."""
    if n < 2 or not math.isfinite(var):
        return math.nan, math.nan
    low, high = _chi2_factors(int(n), level)
    return var * low, var * high


def test_set_part(correct, level: float = LEVEL) -> dict:
    """τ̂² of one arm from its (n_runs × N) correctness, in fractions²: `var` = Σ_i v_i / N², with a jackknife
    interval over the runs (`low`, `high`); NaN below 2 runs, no interval below 3.

    τ̂²_(−r) is τ̂² without run r; on the log scale, se² = (n−1)/n · Σ_r (log τ̂²_(−r) − their mean)², and the
    interval is τ̂²·exp(∓ t(n−1)·se). Resampling runs, not images: when runs differ in overall quality every
    image's v_i moves with the runs drawn, and an interval over the images as independent draws (τ̂² ±
    z·sd_i(v_i)/(N√N)) covers far less than 95 % (docs/report.md, "Validated by simulation"). Where a
    τ̂²_(−r) is 0 (the other runs agree on every image) the log is undefined: the same jackknife on the linear
    scale, floored at 0. No randomness: the same runs give the same interval."""
    correct = np.asarray(correct, float)
    n_runs, n_img = correct.shape
    if n_runs < 2:
        return {"var": math.nan, "low": math.nan, "high": math.nan}
    var = variance_share(correct)["example_var"]
    if n_runs < 3:  # one pair of runs: nothing to tell the spread of τ̂² from
        return {"var": var, "low": math.nan, "high": math.nan}
    if var == 0:
        return {"var": var, "low": 0.0, "high": 0.0}
    loo = np.array([image_variances(np.delete(correct, r, axis=0)).sum() / n_img**2 for r in range(n_runs)])
    t = sps.t.ppf(0.5 + level / 2, n_runs - 1)
    if np.all(loo > 0):
        log = np.log(loo)
        se = math.sqrt((n_runs - 1) / n_runs * float(((log - log.mean()) ** 2).sum()))
        return {"var": var, "low": var * math.exp(-t * se), "high": var * math.exp(t * se)}
    se = math.sqrt((n_runs - 1) / n_runs * float(((loo - loo.mean()) ** 2).sum()))
    return {"var": var, "low": max(0.0, var - t * se), "high": var + t * se}


def outlier_runs(values: Sequence[float], alpha: float = OUTLIER_ALPHA, resolution: float = 0.0) -> list[int]:
    """The positions of the runs that lie too far from the arm's others for normal seeds; [] below `MIN_OUTLIER_RUNS`.

    Run k's distance from the mean of the others in units of their sd, T_k = |x_k − x̄_(−k)| /
    (max(s_(−k), resolution)·√(1 + 1/(n−1))), is t-distributed with n − 2 df under normal seeds (an externally
    studentized residual); a run is named when T_k > t(n−2, 1 − alpha/(2n)) (Bonferroni over the n runs: the
    chance that a normal arm names any run is at most `alpha`; simulated: docs/report.md). `resolution`: the
    metric's step (one image of N, in the metric's units), so that runs tied by a coarse metric are not read
    as a spread of 0; the others all equal and no resolution given: a run that differs is named."""
    x = np.asarray(values, float)
    n = x.size
    if n < MIN_OUTLIER_RUNS:
        return []
    limit = sps.t.ppf(1 - alpha / (2 * n), n - 2) * math.sqrt(1 + 1 / (n - 1))
    out = []
    for k in range(n):
        others = np.delete(x, k)
        spread = max(float(others.std(ddof=1)), resolution)
        gap = abs(x[k] - others.mean())
        if (gap > limit * spread) if spread > 0 else gap > 0:
            out.append(k)
    return out


def variance_ratio_test(values_a: Sequence[float], values_b: Sequence[float]) -> dict:
    """One-sided F test of "a varies more than b" (a less stable than b): `ratio` = s²_a / s²_b and
    `p` = P(F ≥ ratio), F ~ F(n_a − 1, n_b − 1); NaN when either has fewer than 2 values or b's are all equal."""
    var_a, var_b = sample_var(values_a), sample_var(values_b)
    if not (math.isfinite(var_a) and math.isfinite(var_b)) or var_b == 0:
        return {"ratio": math.nan, "p": math.nan}
    ratio = var_a / var_b
    return {"ratio": ratio, "p": float(sps.f.sf(ratio, len(values_a) - 1, len(values_b) - 1))}


def decompose(
    values: Mapping[str, Sequence[float]], tau: Mapping[str, dict] | None = None, level: float = LEVEL
) -> dict[str, dict]:
    """The components of one activation's noise design.

    `values`: {arm: the metric over its seeds} (arms of `ARMS`; a missing one counts as no runs); `tau`:
    {arm: `test_set_part`} in the values' units². τ̂² is subtracted from the sources, and the all-vary arm's is
    the `test` component, only when every arm with runs has a finite one (else nothing is subtracted and `test` is
    NaN; an arm with no runs, e.g. `aug` left out of a recipe without augmentation, needs none).

    Returns {part: {...}}: `init`, `order`, `aug`, `test` (`n`, `arm_var` = the arm's s², `tau`, `var`, `low`,
    `high`, `share`: of the sum, a negative estimate counted as 0), `all` (`n`, `arm_var`, `tau`, `var` = s²_all,
    `low`, `high`: its χ² interval) and `sum` (`var`: of the finite components; `varying`: of those above 0, the
    variance of an ordinary run from the sources that vary in it; `complete`: every source and the all-vary arm
    have a variance; `dominant`: the largest component; `inside`, `consistent`, `diff`, `diff_low`, `diff_high`:
    the checks, None and NaN when not complete).
    """
    arms = {arm: np.asarray(values.get(arm, ()), float) for arm in ARMS}
    taus = {arm: (tau or {}).get(arm, {}).get("var", math.nan) for arm in ARMS}
    subtract = all(math.isfinite(taus[arm]) for arm in ARMS if arms[arm].size or arm == ALL)
    out = {}
    for arm in (*SOURCES, ALL):
        n, s2 = arms[arm].size, sample_var(arms[arm])
        shift = taus[arm] if subtract and arm != ALL else 0.0
        low, high = chi2_interval(s2, n, level)
        out[arm] = {
            "n": n,
            "arm_var": s2,
            "tau": taus[arm],
            "var": s2 - shift,
            "low": _floor(low - shift),
            "high": _floor(high - shift),
        }
    test = (tau or {}).get(ALL, {}) if subtract else {}
    out[TEST] = {
        "n": arms[ALL].size,
        "arm_var": math.nan,
        "tau": taus[ALL],
        "var": test.get("var", math.nan),
        "low": test.get("low", math.nan),
        "high": test.get("high", math.nan),
    }
    out["sum"] = _sum(out, level)
    return out


def _floor(x: float) -> float:
    """max(0, x), NaN kept: a variance is never negative."""
    return max(0.0, x) if math.isfinite(x) else x


def _sum(out: dict, level: float) -> dict:
    """The sum of the finite components, each one's share of it (set in `out`), the dominant one, the checks."""
    finite = {k: out[k]["var"] for k in COMPONENTS if math.isfinite(out[k]["var"])}
    total = sum(finite.values()) if finite else math.nan
    positive = sum(max(0.0, v) for v in finite.values())
    for k in COMPONENTS:
        out[k]["share"] = max(0.0, out[k]["var"]) / positive if k in finite and positive > 0 else math.nan
    res = {
        "var": total,
        "varying": positive,
        "dominant": max(finite, key=finite.get) if positive > 0 else None,
        "complete": all(math.isfinite(out[k]["var"]) for k in (*SOURCES, ALL)),
        "inside": None,
        "consistent": None,
        "diff": math.nan,
        "diff_low": math.nan,
        "diff_high": math.nan,
    }
    if res["complete"]:
        diff = total - out[ALL]["var"]
        se = math.sqrt(sum(2 * out[k]["arm_var"] ** 2 / (out[k]["n"] + 1) for k in (*SOURCES, ALL)))
        half = sps.norm.ppf(0.5 + level / 2) * se
        res.update(
            inside=bool(out[ALL]["low"] <= total <= out[ALL]["high"]),
            diff=diff,
            diff_low=diff - half,
            diff_high=diff + half,
            consistent=bool(abs(diff) <= half),
        )
    return res
