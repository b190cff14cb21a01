"""Helpers shared by several test files (pytest collects no tests here):

- the one shrink of the protocol, for every test that trains (`SHRINK`, `shrunk(*deltas)`),
  and `normalised` (a list of overrides as a key: neither their order nor a repeated key matters);
- results trees in the results layout, written by its own writers (visionbench/results/layout.py), for the
  report tests (`write_run`, `write_recipe`, `write_snapshot`, `write_class_count`); `copy_tree` for the trained
  trees of tests/conftest.py's `trained_tree` (read-only: copy, then damage or resume the copy);
- `visionbench run` in a subprocess, and waiting on its run dirs, for the reliability tests
  (`spawn`, `wait_for`, `seed_dir`, `summary`).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from visionbench.config.overrides import ALIASES
from visionbench.results import layout
from visionbench.results.io import atomic_write_text, write_csv_rows
from visionbench.results.predictions import write_predictions

# ---- the one shrink (every test that trains) ------------------------------------------------------------------------
# The tiny digits protocol (the default recipe, digits_vgg4): 2 epochs of 200 training images in batches of 64, 100
# validation images, the activations' shapes at the first and last epoch. trainer.portable=false: the default recipe's
# portable runs train in a spawned worker (sweep/portable.py); tests of that path ask for it. A test states only what
# it needs otherwise, as deltas: `shrunk("act=relu", "seeds=3", "optim.lr=0.002")`.
SHRINK = {
    "epochs": "2",
    "batch_size": "64",
    "data.limit_train": "200",
    "data.limit_val": "100",
    "snapshot_epochs": "[0,-1]",
    "trainer.portable": "false",
}


def _key(override: str) -> tuple[str, str]:
    """(key, value) of a `key=value` override, the key as the command line reads it (`+key` and aliases too)."""
    key, sep, value = override.partition("=")
    if not sep:
        raise ValueError(f"expected key=value, got {override!r}")
    key = key.strip().lstrip("+")
    return ALIASES.get(key, key), value.strip()


def shrunk(*deltas: str) -> list[str]:
    """`SHRINK` with each `key=value` of `deltas` laid over it, later keys winning: the overrides of a tiny run, one
    per key (for `load_config`, `run_sweep`, `visionbench run`)."""
    merged = dict(SHRINK)
    for override in deltas:
        key, value = _key(override)
        merged.pop(key, None)  # a delta is written where it is given, after the shrink's keys
        merged[key] = value
    return [f"{k}={v}" for k, v in merged.items()]


def normalised(overrides) -> tuple[tuple[str, str], ...]:
    """`overrides` as a key: (key, value) pairs, later keys winning, sorted; two lists that configure the same runs in
    another order (or with a key repeated) give the same key."""
    return tuple(sorted(dict(_key(o) for o in overrides).items()))


# ---- results trees (report tests) -----------------------------------------------------------
def write_run(
    root,
    recipe: str,
    act: str,
    seed: int,
    value: float | None = None,
    *,
    status: str = "completed",
    baseline: str | None = "relu",
    metrics: dict | None = None,
    epochs: int = 0,
    snapshot_epochs=(),
    act_params: int = 0,
    train_time_s: float = 10.0,
    summary: bool = True,
) -> Path:
    """One run dir `<root>/<recipe>/<act>/seed_<seed>` with summary.json, and optionally
    metrics.csv (`epochs` rows rising towards `value`) and act_snapshots/epoch_<eee>.json."""
    run = layout.run_path(root, recipe, act, seed)
    run.mkdir(parents=True, exist_ok=True)
    layout.write_config(run, {"recipe": recipe, "act": act, "seed": seed})
    if metrics is None:
        metrics = {} if value is None else {"val_top1_best": value, "val_top1_final": value - 0.1, "best_epoch": 3}
    if summary:
        layout.write_summary(
            run,
            {
                "schema": layout.SCHEMA,
                "recipe": recipe,
                "act": act,
                "seed": seed,
                "status": status,
                "metrics": metrics,
                "train_time_s": train_time_s,
                "throughput_img_s": 1000.0 + seed,
                "peak_mem_mb": 50.0,
                "params": 12345,
                "act_params": act_params,
                "diverged_epoch": 2 if status == "diverged" else None,
                "error": "boom" if status == "failed" else None,
                "versions": {"torch": "x"},
                "git_commit": None,
                "baseline": baseline,
            },
        )
    if epochs:
        rng = np.random.default_rng(seed)
        top = value if value is not None else 50.0
        rows = []
        for e in range(epochs):
            acc = top * (1 - np.exp(-(e + 1) / 2)) + rng.normal(0, 0.5)
            rows.append(
                {
                    "epoch": e,
                    "train_loss": f"{2.0 / (e + 1):.4f}",
                    "val_loss": f"{2.1 / (e + 1):.4f}",
                    "val_top1": f"{acc:.3f}",
                    "val_top5": f"{min(100, acc + 20):.3f}",
                    "lr": 0.02,
                    "epoch_time_s": 1.5,
                }
            )
        write_csv_rows(layout.files(run).metrics, rows)
    for k, epoch in enumerate(snapshot_epochs):
        write_snapshot(run, act, epoch, bend=0.2 * k)
    return run


def write_class_count(run: Path, n_classes: int, **meta) -> None:
    """A 100-image predictions.npz in `run` whose meta names `n_classes` (what the stall rule reads C from), agreeing
    with the run's summary where it has one (its held-out top-1 and best epoch: results/integrity.py leaves a run out
    whose predictions contradict its summary)."""
    summary = layout.read_summary(run) or {}
    metrics = summary.get("metrics") or {}
    top1 = next((metrics[k] for k in ("test_top1_at_best_val", "val_top1_best") if k in metrics), 100.0)
    right = int(round(float(top1))) if np.isfinite(top1) else 100
    target = np.zeros(100, int)
    pred = np.where(np.arange(100) < right, 0, 1 % n_classes)
    arrays = {
        "pred": pred,
        "target": target,
        "p_true": np.where(pred == target, 1.0, 0.0),
        "confidence": np.ones(100),
        "epoch": int(metrics.get("best_epoch", 3)),
    }
    write_predictions(layout.files(run).predictions, {"raw": arrays}, meta={"n_classes": n_classes, **meta})


def copy_tree(trained: Path, to: Path) -> Path:
    """A copy of a trained results tree (tests/conftest.py's `trained_tree`, read-only) at `to` (which may exist, e.g.
    a test's `tmp_path`), for a test to change: writable, as a tree a sweep wrote (copytree copies the modes)."""
    copy = Path(shutil.copytree(trained, to, symlinks=True, dirs_exist_ok=True))
    set_writable(copy, True)
    return copy


def set_writable(root: Path, writable: bool) -> None:
    """Give the owner write permission on `root` and everything under it (`writable`), or take every write bit away
    (symlinks left alone): a cached trained tree is read-only, so a test that changes it fails where it does."""
    bits = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    for folder, dirs, names in os.walk(root, topdown=False):
        for p in [*(Path(folder, n) for n in [*dirs, *names]), Path(folder)]:
            if not p.is_symlink():
                mode = p.stat().st_mode
                os.chmod(p, mode | stat.S_IWUSR if writable else mode & ~bits)


def write_snapshot(run: Path, act: str, epoch: int, bend: float = 0.0, layers=("features.2", "features.5.act")):
    """An act_snapshots/epoch_<eee>.json with a leaky-ReLU-ish curve per layer and a Gaussian histogram."""
    x = np.linspace(-3, 3, 61)
    edges = np.linspace(-3, 3, 31)
    centers = (edges[:-1] + edges[1:]) / 2
    out = {"epoch": epoch, "act": act, "layers": []}
    for i, name in enumerate(layers):
        y = np.where(x > 0, x, 0.01 * x) + bend * np.sin(x + i)
        counts = np.round(1000 * np.exp(-((centers - 0.3 * i) ** 2) / 2)).astype(int)
        out["layers"].append(
            {
                "name": name,
                "x": x.tolist(),
                "y": y.tolist(),
                "hist_edges": edges.tolist(),
                "hist_counts": counts.tolist(),
            }
        )
    folder = layout.files(run).snapshots
    folder.mkdir(exist_ok=True)
    atomic_write_text(folder / f"epoch_{epoch:03d}.json", json.dumps(out))  # as train/callbacks.py writes it


def write_recipe(root, recipe: str, values: dict[str, list], **kwargs) -> Path:
    """Runs of one recipe from `{act: [value per seed]}`; a value may be "diverged"/"failed"/"running"."""
    for act, vals in values.items():
        for seed, v in enumerate(vals):
            if isinstance(v, str):
                write_run(root, recipe, act, seed, None, status=v, **kwargs)
            else:
                write_run(root, recipe, act, seed, v, **kwargs)
    return Path(root) / recipe


# ---- runs in a subprocess (reliability tests) -----------------------------------------------
ROOT = Path(__file__).resolve().parents[1]
# sitecustomize for the subprocesses: a pause at every epoch start, so a signal lands mid-training
# (sleeping changes no number: the results must equal an uninterrupted run's)
HOOK = """
import os, time
_pause = float(os.environ.get("VB_TEST_EPOCH_PAUSE") or 0)
if _pause:
    from visionbench.train import callbacks
    _start = callbacks.EpochSeeder.on_train_epoch_start
    def _slow(self, trainer, pl_module):
        time.sleep(_pause)
        _start(self, trainer, pl_module)
    callbacks.EpochSeeder.on_train_epoch_start = _slow
"""


def seed_dir(results: Path, act: str, seed: int, recipe: str = "digits_vgg4") -> Path:
    return results / recipe / act / f"seed_{seed}"


def summary(d: Path) -> dict:
    return json.loads((d / "summary.json").read_text())


def spawn(tmp_path: Path, results: Path, *args: str, pause: float = 0.0, env: dict | None = None) -> subprocess.Popen:
    """`visionbench run` of `shrunk(*args)` in a subprocess (pausing `pause` s at every epoch start)."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]),
        "VB_TEST_EPOCH_PAUSE": str(pause),
        **(env or {}),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "visionbench.cli", "run", f"results_dir={results}", *shrunk(*args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def wait_for(predicate, timeout: float = 120.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if predicate():
                return
        except (OSError, ValueError, KeyError):  # a file being replaced, a summary not there yet
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def epoch_batches(loader, epoch: int):
    """One epoch of a training loader, concatenated (images, labels), after `set_epoch` as Lightning calls it."""
    import torch

    loader.sampler.set_epoch(epoch)
    xs, ys = zip(*loader)
    return torch.cat(xs), torch.cat(ys)


def metric_rows(path: Path) -> list[dict]:
    """A metrics.csv's rows without `epoch_time_s` (wall time differs between otherwise identical runs)."""
    import csv

    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k != "epoch_time_s"} for r in csv.DictReader(f)]


