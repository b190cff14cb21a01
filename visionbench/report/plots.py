"""Plots next to the tables: accuracy curves over epochs and the learned activation shapes.

    >>> from visionbench.report import load_runs, plots
    >>> plots.make_plots(load_runs("results/cifar10_vgg8"), "val_top1_best")

`curves_<column>.png` follows paper 004 Fig 1 (mean over seeds with a ±1 std band, one line
per activation, completed runs only, as in the table). `act_shapes_<act>_seed<k>.png` follows
paper 004 Fig 2/7: one panel per layer, the learned activation at each stored epoch over the
density of that layer's pre-activation inputs (the last stored epoch's histogram, on a
secondary axis). Figures are drawn with `matplotlib.figure.Figure` (Agg canvas), never pyplot,
so nothing global (backend, current figure) changes in the caller's process.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

CURVE_SUFFIXES = ("_at_best_val", "_best", "_final")  # summary metric -> its per-epoch column
SNAPSHOT_DIR = "act_snapshots"


def curve_column(metric: str, columns) -> str | None:
    """The metrics.csv column behind a summary metric (`val_top1_best` -> `val_top1`)."""
    columns = list(columns)
    base = metric
    for suffix in CURVE_SUFFIXES:
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    for name in (base, metric, "val_top1"):
        if name in columns:
            return name
    return None


def read_metrics(run_dir) -> pd.DataFrame | None:
    """A run's metrics.csv, or None when missing or unreadable (a plot never fails the report)."""
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        return None
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError):
        return None
    return frame if "epoch" in frame.columns else None


def plot_curves(runs: pd.DataFrame, metric: str, out_dir, baseline: str | None = None) -> Path | None:
    """`curves_<column>.png`: mean ± std across seeds per epoch, one line per act; None if no data.

    The baseline, if given, is drawn black and dashed so the comparison reads at a glance.
    """
    done = runs[runs["status"] == "completed"]
    frames = []
    for _, run in done.iterrows():
        frame = read_metrics(run["run_dir"])
        if frame is not None:
            frames.append(frame.assign(act=run["act"], seed=run["seed"]))
    if not frames:
        return None
    data = pd.concat(frames, ignore_index=True)
    column = curve_column(metric, data.columns)
    if column is None:
        return None
    data[column] = pd.to_numeric(data[column], errors="coerce")
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for act, group in data.groupby("act", sort=True):
        stats = group.groupby("epoch")[column].agg(["mean", "std", "count"])
        std = stats["std"].fillna(0.0).to_numpy()  # one seed: no band rather than no line
        style = {"color": "k", "ls": "--"} if act == baseline else {}
        label = f"{act} (n={group['seed'].nunique()}{', baseline' if act == baseline else ''})"
        line, = ax.plot(stats.index, stats["mean"], label=label, **style)
        ax.fill_between(stats.index, stats["mean"] - std, stats["mean"] + std, color=line.get_color(), alpha=0.2)
    recipe = runs["recipe"].iloc[0]
    ax.set(xlabel="epoch", ylabel=column, title=f"{recipe}: {column}, mean ± std over seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    out = Path(out_dir) / f"curves_{column}.png"
    fig.savefig(out, dpi=120)
    return out


def read_snapshots(run_dir) -> list[dict]:
    """The run's `act_snapshots/epoch_*.json`, sorted by epoch (unreadable files skipped)."""
    out = []
    for path in sorted((Path(run_dir) / SNAPSHOT_DIR).glob("epoch_*.json")):
        try:
            snap = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(snap, dict) and snap.get("layers"):
            out.append(snap)
    return sorted(out, key=lambda s: s.get("epoch", 0))


def plot_act_shapes(run_dir, out_path, title: str | None = None) -> Path | None:
    """One panel per layer: the activation at each stored epoch over its input histogram."""
    snaps = read_snapshots(run_dir)
    if not snaps:
        return None
    names = list(dict.fromkeys(layer["name"] for snap in snaps for layer in snap["layers"]))
    ncols = min(4, len(names))
    nrows = math.ceil(len(names) / ncols)
    fig = Figure(figsize=(3.2 * ncols, 2.6 * nrows + 0.4), layout="constrained")
    colors = [_viridis(i / max(1, len(snaps) - 1)) for i in range(len(snaps))]
    for i, name in enumerate(names):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        hist = [layer for snap in snaps for layer in snap["layers"]
                if layer["name"] == name and layer.get("hist_counts")]
        if hist:
            _histogram(ax, hist[-1])
        for snap, color in zip(snaps, colors):
            for layer in snap["layers"]:
                if layer["name"] == name:
                    ax.plot(layer["x"], layer["y"], color=color, lw=1.4, label=f"epoch {snap.get('epoch', '?')}")
        ax.set_title(_short(name), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=6)
    fig.suptitle(title or f"{snaps[-1].get('act', '')}: learned activation per layer", fontsize=10)
    out = Path(out_path)
    fig.savefig(out, dpi=100)
    return out


def _histogram(ax, layer: dict) -> None:
    # density on a hidden secondary axis, drawn under the curves (paper 004 Fig 2 shading)
    edges = np.asarray(layer["hist_edges"], float)
    counts = np.asarray(layer["hist_counts"], float)
    if edges.size != counts.size + 1 or counts.sum() <= 0:
        return
    density = counts / (counts.sum() * np.diff(edges))
    twin = ax.twinx()
    twin.stairs(density, edges, fill=True, color="0.6", alpha=0.35)
    twin.set_yticks([])
    ax.set_zorder(twin.get_zorder() + 1)
    ax.patch.set_visible(False)


def _short(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[-3:]) if len(parts) > 3 else name


def _viridis(t: float):
    from matplotlib import colormaps

    return colormaps["viridis"](0.1 + 0.8 * t)


def snapshot_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """One run per act that stored snapshots: a completed run if any, then the lowest seed."""
    has = runs[[(Path(d) / SNAPSHOT_DIR).is_dir() for d in runs["run_dir"]]] if len(runs) else runs
    if not len(has):
        return has
    has = has.assign(_not_done=has["status"] != "completed")
    return has.sort_values(["act", "_not_done", "seed"]).groupby("act", sort=True).head(1).drop(columns="_not_done")


def make_plots(runs: pd.DataFrame, metric: str, out_dir=None, baseline: str | None = None) -> list[Path]:
    """All plots of one recipe's runs into `out_dir` (default: the recipe dir). Returns the files."""
    if not len(runs):
        return []
    out_dir = Path(out_dir or runs["recipe_dir"].iloc[0])
    written = [plot_curves(runs, metric, out_dir, baseline)]
    for _, run in snapshot_runs(runs).iterrows():
        out = out_dir / f"act_shapes_{run['act']}_seed{run['seed']}.png"
        title = (f"{run['recipe']} / {run['act']} / seed {run['seed']}: "
                 "learned activation per layer over its input density")
        written.append(plot_act_shapes(run["run_dir"], out, title=title))
    return [p for p in written if p is not None]


def has_curves(runs: pd.DataFrame) -> bool:
    """Whether any run has a metrics.csv (the `--plots` default)."""
    return any((Path(d) / "metrics.csv").is_file() for d in runs["run_dir"])
