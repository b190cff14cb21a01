"""What a metric's name says: which direction is better, and, for a curve metric, what to compute.

    >>> from visionbench.stats.metrics import higher_is_better, parse
    >>> higher_is_better("val_top1_best"), higher_is_better("val_loss_final"), higher_is_better("epochs_to_90")
    (True, False, False)
    >>> parse("ema_val_top1_epochs_to_97.5")
    CurveMetric(name='ema_val_top1_epochs_to_97.5', column='ema_val_top1', kind='epochs_to', level=97.5, absolute=False)

Every part of the project that ranks, tests or selects on a metric asks `higher_is_better` here
(the tables' bold/underline, the verdicts, the suite ranks, the best-of selection of a factor sweep,
the sequential rule of `seeds=auto`), so they can never disagree about a name.

Curve metrics are computed from a run's per-epoch `metrics.csv` (the report's `curves.py` does the
reading); their names (`<column>`: a metrics.csv column, default `val_top1`):

* `[<column>_]epochs_to_<X>`: the first epoch at which the column reaches X % of the run's own best
  (0 < X <= 100). Fewer epochs is better.
* `[<column>_]epochs_to_<T>_abs`: the first epoch at which the column reaches T in its own units.
* `<column>_auc`: the mean of the column over training; better in the column's own direction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# name fragments of metrics where smaller wins: losses, error rates, perplexities, seconds, megabytes
LOWER_IS_BETTER = ("loss", "err", "ppl", "time", "mem")
DEFAULT_COLUMN = "val_top1"  # the curve paper 004 Fig 1 draws
_EPOCHS_TO = re.compile(r"^(?:(?P<column>\w+?)_)?epochs_to_(?P<level>\d+(?:\.\d+)?)(?P<abs>_abs)?$")
_AUC = re.compile(r"^(?P<column>\w+)_auc$")
NAMES_HELP = (
    "epochs_to_<X> (X % of the run's own best val_top1), epochs_to_<T>_abs, <column>_auc "
    "(curve metrics from metrics.csv; docs/report.md)"
)


@dataclass(frozen=True)
class CurveMetric:
    """A parsed curve metric name: `kind` is `epochs_to` or `auc`; `level` is X (relative, %) or T."""

    name: str
    column: str
    kind: str
    level: float | None = None
    absolute: bool = False


def parse(name: str) -> CurveMetric | None:
    """The curve metric `name` stands for, None when it is no curve metric name.

    Raises:
        ValueError: an `epochs_to_<X>` with X outside (0, 100].
    """
    m = _EPOCHS_TO.match(name)
    if m:
        level, absolute = float(m["level"]), bool(m["abs"])
        if not absolute and not 0 < level <= 100:
            raise ValueError(
                f"--metric {name}: X in epochs_to_<X> is a percentage of the run's best, in (0, 100]; "
                f"for an absolute threshold write epochs_to_{m['level']}_abs"
            )
        return CurveMetric(name, m["column"] or DEFAULT_COLUMN, "epochs_to", level, absolute)
    m = _AUC.match(name)
    if m:
        return CurveMetric(name, m["column"], "auc")
    return None


def higher_is_better(metric: str) -> bool:
    """Whether a larger value of `metric` is better, from its name alone.

    `epochs_to_*` (how many epochs a run needs) goes down; every other name goes down when it names
    a loss, an error, a perplexity, a time or a memory size (`val_loss_auc` too), and up otherwise
    (accuracies, `val_top1_auc`).
    """
    if _EPOCHS_TO.match(metric):  # also an out-of-range level: the name still counts epochs
        return False
    return not any(key in metric.lower() for key in LOWER_IS_BETTER)
