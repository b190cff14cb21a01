"""Did the runs of a table learn, and had the comparison converged: the table's stall note, its convergence line,
the clause a verdict gets while the ranking still moves, and the CSV columns behind them (docs/report.md, "Did it
learn, has it converged"). The numbers and the rules are stats/convergence.py's; the stall itself is decided per
run when the runs are read (collect.py: status `stalled`).

    >>> from visionbench.report import convergence
    >>> summary, notes = convergence.attach(summary, recipe_runs, "test_top1_at_best_val", alpha=0.05)

The line follows the per-epoch column of the table's metric (`test_top1` for `test_top1_at_best_val`; figures.py
`curve_column`) in the completed runs' metrics.csv: per activation the mean slope over the last 25 % of the epochs
(at least 3) with its t interval over seeds, `still rising` (`still falling` for a loss) when the interval excludes
0 in the good direction and the window's epochs at that slope move the column by at least the activation's seed sd
at the last epoch (`rising within seed noise` when only the first holds); then Kendall's τ between the activations'
means at epoch ⌈E/2⌉ and at the last epoch E, the pairs whose order reversed, and whether any reversal is beyond
noise (a Welch test of the pair's per-run gains, Holm over every pair, at the report's α). Only then does
every verdict of the table say that the ranking was still moving, naming the pairs. Top-1 columns are compared in
image counts when the runs' predictions.npz give the number of images N and every value is a count of N. Runs
without a metrics.csv are left out; a table without any says `no curves`, and flags nothing.

CSV columns: `slope`, `slope_low`, `slope_high`, `last_sd` (the seed sd at the last epoch), `still_improving`, and
for the table `kendall_tau`, `reversed_pairs` (how many pairs reversed), `ranking_moving` (a reversal beyond noise).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..results.layout import COMPLETED, STALLED
from ..stats import convergence as conv
from ..stats.metrics import higher_is_better
from .collect import read_metrics
from .curves import _curve, plot_metric
from .figures import curve_column
from .tables import number, p_relation

COLUMNS = (
    "slope",
    "slope_low",
    "slope_high",
    "last_sd",
    "still_improving",
    "kendall_tau",
    "reversed_pairs",
    "ranking_moving",
)


def stall_notes(runs: pd.DataFrame) -> list[str]:
    """One note naming the table's stalled runs and why, one counting the completed runs that could not be checked
    (no predictions.npz names their number of classes); none when there is nothing to say."""
    out = []
    stalled = runs[runs["status"] == STALLED]
    if len(stalled):
        out.append(
            "stalled (ended training at chance level; not scored, counted like a divergence): "
            + "; ".join(f"{r['act']} seed {r['seed']}: {r['stalled']}" for _, r in stalled.iterrows())
        )
    unknown = int(((runs["status"] == COMPLETED) & runs["n_classes"].isna()).sum())
    if unknown:
        out.append(
            f"{unknown} completed run{'s' if unknown > 1 else ''} not checked for a stall: no predictions.npz "
            "names the number of classes"
        )
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


def _last(curve: pd.Series) -> float:
    return float(curve[curve.index.max()])


def _slopes(curves: dict[str, list[pd.Series]], higher: bool, window: int) -> dict[str, tuple]:
    """{act: (mean slope, low, high, seed sd at the last epoch, still improving)} over its runs' tail slopes."""
    out = {}
    for act, runs in curves.items():
        mean, low, high = conv.mean_interval([conv.tail_slope(c.index, c.to_numpy()) for c in runs])
        sd = conv.seed_sd([_last(c) for c in runs])
        out[act] = (mean, low, high, sd, conv.still_improving(mean, low, high, sd, window, higher))
    return out


def _slope_text(act: str, numbers: tuple, digits: int, higher: bool, window: int) -> str:
    mean, low, high, sd, improving = numbers
    if not math.isfinite(mean):
        return f"{act} no slope"
    if not math.isfinite(low):
        return f"{act} {number(mean, digits, sign=True)} (one run, no interval)"
    text = f"{act} {number(mean, digits, sign=True)} [{number(low, digits, True)}, {number(high, digits, True)}]"
    direction = "rising" if higher else "falling"
    if not (low > 0 if higher else high < 0):
        return text
    moved = f"{window} × slope = {number(mean * window, digits, True)}"
    if improving:
        return text + f" still {direction} ({moved}, seed sd {number(sd, digits)})"
    return text + f" {direction} within seed noise ({moved}, seed sd {number(sd, digits)})"


