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
    meta            str scalar     JSON: the run the file belongs to (`IDENTITY`: recipe, act label,
                                   setting, seed, config_hash) and `n_images`, `n_classes`, `world_size`

with `<v>` = `raw` (the trained weights) or `ema` (the weight EMA, when the recipe keeps one).
About 12 bytes per image: 120 kB for 10,000 test images. Written atomically (results/io.py).
`meta` was added without a schema bump (readers that ignore it read the file as before); a file
without it predates it, and is read with `meta` None. Whether a file is the evidence of the run it
sits in (identity, epoch, accuracy, ranges): results/evidence.py.

    >>> write_predictions(path, {"raw": {"pred": ..., "p_true": ..., "confidence": ..., "target": ..., "epoch": 7}},
    ...                   meta={"recipe": "digits_vgg4", "act": "relu", "setting": {}, "seed": 0, ...})
    >>> read_predictions(path)["raw"]["pred"]
    >>> variants, meta = read_evidence(path)
    >>> read_meta(path)["n_classes"]          # the meta alone
    >>> n_classes(path)                       # C, or None when unknown (the stall rule reads it here)
    >>> counts(path)                          # (C, N images), one read: what the report's runs table holds
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np

from .io import RunStateError, atomic_path

PREDICTIONS_SCHEMA = 1  # predictions.npz's "schema"; summary.json's is layout.SCHEMA
FILE_NAME = "predictions.npz"
VARIANTS = ("raw", "ema")
ARRAYS = ("pred", "p_true", "confidence", "target")
META = "meta"
IDENTITY = ("recipe", "act", "setting", "seed", "config_hash")  # the run a file belongs to (meta's keys)
FIX = "visionbench predictions {run_dir}"  # the command that rewrites a run's file from its checkpoint


def variant_of(metric: str) -> str:
    """Which weights a metric scores: `ema` for `ema_*` metrics, else `raw`."""
    return "ema" if str(metric).startswith("ema_") else "raw"


def _int_dtype(n_classes: int):
    return np.int16 if n_classes < 2**15 else np.int32


def write_predictions(path: Path, variants: dict[str, dict], meta: dict | None = None) -> None:
    """Write `{variant: {pred, p_true, confidence, target, epoch}}` and `meta` (the run's identity,
    JSON-serialisable; `n_images` is added) to `path` atomically."""
    out = {"schema": np.int64(PREDICTIONS_SCHEMA)}
    n_images = set()
    for v, arrays in variants.items():
        if v not in VARIANTS:
            raise ValueError(f"unknown predictions variant {v!r}; one of {', '.join(VARIANTS)}")
        target = np.asarray(arrays["target"])
        n_classes = int(max(np.max(target, initial=0), np.max(np.asarray(arrays["pred"]), initial=0))) + 1
        if meta and meta.get("n_classes"):
            n_classes = max(n_classes, int(meta["n_classes"]))
        dtype = _int_dtype(n_classes)
        out[f"{v}_pred"] = np.asarray(arrays["pred"]).astype(dtype)
        out[f"{v}_target"] = target.astype(dtype)
        out[f"{v}_p_true"] = np.asarray(arrays["p_true"], dtype=np.float32)
        out[f"{v}_confidence"] = np.asarray(arrays["confidence"], dtype=np.float32)
        out[f"{v}_epoch"] = np.int64(arrays["epoch"])
        if not len({out[f"{v}_{a}"].shape for a in ARRAYS}) == 1:
            raise ValueError(f"predictions {v}: arrays of different lengths")
        n_images.add(len(target))
    if meta is not None:
        out[META] = np.array(json.dumps({**meta, "n_images": max(n_images, default=0)}, sort_keys=True))
    with atomic_path(Path(path)) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **out)


