"""A results tree's compact, committable record: what `visionbench report` needs, without checkpoints.

A record is a folder of two files (`visionbench export RUNS_DIR OUT` writes it, report/export.py):

    record.json                 FORMAT, VERSION, the tree's folder name (`root`), its recipe-level files
                                (sequential.json), and per run (one line each): its path in the tree, summary.json
                                (environment, every metric), config.yaml (both as changes to a shared base),
                                metrics.csv (the per-epoch curves, verbatim), the activation snapshots the report's
                                figures draw; the name of the predictions file, and `sha256`: the SHA-256 of that
                                file and of record.json's own content (`content_sha256`)
    predictions.<sha256>.npz    every run's per-example predictions, packed (`pack`): ≈ 3 bytes per image; the
                                snapshots' arrays (float32); named by the first 16 hex digits of its SHA-256

`opened(path)` gives a run tree for a record (materialised in a temporary folder) or for a tree (itself),
so the report, `compare` and every other reader read a record exactly as they read the runs it came from.
A record is checked whole before use (`read`): its format and version, record.json's content against its own
SHA-256 (an edited metric, a deleted run, an edited path: "has been changed since it was exported"), the
predictions file against the SHA-256 record.json holds, the shape of every field, and every path it names
(results/safe_paths.py: `root` one folder name, run paths and `files` keys inside the tree, the predictions file
inside the record): one line (`RecordError`) for anything wrong, before anything is written. The hashes catch a
record changed after export (by hand, a merge, a truncated copy); they are no signature — whoever rewrites a record
can rewrite its hashes, and the path checks are what keep such a record from writing outside its tree.
A record of format 1 (before the self-hash) is refused: its content cannot be checked (re-export it from its runs,
or seal it as it is with scripts/upgrade_records.py).

Writing replaces a record in one step: the predictions file goes under its own, new name; record.json, renamed
over the old one, is the single commit point; the file the old record named is removed afterwards. A kill at any
instant leaves the old record or the new one, whole (at worst with an unnamed predictions file beside it, which
the next export removes).

Packing keeps every number the statistics use, exactly: the predicted class (stored as its distance to the
true class, mostly 0: it compresses to almost nothing), the true class once per test set, p(true) as float32
byte planes, the confidence only where it is not p(true) (wrong predictions): ≈ 31 kB for 10,000 images of
noisy probabilities (the low mantissa bytes of a float32 do not compress), less for saturated ones; export checks
that what it packs comes back exactly (`read_run`).
A record's report is the report of its runs, byte for byte (tests/test_record.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from . import evidence, integrity, layout, origins
from .io import RunStateError, atomic_path, atomic_write_text, sync_folder
from .predictions import FIX as FIX_RUNS
from .predictions import VARIANTS, read_evidence
from .run_writer import write_run
from .safe_paths import UnsafePath, component, inside

FORMAT = "visionbench-record"
VERSION = 2  # 2: record.json holds the SHA-256 of its own content; the predictions file is named by its hash
RECORD = "record.json"
PREDICTIONS = "predictions.npz"  # format 1's predictions file (format 2: `blob_name`)
_BLOB = re.compile(r"predictions\.[0-9a-f]{16}\.npz")
_ANY_BLOB = re.compile(r"predictions(\.[0-9a-f]{16})?\.npz")  # format 2's, or format 1's
REEXPORT = "re-export it from its runs (visionbench export RUNS_DIR {folder})"


class RecordError(ValueError):
    """A record that cannot be read as it is; the message (one line) names the file and why."""


class _Unusable(Exception):
    """A predictions file whose arrays are not what record.json says (materialize names the file and run)."""


def is_record(path: str | Path) -> bool:
    """Whether `path` is a record folder (or its record.json)."""
    path = Path(path)
    return (path / RECORD).is_file() or (path.name == RECORD and path.is_file())


def record_dir(path: str | Path) -> Path:
    """The record folder of `path` (the folder itself or the folder of its record.json)."""
    path = Path(path)
    return path.parent if path.name == RECORD and path.is_file() else path


def blob_name(sha256: str) -> str:
    """The name of the predictions file whose SHA-256 is `sha256` (hex)."""
    return f"predictions.{sha256[:16]}.npz"


def is_record_file(name: str) -> bool:
    """Whether a file name in a record folder is the export's: record.json, a predictions file, or the temporary
    file of an interrupted write (what may stand in a folder an export was killed in)."""
    return (
        name == RECORD
        or bool(_ANY_BLOB.fullmatch(name))
        or (name.startswith((f".{RECORD}.", ".predictions.")) and ".tmp" in name)
    )


def predictions_path(path: str | Path) -> Path:
    """The predictions file the record at `path` names (without checking it)."""
    folder = record_dir(path)
    try:
        name = json.loads((folder / RECORD).read_text(encoding="utf-8")).get("predictions")
    except (OSError, ValueError, AttributeError):
        name = None
    return folder / (name if isinstance(name, str) and _BLOB.fullmatch(name) else PREDICTIONS)


def content_sha256(record: dict) -> str:
    """The SHA-256 of record.json's content: its canonical JSON (sorted keys, no spaces, ASCII) without the hash
    of itself (`sha256["record.json"]`), so that only what it says counts, not how it is laid out."""
    hashes = record.get("sha256")
    content = (
        {**record, "sha256": {k: v for k, v in hashes.items() if k != RECORD}} if isinstance(hashes, dict) else record
    )
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


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
    return {
        "shift": ((pred - target) % n_classes).astype(shift_dtype),
        "p_true": _planes(variant["p_true"]),
        "conf": _planes(np.asarray(variant["confidence"])[wrong]),
    }


def unpack(arrays: dict, target: np.ndarray, n_classes: int) -> dict[str, np.ndarray]:
    """`{pred, p_true, confidence, target}` from `pack`'s arrays and the test set's true classes."""
    target = np.asarray(target, np.int64)
    pred = (target + arrays["shift"].astype(np.int64)) % n_classes
    p_true = _floats(arrays["p_true"])
    confidence = p_true.copy()
    wrong = pred != target
    conf = _floats(arrays["conf"])
    if int(wrong.sum()) != len(conf):
        raise RecordError(f"{len(conf)} confidences for {int(wrong.sum())} wrong predictions")
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
    """Write the record of `runs` into the folder `out` (created), replacing a record there in one step.

    `runs`: dicts with `path` (in the tree, '/'-joined), `summary`, `config` (dicts or None), `metrics_csv`
    (text or None), `snapshots` (list of snapshot dicts) and `predictions` ((variants, meta) of
    results/predictions.py `read_evidence`, or None). Returns the two paths written.

    The order is the atomicity (module docstring): the predictions file under its hash's name, then record.json
    renamed over the old one (the commit point), then the old predictions file removed."""
    out = Path(out)
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
    digest = hashlib.sha256(blob).hexdigest()
    name = blob_name(digest)
    record = {
        "format": FORMAT,
        "version": VERSION,
        "root": root_name,
        "files": tree_files,
        "bases": bases,
        "runs": entries,
        "predictions": name,
        "sha256": {name: digest},
    }
    record["sha256"][RECORD] = content_sha256(record)
    text = _dumps(record)
    if content_sha256(json.loads(text)) != record["sha256"][RECORD]:  # a value JSON does not give back as it is
        raise RecordError(
            f"the record of {root_name} would not read back as it is written (a value JSON cannot "
            "hold exactly); nothing was written"
        )
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / name) as tmp, open(tmp, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    atomic_write_text(out / RECORD, text)  # the commit point: before it the old record reads, after it the new one
    sync_folder(out)
    for stale in sorted(out.iterdir()):  # the old record's predictions file, and any an interrupted export left
        if stale.name != name and _ANY_BLOB.fullmatch(stale.name):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
    return [out / RECORD, out / name]


def _dumps(record: dict) -> str:
    """record.json's text: sorted keys, one line per run and per base (diffable, and small)."""
    lines = [
        f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}"
        for k, v in sorted(record.items())
        if k not in ("bases", "runs")
    ]
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
        layers.append(
            {**{a: v for a, v in layer.items() if a not in SNAPSHOT_ARRAYS}, "lengths": [len(p) for p in parts]}
        )
    return {**{a: v for a, v in snap.items() if a != "layers"}, "layers": layers}


