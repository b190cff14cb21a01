"""The report's figures, drawn from the results files and the statistics already computed.

    >>> from visionbench.report import figures, load_runs
    >>> figures.make_plots(load_runs("runs/cifar10_vgg8"), "val_top1_best")   # curves + learned shapes
    >>> figures.plot_improvement(pi_frame, "relu", "results/improvement.png")
    >>> figures.plot_cd(ranking.friedman(scores), "results/cd_diagram.png")

* `curves_<column>.png` follows paper 004 Fig 1: mean over seeds with a ±1 std band, one line per
  activation, completed runs only, as in the table.
* `curves_training.png` (with `--html`: the page shows how the runs trained beside what they scored): the training
  loss, the validation loss and the validation top-1 per epoch, one panel each, mean ± std over seeds per activation.
* `act_shapes_<act>_seed<k>.png` follows paper 004 Fig 2/7: one panel per layer, the learned
  activation at each stored epoch over the density of that layer's pre-activation inputs (the last
  stored epoch's histogram, on a secondary axis).
* `improvement.png`: the probability of improvement (Agarwal et al. 2021, Fig. 4 style): per activation
  the mean over recipes of P(X > baseline) (a dot: no interval, the mean's is not estimable at a suite's
  seed counts; stats/improvement.py) and the per-recipe values as small marks, a line at 0.5. A bar is
  drawn only for a row that carries an interval.
* `cd_diagram.png`: the critical-difference diagram of the suite view (Demšar 2006 Fig 1).

Figures are drawn with `matplotlib.figure.Figure` (Agg canvas), never pyplot, so nothing global
(backend, current figure) changes in the caller's process. Reading metrics.csv and the snapshots is
`collect.py`'s; the decision-boundary figure trains networks and lives in
`visionbench.experiments.boundaries`.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..results.io import atomic_write_bytes
from ..stats import ranking
from .collect import read_metrics, read_snapshots, snapshot_runs

CURVE_SUFFIXES = ("_at_best_val", "_best", "_final")  # summary metric -> its per-epoch column


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


def _curve_frames(runs: pd.DataFrame) -> pd.DataFrame | None:
    """The per-epoch curves of the completed runs, one frame (act and seed columns added); None if there are none."""
    done = runs[runs["status"] == "completed"]
    frames = []
    for _, run in done.iterrows():
        frame = read_metrics(run["run_dir"])
        if frame is not None:
            frames.append(frame.assign(act=run["act"], seed=run["seed"]))
    return pd.concat(frames, ignore_index=True) if frames else None


def _mean_band(ax, data: pd.DataFrame, column: str, baseline: str | None, legend: bool = True) -> None:
    """One line per act, the mean over seeds per epoch with a ±1 std band; the baseline black and dashed."""
    values = data.assign(**{column: pd.to_numeric(data[column], errors="coerce")})
    for act, group in values.groupby("act", sort=True):
        stats = group.groupby("epoch")[column].agg(["mean", "std", "count"])
        std = stats["std"].fillna(0.0).to_numpy()  # one seed: no band rather than no line
        style = {"color": "k", "ls": "--"} if act == baseline else {}
        label = f"{act} (n={group['seed'].nunique()}{', baseline' if act == baseline else ''})"
        (line,) = ax.plot(stats.index, stats["mean"], label=label, **style)
        ax.fill_between(stats.index, stats["mean"] - std, stats["mean"] + std, color=line.get_color(), alpha=0.2)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=8)


def plot_curves(runs: pd.DataFrame, metric: str, out_dir, baseline: str | None = None) -> Path | None:
    """`curves_<column>.png`: mean ± std across seeds per epoch, one line per act; None if no data.

    The baseline, if given, is drawn black and dashed so the comparison reads at a glance.
    """
    data = _curve_frames(runs)
    column = curve_column(metric, data.columns) if data is not None else None
    if column is None:
        return None
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    _mean_band(ax, data, column, baseline)
    recipe = runs["recipe"].iloc[0]
    ax.set(xlabel="epoch", ylabel=column, title=f"{recipe}: {column}, mean ± std over seeds")
    return save(fig, Path(out_dir) / f"curves_{column}.png", dpi=120)


TRAINING = ("train_loss", "val_loss", "val_top1")  # curves_training.png's panels, those the runs logged


def plot_training(runs: pd.DataFrame, out_dir, baseline: str | None = None) -> Path | None:
    """`curves_training.png`: how the runs trained, one panel per curve of TRAINING they logged (mean ± std over
    seeds per act); None if they logged none."""
    data = _curve_frames(runs)
    columns = [c for c in TRAINING if data is not None and c in data.columns]
    if not columns:
        return None
    fig = Figure(figsize=(4.2 * len(columns), 3.6), layout="constrained")
    for i, column in enumerate(columns):
        ax = fig.add_subplot(1, len(columns), i + 1)
        _mean_band(ax, data, column, baseline, legend=i == 0)
        ax.set(xlabel="epoch", ylabel=column, title=column)
    fig.suptitle(f"{runs['recipe'].iloc[0]}: training, mean ± std over seeds", fontsize=10)
    return save(fig, Path(out_dir) / "curves_training.png", dpi=100)


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
        hist = [
            layer for snap in snaps for layer in snap["layers"] if layer["name"] == name and layer.get("hist_counts")
        ]
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
    return save(fig, out_path, dpi=100)


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


def make_plots(
    runs: pd.DataFrame, metric: str, out_dir=None, baseline: str | None = None, training: bool = False
) -> list[Path]:
    """All plots of one recipe's runs into `out_dir` (default: the recipe dir); `training`: curves_training.png too
    (the page's). Returns the files."""
    if not len(runs):
        return []
    out_dir = Path(out_dir or runs["recipe_dir"].iloc[0])
    written = [plot_curves(runs, metric, out_dir, baseline)]
    if training:
        written.append(plot_training(runs, out_dir, baseline))
    for _, run in snapshot_runs(runs).iterrows():
        out = out_dir / f"act_shapes_{run['act']}_seed{run['seed']}.png"
        title = (
            f"{run['recipe']} / {run['act']} / seed {run['seed']}: learned activation per layer over its input density"
        )
        written.append(plot_act_shapes(run["run_dir"], out, title=title))
    return [p for p in written if p is not None]


def plot_improvement(frame: pd.DataFrame, baseline: str, out_path) -> Path | None:
    """`improvement.png` from `stats.improvement.table`'s frame: per act the aggregate P(X > baseline) (dot),
    its CI (bar) where the frame has one, and the per-recipe values (gray marks); None when the frame has no
    aggregate row or no aggregate value."""
    agg = frame[(frame["block"] == "all") & frame["p_improve"].notna()].sort_values("p_improve").reset_index(drop=True)
    if agg.empty:
        return None
    blocks = sorted(set(frame["block"]) - {"all"})
    markers = dict(zip(blocks, "osD^v<>ph*"))
    fig = Figure(figsize=(6.5, 1.0 + 0.45 * len(agg)))
    ax = fig.add_subplot(1, 1, 1)
    for i, r in agg.iterrows():
        if math.isfinite(r["ci_low"]):
            ax.hlines(i, r["ci_low"], r["ci_high"], color="tab:blue", lw=6, alpha=0.35)
        ax.plot(r["p_improve"], i, "o", color="tab:blue", ms=6)
        per = frame[(frame["act"] == r["act"]) & (frame["block"] != "all")]
        for _, b in per.dropna(subset=["p_improve"]).iterrows():
            ax.plot(b["p_improve"], i + 0.22, markers.get(b["block"], "o"), color="gray", ms=4, mfc="none")
    for block, m in markers.items():
        ax.plot([], [], m, color="gray", ms=4, mfc="none", label=block)
    ax.axvline(0.5, color="black", lw=0.8, ls="--")
    ax.set_yticks(range(len(agg)), [f"{a} ({n})" for a, n in zip(agg["act"], agg["n_blocks"])])
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.6, len(agg) - 0.4)
    ax.set_xlabel(
        f"P(X > {baseline}), normal model  (dot: mean over recipes, no interval: not estimable at these "
        "seed counts; gray: per recipe)"
    )
    if blocks:
        ax.legend(fontsize=7, loc="lower right", frameon=False)
    ax.set_title(f"Probability of improvement over {baseline} (n recipes in brackets)", fontsize=9)
    return save(fig, out_path, dpi=120, bbox_inches="tight")