def _resolution(runs: pd.DataFrame, values) -> float | None:
    """The metric's units per image, 100 / N, when every value is a count of N images in % (N from the completed
    runs' predictions.npz, collect.py's `n_images`, one N for all); None otherwise (a val column scored on other
    images, a loss, no file)."""
    sizes = runs.loc[runs["status"] == COMPLETED, "n_images"]
    if sizes.isna().any() or sizes.nunique() != 1:
        return None
    n = int(sizes.iloc[0])
    counts = np.asarray(values, float) * n / 100
    return 100 / n if len(counts) and np.all(np.abs(counts - np.rint(counts)) < 1e-3) else None


def _ranking(runs: pd.DataFrame, curves: dict[str, list[pd.Series]], epochs: list[float], higher: bool) -> dict:
    """The ranking numbers (module docstring): τ, the two epochs, the pairs compared and the reversals, over the acts
    with runs at both epochs (each run's value at both)."""
    mid, last = epochs[math.ceil(len(epochs) / 2) - 1], epochs[-1]
    at_mid, at_last = {}, {}
    for act, runs_of in sorted(curves.items()):
        both = [c for c in runs_of if mid in c.index and last in c.index]
        if both:
            at_mid[act], at_last[act] = [float(c[mid]) for c in both], [float(c[last]) for c in both]
    acts = sorted(at_mid)
    means = [(float(np.mean(at_mid[a])), float(np.mean(at_last[a]))) for a in acts]
    resolution = _resolution(runs, [v for a in acts for v in at_mid[a] + at_last[a]])
    return {
        "tau": conv.ranking_tau([m for m, _ in means], [x for _, x in means]),
        "mid": mid,
        "last": last,
        "resolution": resolution,
        "change": conv.ranking_change(at_mid, at_last, higher, resolution),
    }


SHOWN = 3  # reversals within noise named in the line (the lowest p first); those beyond noise are all named


def _overtook(rev: conv.Reversal) -> str:
    return (
        f"{rev.ahead} overtook {rev.behind} (gain test p {p_relation(rev.p) or '= nan'}, Holm p "
        f"{p_relation(rev.p_holm) or '= nan'})"
    )


def _ranking_text(column: str, ranking: dict, alpha: float) -> str:
    """The ranking sentences of the convergence line."""
    text = (
        f"The ranking of the activations' mean {column} at epoch {_epoch(ranking['mid'])} vs "
        f"{_epoch(ranking['last'])}: Kendall τ "
    )
    tau = ranking["tau"]
    text += f"= {number(tau, 2)}" if math.isfinite(tau) else "undefined (tied means)"
    change = ranking["change"]
    found, pairs, tied = change.reversals, change.pairs, change.tied
    if not found:
        text += "; no pair reversed: unchanged."
    else:
        beyond = conv.moving(change, alpha)
        text += (
            f"; {len(found)} of {pairs} pair{'s' if pairs > 1 else ''} reversed, "
            f"{len(beyond) if beyond else 'none'} beyond noise (Welch test of the per-run gains between the two "
            f"epochs{f', Holm over the {pairs} pairs' if pairs > 1 else ''}, α = {alpha:g})"
        )
        if beyond:
            text += ": " + "; ".join(map(_overtook, beyond)) + " — still moving."
        else:
            shown = found[:SHOWN]
            more = f"; {len(found) - len(shown)} more" if len(found) > len(shown) else ""
            text += ": " + "; ".join(map(_overtook, shown)) + more + "."
    if tied:
        text += (
            f" {tied} pair{'s' if tied > 1 else ''} tied at one of the epochs"
            f"{' in image counts' if ranking['resolution'] else ''}: no reversal."
        )
    return text