def _unpack_snapshot(prefix: str, snap: dict, arrays: dict) -> dict:
    layers = []
    for k, layer in enumerate(snap["layers"]):
        key = f"{prefix}_l{k}"
        if key not in arrays:
            raise _Unusable(f"it lacks {key}")
        flat, start, out = np.asarray(arrays[key]).astype(float), 0, {}
        if flat.ndim != 1 or flat.size != sum(layer["lengths"]):
            raise _Unusable(f"{key} holds {flat.size} values, the snapshot's layer {sum(layer['lengths'])}")
        for name, n in zip(SNAPSHOT_ARRAYS, layer["lengths"]):
            values = flat[start : start + n]
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


def _classes(variants: dict, meta: dict | None) -> int:
    """C for packing: meta's n_classes, or more when a class in the arrays says so."""
    n_classes = int((meta or {}).get("n_classes") or 0)
    return max(
        [n_classes]
        + [int(max(np.max(v["pred"], initial=0), np.max(v["target"], initial=0))) + 1 for v in variants.values()]
    )


def _pack_run(i: int, variants: dict, meta: dict | None, arrays: dict, targets: list) -> dict:
    n_classes = _classes(variants, meta)
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


def packing_problem(variants: dict, meta: dict | None) -> str | None:
    """Why a run's predictions cannot go into a record as they are (None: they can): arrays that are no classifier's
    predictions (results/evidence.py `range_problem`: shapes, classes, probabilities), or arrays that would not come
    back exactly from the packed form (e.g. a confidence other than p(true) where the prediction is right)."""
    for v, arrays in variants.items():
        problem = evidence.range_problem(v, arrays, meta)
        if problem:
            return problem
    n_classes = _classes(variants, meta)
    for v, arrays in variants.items():
        back = unpack(pack(arrays, n_classes), arrays["target"], n_classes)
        exact = {
            "pred": np.asarray(arrays["pred"], np.int64),
            "target": np.asarray(arrays["target"], np.int64),
            "p_true": np.asarray(arrays["p_true"], np.float32),
            "confidence": np.asarray(arrays["confidence"], np.float32),
        }
        for key, value in exact.items():
            if not np.array_equal(back[key], value, equal_nan=True):
                return f"its {v}_{key} would not come back exactly from the record" + (
                    f" ({v}_confidence differs from {v}_p_true where the prediction is right)"
                    if key == "confidence"
                    else ""
                )
    return None


