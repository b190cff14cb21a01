"""The expected-maximum curve of a hyper-parameter search: the expected best validation score after n = 1..B
random trials, from the B trial scores one search produced — Dodge et al. (EMNLP 2019), "Show Your Work: Improved
Reporting of Experimental Results", Sec. 3, eq. 1 — and the unbiased variant of Tang et al. (ACL 2020), "Showing
Your Work Doesn't Always Work" (docs/tuning.md, "The expected-maximum curve").

    >>> from visionbench.stats import expected_max as em
    >>> r = em.expected_max([0.91, 0.93, 0.90, 0.95])            # n = 1..4: r.mean, r.sd, r.var
    >>> em.expected_max(scores, method="unbiased")                # Tang et al. 2020: unbiased for the population
    >>> curve = em.expected_max_curve(trials, score="val", by="act", cost="train_time_s")
    >>> em.crossing(curve[curve.act == "rational"], curve[curve.act == "relu"])   # smallest n where they swap
    >>> em.leads(curve, "rational", "relu")   # "rational leads relu from n = 1 to 4 trials; from n = 5 relu leads"

With v_(1) ≤ … ≤ v_(B) the B scores sorted, the max of n i.i.d. draws from their empirical distribution (draws
*with* replacement) equals v_(i) with probability w_i = (i/B)^n − ((i−1)/B)^n, so (`method="dodge"`)

    E_n = Σ_i v_(i) w_i,        Var_n = Σ_i w_i (v_(i) − E_n)²  (= Σ_i v_(i)² w_i − E_n²),

the second being the spread of the best of n draws, what Dodge et al. shade as ±1 sd. Ties need no special case:
over a run of equal values v_(a) = … = v_(b) the weights telescope to (b/B)^n − ((a−1)/B)^n, the empirical
probability that the max equals that value.

The plug-in E_n is biased low for the population's E[max of n] once n is a sizeable fraction of B: at n = B it is
not the best score seen (the B draws with replacement repeat some trials and miss the best one with probability
(1 − 1/B)^B ≈ 1/e). Tang et al. (2020, Sec. 3) show the bias and derive the unbiased alternative, the U-statistic
of the kernel max(x_1..x_n): the average, over all C(B, n) subsets of n of the B trials (draws *without*
replacement), of the subset's best (`method="unbiased"`),

    U_n = Σ_i v_(i) C(i−1, n−1) / C(B, n),

unbiased for E[max of n] whenever the B trials are i.i.d. draws of the search (any tie-break of the sort gives the
same sum). U_B is exactly the best score seen and U_1 the mean. Its `var` is the spread of the best of n distinct
trials among the B, Σ_i w_i (v_(i) − U_n)² with w_i = C(i−1, n−1) / C(B, n): it shrinks to 0 at n = B and is not
an unbiased estimate of the population's Var(max of n). Unbiasedness has a price: of the two estimators of E[max
of n], the unbiased one has the larger sampling variance (Dodge et al., Findings of EMNLP 2021, "Expected
Validation Performance and Estimation of a Random Variable's Maximum").

Lower-is-better scores (a loss, an error): `higher_is_better=False` gives the expected *minimum*, computed as
−E[max] of the negated scores; `mean` is then the expected best (lowest) value and `var` is unchanged.

A diverged trial (a NaN score), `nan=`:

* `"worst"` (default): it counts in the budget — it cost a trial — and is never the best: it sorts below every
  finite score. The best of n trials is then undefined when all n diverged; that probability is returned per n
  (`p_all_failed`: (k/B)^n for dodge, C(k, n)/C(B, n) for unbiased, with k diverged of B) and `mean`/`var` are the
  expected best and its spread *given at least one of the n trials finished* (a ratio of two unbiased sums: not
  exactly unbiased itself). With no NaN this is the plain curve.
* `"drop"`: the diverged trials are removed first and the budget counts finished trials only (B = the finite
  count); optimistic when divergence is common, since a real search pays for its diverged trials.
* `"raise"`: a NaN score is a ValueError.

±inf scores are refused in every mode. The curves assume trials drawn i.i.d. from the search space and scored on
the validation split; the best configuration's validation score is optimistic for its own test score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import gammaln

METHODS = ("dodge", "unbiased")
NAN_MODES = ("worst", "drop", "raise")
CURVE_COLUMNS = ["n", "expected_max", "sd", "p_all_failed", "B", "n_failed", "expected_cost"]


@dataclass(frozen=True)
class ExpectedMax:
    """The curve for n = 1..n_max: `mean` (the expected best of n trials), `var` and `sd` (the spread of that best),
    `p_all_failed` (the probability that all n trials diverged: zero without NaN scores), the budget `B` the curve was
    computed from, `n_failed` (NaN scores counted in B under nan="worst", removed under nan="drop")."""

    n: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    sd: np.ndarray
    p_all_failed: np.ndarray
    B: int
    n_failed: int
    method: str
    higher_is_better: bool


def _log_comb(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log C(a, b) for integer arrays with 0 ≤ b ≤ a (the caller masks the rest)."""
    return gammaln(a + 1.0) - gammaln(b + 1.0) - gammaln(a - b + 1.0)


