"""The one writer of a run folder from what a record or a store holds (results/record.py `materialize`,
results/store.py `materialize`): config.yaml, metrics.csv, the activation snapshots, predictions.npz, and
summary.json last — a run is finished when its summary says so, so a folder cut short reads as unfinished.

    write_run(run_dir, summary=s, config=c, metrics_csv=text, snapshots=[...], predictions=(variants, meta))
"""

from __future__ import annotations

import json
from pathlib import Path

from . import layout
from .predictions import write_predictions


def write_run(
    run_dir: Path,
    *,
    summary: dict | None = None,
    config: dict | None = None,
    metrics_csv: str | None = None,
    snapshots: list[dict] | tuple = (),
    predictions: tuple[dict, dict | None] | None = None,
) -> Path:
    """Write a run's files into `run_dir` (created); what is None is not written. `predictions`: (variants, meta)
    as results/predictions.py `write_predictions` takes them. Returns `run_dir`."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    files = layout.files(run_dir)
    if config is not None:
        layout.write_config(run_dir, config)
    if metrics_csv is not None:
        files.metrics.write_text(metrics_csv)
    for snap in snapshots or ():
        files.snapshots.mkdir(exist_ok=True)
        (files.snapshots / f"epoch_{int(snap['epoch']):03d}.json").write_text(json.dumps(snap))
    if predictions is not None:
        variants, meta = predictions
        write_predictions(files.predictions, variants, meta=meta)
    if summary is not None:
        layout.write_summary(run_dir, summary)
    return run_dir