# --- reading -------------------------------------------------------------------------------------


def read(path: str | Path, *, format_1: bool = False) -> tuple[dict, dict[str, np.ndarray]]:
    """(record.json's content, the predictions file's arrays) of the record at `path`, checked whole.
    `format_1`: read a format-1 record (no hash of its own content: unchecked) — for scripts/upgrade_records.py.

    Raises:
        RecordError: no record there, not JSON (truncated?), another format or version, content that is not the
            content its SHA-256 was taken of (changed since export), a malformed field, a path that would leave
            its folder, or a predictions file whose SHA-256 is not the one record.json holds (truncated or edited).
    """
    folder = record_dir(path)
    where = folder / RECORD
    again = REEXPORT.format(folder=folder)
    if not where.is_file():
        raise RecordError(f"{folder} is no record: it has no {RECORD} (visionbench export RUNS_DIR OUT writes one)")
    try:
        record = json.loads(where.read_text(encoding="utf-8"))
    except OSError as e:
        raise RecordError(f"{where} is unreadable ({e.strerror or e})") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        why = str(e).splitlines()[0][:80] if str(e) else type(e).__name__
        raise RecordError(f"{where} is not a complete JSON file (truncated? {why}); export the record again") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        found = record.get("format") if isinstance(record, dict) else None
        raise RecordError(f"{where} is not a visionbench record (format {found!r}, expected {FORMAT!r})")
    version = record.get("version")
    if version == 1 and not format_1:
        raise RecordError(
            f"{where} is a record of format version 1, written before a record held the SHA-256 of its "
            f"own content: what it says cannot be checked, so it is not read; {again}, or, if you "
            f"trust it as it is, seal it with scripts/upgrade_records.py {folder}"
        )
    if version != VERSION and not (version == 1 and format_1):
        raise RecordError(
            f"{where} is a record of format version {version!r}; this visionbench reads "
            f"version {VERSION}: use the visionbench that wrote it, or export the runs again"
        )
    hashes = record.get("sha256")
    if version == VERSION:
        recorded = hashes.get(RECORD) if isinstance(hashes, dict) else None
        actual = content_sha256(record)
        if recorded != actual:
            said = f"{recorded[:12]}… recorded" if isinstance(recorded, str) else "none recorded"
            raise RecordError(
                f"{where} has been changed since it was exported (sha256 {actual[:12]}… of its "
                f"content, {said}); {again}"
            )
    problem = _malformed(record, version)
    if problem:
        raise RecordError(f"{where} is malformed: {problem}; {again}")
    name = record["predictions"] if version == VERSION else PREDICTIONS
    try:
        blob_path = inside(folder, name, f"{RECORD} predictions")
    except UnsafePath as e:
        raise RecordError(f"{where}: {e}") from None
    try:
        if not stat.S_ISREG(os.stat(blob_path).st_mode):
            raise RecordError(f"{blob_path} is no regular file; the record is incomplete: {again}")
        blob = blob_path.read_bytes()
    except OSError as e:
        raise RecordError(
            f"{blob_path} is missing or unreadable ({e.strerror or e}); the record is incomplete: {again}"
        ) from None
    digest = hashlib.sha256(blob).hexdigest()
    if digest != hashes.get(name):
        raise RecordError(
            f"{blob_path} has been changed since it was exported (sha256 {digest[:12]}…, {RECORD} "
            f"records {str(hashes.get(name))[:12]}…): truncated or edited; {again}"
        )
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001 — foreign bytes: whatever the parser raises, the file is unusable
        raise RecordError(f"{blob_path} is unreadable ({type(e).__name__}); {again}") from None
    return record, arrays


