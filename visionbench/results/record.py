"""A results tree's compact, committable record: what `visionbench report` needs, without checkpoints.

A record is a folder of two files (`visionbench export RUNS_DIR OUT` writes it, report/export.py):

    record.json       FORMAT, VERSION, the tree's folder name (`root`), its recipe-level files
                      (sequential.json), and per run (one line each): its path in the tree, summary.json
                      (environment, every metric), config.yaml (both as changes to a shared base), metrics.csv
                      (the per-epoch curves, verbatim), the activation snapshots the report's figures draw
    predictions.npz   every run's per-example predictions, packed (`pack`): ≈ 3 bytes per image; the
                      snapshots' arrays (float32)

`opened(path)` gives a run tree for a record (materialised in a temporary folder) or for a tree (itself),
so the report, `compare` and every other reader read a record exactly as they read the runs it came from.
A record is checked whole before use: its format and version, and the SHA-256 of predictions.npz that
record.json holds (a truncated or edited file is refused with one line, `RecordError`).

Packing keeps every number the statistics use, exactly: the predicted class (stored as its distance to the
true class, mostly 0: it compresses to almost nothing), the true class once per test set, p(true) as float32
byte planes, the confidence only where it is not p(true) (wrong predictions): ≈ 31 kB for 10,000 images of
noisy probabilities (the low mantissa bytes of a float32 do not compress), less for saturated ones.
A record's report is the report of its runs, byte for byte (tests/test_record.py).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import tempfile
import zipfile
from pathlib import Path
from typing import Iterator

import numpy as np

from . import layout
from .io import RunStateError, atomic_path, atomic_write_text
from .predictions import read_evidence, write_predictions

FORMAT = "visionbench-record"
VERSION = 1
RECORD = "record.json"
PREDICTIONS = "predictions.npz"


class RecordError(ValueError):
    """A record that cannot be read as it is; the message (one line) names the file and why."""


def is_record(path: str | Path) -> bool:
    """Whether `path` is a record folder (or its record.json)."""
    path = Path(path)
    return (path / RECORD).is_file() or (path.name == RECORD and path.is_file())


def record_dir(path: str | Path) -> Path:
    """The record folder of `path` (the folder itself or the folder of its record.json)."""
    path = Path(path)
    return path.parent if path.name == RECORD and path.is_file() else path


# --- packing the per-example predictions -------------------------------------------------------

def _planes(values) -> np.ndarray:
    """float32 values as their 4 byte planes (4 × N uint8): the sign-exponent plane of probabilities is nearly
    constant, so deflate packs it to almost nothing; `_floats` inverts it exactly."""
    return np.ascontiguousarray(np.asarray(values, np.float32).view(np.uint8).reshape(-1, 4).T)


def _floats(planes) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(planes, np.uint8).T).view(np.float32).reshape(-1)


def pack(variant: dict, n_classes: int) -> dict[str, np.ndarray]:
    """One variant `{pred, p_true, confidence, target}` as small arrays (`unpack` inverts it exactly): `shift` =
    (pred − target) mod C, `p_true` as byte planes, `conf` = the confidence where pred ≠ target (elsewhere it is
    p(true)), as byte planes."""
    pred, target = np.asarray(variant["pred"], np.int64), np.asarray(variant["target"], np.int64)
    wrong = pred != target
    shift_dtype = np.uint8 if n_classes <= 256 else np.uint16 if n_classes <= 65536 else np.uint32
    return {"shift": ((pred - target) % n_classes).astype(shift_dtype),
            "p_true": _planes(variant["p_true"]), "conf": _planes(np.asarray(variant["confidence"])[wrong])}


def unpack(arrays: dict, target: np.ndarray, n_classes: int) -> dict[str, np.ndarray]:
    """`{pred, p_true, confidence, target}` from `pack`'s arrays and the test set's true classes."""
    target = np.asarray(target, np.int64)
    pred = (target + arrays["shift"].astype(np.int64)) % n_classes
    p_true = _floats(arrays["p_true"])
    confidence = p_true.copy()
    wrong = pred != target
    conf = _floats(arrays["conf"])
    if int(wrong.sum()) != len(conf):
        raise RecordError(f"{PREDICTIONS}: {len(conf)} confidences for {int(wrong.sum())} wrong predictions")
    confidence[wrong] = conf
    return {"pred": pred, "p_true": p_true, "confidence": confidence, "target": target}


# --- config and summary as changes to a shared base ---------------------------------------------

def _flat(d: dict, prefix: tuple = ()) -> dict[tuple, object]:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, prefix + (key,)))
        else:
            out[prefix + (key,)] = value
    return out


def changes(base: dict, d: dict) -> dict:
    """`d` as `{"set": [[path, value], ...], "drop": [path, ...]}` against `base` (paths: key lists; sorted, so
    that key order, which JSON and YAML keep, never changes a record)."""
    fb, fd = _flat(base), _flat(d)
    changed = (k for k, v in fd.items() if k not in fb or fb[k] != v or type(fb[k]) is not type(v))
    return {"set": sorted([list(k), fd[k]] for k in changed), "drop": sorted(list(k) for k in fb if k not in fd)}


def apply(base: dict, delta: dict) -> dict:
    """`base` with `changes`' delta applied (a fresh nested dict; key order: base's, then new keys)."""
    flat = _flat(base)
    for path in delta.get("drop", []):
        flat.pop(tuple(path), None)
    for path, value in delta.get("set", []):
        flat[tuple(path)] = value
    out: dict = {}
    for path, value in flat.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


# --- writing -------------------------------------------------------------------------------------

def write(out: str | Path, root_name: str, runs: list[dict], tree_files: dict[str, dict]) -> list[Path]:
    """Write the record of `runs` into the folder `out` (created; both files replaced atomically).

    `runs`: dicts with `path` (in the tree, '/'-joined), `summary`, `config` (dicts or None), `metrics_csv`
    (text or None), `snapshots` (list of snapshot dicts) and `predictions` ((variants, meta) of
    results/predictions.py `read_evidence`, or None). Returns the two paths written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    arrays, targets, bases, entries = {}, [], [], []
    for i, run in enumerate(runs):
        snapshots = [_pack_snapshot(f"r{i}_s{j}", s, arrays) for j, s in enumerate(run.get("snapshots") or [])]
        entry = {"path": run["path"], "metrics_csv": run.get("metrics_csv"), "snapshots": snapshots}
        for field in ("summary", "config"):
            entry[field] = None if run.get(field) is None else _as_changes(run[field], bases)
        if run.get("predictions") is not None:
            entry["predictions"] = _pack_run(i, *run["predictions"], arrays, targets)
        entries.append(entry)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays, **{f"target_{k}": t for k, t in enumerate(targets)})
    blob = buffer.getvalue()
    record = {"format": FORMAT, "version": VERSION, "root": root_name, "files": tree_files, "bases": bases,
              "runs": entries, "sha256": {PREDICTIONS: hashlib.sha256(blob).hexdigest()}}
    predictions = out / PREDICTIONS
    with atomic_path(predictions) as tmp:
        tmp.write_bytes(blob)
    atomic_write_text(out / RECORD, _dumps(record))
    return [out / RECORD, predictions]