def plot_cd(test: dict, out_path) -> Path | None:
    """Critical-difference diagram (Demšar 2006 Fig 1): an axis of mean ranks (1 at the left), each act
    a labelled tick, thick bars joining acts not significantly different by the test's post-hoc (pairwise
    Wilcoxon–Holm, or Nemenyi, whose CD is then drawn as a scale bar)."""
    ranks_ = test["mean_ranks"]
    if not ranks_ or not math.isfinite(test["cd"]):
        return None
    k, cd = test["k"], test["cd"]
    nemenyi = test.get("posthoc") == "nemenyi"
    order = sorted(ranks_, key=ranks_.get)
    half = math.ceil(len(order) / 2)
    groups = test.get("groups") if "groups" in test else ranking.cliques(ranks_, cd)
    height = 1.6 + 0.3 * max(half, len(order) - half) + 0.15 * len(groups)
    fig = Figure(figsize=(7, height))
    ax = fig.add_axes([0.02, 0.02, 0.96, 0.96])
    ax.set_xlim(0.5 - 1.2, k + 0.5 + 1.2)
    ax.set_ylim(-0.35 - 0.3 * (max(half, len(order) - half) - 1) - 0.15 * len(groups) - 0.2, 0.6)
    ax.axis("off")
    ax.hlines(0, 1, k, color="black", lw=1)
    for r in range(1, k + 1):
        ax.vlines(r, 0, 0.08, color="black", lw=1)
        ax.text(r, 0.12, str(r), ha="center", va="bottom", fontsize=9)
    if nemenyi:
        ax.hlines(0.45, 1, 1 + cd, color="black", lw=1.5)
        ax.text(1 + cd / 2, 0.5, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=9)
    for i, act in enumerate(order):
        left = i < half
        level = -0.35 - 0.3 * (i if left else len(order) - 1 - i) - 0.15 * len(groups)
        x_text = 0.5 - 0.1 if left else k + 0.5 + 0.1
        ax.plot([ranks_[act], ranks_[act], x_text], [0, level, level], color="black", lw=0.8)
        ax.text(
            x_text,
            level,
            f"{act} ({ranks_[act]:.2f})" if left else f"({ranks_[act]:.2f}) {act}",
            ha="right" if left else "left",
            va="center",
            fontsize=9,
        )
    for j, g in enumerate(groups):
        y = -0.12 - 0.15 * j
        ax.hlines(y, ranks_[g[0]] - 0.04, ranks_[g[-1]] + 0.04, color="black", lw=3)
    post = "Nemenyi" if nemenyi else "pairwise Wilcoxon–Holm"
    ax.set_title(
        f"Friedman p = {test['p_value']:.3g}, {post} α = {test['alpha']:g} ({test['k']} acts × {test['n']} recipes)",
        fontsize=9,
    )
    return save(fig, out_path, dpi=120, bbox_inches="tight")


