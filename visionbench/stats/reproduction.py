"""Did a rerun reproduce a result? The verdict of `visionbench compare` and of a paper's single number.

    >>> from visionbench.stats import reproduction
    >>> res = reproduction.compare_runs(a_values, b_values)             # Δ = B − A, its interval, the tests
    >>> res = reproduction.compare_runs(a_values, b_values, margin=0.5)  # equivalence within ±0.5 (metric units)
    >>> tests_p, verdicts = reproduction.family_verdicts([res, ...], identical=[False, ...])  # Holm over the tests
    >>> reproduction.seeds_for_equivalence(1.0)                         # seeds per tree for 80 % `reproduced`
    >>> reproduction.prediction_interval(98.7, 0.42, 3)                 # where ONE more run would land (95 %)

A and B are the runs of one (recipe, setting, activation) in two results trees: A the reference, B the rerun.
The verdict, at α (default 0.05):

1. **identical**: every run of A is in B and B's in A, with the same numbers (the caller decides this: metric
   values and predicted classes, run by run);
2. **reproduced**: the equivalence test rejects "|μ_B − μ_A| ≥ margin" at α, and B's runs are not significantly
   noisier than A's (`equivalence.spread_grew` at α);
3. **differs**: else one of the activation's tests, Holm-adjusted over every test of the comparison, has p < α:
   Welch's t with Hsu's df (equivalence.py: its level holds for any variance ratio) on the scored runs, and where
   runs were left out (stalled, diverged, failed) Fisher's exact test of how many, A against B. The whole
   compare then says `differs` somewhere in at most α of the reruns that changed nothing, stalls included;
4. **undecided**: neither; `seeds_needed` says how many seeds per tree would make `reproduced` likely (80 %) if
   the two did not differ at all.

**The margin** is the effect of interest: a shift smaller than it is a reproduction. By default it is
`DEFAULT_MARGIN_SD` = 1 seed standard deviation **of A**, the reference (a noisier rerun cannot widen it), and the
test is `equivalence.reference_p`: exact in A's sd for any σ_B up to `equivalence.SPREAD_RATIO` × σ_A, the spread
check beyond. Given in the metric's units (`margin=0.5`), the test is a TOST with Welch's se and Hsu's df. Each
result carries the design's strength: P(`reproduced`) when nothing changed and when B is 1 sd of A off
(`rate_same`, `rate_off`), so a reader sees what a `reproduced` at 3 seeds is worth, and `bound`, the smallest
margin at which the verdict's own test rejects (in A's sd: `bound_sd`). Operating characteristics by simulation:
docs/reproducing.md.

`prediction_interval` is the other question: a paper printed ONE run per cell — does that number lie where
one run of ours would? mean ± t(0.975, n − 1)·s·√(1 + 1/n) over our n runs (normal model; NaN for n < 2).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from . import equivalence, power
from .significance import LEVEL, holm

IDENTICAL, REPRODUCED, DIFFERS, UNDECIDED = "identical", "reproduced", "differs", "undecided"
VERDICTS = (IDENTICAL, REPRODUCED, DIFFERS, UNDECIDED)
DEFAULT_MARGIN_SD = 1.0  # the default equivalence margin: one seed standard deviation of A (module docstring)
MAX_SEEDS = 10_000  # seeds per tree beyond which equivalence is "not in reach"


def prediction_interval(mean: float, sd: float, n: int, level: float = LEVEL) -> tuple[float, float]:
    """(low, high) of the `level` prediction interval of one new run: mean ± t(½ + level/2, n − 1)·sd·√(1 + 1/n);
    NaNs when n < 2 or the mean or sd is not finite."""
    if not (n >= 2 and math.isfinite(mean) and math.isfinite(sd)):
        return math.nan, math.nan
    half = float(sps.t.ppf(0.5 + level / 2, n - 1)) * sd * math.sqrt(1 + 1 / n)
    return mean - half, mean + half


# ---- one activation, and the family ---------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def seeds_for_equivalence(k: float, *, alpha: float = power.ALPHA, target: float = power.POWER) -> float:
    """The fewest seeds per tree at which two trees that do not differ (equal spread) read `reproduced` within
    k·σ_A with probability ≥ `target` (80 %), the spread check included; `inf` beyond `MAX_SEEDS`, NaN for k not
    finite and > 0."""
    if not (isinstance(k, (int, float)) and math.isfinite(k) and k > 0):
        return math.nan

    def reached(n: int) -> bool:
        return equivalence.reference_rate(0.0, 1.0, n, n, float(k), alpha) >= target

    lo, hi = 2, 2
    while not reached(hi):
        lo, hi = hi, hi * 2
        if hi > MAX_SEEDS:
            return math.inf
    while hi - lo > 1:  # the rate rises with n: the first n that reaches the target
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if not reached(mid) else (lo, mid)
    return float(hi)


def compare_runs(
    a,
    b,
    margin: float | None = None,
    *,
    margin_sd: float = DEFAULT_MARGIN_SD,
    alpha: float = power.ALPHA,
    images: int = 0,
    describe: bool = True,
) -> dict:
    """A's and B's values of one metric (one per run): `n_a`, `mean_a`, `sd_a`, the same for B, `diff` = mean B −
    mean A, its 95 % interval `ci_low`, `ci_high` and `welch_p` (Welch's se, Hsu's df; unadjusted), the equivalence
    margin in the metric's units (`margin`) and in A's seed sd (`margin_sd`), the test (`equivalence_test`: `sd`,
    in A's sd, or `tost`, in the metric's units), its p-value `equivalence_p`, `spread_p` (the F test that B is
    noisier), `tie` (Δ̂ = 0 exactly), `step` (Δ̂'s lattice when the metric counts `images` test images), `bound`
    and `bound_sd` (the smallest margin the test accepts on these runs), `rate_same`/`rate_off` (P(`reproduced`)
    of this design when nothing changed / B is 1 sd of A off) and `seeds_needed` (per tree, 80 % `reproduced`
    when the trees do not differ). NaN where a number is undefined (fewer than two runs a side, no spread).
    `describe=False`: only what the verdict needs (no bound, rates or seeds: what a simulation of the verdict runs)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    for given in (margin, margin_sd):
        if given is not None and not given > 0:
            raise ValueError(f"a margin must be > 0, got {given!r}")
    out = {"n_a": a.size, "mean_a": _mean(a), "sd_a": _sd(a), "n_b": b.size, "mean_b": _mean(b), "sd_b": _sd(b)}
    out["diff"], out["ci_low"], out["ci_high"], out["welch_p"] = equivalence.hsu_welch(a, b)
    out["diff"] = out["mean_b"] - out["mean_a"]
    out["step"] = equivalence.lattice_step(a, b, images)
    out["tie"] = bool(a.size and b.size and abs(out["diff"]) <= max(out["step"] / 2, 1e-9 * abs(out["mean_a"])))
    out["spread_p"] = equivalence.spread_grew(a, b, alpha)
    sd = out["sd_a"] if math.isfinite(out["sd_a"]) and out["sd_a"] > 0 else math.nan
    designed = describe and a.size >= 2 and b.size >= 2
    if margin is None:
        k = float(margin_sd)
        out["equivalence_test"], out["margin_sd"], out["margin"] = "sd", k, k * sd
        out["equivalence_p"] = equivalence.reference_p(a, b, k, out["step"])
        out["bound_sd"] = equivalence.reference_bound(a, b, alpha, out["step"]) if designed else math.nan
        out["bound"] = out["bound_sd"] * sd
        rates = [equivalence.reference_rate(s, 1.0, a.size, b.size, k, alpha) for s in (0.0, 1.0)] if designed else []
    else:
        out["equivalence_test"], out["margin"], out["margin_sd"] = "tost", float(margin), margin / sd
        out["equivalence_p"] = equivalence.hsu_tost_p(a, b, margin)
        out["bound"] = equivalence.hsu_tost_bound(a, b, alpha)
        out["bound_sd"] = out["bound"] / sd
        rates = (
            [equivalence.tost_rate(s * sd, sd, a.size, b.size, margin, alpha) for s in (0.0, 1.0)] if designed else []
        )
    out["rate_same"], out["rate_off"] = rates if rates and math.isfinite(sd) else (math.nan, math.nan)
    out["seeds_needed"] = seeds_for_equivalence(out["margin_sd"], alpha=alpha) if describe else math.nan
    return out


def family_verdicts(
    rows: list[dict], identical: list[bool], alpha: float = power.ALPHA
) -> tuple[pd.DataFrame, list[str]]:
    """(per row its Holm-adjusted `welch_p_holm` and `stall_p_holm` and the unadjusted `stall_p`, the verdicts)
    for the activations of one comparison: `rows` are `compare_runs` results (with `left_out_a`/`left_out_b`, the
    runs not scored, where known), `identical` whether each row's runs are the same run by run. The family is every
    test of the rows whose verdict rests on tests: each row's Welch test and, where a run was left out, its
    Fisher test of the left-out counts; the identical rows are decided by their bits."""
    same = np.asarray(identical, bool)
    welch = np.array([r["welch_p"] for r in rows], float)
    stall = np.array([stall_p(r) for r in rows], float)
    welch[same], stall[same] = np.nan, np.nan
    adjusted = holm(np.concatenate([welch, stall]))
    tests = pd.DataFrame(
        {"welch_p_holm": adjusted[: len(rows)], "stall_p": stall, "stall_p_holm": adjusted[len(rows) :]}
    )
    verdicts = [
        decide(s, min(_p(w), _p(f)), r["equivalence_p"], r.get("spread_p", math.nan), alpha)
        for r, s, w, f in zip(rows, same, tests["welch_p_holm"], tests["stall_p_holm"])
    ]
    return tests, verdicts


def stall_p(row: dict) -> float:
    """Fisher's exact p (two-sided) that A and B leave out runs (stalled, diverged, failed) equally often: NaN
    when neither left one out (no test)."""
    out_a, out_b = int(row.get("left_out_a", 0) or 0), int(row.get("left_out_b", 0) or 0)
    if not out_a + out_b:
        return math.nan
    table = [[out_a, int(row["n_a"])], [out_b, int(row["n_b"])]]
    return float(sps.fisher_exact(table)[1])


def _p(p: float) -> float:
    return p if math.isfinite(p) else math.inf


def decide(
    identical: bool, tests_p_holm: float, equivalence_p: float, spread_p: float = math.nan, alpha: float = power.ALPHA
) -> str:
    """The verdict: `identical`, else `reproduced` (equivalence p < α and B not significantly noisier: spread p ≥ α
    or untested), else `differs` (the smallest Holm-adjusted p of the row's tests < α), else `undecided`."""
    if identical:
        return IDENTICAL
    noisier = math.isfinite(spread_p) and spread_p < alpha
    if math.isfinite(equivalence_p) and equivalence_p < alpha and not noisier:
        return REPRODUCED
    if math.isfinite(tests_p_holm) and tests_p_holm < alpha:
        return DIFFERS
    return UNDECIDED


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else math.nan


def _sd(x: np.ndarray) -> float:
    return float(x.std(ddof=1)) if x.size > 1 else math.nan