def _malformed(record: dict, version: int) -> str | None:
    """What makes a record.json's content unusable, naming the field (None: nothing). Paths are checked where
    they are used (`materialize`)."""

    def count(x, least: int = 0) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and x >= least

    def key_path(x) -> bool:
        return isinstance(x, list) and bool(x) and all(isinstance(k, str) for k in x)

    if not isinstance(record.get("root"), str):
        return "root is no folder name"
    files, bases, runs = record.get("files"), record.get("bases"), record.get("runs")
    if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
        return f"files is no mapping of {layout.SEQUENTIAL} paths to their content"
    if not isinstance(bases, list) or not all(isinstance(b, dict) for b in bases):
        return "bases is no list of mappings"
    if not isinstance(runs, list):
        return "runs is no list"
    hashes = record.get("sha256")
    if not isinstance(hashes, dict):
        return "sha256 is no mapping"
    name = record.get("predictions") if version == VERSION else PREDICTIONS
    if version == VERSION and (
        not isinstance(name, str)
        or not _BLOB.fullmatch(name)
        or set(hashes) != {RECORD, name}
        or blob_name(str(hashes[name])) != name
    ):
        return (
            f"predictions {name!r} is not the file its sha256 names (expected "
            f"predictions.<16 hex digits of its SHA-256>.npz, and sha256 naming it and {RECORD} alone)"
        )
    if not isinstance(hashes.get(name), str):
        return f"sha256 holds no hash of {name}"
    seen: dict[str, int] = {}
    for i, run in enumerate(runs):
        at = f"runs[{i}]"
        if not isinstance(run, dict):
            return f"{at} is no mapping"
        path = run.get("path")
        if not isinstance(path, str):
            return f"{at}.path is no string"
        if path in seen:
            return f"{at}.path {path!r} repeats runs[{seen[path]}].path"
        seen[path] = i
        for field in ("summary", "config"):
            delta = run.get(field)
            if delta is None:
                continue
            base = delta.get("base") if isinstance(delta, dict) else None
            if not count(base) or base >= len(bases):
                return f"{at}.{field} names base {base!r}, not one of the {len(bases)} bases"
            sets, drops = delta.get("set", []), delta.get("drop", [])
            if not isinstance(sets, list) or not all(
                isinstance(x, list) and len(x) == 2 and key_path(x[0]) for x in sets
            ):
                return f"{at}.{field}.set is no list of [key path, value]"
            if not isinstance(drops, list) or not all(key_path(x) for x in drops):
                return f"{at}.{field}.drop is no list of key paths"
        if run.get("metrics_csv") is not None and not isinstance(run["metrics_csv"], str):
            return f"{at}.metrics_csv is no text"
        snapshots = run.get("snapshots") or []
        if not isinstance(snapshots, list):
            return f"{at}.snapshots is no list"
        for j, snap in enumerate(snapshots):
            if not isinstance(snap, dict) or not count(snap.get("epoch")):
                return f"{at}.snapshots[{j}] has no epoch (an integer ≥ 0)"
            layers = snap.get("layers")
            if not isinstance(layers, list) or not all(
                isinstance(la, dict)
                and isinstance(la.get("lengths"), list)
                and len(la["lengths"]) == len(SNAPSHOT_ARRAYS)
                and all(count(n) for n in la["lengths"])
                for la in layers
            ):
                return (
                    f"{at}.snapshots[{j}].layers is no list of layers with the lengths of their "
                    f"{', '.join(SNAPSHOT_ARRAYS)}"
                )
        packed = run.get("predictions")
        if packed is None:
            continue
        if not isinstance(packed, dict) or not count(packed.get("n_classes"), 1):
            return f"{at}.predictions has no n_classes (an integer ≥ 1)"
        if packed.get("meta") is not None and not isinstance(packed["meta"], dict):
            return f"{at}.predictions.meta is no mapping"
        variants = packed.get("variants")
        if (
            not isinstance(variants, dict)
            or not variants
            or not all(
                v in VARIANTS and isinstance(info, dict) and count(info.get("epoch")) and count(info.get("target"))
                for v, info in variants.items()
            )
        ):
            return f"{at}.predictions.variants is no mapping of {' / '.join(VARIANTS)} to their epoch and target set"
    return None