def weights(B: int, n_max: int, method: str = "dodge") -> np.ndarray:
    """(n_max, B) matrix: row n−1 holds P(the best of n trials is the i-th smallest of the B), i = 1..B.

    dodge: (i/B)^n − ((i−1)/B)^n (n draws with replacement); unbiased: C(i−1, n−1)/C(B, n) (n distinct trials,
    zero for i < n). Each row sums to 1.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")
    if not 1 <= n_max <= B:
        raise ValueError(f"n must lie in 1..B = {B}, not {n_max}")
    n = np.arange(1, n_max + 1, dtype=float)[:, None]
    i = np.arange(1, B + 1, dtype=float)[None, :]
    if method == "dodge":
        return (i / B) ** n - ((i - 1) / B) ** n
    ok = i >= n
    log_w = _log_comb(np.where(ok, i - 1, 0.0), np.where(ok, n - 1, 0.0)) - _log_comb(np.float64(B), n)
    w = np.where(ok, np.exp(log_w), 0.0)
    # exact where it matters: n = 1 is 1/B, and the row n = B is the max alone
    w[0, :] = 1.0 / B
    if n_max == B:
        w[B - 1, :] = 0.0
        w[B - 1, B - 1] = 1.0
    return w


def _p_all_failed(B: int, k: int, n: np.ndarray, method: str) -> np.ndarray:
    """P(all n trials are among the k diverged ones of B)."""
    if k == 0:
        return np.zeros(n.shape)
    if method == "dodge":
        return (k / B) ** n
    return np.array([math.comb(k, int(m)) / math.comb(B, int(m)) for m in n], dtype=float)


def expected_max(
    scores,
    n_max: int | None = None,
    *,
    method: str = "dodge",
    higher_is_better: bool = True,
    nan: str = "worst",
) -> ExpectedMax:
    """The expected best score of n = 1..n_max trials (n_max = B when None) from the B trial scores of one search,
    with the spread of that best (module docstring: the formulas, the methods, NaN handling).

    Refused (ValueError): no scores, fewer than 2 trials, n_max > B or < 1, ±inf scores, NaN under nan="raise",
    and no finite score at all.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")
    if nan not in NAN_MODES:
        raise ValueError(f"nan must be one of {NAN_MODES}, not {nan!r}")
    v = np.asarray(scores, dtype=float).ravel()
    if v.size == 0:
        raise ValueError("expected_max needs trial scores: none given")
    if np.isinf(v).any():
        raise ValueError("expected_max: a score is ±inf; a diverged trial is NaN (see nan=)")
    missing = np.isnan(v)
    k = int(missing.sum())
    if k and nan == "raise":
        raise ValueError(f"expected_max: {k} of {v.size} scores are NaN (nan='raise')")
    if nan == "drop":
        v = v[~missing]
    B = int(v.size)
    if B < 2:
        raise ValueError(f"expected_max needs at least 2 trials, got B = {B}")
    if k == v.size:
        raise ValueError(f"expected_max: all {k} scores are NaN")
    n_max = B if n_max is None else int(n_max)
    if n_max > B:
        raise ValueError(f"n_max = {n_max} exceeds the number of trials B = {B}: E[max of n] is estimated for n ≤ B")
    if n_max < 1:
        raise ValueError(f"n_max must be at least 1, not {n_max}")

    signed = v if higher_is_better else -v
    # NaN sorts first: below every finite score, never the best (nan="worst"); under "drop" there is none left
    ordered = np.sort(np.where(np.isnan(signed), -np.inf, signed))
    finite = np.isfinite(ordered)
    w = weights(B, n_max, method)
    w_finite = np.where(finite[None, :], w, 0.0)
    n = np.arange(1, n_max + 1)
    k_in = B - int(finite.sum())
    p_fail = _p_all_failed(B, k_in, n.astype(float), method)
    mass = w_finite.sum(axis=1)  # = 1 − p_fail
    vals = np.where(finite, ordered, 0.0)
    # rounding may put the weighted mean an ulp outside the scores; it lies within them (all equal: exactly that value)
    mean = np.clip((w_finite @ vals) / mass, ordered[finite][0], ordered[-1])
    var = (w_finite * (vals[None, :] - mean[:, None]) ** 2).sum(axis=1) / mass
    var = np.maximum(var, 0.0)
    if not higher_is_better:
        mean = -mean
    return ExpectedMax(
        n=n,
        mean=mean,
        var=var,
        sd=np.sqrt(var),
        p_all_failed=p_fail,
        B=B,
        n_failed=k,
        method=method,
        higher_is_better=higher_is_better,
    )


