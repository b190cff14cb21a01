"""The results tree (DESIGN §6): paths, summary.json, config.yaml, provenance.

    results/<recipe>/<act>/seed_<k>/{config.yaml, metrics.csv, summary.json, checkpoints/, act_snapshots/}
    results/<recipe>/<setting>/<act>/seed_<k>/...       # factor sweeps: one level per setting (runner/axes.py)
"""
from __future__ import annotations

import csv
import json
import math
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from ..train.io import RunStateError, atomic_write_text, read_csv_rows
from .axes import setting_label

SCHEMA = 1
STATUSES = ("completed", "diverged", "failed", "running", "interrupted")
SCORED = ("completed", "diverged", "failed")  # what a report counts; running/interrupted runs are still to finish
CONFIG_KEYS = ("recipe", "act", "seed")  # in every run's config.yaml


def run_dir(results_dir: str | Path, recipe: str, act: str, seed: int, setting: dict | None = None) -> Path:
    """`<results_dir>/<recipe>/[<setting>/]<act label>/seed_<k>`; the setting level only in factor sweeps."""
    recipe_dir = Path(results_dir) / recipe
    if setting:
        recipe_dir = recipe_dir / setting_label(setting)
    return recipe_dir / act / f"seed_{seed}"


def _read(path: Path, parse, what: str, fix: str):
    try:
        data = parse(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, yaml.YAMLError) as e:  # JSONDecodeError is a ValueError
        first = str(e).strip().splitlines()[0][:100] if str(e).strip() else type(e).__name__
        raise RunStateError(f"{path} is corrupt ({first}); {fix}") from None
    if not isinstance(data, dict):
        raise RunStateError(f"{path} holds {type(data).__name__}, not the {what} mapping; {fix}")
    return data


def read_summary(path: Path) -> dict | None:
    """The run's summary.json; None if absent; `RunStateError` (naming the file) if unreadable."""
    f = Path(path) / "summary.json"
    return _read(f, json.loads, "summary", "delete it to resume this run from its last checkpoint") \
        if f.exists() else None


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
    """The run's config.yaml; None if absent; `RunStateError` (naming the file) if unreadable, or
    truncated (a YAML file cut short often still parses: it then lacks the keys written last)."""
    f = Path(path) / "config.yaml"
    if not f.exists():
        return None
    fix = f"delete the run directory {Path(path)} to restart this run"
    config = _read(f, yaml.safe_load, "config", fix)
    missing = [k for k in CONFIG_KEYS if k not in config]
    if missing or not f.read_bytes().endswith(b"\n"):  # yaml.safe_dump ends every file with a newline
        lacks = f"no {', '.join(missing)}" if missing else "no final newline"
        raise RunStateError(f"{f} is incomplete ({lacks}: truncated?); {fix}")
    return config


def check_unfinished(path: Path) -> None:
    """Refuse to resume a run whose files do not fit together (`RunStateError` naming what to do):
    a checkpoint without the config that trained it, or without a readable metrics.csv."""
    path = Path(path)
    last = path / "checkpoints" / "last.ckpt"
    if not last.exists():
        return
    restart = f"delete the run directory {path} to restart this run"
    if not (path / "config.yaml").exists():
        raise RunStateError(f"{last} has no config.yaml beside it: which settings trained it is unknown; {restart}")
    metrics = path / "metrics.csv"
    if not metrics.exists():
        raise RunStateError(f"{last} has no metrics.csv beside it: its finished epochs' metrics are lost; {restart}")
    try:
        epochs = [int(r["epoch"]) for r in read_csv_rows(metrics)]
    except (KeyError, TypeError, ValueError, UnicodeDecodeError, csv.Error) as e:
        raise RunStateError(f"{metrics} is corrupt ({type(e).__name__}: {e}); {restart}") from None
    if epochs != list(range(1, len(epochs) + 1)):
        raise RunStateError(f"{metrics} has epochs {epochs[:5]}..., not 1, 2, 3, ...; {restart}")


def remove_stale_temps(path: Path) -> list[Path]:
    """Delete temporary files a killed process left in a run directory (`.NAME.tmpPID`, train/io.py).

    Call it holding the run's lock: no live process writes there then."""
    stale = [p for p in Path(path).rglob(".*.tmp*") if p.is_file()]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


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
