"""Did a run learn, and has a comparison converged: the numbers behind a table's stall rule, its convergence line
and its ranking flag (docs/report.md, "Did it learn, has it converged"). Plain numbers in, numbers out.

    >>> from visionbench.stats import convergence
    >>> convergence.stall_reason(train_loss=2.31, best_top1=11.0, n_classes=10)   # 'final training loss ...'
    >>> convergence.run_stall_reason(summary["metrics"], 10, train_losses)         # from a run's metrics (+ per epoch)
    >>> convergence.tail_slope([1, 2, ..., 15], curve)                             # points per epoch, last 25 %
    >>> convergence.mean_interval([0.12, 0.31, 0.05])                             # (mean, low, high), t over seeds
    >>> convergence.still_improving(0.05, 0.01, 0.09, sd=0.27, window=4)          # False: 4 × 0.05 < 0.27
    >>> change = convergence.ranking_change({"gelu": mid_g, "relu": mid_r}, {"gelu": end_g, "relu": end_r},
    ...                                     resolution=100 / 360)                # runs' values at epoch 8 and 15
    >>> convergence.moving(change, alpha=0.05)                                   # the reversals beyond noise

**Stalled.** A run that trained to its last epoch without learning, with C classes (ln C: the cross-entropy of a
uniform guess; a network that knows nothing averages p(true) = 1/C and, by Jensen, a loss of at least ln C):

1. its training loss never came down: over two or more epochs every epoch's training loss is at least
   `LOSS_FRACTION` · ln C and the last is at least (1 − `LOSS_DROP`) × the first's (it fell less than 5 % from
   where it started: `optim.lr=1e-9`), whatever the accuracy; or
2. its final training loss is at least `LOSS_FRACTION` · ln C and (a) it trained `SHORT_RUN` (3) epochs or more, or
   (b) its last held-out top-1 is at chance too (`stalled_top1`), or (c) the loss is ≥ ln C, worse than a guess.
   A 1–2 epoch run whose accuracy left chance while its loss came down from its first epoch but not yet below
   0.9 ln C is no stall: it is learning; or
3. the best top-1 it reached on held-out data is within `stalled_top1(C)` of chance 100/C: 1.5 × chance, at most 5
   points above it (C = 10: 15 %; C = 2: 55 %; C = 1000: 0.15 %). The multiplicative part speaks for many classes,
   the 5-point cap for few (1.5 × 50 % = 75 % would call a binary classifier that learned a stall).

Rule 2 also catches a run that learned and collapsed back to chance before its last epoch (a best-epoch metric
would still score its lucky peak). The number of epochs and the first epoch's loss come from the run's metrics.csv
(`train_losses`); without it rule 1 is not judged and rule 2 keeps the short-run protection (b, c).

**Converged.** `tail_slope` fits a least-squares line to the last `TAIL` (25 %) of a run's epochs, at least
`MIN_POINTS` (3), and gives its slope in the metric's units per epoch; `mean_interval` is the mean of those
slopes over seeds with its t interval (scipy's `ttest_1samp(...).confidence_interval`); `still_improving` flags
an activation whose interval excludes 0 in the metric's good direction *and* whose mean slope times the window's
epochs is at least its seed sd (sample sd over its runs of the curve's last value): another window of epochs at
that slope would move it by a seed's noise or more. One run (no sd) is never flagged.

**Ranking.** `ranking_change` lists each pair of activations whose order at the middle epoch ⌈E/2⌉ and at the last
epoch E is reversed, strictly (`compare_means`: a tie at either epoch is no reversal; top-1s compared in image
counts), with the Welch two-sample p of the pair's per-run gains (value at E − value at ⌈E/2⌉) and its
Holm-adjusted p over every pair compared; the ranking was still moving when some reversal's adjusted p is below α
(`moving`).
`ranking_tau` is Kendall's τ-b (scipy's `kendalltau`) between the two epochs' means: a summary, not the flag.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats as sps

from .significance import compare, holm

LOSS_FRACTION = 0.9  # a training loss >= 0.9 ln C has come down less than 10 % from a uniform guess
LOSS_DROP = 0.05  # a loss that fell less than 5 % from its first epoch's never started coming down
SHORT_RUN = 3  # from 3 epochs on, a final loss >= 0.9 ln C is a stall whatever the accuracy (a learning run is below)
ACCURACY_FACTOR = 1.5  # a best top-1 <= 1.5 × chance ...
ACCURACY_POINTS = 5.0  # ... and at most 5 points above chance is at chance
TAIL = 0.25  # the share of the last epochs the slope is fitted over
MIN_POINTS = 3  # fewer epochs give no slope
LEVEL = 0.95
ALPHA = 0.05  # the ranking flag's level unless the report passes its --alpha
# two means closer than this share of their size are tied when the values are no image counts: 16 × float32's
# precision (metrics.csv stores float32), far below one image in a million (1e-4 points of a top-1 in %)
TIE_RELATIVE = 1e-6
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
    return isinstance(x, (int, float, np.floating)) and not isinstance(x, bool) and math.isfinite(x)


def never_learned(train_losses, n_classes: int) -> str | None:
    """Rule 1 (module docstring): why the training loss never came down, None when it did (or fewer than two epochs
    have a finite loss: one epoch shows no change)."""
    losses = [float(x) for x in (train_losses or ()) if _finite(x)]
    floor = stalled_loss(n_classes)
    if len(losses) < 2 or min(losses) < floor or losses[-1] < (1 - LOSS_DROP) * losses[0]:
        return None
    return (
        f"training loss never came down: {losses[0]:.3f} in epoch 1, {losses[-1]:.3f} in epoch {len(losses)} "
        f"(down < {LOSS_DROP:.0%}), never below {LOSS_FRACTION:g}·ln {n_classes} = {floor:.3f}"
    )


def stall_reason(train_loss, best_top1, n_classes, final_top1=None, train_losses=None) -> str | None:
    """Why a finished run is stalled (module docstring), None when it is not or C is unknown (None, < 2).

    Args:
        train_loss: the run's final training loss (NaN/None: the last of `train_losses`, else not judged on it).
        best_top1: the best top-1 (%) it reached on held-out data (NaN/None: not judged on it).
        n_classes: C, the number of classes.
        final_top1: its held-out top-1 (%) at the last epoch (NaN/None: counts as at chance).
        train_losses: its training loss per epoch, in epoch order (metrics.csv's `train_loss`): the number of
            epochs it trained and where its loss started. None or empty: unknown (rule 1 is not judged, and rule 2
            needs the accuracy at chance or a loss ≥ ln C, as for a short run).
    """
    if not isinstance(n_classes, int) or n_classes < 2:
        return None
    losses = [] if train_losses is None else list(train_losses)
    if not _finite(train_loss):
        train_loss = next((float(x) for x in reversed(losses) if _finite(x)), None)
    flat = never_learned(losses, n_classes)
    if flat:
        return flat
    final_at_chance = not _finite(final_top1) or final_top1 <= stalled_top1(n_classes)
    long_run = len(losses) >= SHORT_RUN
    if (
        _finite(train_loss)
        and train_loss >= stalled_loss(n_classes)
        and (long_run or final_at_chance or train_loss >= math.log(n_classes))
    ):
        return (
            f"final training loss {train_loss:.3f} ≥ {LOSS_FRACTION:g}·ln {n_classes} = {stalled_loss(n_classes):.3f}"
        )
    if _finite(best_top1) and best_top1 <= stalled_top1(n_classes):
        return (
            f"best held-out top-1 {best_top1:.2f} % ≤ {stalled_top1(n_classes):.2f} % "
            f"(chance {chance_top1(n_classes):.2f} %)"
        )
    return None


def run_stall_reason(metrics: Mapping, n_classes, train_losses=None) -> str | None:
    """`stall_reason` of one run from its metrics (a summary's `metrics`, or a report row holding them): its
    `train_loss_final`, the highest of its held-out best top-1s (`HELD_OUT_TOP1`) and the highest of their values
    at the last epoch (`*_final`), with its per-epoch `train_losses` (results/layout.py `train_losses`, from its
    metrics.csv). The report's `stalled` status and `seeds=auto`'s decisions both judge by it."""

    def highest(keys):
        found = [float(metrics[k]) for k in keys if _finite(metrics.get(k))]
        return max(found) if found else None

    return stall_reason(
        metrics.get("train_loss_final"),
        highest(HELD_OUT_TOP1),
        n_classes,
        final_top1=highest([k.replace("_best", "_final") for k in HELD_OUT_TOP1]),
        train_losses=train_losses,
    )


# --- converged: the tail slope ----------------------------------------------------------------


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


def seed_sd(values) -> float:
    """The sample sd (ddof 1) of the finite `values`: the seed noise a slope is measured against; NaN for fewer
    than two."""
    x = np.asarray(values, float)
    x = x[np.isfinite(x)]
    return float(np.std(x, ddof=1)) if len(x) >= 2 else math.nan


def still_improving(mean: float, low: float, high: float, sd: float, window: int, higher_better: bool = True) -> bool:
    """Still rising (for a loss, falling): the slope's interval [low, high] excludes 0 in the metric's good direction
    and `window` epochs at the mean slope move the metric by at least `sd`, the seed sd (NaN sd: no flag)."""
    if not (_finite(mean) and _finite(sd)):
        return False
    excludes = low > 0 if higher_better else high < 0
    moves = mean * window >= sd if higher_better else -mean * window >= sd
    return bool(excludes and moves)


# --- converged: the ranking -------------------------------------------------------------------


def compare_means(a, b, resolution: float | None = None) -> int:
    """-1, 0 or 1 as the mean of `a` is below, equal to or above the mean of `b`. With `resolution` (the metric's
    units per image: 100 / N for a top-1 in % over N images) each value is counted in images (rounded) and the
    means compared exactly; without it, means within `TIE_RELATIVE` of their size are equal."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if resolution:
        sa, sb = int(np.rint(a / resolution).sum()), int(np.rint(b / resolution).sum())
        cross = sa * len(b) - sb * len(a)  # sa / na vs sb / nb, in integers
        return (cross > 0) - (cross < 0)
    ma, mb = float(a.mean()), float(b.mean())
    if abs(ma - mb) <= TIE_RELATIVE * max(abs(ma), abs(mb)):
        return 0
    return 1 if ma > mb else -1


@dataclass(frozen=True)
class Reversal:
    """A pair whose order reversed between the middle and the last epoch."""

    ahead: str  # better at the last epoch: it overtook `behind`
    behind: str
    p: float  # Welch p of the two activations' per-run gains (NaN: not testable)
    p_holm: float  # Holm-adjusted over every pair compared (`RankingChange.pairs`), NaN where p is


@dataclass(frozen=True)
class RankingChange:
    """How the order of the activations changed between the middle and the last epoch."""

    pairs: int  # pairs compared: every two activations with runs at both epochs
    tied: int  # of them, equal means (`compare_means`) at either epoch: no reversal, though Kendall's τ counts them
    reversals: list[Reversal]  # the pairs whose order reversed strictly, the lowest p first, the untestable last


def ranking_change(
    mid: Mapping[str, Sequence[float]],
    last: Mapping[str, Sequence[float]],
    higher_better: bool = True,
    resolution: float | None = None,
) -> RankingChange:
    """The pairs of activations whose order at the middle epoch (`mid`: per act, its runs' values there) and at the
    last epoch (`last`: the same runs' values, in the same order) reverses strictly (`compare_means` with
    `resolution`), each with the Welch p of the pair's per-run gains (significance.py `compare`) and its Holm adjustment over every
    pair compared (significance.py `holm`, statsmodels' to the bit). Every pair is in the family, not only the
    reversed ones: picking the pairs by the data that the test then sees flagged 6.8 % of tables without a change
    at α = 0.05 (3,000 simulated tables of 4 activations × 5 seeds, the noise of tests/test_convergence.py)."""
    acts = sorted(act for act in mid if len(mid[act]) and len(mid[act]) == len(last.get(act, ())))
    gains = {act: np.asarray(last[act], float) - np.asarray(mid[act], float) for act in acts}
    pairs = list(combinations(acts, 2))
    p = [compare(pd.Series(gains[a]), pd.Series(gains[b]), "welch")["p_value"] for a, b in pairs]
    adjusted = holm(p) if pairs else []
    tied, found = 0, []
    for (a, b), p_ab, q in zip(pairs, p, adjusted):
        before, after = compare_means(mid[a], mid[b], resolution), compare_means(last[a], last[b], resolution)
        tied += before == 0 or after == 0
        if before == 0 or after == 0 or before == after:
            continue
        ahead, behind = (a, b) if (after > 0) == higher_better else (b, a)
        found.append(Reversal(ahead, behind, float(p_ab), float(q)))
    found.sort(key=lambda r: (not math.isfinite(r.p), r.p if math.isfinite(r.p) else 0.0))
    return RankingChange(len(pairs), tied, found)


def moving(change: RankingChange, alpha: float = ALPHA) -> list[Reversal]:
    """The reversals beyond noise: Holm-adjusted gain p below `alpha`. Any one means the ranking was still moving."""
    return [r for r in change.reversals if math.isfinite(r.p_holm) and r.p_holm < alpha]


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
