"""Per-example predictions of one run: `predictions.npz` in the run directory (the contract).

For the checkpoint the recipe reports (the epoch selected on held-out val top-1; the EMA weights
at the EMA's own selected epoch when the recipe reports `ema_*` metrics), one entry per image of
the scored set (the test set; the val set when the recipe has no test set), in the loader's order:

    <v>_pred        int16 / int32  the predicted class (argmax of the logits)
    <v>_p_true      float32        softmax probability of the true class
    <v>_confidence  float32        softmax probability of the predicted class (ECE's confidence)
    <v>_target      int16 / int32  the true class (checks that two runs scored the same images)
    <v>_epoch       int64 scalar   the epoch the arrays come from (1-based)
    schema          int64 scalar   `PREDICTIONS_SCHEMA`

with `<v>` = `raw` (the trained weights) or `ema` (the weight EMA, when the recipe keeps one).
About 12 bytes per image: 120 kB for 10,000 test images. Written atomically (results/io.py).

    >>> write_predictions(path, {"raw": {"pred": ..., "p_true": ..., "confidence": ..., "target": ..., "epoch": 7}})
    >>> read_predictions(path)["raw"]["pred"]
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from .io import RunStateError, atomic_path

PREDICTIONS_SCHEMA = 1  # predictions.npz's "schema"; summary.json's is layout.SCHEMA
FILE_NAME = "predictions.npz"
VARIANTS = ("raw", "ema")
ARRAYS = ("pred", "p_true", "confidence", "target")


def variant_of(metric: str) -> str:
    """Which weights a metric scores: `ema` for `ema_*` metrics, else `raw`."""
    return "ema" if str(metric).startswith("ema_") else "raw"


def _int_dtype(n_classes: int):
    return np.int16 if n_classes < 2**15 else np.int32


def write_predictions(path: Path, variants: dict[str, dict]) -> None:
    """Write `{variant: {pred, p_true, confidence, target, epoch}}` to `path` atomically."""
    out = {"schema": np.int64(PREDICTIONS_SCHEMA)}
    for v, arrays in variants.items():
        if v not in VARIANTS:
            raise ValueError(f"unknown predictions variant {v!r}; one of {', '.join(VARIANTS)}")
        target = np.asarray(arrays["target"])
        n_classes = int(max(np.max(target, initial=0), np.max(np.asarray(arrays["pred"]), initial=0))) + 1
        dtype = _int_dtype(n_classes)
        out[f"{v}_pred"] = np.asarray(arrays["pred"]).astype(dtype)
        out[f"{v}_target"] = target.astype(dtype)
        out[f"{v}_p_true"] = np.asarray(arrays["p_true"], dtype=np.float32)
        out[f"{v}_confidence"] = np.asarray(arrays["confidence"], dtype=np.float32)
        out[f"{v}_epoch"] = np.int64(arrays["epoch"])
        if not len({out[f"{v}_{a}"].shape for a in ARRAYS}) == 1:
            raise ValueError(f"predictions {v}: arrays of different lengths")
    with atomic_path(Path(path)) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **out)


def read_predictions(path: Path) -> dict[str, dict] | None:
    """`{variant: {pred, p_true, confidence, target, epoch}}`, None when the file does not exist.

    Raises:
        RunStateError: a file that is not a readable predictions file of this schema (names the file).
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise RunStateError(f"{path} is not a readable predictions file ({type(e).__name__}: {e}); "
                            f"delete it and rerun the run's evaluation, or report without it") from None
    if int(data.get("schema", -1)) != PREDICTIONS_SCHEMA:
        raise RunStateError(f"{path} has predictions schema {data.get('schema')!r}, not {PREDICTIONS_SCHEMA}")
    out = {}
    for v in VARIANTS:
        if f"{v}_pred" in data:
            out[v] = {a: data[f"{v}_{a}"] for a in ARRAYS}
            out[v]["epoch"] = int(data[f"{v}_epoch"])
    return out