def _dumps(record: dict) -> str:
    """record.json's text: sorted keys, one line per run and per base (diffable, and small)."""
    lines = [f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(record.items())
             if k not in ("bases", "runs")]
    for key in ("bases", "runs"):
        items = ",\n".join(f"  {json.dumps(x, sort_keys=True)}" for x in record[key])
        lines.append(f" {json.dumps(key)}: [\n{items}\n ]")
    return "{\n" + ",\n".join(lines) + "\n}\n"


SNAPSHOT_ARRAYS = ("x", "y", "hist_edges", "hist_counts")  # the drawn arrays of a snapshot's layer


def _pack_snapshot(prefix: str, snap: dict, arrays: dict) -> dict:
    """A snapshot with its layers' arrays moved into `arrays` (float32, one array per layer)."""
    layers = []
    for k, layer in enumerate(snap.get("layers") or []):
        parts = [np.asarray(layer[a], np.float32) for a in SNAPSHOT_ARRAYS]
        arrays[f"{prefix}_l{k}"] = np.concatenate(parts)
        layers.append({**{a: v for a, v in layer.items() if a not in SNAPSHOT_ARRAYS},
                       "lengths": [len(p) for p in parts]})
    return {**{a: v for a, v in snap.items() if a != "layers"}, "layers": layers}