def expected_max_curve(
    trials: pd.DataFrame,
    score: str = "val",
    by: str | None = "act",
    cost: str | None = "train_time_s",
    *,
    n_max: int | None = None,
    method: str = "dodge",
    higher_is_better: bool = True,
    nan: str = "worst",
) -> pd.DataFrame:
    """A tidy frame, one row per (group, n): `by` (when given), n, expected_max (the expected best; the minimum when
    higher_is_better=False), sd, p_all_failed, B, n_failed and expected_cost = n × the mean cost of the group's trials
    (the cumulative budget, for the curve against training time; the trials counted in B, diverged ones included under
    nan="worst"; NaN costs skipped; the column is omitted when cost is None).

    Each group's curve runs to its own B, or to n_max if given (a group with fewer than n_max trials is refused).
    """
    needed = [c for c in (score, by, cost) if c is not None]
    absent = [c for c in needed if c not in trials.columns]
    if absent:
        raise ValueError(
            f"expected_max_curve: the trials frame has no column {absent} (columns: {list(trials.columns)})"
        )
    groups = trials.groupby(by, sort=True) if by is not None else [(None, trials)]
    frames = []
    for key, group in groups:
        label = key[0] if isinstance(key, tuple) else key
        try:
            r = expected_max(group[score], n_max, method=method, higher_is_better=higher_is_better, nan=nan)
        except ValueError as err:
            where = f" ({by} = {label!r})" if by is not None else ""
            raise ValueError(f"{err}{where}") from None
        frame = pd.DataFrame(
            {
                "n": r.n,
                "expected_max": r.mean,
                "sd": r.sd,
                "p_all_failed": r.p_all_failed,
                "B": r.B,
                "n_failed": r.n_failed,
            }
        )
        if cost is not None:
            counted = group if nan != "drop" else group[group[score].notna()]
            frame["expected_cost"] = r.n * float(counted[cost].mean())
        if by is not None:
            frame.insert(0, by, label)
        frames.append(frame)
    out = pd.concat(frames, ignore_index=True)
    out.attrs.update(method=method, higher_is_better=higher_is_better, nan=nan, score=score)
    return out


def _as_series(curve) -> pd.Series:
    """A curve as expected best indexed by n: an ExpectedMax, a frame with columns n and expected_max, a Series
    indexed by n, or values for n = 1, 2, ..."""
    if isinstance(curve, ExpectedMax):
        return pd.Series(curve.mean, index=curve.n)
    if isinstance(curve, pd.DataFrame):
        return curve.set_index("n")["expected_max"].sort_index()
    if isinstance(curve, pd.Series):
        return curve.sort_index()
    values = np.asarray(curve, dtype=float).ravel()
    return pd.Series(values, index=np.arange(1, values.size + 1))


