"""Did a run learn, and has a comparison converged: the numbers behind a table's stall rule and its convergence
line (docs/report.md, "Did it learn, has it converged"). Plain numbers in, numbers out.

    >>> from visionbench.stats import convergence
    >>> convergence.stall_reason(train_loss=2.31, best_top1=11.0, n_classes=10)   # 'final training loss ...'
    >>> convergence.run_stall_reason(summary["metrics"], n_classes=10)           # the same, from a run's metrics
    >>> convergence.tail_slope([1, 2, ..., 15], curve)                             # points per epoch, last 25 %
    >>> convergence.mean_interval([0.12, 0.31, 0.05])                             # (mean, low, high), t over seeds
    >>> convergence.ranking_tau([97.1, 96.8, 95.0], [98.7, 98.5, 97.3])           # Kendall τ of two rankings

**Stalled.** A run that trained to its last epoch and ended it at chance level: its final training loss is still
at least `LOSS_FRACTION` · ln C (the cross-entropy of a uniform guess over C classes is ln C; a network that knows
nothing averages p(true) = 1/C and, by Jensen, a loss of at least ln C) while its last held-out top-1 is at
chance too (where the run records one: a short run can leave chance in accuracy before its loss comes down; a
loss ≥ ln C, worse than a uniform guess, counts alone), or the best top-1 it reached on held-out
data is within `stalled_top1(C)` of chance 100/C: 1.5 × chance, at most 5 points above it (for C = 10: 15 %; C = 2:
55 %; C = 1000: 0.15 %). The multiplicative part speaks for many classes, the 5-point cap for few (1.5 × 50 % =
75 % would call a binary classifier that learned a stall). The loss rule also catches a run that learned and then
collapsed back to chance before its last epoch (a best-epoch metric would still score its lucky peak).

**Converged.** `tail_slope` fits a least-squares line to the last `TAIL` (25 %) of a run's epochs, at least
`MIN_POINTS` (3), and gives its slope in the metric's units per epoch; `mean_interval` is the mean of those
slopes over seeds with its t interval (scipy's `ttest_1samp(...).confidence_interval`); `still_improving` flags
an interval that excludes 0 in the metric's good direction. `ranking_tau` is Kendall's τ-b (scipy's
`kendalltau`) between the activations' mean metric at two epochs: 1 when the order did not change.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Mapping

import numpy as np
from scipy import stats as sps

LOSS_FRACTION = 0.9  # a final training loss >= 0.9 ln C has come down less than 10 % from a uniform guess
ACCURACY_FACTOR = 1.5  # a best top-1 <= 1.5 × chance ...
ACCURACY_POINTS = 5.0  # ... and at most 5 points above chance is at chance
TAIL = 0.25  # the share of the last epochs the slope is fitted over
MIN_POINTS = 3  # fewer epochs give no slope
LEVEL = 0.95
# the best top-1 a run reached on held-out data, per weights and split: the stall rule takes the highest
HELD_OUT_TOP1 = ("val_top1_best", "test_top1_best", "ema_val_top1_best", "ema_test_top1_best")


def chance_top1(n_classes: int) -> float:
    """The top-1 accuracy (%) of a guess: 100 / C."""
    return 100.0 / n_classes


def stalled_top1(n_classes: int) -> float:
    """The top-1 (%) at or below which a run's best is at chance: 1.5 × chance, at most 5 points above it."""
    chance = chance_top1(n_classes)
    return chance + min((ACCURACY_FACTOR - 1) * chance, ACCURACY_POINTS)


