"""Rewrite a completed run's `predictions.npz` from its checkpoint, identical to the one it wrote.

    visionbench predictions runs/digits_vgg4/relu/seed_0      # or rerun the sweep's `visionbench run ...`

`PredictionsWriter` (train/predictions.py) keeps each variant's selected arrays in its checkpoint state,
so `checkpoints/last.ckpt` (the final selection of every variant) and `checkpoints/best.ckpt` (the raw
weights' selection at their best epoch) hold the arrays the file was written from: nothing is re-scored,
and the rewritten arrays are the original's, byte for byte. A variant is taken from the first of the two
whose selection is at the epoch the run's summary selected. Before writing, the result is checked as the
report checks it (results/evidence.py). The checkpoints are read as data only (results/checkpoint.py `load`:
one that pickles code is refused, naming it). Runs whose checkpoints predate per-example predictions (or were
deleted) cannot be rewritten this way: the error says so.
"""

from __future__ import annotations

from pathlib import Path

from ..results import checkpoint, evidence, layout
from ..results.io import RunStateError
from ..results.predictions import FILE_NAME, write_predictions
from .predictions import PredictionsWriter, run_meta


def _selection(ckpt: Path) -> tuple[dict, dict | None]:
    """(the PredictionsWriter's `{variant: {score, epoch, arrays}}`, its meta) in a checkpoint; ({}, None) if none."""
    # tensors and plain values only: a checkpoint pickling a call (os.system, ...) is refused, never run
    obj = checkpoint.load(ckpt, fix="delete the run directory to retrain it, or rewrite from a checkpoint you trust")
    states = obj.get("callbacks") or {} if isinstance(obj, dict) else {}
    state = next((s for k, s in states.items() if str(k).startswith(PredictionsWriter.__qualname__)), None) or {}
    return dict(state.get("selected") or {}), state.get("meta")


def rewrite_predictions(run_dir) -> Path:
    """Write `run_dir`'s predictions.npz from its checkpoints' saved selection; returns its path.

    Raises:
        RunStateError: no completed run there, or its checkpoints hold no predictions at the selected epochs
            (the message names the run and why).
    """
    run = layout.files(Path(run_dir))
    summary, cfg = layout.read_summary(run.root), layout.read_config(run.root)
    if summary is None or summary.get("status") != layout.COMPLETED or cfg is None:
        what = (
            "no summary.json"
            if summary is None
            else "no config.yaml"
            if cfg is None
            else f"status {summary.get('status')!r}"
        )
        raise RunStateError(f"{run.root}: {what}: only a completed run's {FILE_NAME} can be rewritten")
    metrics = summary.get("metrics") or {}
    found, meta, expected = {}, None, set()
    for ckpt in (run.last, run.best):
        if not ckpt.exists():
            continue
        selected, ckpt_meta = _selection(ckpt)
        meta = meta or ckpt_meta
        expected |= set(selected) if ckpt == run.last else set()
        for v, s in selected.items():
            want = metrics.get(evidence.SELECTED_EPOCH[v])
            if v not in found and (want is None or int(want) == int(s["epoch"])):
                found[v] = {**{a: t.numpy() for a, t in s["arrays"].items()}, "epoch": int(s["epoch"])}
    if not found or not expected <= set(found):
        where = ", ".join(p.name for p in (run.last, run.best) if p.exists()) or "no checkpoint"
        lacks = (
            "hold no per-example predictions (a run from before them?)"
            if not found
            else f"hold no {', '.join(sorted(expected - set(found)))} predictions at the selected epoch"
        )
        raise RunStateError(f"{run.root}: its checkpoints ({where}) {lacks}; delete the run directory to retrain it")
    meta = meta or run_meta(cfg, None)
    for v, arrays in found.items():
        problem = evidence.range_problem(v, arrays, None) or evidence.run_problem(v, arrays, meta, summary)
        if problem:
            raise RunStateError(f"{run.root}: its checkpoints' predictions disagree with its summary ({problem})")
    problem = evidence.identity_problem(meta, summary)
    if problem:
        raise RunStateError(f"{run.root}: its checkpoints' predictions were {problem}")
    write_predictions(run.predictions, found, meta=meta)
    return run.predictions