def _unpack_snapshot(prefix: str, snap: dict, arrays: dict) -> dict:
    layers = []
    for k, layer in enumerate(snap["layers"]):
        flat, start, out = arrays[f"{prefix}_l{k}"].astype(float), 0, {}
        for name, n in zip(SNAPSHOT_ARRAYS, layer["lengths"]):
            values = flat[start:start + n]
            out[name] = [int(v) for v in values] if name == "hist_counts" else [float(v) for v in values]
            start += n
        layers.append({**{a: v for a, v in layer.items() if a != "lengths"}, **out})
    return {**snap, "layers": layers}


def _as_changes(d: dict, bases: list[dict]) -> dict:
    """`d` as changes to the base it shares most with (a new base when none shares half its keys)."""
    flat = _flat(d)
    best, kept = None, -1
    for k, base in enumerate(bases):
        same = sum(1 for key, v in _flat(base).items() if key in flat and flat[key] == v)
        if same > kept:
            best, kept = k, same
    if best is None or kept < len(flat) / 2:
        bases.append(d)
        best = len(bases) - 1
    return {"base": best, **changes(bases[best], d)}


def _pack_run(i: int, variants: dict, meta: dict | None, arrays: dict, targets: list) -> dict:
    n_classes = int((meta or {}).get("n_classes") or 0)
    n_classes = max([n_classes] + [int(max(v["pred"].max(initial=0), v["target"].max(initial=0))) + 1
                                   for v in variants.values()])
    out = {"meta": meta, "n_classes": n_classes, "variants": {}}
    for name, v in variants.items():
        target = np.asarray(v["target"])
        k = next((k for k, t in enumerate(targets) if t.shape == target.shape and np.array_equal(t, target)), None)
        if k is None:
            targets.append(target.astype(np.int16 if n_classes < 2**15 else np.int32))
            k = len(targets) - 1
        for key, value in pack(v, n_classes).items():
            arrays[f"r{i}_{name}_{key}"] = value
        out["variants"][name] = {"epoch": int(v["epoch"]), "target": k}
    return out


# --- reading -------------------------------------------------------------------------------------

