"""The on-disk layout of one run and the contract of its files (for readers: docs/layout.md): the one
place that knows file names, the summary schema and the run statuses.

    <results_dir>/<recipe>/[<setting label>/]<act>/seed_<k>/
        config.yaml     the resolved run config (the sweep writes, resume compares)
        summary.json    status + metrics, schema `SCHEMA` (the sweep writes, report reads)
        metrics.csv     one row per finished epoch (train/callbacks.MetricsWriter)
        checkpoints/    last.ckpt (every epoch: what a resume starts from), best.ckpt (best val_top1)
        act_snapshots/  learnable activations' shapes at chosen epochs (report plots)
        predictions.npz per-example predictions at the reported checkpoint (results/predictions.py)
        tb/             TensorBoard events (trainer.loggers: also csv/, wandb/, trackers.json; docs/running.md)

The writer (sweep) and the reader (report) both go through `read_summary`: one contract, so a
summary the sweep would refuse is one the report skips with the same reason.
Depends on nothing of visionbench: models, train, sweep and report may all import it.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .io import RunStateError, atomic_write_text, read_csv_rows, unwritable

SCHEMA = 1  # summary.json's "schema"; bump it when a field changes meaning

COMPLETED, DIVERGED, FAILED, RUNNING, INTERRUPTED = "completed", "diverged", "failed", "running", "interrupted"
STATUSES = (COMPLETED, DIVERGED, FAILED, RUNNING, INTERRUPTED)
SCORED = (COMPLETED, DIVERGED, FAILED)  # what a report counts; running/interrupted runs are still to finish
# never written: the report's name for a completed run that ended training at chance level (report/collect.py,
# stats/convergence.py); its summary stays `completed` and the sweep treats it as finished
STALLED = "stalled"
CONFIG_KEYS = ("recipe", "act", "seed")  # in every run's config.yaml

RUN_DIR_NAME = re.compile(r"seed_\d+")
DEFAULT_METRIC = "val_top1_best"  # report.metric: null without a held-out split
HELD_OUT_METRIC = "test_top1_at_best_val"  # report.metric: null with one (the test set read at the selected epoch)
SEQUENTIAL = "sequential.json"  # <recipe>/[<setting>/]sequential.json: where `seeds=auto` stopped each activation


class _Below:
    """A path below a run directory, read as an attribute of its `RunFiles` (`files.summary`)."""

    def __init__(self, *parts: str):
        self.parts = parts

    def __get__(self, files, owner=None):
        return self if files is None else files.root.joinpath(*self.parts)


@dataclass(frozen=True)
class RunFiles:
    """The paths inside one run directory."""

    root: Path

    config = _Below("config.yaml")
    summary = _Below("summary.json")
    metrics = _Below("metrics.csv")
    error = _Below("error.txt")
    checkpoints = _Below("checkpoints")
    last = _Below("checkpoints", "last.ckpt")
    best = _Below("checkpoints", "best.ckpt")
    snapshots = _Below("act_snapshots")
    predictions = _Below("predictions.npz")
    trackers = _Below("trackers.json")  # the MLflow / W&B run ids a resumed run continues (train/trackers.py)


def default_metric(val_split: float) -> str:
    """The metric a table scores when the recipe names none: selection on held-out data if there is any."""
    return HELD_OUT_METRIC if float(val_split) > 0 else DEFAULT_METRIC


def files(run: str | Path) -> RunFiles:
    return RunFiles(Path(run))


def run_path(results_dir: str | Path, recipe: str, act: str, seed: int, setting_label: str | None = None) -> Path:
    """`<results_dir>/<recipe>/[<setting_label>/]<act>/seed_<k>`; the setting level only in factor sweeps."""
    recipe_dir = Path(results_dir) / recipe
    if setting_label:
        recipe_dir = recipe_dir / setting_label
    return recipe_dir / act / f"seed_{seed}"


def run_for_checkpoint(checkpoint: Path) -> Path:
    """The run directory of a file in its `checkpoints/` folder."""
    return Path(checkpoint).parent.parent


def is_run_dir(path: Path) -> bool:
    """A run sits at `<act>/seed_<k>`; `seed_<k>` folders inside a run (e.g. checkpoints/seed_0) are not runs."""
    return RUN_DIR_NAME.fullmatch(path.name) is not None and not any(
        RUN_DIR_NAME.fullmatch(part) for part in path.parent.parts[-3:]
    )


def find_run_dirs(path: str | Path) -> list[Path]:
    """Every run directory below `path` (a recipe dir, a parent of recipes, or one run), sorted."""
    root = Path(path)
    if RUN_DIR_NAME.fullmatch(root.name) and root.is_dir():
        return [root]
    return sorted(p for p in root.rglob("seed_*") if p.is_dir() and is_run_dir(p))


def first_link(root: str | Path) -> Path | None:
    """The first folder of the results tree under `root` (`root` itself included) that is a symbolic link, down to
    the run folders (`seed_k`) and not inside them (a tracker's own links, wandb/latest-run, are its business), or
    None: a sweep writes whole runs into these folders and must not write where a link points."""
    root = Path(root)
    if root.is_symlink():
        return root
    if not root.is_dir():
        return None
    for dirpath, dirnames, _ in os.walk(root):  # followlinks=False: a linked folder is listed, never entered
        for name in sorted(dirnames):
            if (Path(dirpath) / name).is_symlink():
                return Path(dirpath) / name
        dirnames[:] = [n for n in dirnames if not RUN_DIR_NAME.fullmatch(n)]  # a run's inside is the run's
    return None


def first_unwritable(root: str | Path, runs: bool = True) -> tuple[Path, str] | None:
    """(directory, why) of the first directory of the results tree under `root` this process cannot
    write, or of the nearest existing parent when `root` does not exist yet; None when all can.
    `runs=False` leaves out the inside of run directories (a report writes only above them: tables,
    plots, the suite view)."""
    root = Path(root).absolute()
    existing = next((p for p in (root, *root.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        return None  # a file in the way: mkdir says so where it matters
    for dirpath, dirnames, _ in os.walk(existing):
        why = unwritable(Path(dirpath))
        if why:
            return Path(dirpath), why
        if existing != root:
            break  # the parent that will hold root: its other folders are none of ours
        dirnames[:] = sorted(n for n in dirnames if runs or not RUN_DIR_NAME.fullmatch(n))
    return None


def seed_of(run: Path) -> int | None:
    """The seed in a run directory's name (`seed_3` -> 3)."""
    return int(run.name[len("seed_") :]) if RUN_DIR_NAME.fullmatch(run.name) else None


def recipe_root(run_dir: Path, summary: dict) -> Path:
    """The recipe folder of a run: above its setting's folder in a factor sweep (<recipe>/<setting>/<act>/seed_k),
    its grandparent otherwise. The one rule the report's reader and the store's rows place a run by."""
    run_dir = Path(run_dir)
    return run_dir.parents[2] if summary.get("setting") and len(run_dir.parts) > 3 else run_dir.parent.parent


def finite(value) -> float:
    """A summary's number as a float; anything non-numeric or non-finite is NaN (never a score)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out if math.isfinite(out) else math.nan


def metric_values(summary: dict) -> dict[str, float]:
    """A summary's metrics, each as `finite` reads it, in the summary's order: what the report's rows and the
    store's `metric.*` columns hold."""
    metrics = summary.get("metrics") if isinstance(summary.get("metrics"), dict) else {}
    return {k: finite(v) for k, v in metrics.items()}


def _read(path: Path, parse: Callable[[str], Any], what: str, fix: str) -> dict:
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
    f = files(path).summary
    return (
        _read(f, json.loads, "summary", "delete it to resume this run from its last checkpoint") if f.exists() else None
    )


def unscored_reason(summary: dict) -> str | None:
    """Why a report leaves this summary out (None: it is scored): another schema, or a status still to finish."""
    schema = summary.get("schema", SCHEMA)
    if schema != SCHEMA:
        return f"summary schema {schema!r}, this report reads schema {SCHEMA}"
    status = summary.get("status")
    if status == RUNNING:
        return "still running"
    if status == INTERRUPTED:
        return "interrupted (rerun the sweep's command to resume it)"
    if status not in SCORED:
        return f"unknown status {status!r}"
    return None


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None  # JSON has no NaN; a missing number is null
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def write_summary(path: Path, summary: dict) -> None:
    atomic_write_text(files(path).summary, json.dumps(_clean(summary), indent=2, sort_keys=False) + "\n")


def write_sequential(recipe_dir: Path, record: dict) -> None:
    atomic_write_text(Path(recipe_dir) / SEQUENTIAL, json.dumps(_clean(record), indent=2) + "\n")


def read_sequential(recipe_dir: Path) -> dict | None:
    """A recipe (or setting) directory's sequential.json; None if absent; `RunStateError` if unreadable."""
    f = Path(recipe_dir) / SEQUENTIAL
    return (
        _read(f, json.loads, "sequential-seeds", "delete it and rerun the sweep's command to rewrite it")
        if f.exists()
        else None
    )


def read_config(path: Path) -> dict | None:
    """The run's config.yaml; None if absent; `RunStateError` (naming the file) if unreadable, or
    truncated (a YAML file cut short often still parses: it then lacks the keys written last)."""
    f = files(path).config
    if not f.exists():
        return None
    fix = f"delete the run directory {Path(path)} to restart this run"
    config = _read(f, _safe_yaml, "config", fix)
    missing = [k for k in CONFIG_KEYS if k not in config]
    if missing or not f.read_bytes().endswith(b"\n"):  # yaml.safe_dump ends every file with a newline
        lacks = f"no {', '.join(missing)}" if missing else "no final newline"
        raise RunStateError(f"{f} is incomplete ({lacks}: truncated?); {fix}")
    return config


def _safe_yaml(text: str) -> Any:
    """`yaml.safe_load` by libyaml where PyYAML has it (a report reads every run's config.yaml: ~8x faster)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader


def write_config(path: Path, cfg: dict) -> None:
    atomic_write_text(files(path).config, yaml.safe_dump(cfg, sort_keys=False))


def trained_with(config: dict) -> tuple[str | None, dict, str | None]:
    """(activation, its options, model name) a run's config.yaml says its weights were trained with."""
    act = config.get("act") or None
    options = dict((config.get("act_options") or {}).get(act) or {}) if act else {}
    return act, options, (config.get("model") or {}).get("name")


def read_metrics(path: Path) -> list[dict]:
    """The rows of the run's metrics.csv (strings); [] when it does not exist."""
    return read_csv_rows(files(path).metrics)


def train_losses(path: Path) -> list[float]:
    """The run's training loss per epoch, in the order of metrics.csv's rows (one per epoch trained; NaN where a row
    has none): what the stall rule reads the epochs trained and the first epoch's loss from
    (stats/convergence.py). [] when there is no readable metrics.csv."""
    try:
        rows = read_metrics(path)
    except (OSError, UnicodeDecodeError, csv.Error):
        return []
    out = []
    for row in rows:
        try:
            out.append(float(row.get("train_loss") or "nan"))
        except (TypeError, ValueError):
            out.append(math.nan)
    return out


def check_unfinished(path: Path) -> None:
    """Refuse to resume a run whose files do not fit together (`RunStateError` naming what to do):
    a checkpoint without the config that trained it, or without a readable metrics.csv."""
    run = files(path)
    if not run.last.exists():
        return
    restart = f"delete the run directory {run.root} to restart this run"
    if not run.config.exists():
        raise RunStateError(f"{run.last} has no config.yaml beside it: which settings trained it is unknown; {restart}")
    if not run.metrics.exists():
        raise RunStateError(
            f"{run.last} has no metrics.csv beside it: its finished epochs' metrics are lost; {restart}"
        )
    try:
        rows = read_csv_rows(run.metrics)
        epochs = [int(r["epoch"]) for r in rows]
    except (KeyError, TypeError, ValueError, UnicodeDecodeError, csv.Error) as e:
        raise RunStateError(f"{run.metrics} is corrupt ({type(e).__name__}: {e}); {restart}") from None
    torn = torn_row(run.metrics, rows)
    if torn:
        raise RunStateError(f"{run.metrics} is torn ({torn}): its epochs' metrics cannot be trusted; {restart}")
    if epochs != list(range(1, len(epochs) + 1)):
        raise RunStateError(f"{run.metrics} has epochs {epochs[:5]}..., not 1, 2, 3, ...; {restart}")


def torn_row(path: Path, rows: list[dict]) -> str | None:
    """What shows that metrics.csv was cut short (None: intact): no final newline, a row with fewer or
    more fields than the header, or a row without its epoch or train_loss. MetricsWriter rewrites the
    whole file atomically, so only damage from outside (a copy cut short, `head -c`) tears it."""
    if path.stat().st_size and not path.read_bytes().endswith(b"\n"):
        return "no final newline: cut short?"
    for row in rows:
        short = None in row.values()  # csv.DictReader's restval: a field the row lacks
        if short or None in row or any(not row.get(k) for k in ("epoch", "train_loss")):
            what = (
                "fewer fields than the header"
                if short
                else "more fields than the header"
                if None in row
                else "an empty epoch or train_loss"
            )
            return f"the row of epoch {row.get('epoch') or '?'} has {what}"
    return None


def remove_stale_temps(path: Path) -> list[Path]:
    """Delete temporary files a killed process left in a run directory (`.NAME.tmpPID`, results/io.py).

    Call it holding the run's lock: no live process writes there then."""
    stale = [p for p in Path(path).rglob(".*.tmp*") if p.is_file()]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


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
