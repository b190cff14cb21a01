"""Per-example statistics of two activations whose runs scored the same images (docs/per_example.md).

    >>> a, b = Arm.from_runs(act_runs), Arm.from_runs(relu_runs)   # each: {pred, p_true, confidence, target}
    >>> compare_arms(a, b)["two_level_low"]

An `Arm` holds one activation's runs as (n_runs × N) arrays over the same N images. Everything is
in fractions (0.012, not 1.2 points); the report scales. What is computed, each against the baseline:

* `two_level_interval`: Δ of the mean accuracies with a 95 % t interval whose variance has a seed term
  (exactly Welch's) and a test-example term E (what resampling the test set adds; Bouthillier et al. 2021);
  √E, `example_sd`, is the test set's part of Δ;
* `variance_share`: the share of the seed-to-seed variance of accuracy that the finite test set alone
  explains (Jordan 2023), and the binomial sd √(p(1 − p)/N);
* `paired_over_images`: a paired t-test over images of the seed-averaged correctness, and
  `mcnemar_p`, the exact McNemar test of two prediction vectors (McNemar 1947; Dietterich 1998);
* `churn_test`: the fraction of images whose predicted class changes between two runs, within an
  activation and between two, with an exact permutation test of "between > within";
* `ensemble_pred`: the seed ensemble (plurality vote, ties by summed confidence);
* `nll`, `ece`: calibration per run (ECE over 15 equal-width confidence bins; Guo et al. 2017).

Every function that takes several runs refuses runs that did not score the same images
(`check_same_images`: one ValueError naming the first run that differs).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar

from .significance import compare

N_BINS = 15  # ECE's equal-width confidence bins (Guo et al. 2017)
NLL_FLOOR = 1e-12  # p_true below this counts as this: one float32 zero does not make the NLL infinite
MAX_RELABELINGS = 10_000  # the churn permutation test enumerates up to this many relabelings, else samples
LEVEL = 0.95


def check_same_images(targets: Sequence[np.ndarray], labels: Sequence[str] | None = None) -> np.ndarray:
    """The target vector every run shares; ValueError naming the first run whose targets differ."""
    if not len(targets):
        raise ValueError("no runs: nothing to compare")
    labels = list(labels) if labels is not None else [f"run {k}" for k in range(len(targets))]
    first = np.asarray(targets[0])
    for label, target in zip(labels[1:], targets[1:]):
        target = np.asarray(target)
        if target.shape != first.shape or not np.array_equal(target, first):
            what = (
                f"{target.size} images vs {first.size}"
                if target.shape != first.shape
                else f"{int(np.sum(target != first))} of {first.size} targets differ"
            )
            raise ValueError(
                f"the runs did not score the same images ({label} vs {labels[0]}: {what}); "
                "per-example statistics need every run scored on one test set in one order"
            )
    return first


@dataclass(frozen=True)
class Arm:
    """One activation's runs over the same N images: `pred`, `p_true`, `confidence` are (n_runs × N),
    `target` (N,); `seeds` names the runs (for the seed-paired test of the calibration)."""

    pred: np.ndarray
    p_true: np.ndarray
    confidence: np.ndarray
    target: np.ndarray
    seeds: tuple = ()

    @classmethod
    def from_runs(cls, runs: Sequence[dict], seeds: Sequence | None = None, labels: Sequence[str] | None = None) -> Arm:
        """Stack per-run dicts `{pred, p_true, confidence, target}` (results/predictions.py's variant)."""
        target = check_same_images([r["target"] for r in runs], labels)
        stack = {k: np.stack([np.asarray(r[k]) for r in runs]) for k in ("pred", "p_true", "confidence")}
        return cls(
            stack["pred"].astype(np.int64),
            stack["p_true"].astype(float),
            stack["confidence"].astype(float),
            np.asarray(target).astype(np.int64),
            tuple(seeds if seeds is not None else range(len(runs))),
        )

    @property
    def n(self) -> int:
        return self.pred.shape[0]

    @property
    def correct(self) -> np.ndarray:
        """(n_runs × N) booleans: pred == target."""
        return self.pred == self.target


# ---- Δ with seeds and test examples as sources of variance ------------------------------------


def two_level_interval(ca, cb, level: float = LEVEL) -> dict:
    """Δ = mean accuracy of `ca` − of `cb` with its seed-only (Welch) and two-level t intervals.

    `ca`, `cb`: correctness arrays (..., n_runs, N), leading axes batched. With d_i the difference of
    the seed-averaged correctness of image i and v_i the ddof-1 variance of image i's correctness
    across one arm's seeds:

        seed term    = s_A²/n_A + s_B²/n_B                       (s²: variance of run accuracy; Welch)
        example term = max(0, var_i(d_i) − mean_i(v_A,i/n_A + v_B,i/n_B)) / N
        Δ ± t(ν, 0.975)·√(seed + example), ν Welch–Satterthwaite over both terms (example term: N − 1 df)

    and never narrower than the seed-only (Welch) interval Δ ± t(ν_seed, 0.975)·√seed. The example term is
    what drawing another test set of N images from the same distribution would add; the subtraction removes
    the seed noise already in d_i (it is in the seed term). As N → ∞ the interval is Welch's; for small N it
    is wider. Coverage by simulation: docs/per_example.md. Returns arrays (floats without batch axes) `diff`,
    `low`, `high`, `df`, `seed_var`, `example_var`, `example_sd`, `seed_low`, `seed_high`, `seed_df`; NaN with
    < 2 runs per arm. `example_sd` = √example_var is *the test set's part of Δ*: the sd that drawing another N
    images would give Δ, both arms scored on the same images (the report's one definition of that phrase).
    """
    ca, cb = np.asarray(ca, float), np.asarray(cb, float)
    (na, n_img), nb = ca.shape[-2:], cb.shape[-2]
    if cb.shape[-1] != n_img:
        raise ValueError(f"the runs did not score the same images ({n_img} vs {cb.shape[-1]} images)")
    diff = ca.mean(axis=(-2, -1)) - cb.mean(axis=(-2, -1))
    if na < 2 or nb < 2:
        nan = np.full(np.shape(diff), np.nan)
        return _squeeze(
            dict(
                diff=diff,
                low=nan,
                high=nan,
                df=nan,
                seed_var=nan,
                example_var=nan,
                example_sd=nan,
                seed_low=nan,
                seed_high=nan,
                seed_df=nan,
            )
        )
    sa = ca.mean(axis=-1).var(axis=-1, ddof=1) / na
    sb = cb.mean(axis=-1).var(axis=-1, ddof=1) / nb
    d = ca.mean(axis=-2) - cb.mean(axis=-2)
    noise = (ca.var(axis=-2, ddof=1) / na + cb.var(axis=-2, ddof=1) / nb).mean(axis=-1)
    example = np.maximum(0.0, d.var(axis=-1, ddof=1) - noise) / n_img
    seed = sa + sb
    seed_df = _satterthwaite([(sa, na - 1), (sb, nb - 1)])
    df = _satterthwaite([(sa, na - 1), (sb, nb - 1), (example, n_img - 1)])
    with np.errstate(invalid="ignore"):
        half = sps.t.ppf(0.5 + level / 2, df) * np.sqrt(seed + example)
        seed_half = sps.t.ppf(0.5 + level / 2, seed_df) * np.sqrt(seed)
    seed_half = np.where(seed > 0, seed_half, 0.0)
    # never narrower than the seed-only interval: a larger df can lower t by more than the example term adds
    half = np.maximum(np.where(seed + example > 0, half, 0.0), seed_half)
    return _squeeze(
        dict(
            diff=diff,
            low=diff - half,
            high=diff + half,
            df=df,
            seed_var=seed,
            example_var=example,
            example_sd=np.sqrt(example),
            seed_low=diff - seed_half,
            seed_high=diff + seed_half,
            seed_df=seed_df,
        )
    )


def _satterthwaite(terms) -> np.ndarray:
    """Welch–Satterthwaite df of a sum of variance terms [(term, its df)]; terms that are 0 drop out."""
    total = sum(t for t, _ in terms)
    with np.errstate(invalid="ignore", divide="ignore"):
        denom = sum(np.where(t > 0, t**2 / k, 0.0) for t, k in terms)
        return np.where(denom > 0, total**2 / np.where(denom > 0, denom, 1.0), np.nan)


def _squeeze(out: dict) -> dict:
    return {k: float(v) if np.ndim(v) == 0 else v for k, v in out.items()}


def binomial_sd(p: float, n_images: int) -> float:
    """√(p(1 − p)/N): the sd of a fixed model's accuracy `p` (a fraction) over random test sets of N images."""
    return math.sqrt(p * (1 - p) / n_images)


def image_variances(c) -> np.ndarray:
    """v_i: the ddof-1 variance of each image's correctness across one arm's runs (`c`: n_runs × N)."""
    return np.asarray(c, float).var(axis=0, ddof=1)


def variance_share(c) -> dict:
    """How much of one arm's seed-to-seed variance of accuracy the finite test set alone explains (Jordan 2023).

    `c`: (n_runs × N) correctness. `seed_var` = s², the ddof-1 variance of run accuracy; `example_var` =
    Σ_i v_i / N², what s² would be if images flipped independently between runs; `share` = their ratio
    (1: pure finite-test-set noise; < 1: runs also differ in overall quality; NaN with < 2 runs or s² = 0);
    `binomial_sd` = √(p(1 − p)/N), the sd of a fixed model's accuracy over random test sets of N images.
    """
    c = np.asarray(c, float)
    n, n_img = c.shape
    p = float(c.mean())
    out = {
        "accuracy": p,
        "binomial_sd": binomial_sd(p, n_img),
        "seed_var": math.nan,
        "example_var": math.nan,
        "share": math.nan,
    }
    if n < 2:
        return out
    # from the counts of right images (exact): runs with equal counts have s² = 0, not a few ulps
    seed_var = float(c.sum(axis=1).var(ddof=1)) / n_img**2
    example_var = float(image_variances(c).sum() / n_img**2)
    out.update(seed_var=seed_var, example_var=example_var, share=example_var / seed_var if seed_var > 0 else math.nan)
    return out


# ---- the same images scored by both activations --------------------------------------------


def paired_over_images(ca, cb) -> dict:
    """Paired two-tailed t-test over images of d_i = (seed-averaged correctness of image i) A − B.

    It conditions on these trained runs: "do these runs score the same images differently", not
    "is the activation better in general" (that is `two_level_interval`'s question)."""
    d = np.asarray(ca, float).mean(axis=0) - np.asarray(cb, float).mean(axis=0)
    if d.size < 2 or np.all(d == d[0]):
        return {"diff": float(d.mean()) if d.size else math.nan, "t_stat": math.nan, "p_value": math.nan}
    res = sps.ttest_1samp(d, 0.0)
    return {"diff": float(d.mean()), "t_stat": float(res.statistic), "p_value": float(res.pvalue)}


def mcnemar_p(correct_a, correct_b) -> float:
    """Exact (binomial) McNemar p of two classifiers' correctness on the same images; 1 when they never disagree."""
    a, b = np.asarray(correct_a, bool), np.asarray(correct_b, bool)
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    if only_a + only_b == 0:
        return 1.0
    table = [[int(np.sum(a & b)), only_a], [only_b, int(np.sum(~a & ~b))]]
    return float(mcnemar(table, exact=True).pvalue)


# ---- churn: which images change their predicted class ---------------------------------------


def disagreement(pred) -> np.ndarray:
    """(n × n) matrix: the fraction of images on which runs j and k predict different classes."""
    pred = np.asarray(pred)
    return np.array([[float(np.mean(pj != pk)) for pk in pred] for pj in pred])


def churn(pred_a, pred_b=None) -> float:
    """Mean churn over pairs of runs: within one arm (all seed pairs) or between two (all cross pairs).

    churn(run, run) is 0, and so is that of two runs that predict identically; NaN without a pair."""
    pred_a = np.asarray(pred_a)
    if pred_b is None:
        n = len(pred_a)
        return float(disagreement(pred_a)[np.triu_indices(n, 1)].mean()) if n > 1 else math.nan
    pred_b = np.asarray(pred_b)
    return float(np.mean([np.mean(pa != pb) for pa in pred_a for pb in pred_b]))


def churn_test(pred_a, pred_b, seed: int = 0) -> dict:
    """Churn within each arm, pooled within, between arms, and the permutation p of "between > within".

    Statistic: between − within (within: the mean over every pair of runs of one arm, both arms pooled).
    The p-value is exact over all C(n_A + n_B, n_A) assignments of the runs to the two arms (one-sided);
    above `MAX_RELABELINGS` it is estimated from that many seeded random assignments. `min_p`: the
    smallest p these run counts can give (3 vs 3: 0.10, so never significant at 0.05)."""
    pred_a, pred_b = np.asarray(pred_a), np.asarray(pred_b)
    na, nb = len(pred_a), len(pred_b)
    out = {
        "within_a": churn(pred_a),
        "within_b": churn(pred_b),
        "between": churn(pred_a, pred_b),
        "within": math.nan,
        "p_value": math.nan,
        "min_p": math.nan,
        "n_relabelings": 0,
        "exact": True,
    }
    if na + nb < 3 or max(na, nb) < 2:
        return out
    dis = disagreement(np.concatenate([pred_a, pred_b]))
    masks = _relabelings(na, nb, seed)
    stat = _churn_statistic(dis, masks)
    observed = stat[0]
    n_within = na * (na - 1) / 2 + nb * (nb - 1) / 2
    out["within"] = float((dis[:na, :na].sum() + dis[na:, na:].sum()) / 2 / n_within)
    tol = 1e-12
    out["p_value"] = float(np.mean(stat >= observed - tol))
    # the design's smallest p, whatever the data: the observed assignment (and, with equal arms, its
    # mirror image, which has the same statistic) alone at the top
    out["min_p"] = (2 if na == nb else 1) / len(masks)
    out["n_relabelings"], out["exact"] = len(masks), math.comb(na + nb, na) <= MAX_RELABELINGS
    return out


def _relabelings(na: int, nb: int, seed: int) -> np.ndarray:
    """(K × n) 0/1 masks of arm A; the observed assignment first. All of them, or seeded random ones."""
    n = na + nb
    observed = np.r_[np.ones(na), np.zeros(nb)]
    if math.comb(n, na) <= MAX_RELABELINGS:
        masks = np.zeros((math.comb(n, na), n))
        for k, idx in enumerate(itertools.combinations(range(n), na)):
            masks[k, list(idx)] = 1
        return masks[np.argsort(~np.all(masks == observed, axis=1), kind="stable")]
    rng = np.random.default_rng(seed)
    drawn = np.array([rng.permutation(observed) for _ in range(MAX_RELABELINGS - 1)])
    return np.vstack([observed, drawn])


def _churn_statistic(dis: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """between − pooled within for each relabeling (rows of `masks`; `dis` symmetric, zero diagonal)."""
    other = 1 - masks
    na, nb = masks.sum(axis=1), other.sum(axis=1)
    between = np.einsum("ki,ij,kj->k", masks, dis, other) / (na * nb)
    within_sum = (np.einsum("ki,ij,kj->k", masks, dis, masks) + np.einsum("ki,ij,kj->k", other, dis, other)) / 2
    return between - within_sum / (na * (na - 1) / 2 + nb * (nb - 1) / 2)


# ---- the seed ensemble and calibration ------------------------------------------------------


def ensemble_pred(pred, confidence) -> np.ndarray:
    """The seed ensemble's class per image: the plurality of the runs' predicted classes; a tie goes to
    the class with the larger summed confidence (then to the lower run index)."""
    pred, confidence = np.asarray(pred), np.asarray(confidence, float)
    n = len(pred)
    same = pred[:, None, :] == pred[None, :, :]  # (run j, run k, image): k voted for j's class
    votes = same.sum(axis=1)
    conf = (same * confidence[None, :, :]).sum(axis=1)
    score = votes + conf / (n + 1)  # summed confidence ≤ votes ≤ n: it only breaks ties
    return np.take_along_axis(pred, score.argmax(axis=0)[None, :], axis=0)[0]


def nll(p_true) -> np.ndarray:
    """Per run (rows of `p_true`): mean negative log-likelihood of the true class, p floored at `NLL_FLOOR`."""
    return -np.log(np.maximum(np.asarray(p_true, float), NLL_FLOOR)).mean(axis=-1)


def ece(confidence, correct, n_bins: int = N_BINS) -> np.ndarray:
    """Per run: expected calibration error Σ_b (n_b/N)·|acc_b − conf_b| over `n_bins` equal-width bins
    ((b−1)/B, b/B] of the predicted class's confidence (Naeini et al. 2015; Guo et al. 2017)."""
    conf, corr = np.atleast_2d(np.asarray(confidence, float)), np.atleast_2d(np.asarray(correct, float))
    bins = np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)
    out = []
    for b, c, k in zip(bins, conf, corr):
        gap = np.bincount(b, weights=k, minlength=n_bins) - np.bincount(b, weights=c, minlength=n_bins)
        out.append(np.abs(gap).sum() / len(b))  # Σ_b (n_b/N)|acc_b − conf_b| = Σ_b |Σ(k − c)| / N
    out = np.array(out)
    return out if np.ndim(confidence) > 1 else out[0]


# ---- everything: one activation, and one against the baseline ---------------------------------


def describe_arm(arm: Arm) -> dict:
    """One arm's own numbers: `accuracy`, `binomial_sd`, `seed_var`, `example_var`, `share`
    (`variance_share`), `churn_within`, `ensemble` accuracy, `nll`, `ece` and their sds over runs."""
    out = variance_share(arm.correct)
    out["churn_within"] = churn(arm.pred)
    out["ensemble"] = float(np.mean(ensemble_pred(arm.pred, arm.confidence) == arm.target))
    for name, values in (("nll", nll(arm.p_true)), ("ece", ece(arm.confidence, arm.correct))):
        out[name] = float(np.mean(values))
        out[f"{name}_sd"] = float(np.std(values, ddof=1)) if arm.n > 1 else math.nan
    return out


def compare_arms(a: Arm, b: Arm, test: str = "student", level: float = LEVEL, seed: int = 0) -> dict:
    """Every per-example number of arm `a` against the baseline `b` (fractions), flat: each arm's
    `describe_arm` (suffix `_a`, `_b`), `diff` and the intervals (`two_level_*`), the image-paired test
    (`images_*`), churn and its permutation test (`churn_*`), the ensembles' McNemar p (`ensemble_p`),
    and the seed-level test (`test`: student, welch, paired) of NLL and ECE (`nll_p`, `ece_p`, with the
    mark of an untestable pair, significance.compare's)."""
    check_same_images([a.target, b.target], ["this activation", "the baseline"])
    out = {"n_a": a.n, "n_b": b.n, "n_images": int(a.target.size)}
    for suffix, arm in (("a", a), ("b", b)):
        out.update({f"{k}_{suffix}": v for k, v in describe_arm(arm).items()})
    interval = two_level_interval(a.correct, b.correct, level)
    out["diff"] = interval.pop("diff")
    out.update({f"two_level_{k}": v for k, v in interval.items()})
    out.update({f"images_{k}": v for k, v in paired_over_images(a.correct, b.correct).items()})
    out.update({f"churn_{k}": v for k, v in churn_test(a.pred, b.pred, seed).items()})
    ens_a, ens_b = (ensemble_pred(x.pred, x.confidence) == x.target for x in (a, b))
    out["ensemble_p"] = mcnemar_p(ens_a, ens_b)
    for name, values in (
        ("nll", (nll(a.p_true), nll(b.p_true))),
        ("ece", (ece(a.confidence, a.correct), ece(b.confidence, b.correct))),
    ):
        va, vb = (pd.Series(v, index=list(arm.seeds)) for v, arm in zip(values, (a, b)))
        res = compare(va, vb, test)
        out[f"{name}_p"], out[f"{name}_mark"] = res["p_value"], res["mark"]
    return out