def read(path: str | Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(record.json's content, predictions.npz's arrays) of the record at `path`, checked whole.

    Raises:
        RecordError: no record there, not JSON (truncated?), another format or version, or a
            predictions.npz whose SHA-256 is not the one record.json holds (truncated or edited).
    """
    folder = record_dir(path)
    where = folder / RECORD
    if not where.is_file():
        raise RecordError(f"{folder} is no record: it has no {RECORD} (visionbench export RUNS_DIR OUT writes one)")
    try:
        record = json.loads(where.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise RecordError(f"{where} is not a complete JSON file (truncated? {str(e).splitlines()[0][:80]}); "
                          "export the record again") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        found = record.get("format") if isinstance(record, dict) else None
        raise RecordError(f"{where} is not a visionbench record (format {found!r}, expected {FORMAT!r})")
    if record.get("version") != VERSION:
        raise RecordError(f"{where} is a record of format version {record.get('version')!r}; this visionbench reads "
                          f"version {VERSION}: use the visionbench that wrote it, or export the runs again")
    blob_path = folder / PREDICTIONS
    try:
        blob = blob_path.read_bytes()
    except OSError as e:
        raise RecordError(f"{blob_path} is missing or unreadable ({e.strerror or e}); the record is incomplete") from None
    digest = hashlib.sha256(blob).hexdigest()
    if digest != (record.get("sha256") or {}).get(PREDICTIONS):
        raise RecordError(f"{blob_path} is not the file {RECORD} was written with (sha256 {digest[:12]}…, expected "
                          f"{str((record.get('sha256') or {}).get(PREDICTIONS))[:12]}…): truncated or edited; "
                          "export the record again")
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise RecordError(f"{blob_path} is unreadable ({type(e).__name__})") from None
    return record, arrays


def materialize(path: str | Path, into: str | Path) -> Path:
    """Write the record at `path` as a run tree under `into`; returns the tree's root (`into/<root>`)."""
    record, arrays = read(path)
    bases = record["bases"]
    root = Path(into) / record["root"]
    for rel, content in (record.get("files") or {}).items():  # the recipe-level sequential.json files
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        layout.write_sequential((root / rel).parent, content)
    for i, run in enumerate(record["runs"]):
        run_dir = root / run["path"]
        run_dir.mkdir(parents=True, exist_ok=True)
        if run.get("config") is not None:
            layout.write_config(run_dir, apply(bases[run["config"]["base"]], run["config"]))
        if run.get("metrics_csv") is not None:
            layout.files(run_dir).metrics.write_text(run["metrics_csv"])
        for j, snap in enumerate(run.get("snapshots") or []):
            snaps = layout.files(run_dir).snapshots
            snaps.mkdir(exist_ok=True)
            (snaps / f"epoch_{int(snap['epoch']):03d}.json").write_text(
                json.dumps(_unpack_snapshot(f"r{i}_s{j}", snap, arrays)))
        if run.get("predictions"):
            _write_predictions(run_dir, i, run["predictions"], arrays)
        if run.get("summary") is not None:
            layout.write_summary(run_dir, apply(bases[run["summary"]["base"]], run["summary"]))
    return root


def _write_predictions(run_dir: Path, i: int, packed: dict, arrays: dict) -> None:
    n_classes = int(packed["n_classes"])
    variants = {}
    for name, info in packed["variants"].items():
        try:
            own = {k: arrays[f"r{i}_{name}_{k}"] for k in ("shift", "p_true", "conf")}
            target = arrays[f"target_{info['target']}"]
        except KeyError as e:
            raise RecordError(f"{PREDICTIONS} lacks {e.args[0]}: the record is incomplete") from None
        variants[name] = {**unpack(own, target, n_classes), "epoch": info["epoch"]}
    meta = packed.get("meta")
    meta = {k: v for k, v in meta.items() if k != "n_images"} if isinstance(meta, dict) else None
    write_predictions(layout.files(run_dir).predictions, variants, meta=meta)


@contextlib.contextmanager
def opened(path: str | Path) -> Iterator[Path]:
    """A run tree to read: `path` itself when it is one; a record's runs materialised in a temporary
    folder (removed afterwards) when `path` is a record. RecordError for a damaged record."""
    if not is_record(path):
        yield Path(path)
        return
    with tempfile.TemporaryDirectory(prefix="visionbench-record-") as tmp:
        yield materialize(path, tmp)


def read_run(run_dir: Path) -> dict:
    """One run directory's files as `write` takes them (its path is set by the caller)."""
    files = layout.files(run_dir)
    try:
        predictions = read_evidence(files.predictions)
    except RunStateError:
        predictions = None  # a damaged file is no evidence: the report says so for the tree, the record drops it
    snapshots = []
    if files.snapshots.is_dir():
        for snap in sorted(files.snapshots.glob("epoch_*.json")):
            try:
                snapshots.append(json.loads(snap.read_text()))
            except (OSError, ValueError):
                continue
    return {"summary": layout.read_summary(run_dir), "config": layout.read_config(run_dir),
            "metrics_csv": files.metrics.read_text() if files.metrics.is_file() else None,
            "snapshots": snapshots, "predictions": predictions}

