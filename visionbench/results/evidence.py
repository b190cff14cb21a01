"""Whether a run's `predictions.npz` is that run's evidence, and if not, why and what fixes it.

The report (report/per_example.py) asks `judge(run_dir, summary, variant)` for every completed run and
uses the arrays only of a file that passes, in this order:

1. it exists: else `missing` (the run's summary says it wrote one: deleted since) or `before` (the summary
   records none: a run from before per-example predictions, or one whose file was deleted);
2. it reads as a complete file (results/predictions.py `read_evidence`): else `damaged`;
3. its arrays are in range: one dimension, as many entries as the file's `meta` says the scored set has,
   classes in [0, n_classes), probabilities finite in [0, 1], the predicted class's probability at least
   the true class's: else `damaged`;
4. it names this run: meta's recipe, act label, setting, seed and config hash equal the summary's: else
   `mismatch` (the file is another run's);
5. it agrees with the summary: the variant's epoch is the summary's selected epoch (`best_epoch`,
   `ema_best_epoch`), its top-1 the summary's accuracy of that checkpoint on the scored set within one image (one
   per DDP process: the metric counts the sampler's padding): else `disagree`. Which of the two is wrong the files
   cannot tell (a metric edited in the summary, an edited file): the report leaves the run out of its tables and
   verdicts (results/integrity.py), naming the disagreement, not blaming either (a file that names no run:
   `mismatch`);
6. it has the variant the report's metric scores: else `no_variant`.

A file from before `meta` passes steps 3 (without the class bound) and 4 (without the identity) as
`unnamed`. Every refusal names the file, why, and the command that rewrites it (`FIX`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import origins
from .io import RunStateError
from .layout import files
from .predictions import ARRAYS, FILE_NAME, read_evidence

OK, UNNAMED, MISSING, BEFORE, DAMAGED, MISMATCH, DISAGREE, NO_VARIANT = (
    "ok",
    "unnamed",
    "missing",
    "before",
    "damaged",
    "mismatch",
    "disagree",
    "no_variant",
)
USED = (OK, UNNAMED)  # the kinds whose arrays the report uses
SELECTED_EPOCH = {"raw": "best_epoch", "ema": "ema_best_epoch"}  # results/layout.metrics_from_rows
# the accuracy of the selected checkpoint on the scored set: the test set's when the run had one, else val's
ACCURACY = {
    "raw": ("test_top1_at_best_val", "val_top1_best"),
    "ema": ("ema_test_top1_at_best_val", "ema_val_top1_best"),
}


@dataclass(frozen=True)
class Evidence:
    """What `judge` found: `kind` (one of the constants above), the variant's arrays when usable, and why not."""

    kind: str
    arrays: dict | None = None
    why: str = ""


def fix_command(run_dir) -> str:
    """The command that rewrites a run's predictions, wherever it was read from (results/origins.py)."""
    return origins.fix_command(run_dir)


def range_problem(v: str, arrays: dict, meta: dict | None) -> str | None:
    """Why one variant's arrays cannot be predictions of a classifier (None: they can)."""
    shapes = {a: np.shape(arrays[a]) for a in ARRAYS}
    if any(len(s) != 1 for s in shapes.values()) or len(set(shapes.values())) != 1:
        return f"{v} arrays of shapes {', '.join(f'{a} {s}' for a, s in shapes.items())}, not one entry per image"
    n = shapes["pred"][0]
    expected = (meta or {}).get("n_images")
    if n == 0 or (isinstance(expected, int) and n != expected):
        return f"{n} {v} entries, the scored set has {expected if expected else 'more'} images"
    if int(arrays["epoch"]) < 1:
        return f"{v}_epoch {arrays['epoch']}, not an epoch (1, 2, ...)"
    n_classes = (meta or {}).get("n_classes")
    for a in ("pred", "target"):
        x = np.asarray(arrays[a])
        if not np.issubdtype(x.dtype, np.integer):
            return f"{v}_{a} holds {x.dtype}, not classes"
        bad = (x < 0) | (x >= n_classes) if isinstance(n_classes, int) else x < 0
        if bad.any():
            bound = f"[0, {n_classes})" if isinstance(n_classes, int) else "[0, ...)"
            return f"{v}_{a} has class {int(x[bad][0])} outside {bound}"
    for a in ("p_true", "confidence"):
        if not np.issubdtype(np.asarray(arrays[a]).dtype, np.floating):
            return f"{v}_{a} holds {np.asarray(arrays[a]).dtype}, not probabilities"
        x = np.asarray(arrays[a], dtype=float)
        bad = ~np.isfinite(x) | (x < 0) | (x > 1)
        if bad.any():
            return f"{v}_{a} has {int(bad.sum())} probabilities outside [0, 1] (e.g. {x[bad][0]!r})"
    if (np.asarray(arrays["confidence"], float) < np.asarray(arrays["p_true"], float) - 1e-6).any():
        return f"{v}_confidence is below {v}_p_true: not the probability of the predicted class"
    return None