def materialize(path: str | Path, into: str | Path, *, format_1: bool = False) -> Path:
    """Write the record at `path` as a run tree under `into`; returns the tree's root (`into/<root>`).
    Every path the record names is checked (results/safe_paths.py) before anything is written."""
    record, arrays = read(path, format_1=format_1)
    folder, into = record_dir(path), Path(into)
    where, again = folder / RECORD, REEXPORT.format(folder=folder)
    bases, runs, files = record["bases"], record["runs"], record["files"]
    try:
        root = inside(into, component(record["root"], "root"), "root")
        places = [inside(root, rel, "files key") for rel in files]
        run_dirs = [inside(root, run["path"], f"runs[{i}].path") for i, run in enumerate(runs)]
    except UnsafePath as e:
        raise RecordError(f"{where}: {str(e).replace(str(into), '<materialised tree>')}; nothing was written") from None
    wrong = next((rel for rel, place in zip(files, places) if place.name != layout.SEQUENTIAL), None)
    if wrong is not None:
        raise RecordError(f"{where} is malformed: files key {wrong!r} is no {layout.SEQUENTIAL}; {again}")
    blob = folder / (record["predictions"] if record["version"] == VERSION else PREDICTIONS)
    try:
        for place, rel in zip(places, files):  # the recipe-level sequential.json files
            place.parent.mkdir(parents=True, exist_ok=True)
            layout.write_sequential(place.parent, files[rel])
        for i, (run, run_dir) in enumerate(zip(runs, run_dirs)):
            try:
                _materialize_run(i, run, run_dir, bases, arrays)
            except _Unusable as e:
                raise RecordError(
                    f"{blob} does not hold what {RECORD} says of runs[{i}] ({run['path']}): {e}; {again}"
                ) from None
            except RecordError:
                raise
            except (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError, OverflowError) as e:
                raise RecordError(
                    f"{where} is malformed: runs[{i}] ({run['path']}) cannot be written back "
                    f"({type(e).__name__}: {str(e)[:80]}); {again}"
                ) from None
    except OSError as e:
        raise RecordError(f"cannot write the runs of {folder} into {into}: {e.strerror or e}") from None
    return root


