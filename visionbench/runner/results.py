"""The results tree (DESIGN §6): paths, summary.json, config.yaml, provenance.

    results/<recipe>/<act>/seed_<k>/{config.yaml, metrics.csv, summary.json, checkpoints/, act_snapshots/}
    results/<recipe>/<setting>/<act>/seed_<k>/...       # factor sweeps: one level per setting (runner/axes.py)
"""
from __future__ import annotations

import json
import math
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from ..train.io import atomic_write_text
from .axes import setting_label

SCHEMA = 1
STATUSES = ("completed", "diverged", "failed", "running")


def run_dir(results_dir: str | Path, recipe: str, act: str, seed: int, setting: dict | None = None) -> Path:
    """`<results_dir>/<recipe>/[<setting>/]<act label>/seed_<k>`; the setting level only in factor sweeps."""
    recipe_dir = Path(results_dir) / recipe
    if setting:
        recipe_dir = recipe_dir / setting_label(setting)
    return recipe_dir / act / f"seed_{seed}"


def read_summary(path: Path) -> dict | None:
    f = Path(path) / "summary.json"
    if not f.exists():
        return None
    try:
        return json.loads(f.read_text())
    except json.JSONDecodeError:
        return None  # cannot happen with atomic writes, but never crash a sweep on it


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None  # JSON has no NaN; a missing number is null
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def write_summary(path: Path, summary: dict) -> None:
    atomic_write_text(Path(path) / "summary.json", json.dumps(_clean(summary), indent=2, sort_keys=False) + "\n")


def read_config(path: Path) -> dict | None:
    f = Path(path) / "config.yaml"
    return yaml.safe_load(f.read_text()) if f.exists() else None


def write_config(path: Path, cfg: dict) -> None:
    atomic_write_text(Path(path) / "config.yaml", yaml.safe_dump(cfg, sort_keys=False))


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("visionbench", "torch", "torchvision", "timm", "lightning", "torchmetrics", "numpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_commit() -> str | None:
    """The commit of the visionbench checkout that ran, with '+dirty' for local edits; None if not a checkout."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def metrics_from_rows(rows: list[dict]) -> dict[str, float]:
    """Best/final metrics of a run from its metrics.csv rows (best epoch chosen on val_top1)."""
    def col(name):
        return [float(r[name]) if r.get(name) not in (None, "") else math.nan for r in rows]

    if not rows:
        return {}
    out: dict[str, float] = {}
    val = col("val_top1")
    finite = [(v, i) for i, v in enumerate(val) if math.isfinite(v)]
    # the first epoch reaching the best value; the last epoch if none is finite
    best_i = max(finite, key=lambda t: (t[0], -t[1]))[1] if finite else len(rows) - 1
    out["best_epoch"] = int(float(rows[best_i]["epoch"]))
    for key in ("val_top1", "val_top5", "ema_val_top1", "ema_val_top5", "test_top1", "test_top5", "ema_test_top1"):
        if key not in rows[-1]:
            continue
        values = col(key)
        good = [v for v in values if math.isfinite(v)]
        out[f"{key}_best"] = max(good) if good else math.nan
        out[f"{key}_final"] = values[-1]
    for key in ("val_loss", "train_loss"):
        if key in rows[-1]:
            out[f"{key}_final"] = col(key)[-1]
    if "test_top1" in rows[-1]:
        out["test_top1_at_best_val"] = col("test_top1")[best_i]
    if "ema_val_top1" in rows[-1]:
        ema = col("ema_val_top1")
        good = [(v, i) for i, v in enumerate(ema) if math.isfinite(v)]
        if good:
            ei = max(good, key=lambda t: (t[0], -t[1]))[1]
            out["ema_best_epoch"] = int(float(rows[ei]["epoch"]))
            if "ema_test_top1" in rows[-1]:
                out["ema_test_top1_at_best_val"] = col("ema_test_top1")[ei]
    return out