def identity_problem(meta: dict, summary: dict) -> str | None:
    """How the run the file names differs from the run whose summary this is (None: the same run)."""
    theirs = {
        "recipe": summary.get("recipe"),
        "act": summary.get("act_label") or summary.get("act"),
        "setting": summary.get("setting") or {},
        "seed": summary.get("seed"),
        "config_hash": summary.get("config_hash"),
    }
    diffs = [
        f"{k} {meta.get(k)!r} vs {theirs[k]!r}"
        for k in theirs
        if theirs[k] is not None and (k != "setting" or "setting" in summary) and meta.get(k) != theirs[k]
    ]
    return "written by another run (file vs summary: " + ", ".join(diffs) + ")" if diffs else None


def run_problem(v: str, arrays: dict, meta: dict | None, summary: dict) -> str | None:
    """How one variant's arrays disagree with the run's summary: selected epoch, accuracy (None: they agree)."""
    metrics = summary.get("metrics") if isinstance(summary.get("metrics"), dict) else {}
    selected = metrics.get(SELECTED_EPOCH[v])
    if isinstance(selected, (int, float)) and math.isfinite(selected) and int(selected) != arrays["epoch"]:
        return (
            f"{v} predictions of epoch {arrays['epoch']} in {FILE_NAME}, selected epoch {int(selected)} in "
            f"summary.json ({SELECTED_EPOCH[v]})"
        )
    key = next((k for k in ACCURACY[v] if k in metrics), None)
    value = metrics.get(key) if key else None
    if isinstance(value, (int, float)) and math.isfinite(value):
        n = len(arrays["pred"])
        accuracy = 100.0 * float(np.mean(np.asarray(arrays["pred"]) == np.asarray(arrays["target"])))
        images = max(1, int((meta or {}).get("world_size") or 1))
        if abs(accuracy - value) > 100.0 * images / n + 1e-3:
            return f"{v} top-1 {accuracy:.2f} in {FILE_NAME}, {value:.2f} in summary.json ({key})"
    return None


def missing_kind(summary: dict) -> Evidence:
    """No file: `missing` when the summary records that the run wrote one, else `before`."""
    if summary.get("predictions"):
        return Evidence(MISSING, why=f"no {FILE_NAME} (the run wrote one: deleted since?)")
    return Evidence(BEFORE, why=f"no {FILE_NAME} (a run from before per-example predictions, or its file deleted)")


def judge(run_dir, summary: dict, variant: str) -> Evidence:
    """Whether `run_dir`'s predictions.npz is the evidence of its `summary`'s run for `variant`."""
    path = files(Path(run_dir)).predictions
    try:
        read = read_evidence(path)
    except RunStateError as exc:
        return Evidence(DAMAGED, why=str(exc).replace(f"{path} ", f"{FILE_NAME} ", 1))
    if read is None:
        return missing_kind(summary)
    variants, meta = read
    for v, arrays in variants.items():
        problem = range_problem(v, arrays, meta)
        if problem:
            return Evidence(DAMAGED, why=f"{FILE_NAME} is damaged: {problem}")
    problem = identity_problem(meta, summary) if meta is not None else None
    if problem:
        return Evidence(MISMATCH, why=f"{FILE_NAME} is not this run's: {problem}")
    for v, arrays in variants.items():
        problem = problem or run_problem(v, arrays, meta, summary)
    if problem and meta is None:  # a file from before it named its run: perhaps another run's
        return Evidence(MISMATCH, why=f"{FILE_NAME} (which names no run) is not this run's: {problem}")
    if problem:
        return Evidence(DISAGREE, why=f"the summary's metrics and the predictions disagree: {problem}")
    if variant not in variants:
        return Evidence(NO_VARIANT, why=f"{FILE_NAME} has no {variant!r} predictions (has {', '.join(variants)})")
    return Evidence(OK if meta is not None else UNNAMED, variants[variant])