def plot_tuning(curve: pd.DataFrame, out_path, recipe: str = "", metric: str = "") -> Path | None:
    """`tuning.png` (report/tuning.py): per activation the expected best validation score after n trials with its
    95 % bootstrap band over trials (report/tuning_curves.py; ±1 sd of the best draw for a frame without the band),
    against n and, when the trials' times are known, against the expected cumulative training time."""
    if curve is None or curve.empty:
        return None
    timed = "expected_cost" in curve and curve["expected_cost"].notna().any()
    fig = Figure(figsize=(10.5 if timed else 6.4, 4.2), layout="constrained")
    axes = fig.subplots(1, 2 if timed else 1, squeeze=False)[0]
    score = metric or curve.attrs.get("score", "score")
    for act, group in curve.groupby("act", sort=False):
        group = group.sort_values("n")
        for ax, x in zip(axes, ["n", "expected_cost"]):
            (line,) = ax.plot(group[x], group["expected_max"], marker=".", label=f"{act} (B={int(group['B'].iloc[0])})")
            banded = "band_low" in group
            ax.fill_between(
                group[x],
                group["band_low"] if banded else group["expected_max"] - group["sd"],
                group["band_high"] if banded else group["expected_max"] + group["sd"],
                color=line.get_color(),
                alpha=0.2,
            )
    shade = "95 % bootstrap band" if "band_low" in curve else "± sd"
    axes[0].set(
        xlabel="trials n", ylabel=f"expected best {score} ({shade})", title=f"{recipe}: expected best of n trials"
    )
    axes[0].xaxis.get_major_locator().set_params(integer=True)
    if timed:
        axes[1].set(xlabel="expected training time of n trials (s)", title="against cumulative training time")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return save(fig, Path(out_path), dpi=120)


def save(fig: Figure, path, **savefig) -> Path:
    """`fig` as the PNG (or the format of `path`'s suffix) `path`, written atomically: rendered in memory, then
    `results.io.atomic_write_bytes`, so a symlink planted at `path` is replaced, never written through."""
    path = Path(path)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=path.suffix.lstrip(".") or "png", **savefig)
    return atomic_write_bytes(path, buffer.getvalue())
