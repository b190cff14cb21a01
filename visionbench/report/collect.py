"""Find the runs under a results directory and read their `summary.json` files into a DataFrame.

    >>> from visionbench.report import load_runs
    >>> runs = load_runs("runs/cifar10_vgg8")      # or the parent `runs/`
    >>> runs.groupby(["recipe", "act"]).val_top1_best.mean()

Layout read (visionbench/results/layout.py): `<recipe_dir>/<act>/seed_<k>/summary.json`, and in
factor sweeps `<recipe>/<setting>/<act>/seed_<k>/summary.json`. Labels come from the
directory names, which are unique on disk by construction (two variants of one family, e.g.
`rational[init=gelu]` and `rational[init=leaky_relu]`, live in two act dirs); the summary's own
fields are only a fallback for the seed, and a disagreement is reported as a note. `recipe_dir`
is the folder above the act folders (a setting's folder in a factor sweep: its own table goes
there), `recipe_root` the recipe's folder.

The per-epoch files the figures and the curve metrics read are here too: `read_metrics`
(metrics.csv as a frame), `read_snapshots` (act_snapshots/epoch_*.json), `snapshot_runs`, `has_curves`.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd

from ..results import integrity, layout
from ..results.io import RunStateError
from ..results.predictions import counts
from ..stats.convergence import run_stall_reason

# per-run scalars that are not in summary["metrics"] but may still be asked for as --metric
RUN_SCALARS = ("train_time_s", "throughput_img_s", "peak_mem_mb", "gpu_busy_pct")
BASE_COLUMNS = [
    "recipe",
    "act",
    "seed",
    "status",
    "setting",
    "baseline",
    *RUN_SCALARS,
    "params",
    "act_params",
    "diverged_epoch",
    "error",
    "act_family",
    "report_metric",
    "report_best_of",
    "val_split",
    "config_hash",
    "plugins",
    "environment",
    "n_classes",
    "n_images",
    "stalled",
    "run_dir",
    "recipe_dir",
    "recipe_root",
]


def _plugins(records) -> str | None:
    """`module@sha256[:12]` of each plugin a run records (visionbench/plugins.py), `;`-joined; None for none."""
    if not isinstance(records, list) or not records:
        return None
    return ";".join(f"{r.get('module')}@{str(r.get('sha256'))[:12]}" for r in records if isinstance(r, dict)) or None


def _environment(summary: dict) -> str | None:
    """The run's `environment` (train/environment.py) as canonical JSON (sorted keys: equal environments, equal
    strings); for a run from before it was recorded, the part its `versions`, `git_commit` and `threads` tell; None
    when the summary records none of them."""
    env = summary.get("environment")
    if not isinstance(env, dict):
        versions = dict(summary.get("versions") or {}) if isinstance(summary.get("versions"), dict) else {}
        env = {
            k: v
            for k, v in (
                ("python", versions.pop("python", None)),
                ("packages", versions or None),
                ("git_commit", summary.get("git_commit")),
                ("threads", summary.get("threads")),
            )
            if v is not None
        }
    return json.dumps(env, sort_keys=True, separators=(",", ":")) if env else None


def run_row(run_dir: Path) -> tuple[dict | None, str | None]:
    """One run's row, or (None, note) when the run is skipped (missing, unreadable, running).

    The summary is read and judged by `results.layout` (`read_summary`, `unscored_reason`): the
    contract the runner writes by. A run whose files disagree with its summary (results/integrity.py: a damaged
    config.yaml, predictions.npz contradicting the summary's metric) is left out with a note naming it. A completed run that never learned gets the status `stalled` here, in the report
    (its summary.json stays `completed`), with the reason in `stalled`: stats/convergence.py's rule, on its metrics
    and its metrics.csv's training loss per epoch."""
    label = "/".join(run_dir.parts[-3:])
    try:
        summary = layout.read_summary(run_dir)
    except (OSError, RunStateError) as exc:
        return None, f"{label}: unreadable summary.json ({exc}); ignored"
    if summary is None:
        return None, f"{label}: no summary.json (still running or crashed before writing it); ignored"
    reason = layout.unscored_reason(summary)
    if reason:
        return None, f"{label}: {reason}; ignored"
    damage = integrity.problem(run_dir, summary)  # a damaged config.yaml, a summary its predictions contradict
    if damage:
        return None, f"{label}: {damage}; left out of every table and verdict"
    status = summary["status"]

    seed = layout.seed_of(run_dir)
    root = layout.recipe_root(run_dir, summary)
    report = summary.get("report") if isinstance(summary.get("report"), dict) else {}
    n_cls, n_img = counts(layout.files(run_dir).predictions)  # C and N images, None when unknown
    row = {
        "recipe": root.name,
        "act": run_dir.parent.name,
        "seed": seed if seed is not None else summary.get("seed"),
        "status": status,
        "setting": run_dir.parent.parent.name if root != run_dir.parent.parent else "",
        "baseline": summary.get("baseline"),
        "report_metric": report.get("metric"),
        "report_best_of": ",".join(report.get("best_of") or []) if "best_of" in report else None,
        "val_split": layout.finite(summary.get("val_split")),
        "config_hash": summary.get("config_hash"),
        "plugins": _plugins(summary.get("plugins")),
        "environment": _environment(summary),
        "n_classes": n_cls,
        "n_images": n_img,
        "stalled": None,
        "params": summary.get("params"),
        "act_params": summary.get("act_params"),
        "diverged_epoch": summary.get("diverged_epoch"),
        "error": summary.get("error"),
        "act_family": summary.get("act"),
        "run_dir": str(run_dir),
        "recipe_dir": str(run_dir.parent.parent),
        "recipe_root": str(root),
    }
    for key in RUN_SCALARS:
        row[key] = layout.finite(summary.get(key))
    for key, value in layout.metric_values(summary).items():
        if key not in row:  # a metric may never shadow a bookkeeping column
            row[key] = value
    if status == layout.COMPLETED:
        row["stalled"] = run_stall_reason(row, row["n_classes"], layout.train_losses(run_dir))
        row["status"] = layout.STALLED if row["stalled"] else status
    notes = []
    if summary.get("recipe") not in (None, row["recipe"]):
        notes.append(
            f"{label}: summary recipe {summary['recipe']!r} differs from its directory; the directory name is used"
        )
    if summary.get("seed") not in (None, row["seed"]):
        notes.append(
            f"{label}: summary seed {summary['seed']!r} differs from its directory; the directory name is used"
        )
    return row, "; ".join(notes) or None


def scan_runs(path: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """Read every run below `path`; returns the runs table and notes about what was skipped.

    Raises:
        FileNotFoundError: `path` does not exist.
    """
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"results directory {str(root)!r} does not exist")
    rows, notes = [], []
    for run_dir in layout.find_run_dirs(root):
        row, note = run_row(run_dir)
        if note:
            notes.append(note)
        if row is not None:
            rows.append(row)
    frame = pd.DataFrame(rows)
    for col in BASE_COLUMNS:
        if col not in frame.columns:
            frame[col] = pd.Series(dtype=object)
    extra = [c for c in frame.columns if c not in BASE_COLUMNS]
    frame = frame[BASE_COLUMNS[:5] + extra + BASE_COLUMNS[5:]]
    if len(frame):
        frame["seed"] = frame["seed"].astype("Int64")
        frame = frame.sort_values(["recipe_dir", "act", "seed"], kind="stable").reset_index(drop=True)
    return frame, notes


def load_runs(path: str | Path) -> pd.DataFrame:
    """One row per run: recipe, act, seed, status, every metric, time, throughput, sizes.

    Runs still `running`, without or with an unreadable `summary.json` are left out; the
    reasons are in `runs.attrs["notes"]`. Non-finite metric values are NaN.

    Args:
        path: a recipe directory (`runs/cifar10_vgg8`), a parent of several, or one run dir.

    Returns:
        DataFrame with columns `recipe, act, seed, status, setting, <metrics...>, baseline, train_time_s,
        throughput_img_s, peak_mem_mb, gpu_busy_pct (CUDA), params, act_params, diverged_epoch, error, act_family,
        report_metric, report_best_of, val_split, n_classes, stalled, run_dir, recipe_dir, recipe_root` (`setting`:
        the factor setting's folder name, "" outside factor sweeps; `report_*`: the recipe's `report:`
        block as the run recorded it, None for runs written before it existed; `status`: the summary's, but
        `stalled` for a completed run that ended training at chance level, with the reason in `stalled`;
        `n_classes`, `n_images`: from its predictions.npz, None when unknown).
    """
    frame, notes = scan_runs(path)
    frame.attrs["notes"] = notes
    return frame


def metric_names(runs: pd.DataFrame) -> list[str]:
    """The metrics present in `runs` (summary metrics first, then the per-run scalars)."""
    metrics = [c for c in runs.columns if c not in BASE_COLUMNS]
    scalars = [c for c in RUN_SCALARS if c in runs.columns and runs[c].notna().any()]
    return metrics + scalars


# --- per-epoch files: metrics.csv and the activation snapshots -------------------------------


def read_metrics(run_dir) -> pd.DataFrame | None:
    """A run's metrics.csv, or None when missing or unreadable (a plot never fails the report)."""
    path = layout.files(run_dir).metrics
    if not path.is_file():
        return None
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError):
        return None
    return frame if "epoch" in frame.columns else None