def read_evidence(path: Path) -> tuple[dict[str, dict], dict | None] | None:
    """(`{variant: {pred, p_true, confidence, target, epoch}}`, meta or None for a file from before it);
    None when the file does not exist.

    Raises:
        RunStateError: a file that is not a complete predictions file of this schema: unreadable, an entry
            missing, an epoch that is no integer, a meta that is no JSON mapping (the message names the file).
    """
    path = Path(path)
    if not path.exists():
        return None
    damaged = f"{path} is damaged"
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError, AttributeError, TypeError) as e:
        raise RunStateError(
            f"{path} is not a readable predictions file ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:120] if str(e) else ''})"
        ) from None
    if not isinstance(data, dict):  # np.load of a plain .npy: one array, no entries
        raise RunStateError(f"{damaged}: one array, not the entries of a predictions file")
    try:
        schema = int(data.get("schema", -1))
    except (TypeError, ValueError):
        schema = -1
    if schema != PREDICTIONS_SCHEMA:
        raise RunStateError(f"{path} has predictions schema {data.get('schema')!r}, not {PREDICTIONS_SCHEMA}")
    out = {}
    for v in VARIANTS:
        present = [k for k in (*ARRAYS, "epoch") if f"{v}_{k}" in data]
        if not present:
            continue
        if len(present) < len(ARRAYS) + 1:
            missing = sorted({*ARRAYS, "epoch"} - set(present))
            raise RunStateError(f"{damaged}: no {', '.join(f'{v}_{k}' for k in missing)}")
        out[v] = {a: data[f"{v}_{a}"] for a in ARRAYS}
        epoch = data[f"{v}_epoch"]
        if epoch.shape != () or not np.issubdtype(epoch.dtype, np.integer):
            raise RunStateError(f"{damaged}: {v}_epoch is {epoch.dtype} of shape {epoch.shape}, not an integer")
        out[v]["epoch"] = int(epoch)
    if not out:
        raise RunStateError(f"{damaged}: no predictions (no {' or '.join(f'{v}_pred' for v in VARIANTS)})")
    return out, _meta(path, str(data[META])) if META in data else None


def _meta(path: Path, text: str) -> dict:
    """The `meta` entry's text as its mapping; RunStateError (naming the file) when it is no JSON mapping."""
    try:
        meta = json.loads(text)
    except ValueError:
        meta = None
    if not isinstance(meta, dict):
        raise RunStateError(f"{path} is damaged: its {META} entry is no JSON mapping")
    return meta


def read_predictions(path: Path) -> dict[str, dict] | None:
    """`{variant: {pred, p_true, confidence, target, epoch}}`, None when the file does not exist.

    Raises:
        RunStateError: a file that is not a complete predictions file of this schema (names the file).
    """
    read = read_evidence(path)
    return None if read is None else read[0]


def read_meta(path: Path) -> dict | None:
    """The file's `meta` mapping alone (its other entries are not read): None when the file does not exist or has
    no meta (written before it).

    Raises:
        RunStateError: an unreadable file, or a meta that is no JSON mapping (the message names the file).
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            text = str(z[META]) if META in z.files else None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError, AttributeError, TypeError) as e:
        raise RunStateError(f"{path} is not a readable predictions file ({type(e).__name__})") from None
    return None if text is None else _meta(path, text)


def counts(path: Path) -> tuple[int | None, int | None]:
    """(C, the number of classes, N, the number of images scored) as the predictions file at `path` names them (its
    `meta`), one read of it; None for what is unknown (no file, a file from before the meta, an unreadable one)."""
    try:
        meta = read_meta(path) or {}
    except RunStateError:
        meta = {}

    def count(key: str, least: int) -> int | None:
        n = meta.get(key)
        return n if isinstance(n, int) and not isinstance(n, bool) and n >= least else None

    return count("n_classes", 2), count("n_images", 1)


def n_classes(path: Path) -> int | None:
    """C, the number of classes, as the predictions file at `path` names it (`counts`); None when unknown."""
    return counts(path)[0]