def _line(acts, column, epochs, curves, slopes, missing: int, higher: bool, ranking, alpha: float, digits: int) -> str:
    """The convergence line of one table (module docstring), the activations in the table's order `acts`."""
    left_out = f" ({missing} completed run{'s' if missing > 1 else ''} without metrics.csv left out)" if missing else ""
    head = f"Convergence of {column}{left_out}: "
    if len(epochs) < conv.MIN_POINTS:
        plural = "s" if len(epochs) > 1 else ""
        text = head + f"{len(epochs)} epoch{plural}, too few for a slope (needs {conv.MIN_POINTS})"
    else:
        window = conv.tail_window(len(epochs))
        text = head + (
            f"slope per epoch over the last {window} of {len(epochs)} epochs, mean [95 % t interval] over "
            f"seeds (still {'rising' if higher else 'falling'}: the interval excludes 0 and {window} epochs "
            f"at the slope move it by ≥ the seed sd at epoch {_epoch(epochs[-1])}): "
            + "; ".join(_slope_text(act, slopes[act], digits, higher, window) for act in acts if act in slopes)
        )
    if ranking is None:
        return text + "."
    return text + ". " + _ranking_text(column, ranking, alpha)


def _clause(ranking: dict, alpha: float, act: str) -> str:
    """What the verdict's sentence of `act` gets when `act` itself moved: its reversals beyond noise ('' if none)."""
    beyond = [r for r in conv.moving(ranking["change"], alpha) if act in (r.ahead, r.behind)]
    if not beyond:
        return ""
    pairs = "; ".join(f"{r.ahead} overtook {r.behind}, gain test Holm p {p_relation(r.p_holm)}" for r in beyond)
    return (
        f"; the ranking was still moving between epoch {_epoch(ranking['mid'])} and {_epoch(ranking['last'])} "
        f"({pairs})."
    )


def attach(
    summary: pd.DataFrame, runs: pd.DataFrame, metric: str, digits: int = 2, alpha: float = conv.ALPHA
) -> tuple[pd.DataFrame, list[str]]:
    """`summary` (one table, after verdict.annotate) with the COLUMNS and, while the ranking was still moving (a
    reversal beyond noise at `alpha`), the clause in the verdict's sentence of each activation that moved (it
    names that activation's reversals); and the table's notes: the stall notes, then the convergence line."""
    notes = stall_notes(runs)
    out = summary.copy()
    for col in COLUMNS:
        out[col] = False if col in ("still_improving", "ranking_moving") else math.nan
    column, curves, missing = _curves(runs, metric)
    if not curves:
        done = int((runs["status"] == COMPLETED).sum())
        return out, notes + [f"Convergence: no curves ({'no metrics.csv' if done else 'no completed run'})."]
    higher = higher_is_better(column)
    epochs = sorted({e for c in curves.values() for curve in c for e in curve.index})
    slopes = _slopes(curves, higher, conv.tail_window(len(epochs)))
    ranking = _ranking(runs, curves, epochs, higher) if len(epochs) >= 2 and len(curves) >= 2 else None
    numbers = [slopes.get(act, (math.nan,) * 4 + (False,)) for act in out["act"]]
    for k, col in enumerate(COLUMNS[:5]):
        out[col] = [n[k] for n in numbers]
    if ranking is not None:
        out["kendall_tau"] = ranking["tau"]
        out["reversed_pairs"] = len(ranking["change"].reversals)
        out["ranking_moving"] = bool(conv.moving(ranking["change"], alpha))
    if ranking is not None and out["ranking_moving"].any() and "verdict" in out:
        for i in out.index:  # only the verdicts of the activations that moved, naming their own reversals
            text, clause = str(out.at[i, "verdict_text"]), _clause(ranking, alpha, str(out.at[i, "act"]))
            if clause and str(out.at[i, "verdict"]) not in ("", "nan") and text.endswith("."):
                out.at[i, "verdict_text"] = text[:-1] + clause
    return out, notes + [
        _line(list(out["act"]), column, epochs, curves, slopes, missing, higher, ranking, alpha, digits)
    ]