def stalled_loss(n_classes: int) -> float:
    """The training loss at or above which a run is at chance: `LOSS_FRACTION` · ln C."""
    return LOSS_FRACTION * math.log(n_classes)


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def stall_reason(train_loss, best_top1, n_classes, final_top1=None) -> str | None:
    """Why a finished run is stalled (module docstring), None when it is not or C is unknown (None, < 2).

    Args:
        train_loss: the run's final training loss (NaN/None: not judged on it).
        best_top1: the best top-1 (%) it reached on held-out data (NaN/None: not judged on it).
        n_classes: C, the number of classes.
        final_top1: its held-out top-1 (%) at the last epoch: a loss between 0.9·ln C and ln C counts only with it
            at chance too (NaN/None: the loss alone), so a short run whose accuracy left chance but whose loss has
            not come down yet is no stall; a loss ≥ ln C (worse than a uniform guess) counts whatever it is.
    """
    if not isinstance(n_classes, int) or n_classes < 2:
        return None
    final_at_chance = not _finite(final_top1) or final_top1 <= stalled_top1(n_classes)
    worse_than_a_guess = _finite(train_loss) and train_loss >= math.log(n_classes)
    if _finite(train_loss) and train_loss >= stalled_loss(n_classes) and (final_at_chance or worse_than_a_guess):
        return (f"final training loss {train_loss:.3f} ≥ {LOSS_FRACTION:g}·ln {n_classes} = "
                f"{stalled_loss(n_classes):.3f}")
    if _finite(best_top1) and best_top1 <= stalled_top1(n_classes):
        return (f"best held-out top-1 {best_top1:.2f} % ≤ {stalled_top1(n_classes):.2f} % "
                f"(chance {chance_top1(n_classes):.2f} %)")
    return None


def run_stall_reason(metrics: Mapping, n_classes) -> str | None:
    """`stall_reason` of one run from its metrics (a summary's `metrics`, or a report row holding them): its
    `train_loss_final`, the highest of its held-out best top-1s (`HELD_OUT_TOP1`) and the highest of their values
    at the last epoch (`*_final`). The report's `stalled` status and `seeds=auto`'s decisions both judge by it."""
    def highest(keys):
        found = [float(metrics[k]) for k in keys if _finite(metrics.get(k))]
        return max(found) if found else None

    return stall_reason(metrics.get("train_loss_final"), highest(HELD_OUT_TOP1), n_classes,
                        final_top1=highest([k.replace("_best", "_final") for k in HELD_OUT_TOP1]))


def tail_window(n_epochs: int) -> int:
    """How many of the last epochs the slope is fitted over: 25 % of them, rounded up, at least 3."""
    return max(MIN_POINTS, math.ceil(TAIL * n_epochs))


def tail_slope(epochs, values) -> float:
    """The least-squares slope (units per epoch) of `values` over the last `tail_window` epochs; NaN when the
    curve has fewer than `MIN_POINTS` finite points."""
    x, y = np.asarray(epochs, float), np.asarray(values, float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < MIN_POINTS:
        return math.nan
    order = np.argsort(x, kind="stable")
    window = tail_window(len(x))
    x, y = x[order][-window:], y[order][-window:]
    return float(sps.linregress(x, y).slope)


def mean_interval(values, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, low, high): the mean of the finite `values` and its t interval over them; the interval is NaN for
    fewer than two values and [mean, mean] when they are all equal."""
    x = np.asarray(values, float)
    x = x[np.isfinite(x)]
    if not len(x):
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    if np.all(x == x[0]):
        return mean, mean, mean
    ci = sps.ttest_1samp(x, 0.0).confidence_interval(level)
    return mean, float(ci.low), float(ci.high)


def still_improving(low: float, high: float, higher_better: bool = True) -> bool:
    """Whether the slope's interval excludes 0 in the metric's good direction (still rising; for a loss, falling)."""
    return bool(low > 0) if higher_better else bool(high < 0)


def ranking_tau(earlier, later) -> float:
    """Kendall's τ-b between two sets of the same activations' scores (NaN with fewer than two, or a constant set)."""
    a, b = np.asarray(earlier, float), np.asarray(later, float)
    if len(a) < 2 or len(a) != len(b) or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return math.nan
    if np.all(a == a[0]) or np.all(b == b[0]):
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(sps.kendalltau(a, b).statistic)