def _materialize_run(i: int, run: dict, run_dir: Path, bases: list, arrays: dict) -> None:
    write_run(
        run_dir,
        summary=apply(bases[run["summary"]["base"]], run["summary"]) if run.get("summary") is not None else None,
        config=apply(bases[run["config"]["base"]], run["config"]) if run.get("config") is not None else None,
        metrics_csv=run.get("metrics_csv"),
        snapshots=[_unpack_snapshot(f"r{i}_s{j}", snap, arrays) for j, snap in enumerate(run.get("snapshots") or [])],
        predictions=_predictions(i, run["predictions"], arrays) if run.get("predictions") is not None else None,
    )


def _predictions(i: int, packed: dict, arrays: dict) -> tuple[dict, dict | None]:
    """Run i's (variants, meta) from the record's packed arrays; _Unusable when they are not what it says."""
    n_classes = packed["n_classes"]
    variants = {}
    for name, info in packed["variants"].items():
        try:
            own = {k: np.asarray(arrays[f"r{i}_{name}_{k}"]) for k in ("shift", "p_true", "conf")}
            target = np.asarray(arrays[f"target_{info['target']}"])
        except KeyError as e:
            raise _Unusable(f"it lacks {e.args[0]}") from None
        n = target.shape[0] if target.ndim == 1 else -1
        shapes = {"target": target.shape, "shift": own["shift"].shape, "p_true": own["p_true"].shape}
        if (
            n < 0
            or shapes["shift"] != (n,)
            or shapes["p_true"] != (4, n)
            or own["conf"].ndim != 2
            or own["conf"].shape[0] != 4
            or not all(np.issubdtype(a.dtype, np.integer) for a in (target, *own.values()))
        ):
            raise _Unusable(
                f"its {name} arrays have shapes {', '.join(f'{k} {v}' for k, v in shapes.items())}, "
                f"conf {own['conf'].shape}, not one entry per image"
            )
        try:
            variants[name] = {**unpack(own, target, n_classes), "epoch": info["epoch"]}
        except RecordError as e:
            raise _Unusable(str(e)) from None
    meta = packed.get("meta")
    return variants, ({k: v for k, v in meta.items() if k != "n_images"} if isinstance(meta, dict) else None)


@contextlib.contextmanager
def opened(path: str | Path) -> Iterator[Path]:
    """A run tree to read: `path` itself when it is one; a record's runs materialised in a temporary
    folder (removed afterwards) when `path` is a record. RecordError for a damaged record."""
    if not is_record(path):
        yield Path(path)
        return
    with origins.temporary_folder("record") as tmp:
        tree = materialize(path, tmp)
        with origins.registered(tree, origins.of_record(str(record_dir(path)))):
            yield tree


def read_run(run_dir: Path) -> dict:
    """One run directory's files as `write` takes them (its path is set by the caller).

    Raises:
        RecordError: a predictions.npz that cannot go into a record as it is (unreadable, arrays that are no
            classifier's predictions, or that would not come back exactly): one line naming it and the fix.
        RunStateError: an unreadable summary.json or config.yaml, or files that disagree with the summary
            (results/integrity.py: a damaged config.yaml, a metric its predictions contradict): the message names it."""
    files = layout.files(run_dir)
    summary = layout.read_summary(run_dir)
    if summary and (problem := integrity.problem(Path(run_dir), summary)):
        raise RunStateError(f"{problem}; a record or a store holds whole runs only")
    fix = (
        f"rewrite it with `{FIX_RUNS.format(run_dir=run_dir)}` (or delete it: the run is then recorded without "
        "per-example predictions) and export again"
    )
    try:
        predictions = read_evidence(files.predictions)
    except RunStateError as e:
        raise RecordError(f"{files.predictions} cannot go into a record: {e}; {fix}") from None
    problem = packing_problem(*predictions) if predictions is not None else None
    if problem:
        raise RecordError(f"{files.predictions} cannot go into a record: {problem}; {fix}")
    snapshots = []
    if files.snapshots.is_dir():
        for snap in sorted(files.snapshots.glob("epoch_*.json")):
            try:
                snapshots.append(json.loads(snap.read_text()))
            except (OSError, ValueError):
                continue
    return {
        "summary": summary,
        "config": layout.read_config(run_dir),
        "metrics_csv": files.metrics.read_text() if files.metrics.is_file() else None,
        "snapshots": snapshots,
        "predictions": predictions,
    }