def read_snapshots(run_dir) -> list[dict]:
    """The run's `act_snapshots/epoch_*.json`, sorted by epoch. A file that is no snapshot (unreadable,
    not JSON, or not the shape train/callbacks.py `ActivationSnapshots` writes) is skipped with a note
    on stderr naming it: a plot of garbage would look like a learned activation."""
    out = []
    for path in sorted(layout.files(run_dir).snapshots.glob("epoch_*.json")):
        try:
            snap = json.loads(path.read_text())
        except (OSError, ValueError) as exc:  # UnicodeDecodeError, JSONDecodeError: ValueErrors
            problem = f"unreadable ({type(exc).__name__})"
        else:
            problem = snapshot_problem(snap)
        if problem:
            print(f"note: {path}: {problem}; not plotted (delete it, or rerun the run to rewrite it)", file=sys.stderr)
            continue
        out.append(snap)
    return sorted(out, key=lambda s: s["epoch"])


def _numbers(values, length: int | None = None) -> bool:
    """A list of finite numbers (of `length` items when given)."""
    return (
        isinstance(values, list)
        and (length is None or len(values) == length)
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)
    )


def snapshot_problem(snap) -> str | None:
    """What makes `snap` no activation snapshot; None when it is one: {"epoch": int >= 0, "act": str,
    "layers": [{"name": str, "x": [numbers], "y": [as many numbers; NaN allowed where the activation
    overflowed], "hist_edges": [numbers], "hist_counts": [one fewer]}, ...]} with at least one layer."""
    if not isinstance(snap, dict):
        return f"holds {type(snap).__name__}, not a snapshot mapping"
    epoch, layers = snap.get("epoch"), snap.get("layers")
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        return f"epoch {epoch!r} is not an integer >= 0"
    if not isinstance(layers, list) or not layers:
        return "no layers"
    for i, layer in enumerate(layers):
        if not isinstance(layer, dict) or not isinstance(layer.get("name"), str):
            return f"layer {i} has no name"
        x, y = layer.get("x"), layer.get("y")
        if (
            not _numbers(x)
            or not x
            or not isinstance(y, list)
            or len(y) != len(x)
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in y)
        ):
            return f"layer {layer['name']}: x and y are not two lists of as many numbers"
        edges, counts = layer.get("hist_edges"), layer.get("hist_counts")
        if not _numbers(edges) or not _numbers(counts, len(edges) - 1):
            return f"layer {layer['name']}: hist_counts is not one number per bin of hist_edges"
    return None


def snapshot_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """One run per act that stored snapshots: a completed run if any, then the lowest seed."""
    has = runs[[layout.files(d).snapshots.is_dir() for d in runs["run_dir"]]] if len(runs) else runs
    if not len(has):
        return has
    has = has.assign(_not_done=has["status"] != "completed")
    return has.sort_values(["act", "_not_done", "seed"]).groupby("act", sort=True).head(1).drop(columns="_not_done")


def has_curves(runs: pd.DataFrame) -> bool:
    """Whether any run has a metrics.csv (the `--plots` default)."""
    return any(layout.files(d).metrics.is_file() for d in runs["run_dir"])