# a 3-epoch relu run on 320 digits images: long enough to crash in epoch 3 and resume
SMALL_RUN = shrunk("act=relu", "seeds=1", "epochs=3", "data.limit_train=320", "snapshot_epochs=[]")


def sweep_small(results: Path, *args: str):
    """The one outcome of a `SMALL_RUN` sweep into `results` (extra overrides in `args`)."""
    from visionbench.sweep.preflight import load_config
    from visionbench.sweep.sweep import run_sweep

    (outcome,) = run_sweep(load_config([f"results_dir={results}", *shrunk(*SMALL_RUN, *args)]), progress=False)
    return outcome


# ---- the trackers' extras (tests of train/trackers.py) ----------------------------------------------------
def installed(name: str) -> bool:
    from visionbench.train.trackers import available

    return available(name)


needs_mlflow = pytest.mark.skipif(
    not installed("mlflow"), reason="the mlflow extra is not installed: pip install 'visionbench[mlflow]'"
)
needs_wandb = pytest.mark.skipif(
    not installed("wandb"), reason="the wandb extra is not installed: pip install 'visionbench[wandb]'"
)


def cut_at_line(path: Path, into: int = 0) -> None:
    """The file cut after half its lines (and `into` bytes of the next): what a copy stopped part way leaves."""
    lines = path.read_bytes().splitlines(keepends=True)
    half = len(lines) // 2
    path.write_bytes(b"".join(lines[:half]) + lines[half][:into])
