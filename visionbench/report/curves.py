"""Convergence as a metric, computed from each run's metrics.csv (docs/report.md, "Convergence metrics").

The summary metrics say where a run ends; these say how fast it gets there. On the digits
default, rational is at 70 % after one epoch where ReLU is at 15 %: a best-over-epochs
table cannot show that, `epochs_to_90` and `val_top1_auc` can.

    visionbench report runs/digits_vgg4 --metric epochs_to_90
    visionbench report runs/digits_vgg4 --metric val_top1_auc

    >>> from visionbench.report import curves, load_runs
    >>> runs = curves.add_metric(load_runs("runs/digits_vgg4"), "epochs_to_90")

The names a `--metric` may take, and their direction, are `visionbench.stats.metrics`'s (`parse`,
`higher_is_better`): `[<column>_]epochs_to_<X>` (X % of the run's own best of the column, default
`val_top1`), `[<column>_]epochs_to_<T>_abs` (T in the column's units) and `<column>_auc` (the area
under the per-epoch curve divided by the number of epochs: the mean over training, in the column's
units, so recipes with different epoch counts stay on one scale). The epoch is metrics.csv's `epoch`
value (the runner writes 1 after the first epoch). A run that never reaches the threshold has no
value: it is counted in the table's `n_missing` and named in the notes, not scored as fast or slow.

Only completed runs get a value (diverged and failed runs are never scored, as in the tables).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..stats.metrics import NAMES_HELP, CurveMetric, higher_is_better, parse
from .collect import read_metrics


def plot_metric(metric: str) -> str:
    """The per-epoch column to draw for `metric`: a curve metric's own column, else `metric` itself."""
    try:
        cm = parse(metric)
    except ValueError:
        return metric
    return cm.column if cm is not None else metric


def epochs_to(frame: pd.DataFrame, column: str, level: float, absolute: bool = False) -> float:
    """First `epoch` where `column` >= level (absolute) or >= level % of its own best; NaN if never."""
    curve = _curve(frame, column)
    if curve is None:
        return math.nan
    target = level if absolute else level / 100 * curve.max()
    reached = curve.index[curve.to_numpy() >= target]
    return float(reached[0]) if len(reached) else math.nan


def auc(frame: pd.DataFrame, column: str) -> float:
    """Area under the per-epoch `column` curve / number of epochs (the mean over training); NaN if none."""
    curve = _curve(frame, column)
    return float(curve.mean()) if curve is not None else math.nan


def _curve(frame: pd.DataFrame, column: str) -> pd.Series | None:
    """`column` by epoch: numeric, finite, one value per epoch (the last, after a resume), sorted."""
    if frame is None or column not in frame.columns or "epoch" not in frame.columns:
        return None
    data = pd.DataFrame(
        {
            "epoch": pd.to_numeric(frame["epoch"], errors="coerce"),
            "value": pd.to_numeric(frame[column], errors="coerce"),
        }
    )
    data = data[np.isfinite(data["epoch"]) & np.isfinite(data["value"])]
    data = data.drop_duplicates("epoch", keep="last").sort_values("epoch")
    return pd.Series(data["value"].to_numpy(), index=data["epoch"].to_numpy()) if len(data) else None


def value(frame: pd.DataFrame | None, cm: CurveMetric) -> float:
    """The curve metric `cm` of one run's metrics.csv frame."""
    if cm.kind == "auc":
        return auc(frame, cm.column)
    return epochs_to(frame, cm.column, cm.level, cm.absolute)


def add_metric(runs: pd.DataFrame, name: str) -> pd.DataFrame:
    """`runs` with a column `name`: the curve metric of every completed run (NaN for the others).

    Raises:
        ValueError: `name` is no curve metric, no run has a metrics.csv, no metrics.csv has the
            column, or `epochs_to` asks for a column where lower is better (a loss never "reaches" 90 %).
    """
    cm = parse(name)
    if cm is None:
        raise ValueError(f"{name!r} is no curve metric; curve metrics are {NAMES_HELP}")
    if cm.kind == "epochs_to" and not higher_is_better(cm.column):
        raise ValueError(
            f"--metric {name}: epochs_to needs a column where higher is better (val_top1, test_top1, "
            f"ema_val_top1, ...), got {cm.column!r}"
        )
    frames = {i: read_metrics(run["run_dir"]) for i, run in runs.iterrows() if run["status"] == "completed"}
    found = [f for f in frames.values() if f is not None]
    if not found:
        raise ValueError(f"--metric {name} is computed from each run's metrics.csv, and no completed run has one")
    if not any(cm.column in f.columns for f in found):
        columns = sorted({c for f in found for c in f.columns} - {"epoch"})
        raise ValueError(f"--metric {name}: no metrics.csv has a column {cm.column!r}; columns: {', '.join(columns)}")
    values = [value(frames[i], cm) if frames.get(i) is not None else math.nan for i in runs.index]
    return runs.assign(**{name: values})
