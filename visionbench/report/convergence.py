"""Did the runs of a table learn, and had the comparison converged: the table's stall note, its convergence line,
the clause a verdict gets while the ranking still moves, and the CSV columns behind them (docs/report.md, "Did it
learn, has it converged"). The numbers are stats/convergence.py's; the stall itself is decided per run when the
runs are read (collect.py: status `stalled`).

    >>> from visionbench.report import convergence
    >>> summary, notes = convergence.attach(summary, recipe_runs, "test_top1_at_best_val")

The line follows the per-epoch column of the table's metric (`test_top1` for `test_top1_at_best_val`; figures.py
`curve_column`) in the completed runs' metrics.csv: per activation the mean slope over the last 25 % of the epochs
(at least 3) with its t interval over seeds, `still rising` (`still falling` for a loss) when the interval excludes
0 in the good direction; then Kendall's τ between the activations' mean at epoch ⌈E/2⌉ and at the last epoch E.
A τ below 1 means the order changed in the second half: every verdict of the table then says that the ranking was
still moving. Runs without a metrics.csv are left out; a table without any says `no curves`, and flags nothing.
"""
from __future__ import annotations

import math

import pandas as pd

from ..results.layout import COMPLETED, STALLED
from ..stats import convergence as conv
from ..stats.metrics import higher_is_better
from .collect import read_metrics
from .curves import _curve, plot_metric
from .figures import curve_column
from .tables import number

COLUMNS = ("slope", "slope_low", "slope_high", "still_improving", "kendall_tau")


def stall_notes(runs: pd.DataFrame) -> list[str]:
    """One note naming the table's stalled runs and why, one counting the completed runs that could not be checked
    (no predictions.npz names their number of classes); none when there is nothing to say."""
    out = []
    stalled = runs[runs["status"] == STALLED]
    if len(stalled):
        out.append("stalled (ended training at chance level; not scored, counted like a divergence): "
                   + "; ".join(f"{r['act']} seed {r['seed']}: {r['stalled']}" for _, r in stalled.iterrows()))
    unknown = int(((runs["status"] == COMPLETED) & runs["n_classes"].isna()).sum())
    if unknown:
        out.append(f"{unknown} completed run{'s' if unknown > 1 else ''} not checked for a stall: no predictions.npz "
                   "names the number of classes")
    return out


def _curves(runs: pd.DataFrame, metric: str) -> tuple[str | None, dict[str, list[pd.Series]], int]:
    """(the per-epoch column, {act: its completed runs' curves of it}, completed runs without a metrics.csv)."""
    done = runs[runs["status"] == COMPLETED]
    frames = [(run["act"], read_metrics(run["run_dir"])) for _, run in done.iterrows()]
    found = [(act, f) for act, f in frames if f is not None]
    if not found:
        return None, {}, len(frames)
    column = curve_column(plot_metric(metric), sorted({c for _, f in found for c in f.columns}))
    curves: dict[str, list[pd.Series]] = {}
    for act, frame in found:
        curve = _curve(frame, column) if column else None
        if curve is not None:
            curves.setdefault(act, []).append(curve)
    return column, curves, len(frames) - len(found)


def _epoch(e: float) -> str:
    return f"{e:g}"


def _mean_at(curves: list[pd.Series], epoch: float) -> float:
    values = [c[epoch] for c in curves if epoch in c.index]
    return float(sum(values) / len(values)) if values else math.nan


def _slopes(curves: dict[str, list[pd.Series]], higher: bool) -> dict[str, tuple[float, float, float, bool]]:
    """{act: (mean slope, low, high, still improving)} over its runs' tail slopes."""
    out = {}
    for act, runs in curves.items():
        mean, low, high = conv.mean_interval([conv.tail_slope(c.index, c.to_numpy()) for c in runs])
        out[act] = (mean, low, high, conv.still_improving(low, high, higher))
    return out