def _signs(curve_a, curve_b, higher_is_better: bool) -> pd.Series:
    """+1 where a is ahead, −1 where b is, 0 on a tie, at each n both curves have."""
    a, b = _as_series(curve_a), _as_series(curve_b)
    both = a.index.intersection(b.index)
    if both.empty:
        raise ValueError("the two curves share no n")
    diff = a[both] - b[both]
    if not higher_is_better:
        diff = -diff
    return np.sign(diff).astype(int)


def _segments(signs: pd.Series) -> list[tuple[int, int, int]]:
    """(first n, last n, sign) of the runs of one leader; a tie between two runs of one leader does not split it."""
    runs: list[list[int]] = []
    for n, s in signs.items():
        if runs and runs[-1][2] == s:
            runs[-1][1] = int(n)
        else:
            runs.append([int(n), int(n), int(s)])
    return [tuple(r) for r in runs]


def crossing(curve_a, curve_b, *, higher_is_better: bool = True) -> int | None:
    """The smallest n at which the curves swap order — the curve behind at the first n where they differ is strictly
    ahead — or None if they never do (ties are not swaps). Curves: ExpectedMax results, curve frames (columns n and
    expected_max, e.g. one group of expected_max_curve), Series indexed by n, or values for n = 1, 2, ...

    A point-estimate statement about two expected-max curves, not a test: where they cross within a curve's sd, the
    order there is noise.
    """
    signs = _signs(curve_a, curve_b, higher_is_better)
    nonzero = signs[signs != 0]
    if nonzero.empty:
        return None
    swapped = nonzero[nonzero == -nonzero.iloc[0]]
    return None if swapped.empty else int(swapped.index[0])


def leads(curve, a: str, b: str, *, by: str = "act", higher_is_better: bool | None = None) -> str:
    """One sentence on which of `a` and `b` leads at which budget, from an expected_max_curve frame, e.g.
    "rational leads relu from n = 1 to 4 trials; from n = 5 relu leads". Each segment names its leader ("tied" where
    the curves are equal); the last segment runs to the largest n both curves have.

    higher_is_better defaults to the frame's own (expected_max_curve records it in `attrs`), else True.
    """
    if higher_is_better is None:
        higher_is_better = bool(curve.attrs.get("higher_is_better", True))
    sub_a, sub_b = curve[curve[by] == a], curve[curve[by] == b]
    for name, sub in ((a, sub_a), (b, sub_b)):
        if sub.empty:
            raise ValueError(f"leads: no curve for {by} = {name!r}")
    return lead_sentence(sub_a, sub_b, a, b, higher_is_better=higher_is_better)


def lead_sentence(curve_a, curve_b, name_a: str, name_b: str, *, higher_is_better: bool = True) -> str:
    """leads() for two curves of any form crossing() takes: "a leads b from n = 1 to 4 trials; from n = 5 b leads",
    one clause per run of one leader (or of a tie); the last clause runs to the largest n both curves have."""
    segments = _segments(_signs(curve_a, curve_b, higher_is_better))
    first, last, s = segments[0]
    if len(segments) == 1:
        span = f"at every n from {first} to {last} trials" if first != last else f"at n = {first}"
    else:
        span = f"from n = {first} to {last} trials" if first != last else f"at n = {first}"
    if s == 0:
        head = f"{name_a} and {name_b} are tied {span}"
    else:
        lead, behind = (name_a, name_b) if s > 0 else (name_b, name_a)
        head = f"{lead} leads {behind} {span}"
    parts = [head]
    for idx, (first, last, s) in enumerate(segments[1:], start=1):
        who = "they are tied" if s == 0 else f"{name_a if s > 0 else name_b} leads"
        if idx == len(segments) - 1:
            parts.append(f"from n = {first} {who}" if first != last else f"at n = {first} {who}")
        else:
            parts.append(f"from n = {first} to {last} {who}" if first != last else f"at n = {first} {who}")
    return "; ".join(parts)