def _slope_text(act: str, numbers: tuple, digits: int, higher: bool) -> str:
    mean, low, high, improving = numbers
    if not math.isfinite(mean):
        return f"{act} no slope"
    if not math.isfinite(low):
        return f"{act} {number(mean, digits, sign=True)} (one run, no interval)"
    flag = f" still {'rising' if higher else 'falling'}" if improving else ""
    return f"{act} {number(mean, digits, sign=True)} [{number(low, digits, True)}, {number(high, digits, True)}]{flag}"


def _ranking(curves: dict[str, list[pd.Series]], epochs: list[float]) -> tuple[float, float, float]:
    """(τ, epoch ⌈E/2⌉, epoch E) over the acts with a mean at both epochs; τ NaN when it is not defined."""
    mid, last = epochs[math.ceil(len(epochs) / 2) - 1], epochs[-1]
    pairs = [(_mean_at(c, mid), _mean_at(c, last)) for _, c in sorted(curves.items())]
    pairs = [p for p in pairs if math.isfinite(p[0]) and math.isfinite(p[1])]
    return conv.ranking_tau([p[0] for p in pairs], [p[1] for p in pairs]), mid, last


def _line(acts, column, epochs, curves, slopes, missing: int, higher: bool, tau, mid, last, digits: int) -> str:
    """The convergence line of one table (module docstring), the activations in the table's order `acts`."""
    left_out = f" ({missing} completed run{'s' if missing > 1 else ''} without metrics.csv left out)" if missing else ""
    head = f"Convergence of {column}{left_out}: "
    if len(epochs) < conv.MIN_POINTS:
        plural = "s" if len(epochs) > 1 else ""
        text = head + f"{len(epochs)} epoch{plural}, too few for a slope (needs {conv.MIN_POINTS})"
    else:
        text = head + (f"slope per epoch over the last {conv.tail_window(len(epochs))} of {len(epochs)} epochs, mean "
                       f"[95 % t interval] over seeds: "
                       + "; ".join(_slope_text(act, slopes[act], digits, higher) for act in acts if act in slopes))
    if len(epochs) < 2 or len(curves) < 2:
        return text + "."
    ranking = f"ranking of the activations' mean {column} at epoch {_epoch(mid)} vs {_epoch(last)}: Kendall τ "
    if not math.isfinite(tau):
        return text + f". The {ranking}undefined (tied means)."
    return text + f". The {ranking}= {number(tau, 2)}{', still moving' if tau < 1 else ', unchanged'}."


def attach(summary: pd.DataFrame, runs: pd.DataFrame, metric: str, digits: int = 2) -> tuple[pd.DataFrame, list[str]]:
    """`summary` (one table, after verdict.annotate) with the COLUMNS and, while the ranking still moved, the clause
    in each verdict's sentence; and the table's notes: the stall notes, then the convergence line."""
    notes = stall_notes(runs)
    out = summary.copy()
    for col in COLUMNS:
        out[col] = False if col == "still_improving" else math.nan
    column, curves, missing = _curves(runs, metric)
    if not curves:
        done = int((runs["status"] == COMPLETED).sum())
        return out, notes + [f"Convergence: no curves ({'no metrics.csv' if done else 'no completed run'})."]
    higher = higher_is_better(column)
    slopes = _slopes(curves, higher)
    epochs = sorted({e for c in curves.values() for curve in c for e in curve.index})
    tau, mid, last = _ranking(curves, epochs) if len(epochs) >= 2 else (math.nan, math.nan, math.nan)
    numbers = [slopes.get(act, (math.nan, math.nan, math.nan, False)) for act in out["act"]]
    for k, col in enumerate(COLUMNS[:4]):
        out[col] = [n[k] for n in numbers]
    out["kendall_tau"] = tau
    if math.isfinite(tau) and tau < 1 and "verdict" in out:
        clause = (f"; the ranking was still moving (Kendall τ = {number(tau, 2)} between epoch {_epoch(mid)} and "
                  f"{_epoch(last)}).")
        moving = out["verdict"].astype(str).ne("") & out["verdict_text"].astype(str).str.endswith(".")
        out.loc[moving, "verdict_text"] = out.loc[moving, "verdict_text"].str[:-1] + clause
    return out, notes + [_line(list(out["act"]), column, epochs, curves, slopes, missing, higher, tau, mid, last,
                               digits)]
