"""One table of every run: a store of runs collected from results trees and records (docs/store.md).

    visionbench collect runs/digits_vgg4 other-machine/digits_vgg4 --into runs.store   # then add more pieces
    visionbench report runs.store act=relu,rational      # the report of the runs it holds, into runs.store/_report/
    >>> store.read("runs.store", {"recipe": ["digits_vgg4"]})   # one row per run, as a pandas DataFrame

A store is a folder:

    _store.json                  the marker: {"format": "visionbench-store", "version": 1}
    part-<17 digits>.parquet     one file per collect that added runs, never changed afterwards; the digits count
                                 down (10^17 minus the microseconds since 1970), so the newest file sorts first
    _report/                     `visionbench report STORE`'s files (tables, figures), at their places in the tree

One row per run (`COLUMNS` below, `metric.<name>` for every metric of its summary, `env.*`, `placement.*`) with, in
`run_json`, everything `results/record.py` `read_run` reads of its folder (summary, config, curves, activation
snapshots) and, in `predictions_npz`, its per-example predictions: enough to write the run folder back
(`opened`), so that `visionbench report STORE` and `visionbench compare` read a store as they read a tree.

Identity: a run is (recipe, setting, act label, seed, config hash); its content is the SHA-256 of its summary,
config, curves and predictions (`content_sha256`: not of its snapshots, the report's drawings, which a record keeps
for one run per activation only). The same run collected again (from its tree, a copy, its record) adds nothing;
a different result under an identity the store (or the same collect) already holds is refused, naming both sources,
and nothing of that collect is written.

Each collect writes its rows into one new Parquet file, atomically (results/io.py `atomic_path`: a temporary file
named `.part-....tmp<pid>` in the store, fsynced, renamed): a collect killed at any instant leaves the store as it was
or with all of its new runs. Readers list `part-*.parquet` only (Parquet readers skip names that start with `.` or
`_`, so `pd.read_parquet(STORE)` reads the parts as one dataset); the next collect removes the temporary file of a
collect whose process is gone. Each part holds every column of the parts before it, and the newest sorts first, so
a reader that takes its schema from the first file sees every column.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import io
import json
import math
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from . import layout, record
from .io import RunStateError, atomic_path
from .predictions import ARRAYS, VARIANTS, write_predictions
from .safe_paths import UnsafePath, inside

FORMAT = "visionbench-store"
VERSION = 1
MARKER = "_store.json"
REPORT = "_report"  # <STORE>/_report/: the report's files of a store (a leading _: Parquet readers skip it)
_PART = re.compile(r"part-\d{17}\.parquet")
_TEMP = re.compile(r"\.part-\d{17}\.parquet\..*\.tmp(\d+)")
IDENTITY = ("recipe", "setting", "act", "seed", "config_hash")
FILTERS = ("recipe", "act", "config")  # report STORE recipe=a,b act=x,y config=HASH: the runs selected

# the columns every part has (type: "s" string, "i" integer, "f" float, "b" boolean, "y" bytes), in this order;
# then metric.<name> (float), and the env.* and placement.* columns
COLUMNS = {
    "recipe": "s",
    "setting": "s",
    "setting_label": "s",
    "act": "s",
    "act_family": "s",
    "act_options": "s",
    "plugins": "s",
    "seed": "i",
    "seed_init": "i",
    "seed_order": "i",
    "seed_aug": "i",
    "status": "s",
    "config_hash": "s",
    "train_time_s": "f",
    "throughput_img_s": "f",
    "peak_mem_mb": "f",
    "gpu_busy_pct": "f",
    "params": "i",
    "act_params": "i",
    "error": "s",
    "git_commit": "s",
    "started": "s",
    "finished": "s",
    "env.python": "s",
    "env.torch": "s",
    "env.visionbench": "s",
    "env.device": "s",
    "env.cpu": "s",
    "env.cpu_capability": "s",
    "env.gpu": "s",
    "env.cuda": "s",
    "env.threads": "i",
    "env.kernels_backend": "s",
    "env.kernels_from": "s",
    "env.data_sha256": "s",
    "environment": "s",
    "placement.parallel": "i",
    "placement.workers": "i",
    "placement.visible_gpu": "s",
    "placement.mps": "s",
    "source": "s",
    "source_path": "s",
    "collected_at": "s",
    "run_path": "s",
    "content_sha256": "s",
    "run_json": "s",
    "predictions_npz": "y",
}
_TYPES = {"s": pa.string(), "i": pa.int64(), "f": pa.float64(), "b": pa.bool_(), "y": pa.binary()}
METRIC = "metric."


class StoreError(record.RecordError):
    """A store that cannot be read or written as asked, or runs it refuses; the message (one line) says why.
    A RecordError, so that every reader of records (report, compare) says it in one line as well."""


def is_store(path: str | Path) -> bool:
    """Whether `path` is a store (a folder holding the marker)."""
    return (Path(path) / MARKER).is_file()


def report_dir(path: str | Path) -> Path:
    """Where the report of a store writes its files, created: <STORE>/_report/ (its leading `_` keeps Parquet
    readers of the store's folder out of it). StoreError when it is a symlink (the report would write elsewhere)."""
    folder = Path(path) / REPORT
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise StoreError(f"{folder} is no folder of the store (a symlink or a file); remove it and report again")
    folder.mkdir(exist_ok=True)
    return folder


def check_target(path: str | Path) -> None:
    """StoreError unless `path` can be a store to collect into: missing, an empty folder or a store."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_dir():
        raise StoreError(f"{path} exists and is no folder; give a store (a folder with {MARKER}) or a new path")
    if is_store(path):
        _marker(path)
        return
    if any(path.iterdir()):
        raise StoreError(f"{path} exists and is no store (no {MARKER}, not empty); give a store or a new path")


def _marker(path: Path) -> None:
    where = Path(path) / MARKER
    try:
        marker = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise StoreError(
            f"{where} is unreadable ({type(e).__name__}); it marks a store: "
            f'{{"format": "{FORMAT}", "version": {VERSION}}}'
        ) from None
    if not isinstance(marker, dict) or marker.get("format") != FORMAT or marker.get("version") != VERSION:
        raise StoreError(
            f"{where} marks no store this visionbench reads (expected format {FORMAT!r}, version "
            f"{VERSION}; it holds {json.dumps(marker)[:80]})"
        )


# --- one run as a row ------------------------------------------------------------------------------


def _canonical(x) -> str:
    return json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _arrays(predictions) -> dict[str, np.ndarray]:
    """A run's (variants, meta) as the arrays of its npz: each variant's, in fixed dtypes, and meta as JSON."""
    variants, meta = predictions
    out = {}
    for v in VARIANTS:
        if v not in variants:
            continue
        arrays = variants[v]
        for a in ARRAYS:
            out[f"{v}_{a}"] = np.asarray(arrays[a], np.float32 if a in ("p_true", "confidence") else np.int64)
        out[f"{v}_epoch"] = np.int64(arrays["epoch"])
    if meta is not None:
        out["meta"] = np.array(_canonical({k: v for k, v in meta.items() if k != "n_images"}))
    return out


def content_sha256(run: dict, arrays: dict[str, np.ndarray] | None) -> str:
    """The SHA-256 of what a run says: its summary, config and curves (canonical JSON) and its predictions' arrays."""
    h = hashlib.sha256(_canonical([run.get("summary"), run.get("config"), run.get("metrics_csv")]).encode())
    for key in sorted(arrays or {}):
        value = np.ascontiguousarray(arrays[key])
        h.update(f"{key}:{value.dtype.str}:{value.shape}".encode())
        h.update(value.tobytes() if value.dtype.kind != "U" else str(value).encode())
    return h.hexdigest()


def _number(x) -> float:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return math.nan
    return x if math.isfinite(x) else math.nan


def _integer(x) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _text(x) -> str | None:
    return None if x is None else x if isinstance(x, str) else _canonical(x)


def run_row(run_dir: Path, recipe_root: Path, source: str, run: dict) -> dict:
    """The row of the run at `run_dir` (below `recipe_root`, collected from `source`), from its `read_run` dict."""
    summary = run.get("summary") or {}
    arrays = _arrays(run["predictions"]) if run.get("predictions") is not None else None
    env = summary.get("environment") if isinstance(summary.get("environment"), dict) else {}

    def part(d, *keys):
        for key in keys:
            d = d.get(key) if isinstance(d, dict) else None
        return d

    device = part(env, "device") or {}
    seeds = summary.get("seeds") if isinstance(summary.get("seeds"), dict) else {}
    setting = summary.get("setting") if isinstance(summary.get("setting"), dict) else {}
    rel = run_dir.relative_to(recipe_root)
    row = {
        "recipe": recipe_root.name,
        "setting": _canonical(setting),
        "setting_label": rel.parts[0] if len(rel.parts) > 2 else "",
        "act": run_dir.parent.name,
        "act_family": _text(summary.get("act")),
        "act_options": _text(summary.get("act_options")),
        "plugins": _text(summary.get("plugins")),
        "seed": layout.seed_of(run_dir),
        "seed_init": _integer(seeds.get("init")),
        "seed_order": _integer(seeds.get("order")),
        "seed_aug": _integer(seeds.get("aug")),
        "status": _text(summary.get("status")),
        "config_hash": _text(summary.get("config_hash")),
        **{k: _number(summary.get(k)) for k in ("train_time_s", "throughput_img_s", "peak_mem_mb", "gpu_busy_pct")},
        "params": _integer(summary.get("params")),
        "act_params": _integer(summary.get("act_params")),
        "error": _text(summary.get("error")),
        "git_commit": _text(summary.get("git_commit")),
        "started": _text(summary.get("started")),
        "finished": _text(summary.get("finished")),
        "env.python": _text(env.get("python")),
        "env.torch": _text(part(env, "packages", "torch")),
        "env.visionbench": _text(part(env, "packages", "visionbench")),
        "env.device": _text(device.get("gpu") or device.get("cpu")),
        "env.cpu": _text(device.get("cpu")),
        "env.cpu_capability": _text(device.get("cpu_capability")),
        "env.gpu": _text(device.get("gpu")),
        "env.cuda": _text(device.get("cuda")),
        "env.threads": _integer(env.get("threads", summary.get("threads"))),
        "env.kernels_backend": _text(part(env, "kernels", "backend")),
        "env.kernels_from": _text(part(env, "kernels", "from")),
        "env.data_sha256": _text(part(env, "data", "sha256")),
        "environment": _canonical(env) if env else None,
        "placement.parallel": _integer(part(env, "placement", "parallel")),
        "placement.workers": _integer(part(env, "placement", "workers")),
        "placement.visible_gpu": _text(part(env, "placement", "visible_gpu")),
        "placement.mps": _text(part(env, "placement", "mps")),
        "source": source,
        "source_path": rel.as_posix(),
        "collected_at": None,
        "run_path": f"{recipe_root.name}/{rel.as_posix()}",
        "content_sha256": content_sha256(run, arrays),
        "run_json": json.dumps(
            {k: run.get(k) for k in ("summary", "config", "metrics_csv", "snapshots")}, sort_keys=True
        ),
        "predictions_npz": _npz(arrays) if arrays is not None else None,
    }
    metrics = summary.get("metrics") if isinstance(summary.get("metrics"), dict) else {}
    row.update({f"{METRIC}{k}": _number(v) for k, v in sorted(metrics.items())})
    return row


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def _recipe_root(run_dir: Path, summary: dict) -> Path:
    """The recipe folder of a run (report/collect.py's rule): above the setting's folder in a factor sweep."""
    return run_dir.parents[2] if summary.get("setting") and len(run_dir.parts) > 3 else run_dir.parent.parent


def gather(tree: Path, source: str) -> tuple[list[dict], list[str], list[str]]:
    """(rows, skipped, left out) of the runs below `tree`: every scored run (completed, diverged, failed) as a row;
    one line per run that cannot be read (skipped: damage) and per run still to finish (left out: running,
    interrupted)."""
    rows, skipped, left = [], [], []
    for run_dir in layout.find_run_dirs(tree):
        label = f"{source}: {run_dir.relative_to(tree).as_posix() if run_dir != tree else run_dir.name}"
        try:
            summary = layout.read_summary(run_dir)
        except (OSError, RunStateError) as e:
            skipped.append(f"{label}: unreadable summary.json ({' '.join(str(e).split())})")
            continue
        if summary is None:
            skipped.append(f"{label}: no summary.json")
            continue
        reason = layout.unscored_reason(summary)
        if reason:
            (left if summary.get("status") in (layout.RUNNING, layout.INTERRUPTED) else skipped).append(
                f"{label}: {reason}"
            )
            continue
        try:
            run = record.read_run(run_dir)
        except (record.RecordError, RunStateError, OSError) as e:
            skipped.append(f"{label}: {' '.join(str(e).split())}")
            continue
        rows.append(run_row(run_dir, _recipe_root(run_dir, summary), source, run))
    return rows, skipped, left


# --- the parts -------------------------------------------------------------------------------------


def parts(path: str | Path) -> list[Path]:
    """The store's Parquet files, oldest first."""
    return sorted((p for p in Path(path).iterdir() if _PART.fullmatch(p.name)), reverse=True)


def _schema_of(columns: list[str]) -> pa.Schema:
    return pa.schema([(c, _TYPES[COLUMNS.get(c, "f" if c.startswith(METRIC) else "s")]) for c in columns])


def _order(columns) -> list[str]:
    """Columns in the table's order: COLUMNS' first fields, the metrics, then the rest of COLUMNS."""
    cols = set(columns)
    fixed = [c for c in COLUMNS if c in cols]
    head = fixed[: fixed.index("config_hash") + 1] if "config_hash" in fixed else fixed
    return (
        head
        + sorted(c for c in cols if c.startswith(METRIC))
        + [c for c in fixed if c not in head]
        + sorted(c for c in cols if c not in COLUMNS and not c.startswith(METRIC))
    )


def _write_part(store: Path, rows: list[dict], known: list[str]) -> Path:
    columns = _order(set(known) | set(COLUMNS) | {c for r in rows for c in r})
    schema = _schema_of(columns)
    table = pa.table({c: pa.array([r.get(c) for r in rows], type=schema.field(c).type) for c in columns}, schema=schema)
    number = 10**17 - int(datetime.datetime.now(datetime.timezone.utc).timestamp() * 1e6)
    older = [int(p.name[len("part-") : -len(".parquet")]) for p in parts(store)]
    number = min([number, *(n - 1 for n in older)])  # below every older part's, whatever the clock did
    while (store / f"part-{number:017d}.parquet").exists():  # another collect's, this microsecond
        number -= 1
    target = store / f"part-{number:017d}.parquet"
    with atomic_path(target) as tmp, open(tmp, "wb") as f:
        pq.write_table(table, f, compression="zstd")
        f.flush()
        os.fsync(f.fileno())
    record._sync(store)
    return target


def _remove_stale_temps(store: Path) -> None:
    """The temporary files of collects whose process is gone (a kill -9 mid-write)."""
    for p in store.iterdir():
        m = _TEMP.fullmatch(p.name)
        if not m:
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                p.unlink()
        except (OSError, ValueError, OverflowError):
            pass


def _read_parts(store: Path, columns: list[str] | None = None) -> pd.DataFrame:
    frames = []
    for p in parts(store):
        try:
            have = pq.read_schema(p).names
            table = pq.read_table(p, columns=[c for c in columns if c in have] if columns else None)
        except (OSError, pa.ArrowException) as e:
            raise StoreError(
                f"{p} is unreadable ({type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
                "); a store's parts are never rewritten: restore it from a copy or remove it and "
                "collect its runs again"
            ) from None
        frames.append(table.to_pandas().assign(_part=p.name))
    if not frames:
        return pd.DataFrame(columns=[*(columns or COLUMNS), "_part"])
    return pd.concat(frames, ignore_index=True)


def _identity(row) -> tuple:
    return tuple(None if (isinstance(row[k], float) and math.isnan(row[k])) else row[k] for k in IDENTITY)


def _describe(row) -> str:
    setting = "" if row["setting"] in ("{}", None) else f" setting {row['setting']}"
    return f"{row['recipe']}{setting} {row['act']} seed {row['seed']} (config {row['config_hash']})"


# --- collecting --------------------------------------------------------------------------------------


def collect(sources: list[str], into: str | Path) -> tuple[list[str], list[str], list[str], Path | None]:
    """Collect the runs of `sources` (trees, records, stores) into the store `into` (created when missing).

    Returns (one line per source: "collected N runs from X (M new, K already in the store)", the lines of what was
    skipped (damage), the lines of runs left out (still running, interrupted), the part written or None).

    Raises:
        StoreError: `into` is no store and no new or empty folder; a source that does not exist, is no results tree
            or a damaged record; runs that conflict (nothing of this collect is then written).
    """
    store = Path(into)
    check_target(store)
    if is_store(store):
        _remove_stale_temps(store)
    held = (
        _read_parts(store, [*IDENTITY, "content_sha256", "source", "source_path"])
        if is_store(store)
        else pd.DataFrame()
    )
    known: dict[tuple, tuple[str, str]] = {
        _identity(r): (r["content_sha256"], f"{r['source']} ({r['source_path']})") for _, r in held.iterrows()
    }
    columns = [c for p in (parts(store) if is_store(store) else []) for c in pq.read_schema(p).names]
    lines, skipped, left, new_rows, conflicts = [], [], [], [], []
    for source in sources:
        label = str(source)
        path = Path(source)
        if not path.exists():
            raise StoreError(f"{label} does not exist")
        if path.resolve() == store.resolve():
            raise StoreError(f"{label} is the store collected into")
        try:
            with _tree_of(path) as tree:
                rows, bad, later = gather(tree, label)
        except record.RecordError as e:  # a damaged record (or store): nothing of it is collected
            skipped.append(f"{label}: {e}")
            lines.append(f"collected 0 runs from {label} (0 new, 0 already in the store)")
            continue
        skipped += bad
        left += later
        if not rows and not bad and not later:
            kept = path / "record"  # a committed results folder: its runs are in its record
            hint = f"; it holds a record of runs: {kept}" if record.is_record(kept) else ""
            raise StoreError(
                f"{label} holds no run (<recipe>/<act>/seed_<k>/summary.json), and is no record "
                f"(record.json) and no store ({MARKER}){hint}"
            )
        fresh = already = 0
        for row in rows:
            key = _identity(row)
            if key in known:
                content, where = known[key]
                if content != row["content_sha256"]:
                    conflicts.append(
                        f"{_describe(row)}: {label} ({row['source_path']}) holds a different result "
                        f"than {where} (content {row['content_sha256'][:12]}… vs {content[:12]}…)"
                    )
                else:
                    already += 1
                continue
            known[key] = (row["content_sha256"], f"{label} ({row['source_path']})")
            new_rows.append(row)
            fresh += 1
        lines.append(f"collected {len(rows)} runs from {label} ({fresh} new, {already} already in the store)")
    if conflicts:
        raise StoreError(
            "; ".join(conflicts[:3])
            + (f"; and {len(conflicts) - 3} more" if len(conflicts) > 3 else "")
            + f"; refused: nothing was written to {store} (one identity, one result: collect the "
            "conflicting runs into another store)"
        )
    written = None
    if new_rows:
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for row in new_rows:
            row["collected_at"] = now
        if not is_store(store):
            store.mkdir(parents=True, exist_ok=True)
            with atomic_path(store / MARKER) as tmp, open(tmp, "w") as f:
                f.write(json.dumps({"format": FORMAT, "version": VERSION}) + "\n")
                f.flush()
                os.fsync(f.fileno())
        written = _write_part(store, new_rows, columns)
    return lines, skipped, left, written


@contextlib.contextmanager
def _tree_of(path: Path) -> Iterator[Path]:
    """The run tree of a source: a record materialised, a store materialised, or the tree itself."""
    if is_store(path):
        with opened(path) as tree:
            yield tree
    else:
        with record.opened(path) as tree:
            yield tree


# --- reading -----------------------------------------------------------------------------------------


def parse_filters(args: list[str]) -> dict[str, list[str]]:
    """`recipe=a,b act=x config=HASH` as {key: values}; StoreError for another key."""
    out: dict[str, list[str]] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or key not in FILTERS:
            raise StoreError(
                f"unknown selector {arg!r}; a store's runs are selected by {', '.join(f'{k}=A,B' for k in FILTERS)}"
            )
        out.setdefault(key, []).extend(v.strip() for v in value.split(",") if v.strip())
    return out


def take_filters(argv: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """(the other arguments, the selectors) of a command line that may name a store: `recipe=`, `act=`, `config=`."""
    rest, selectors = [], []
    for arg in argv:
        (selectors if arg.partition("=")[0] in FILTERS and "=" in arg and not arg.startswith("-") else rest).append(arg)
    return rest, parse_filters(selectors)


def read(path: str | Path, filters: dict[str, list[str]] | None = None) -> pd.DataFrame:
    """The store's runs, one row per identity (a run collected twice concurrently: its latest row), oldest collect
    first, selected by `filters` ({"recipe": [...], "act": [...], "config": [...]}: config hashes).

    Raises:
        StoreError: no store, an unreadable part, a filter that selects nothing (the line names what it holds).
    """
    path = Path(path)
    if not is_store(path):
        raise StoreError(f"{path} is no store (no {MARKER}); `visionbench collect TREE --into {path}` makes one")
    _marker(path)
    runs = _read_parts(path)
    if len(runs):
        runs = runs.drop_duplicates(subset=list(IDENTITY), keep="last").reset_index(drop=True)
    selected = runs
    for key, values in (filters or {}).items():
        column = "config_hash" if key == "config" else key
        if values:
            selected = selected[selected[column].isin(values)]
    if not len(selected):
        holds = (
            "no run"
            if not len(runs)
            else "; ".join(
                f"recipe {recipe}: act {', '.join(sorted(set(g['act'])))}" for recipe, g in runs.groupby("recipe")
            )
        )
        asked = " ".join(f"{k}={','.join(v)}" for k, v in (filters or {}).items())
        raise StoreError(f"no run in {path} matches {asked or 'anything'}; it holds {holds}")
    return selected.drop(columns="_part").reset_index(drop=True)


def materialize(runs: pd.DataFrame, into: Path) -> Path:
    """Write the runs of `read`'s frame as a results tree under `into`; returns its root (`into/runs`)."""
    root = Path(into) / "runs"
    seen: dict[str, str] = {}
    for _, row in runs.iterrows():
        where = f"{row['source']} ({row['source_path']})"
        if row["run_path"] in seen:
            raise StoreError(
                f"two runs of the store go to {row['run_path']}: {seen[row['run_path']]} and {where} "
                "(configurations differ); select one with config=HASH"
            )
        seen[row["run_path"]] = where
        try:
            run_dir = inside(root, row["run_path"], "run_path")
        except UnsafePath as e:
            raise StoreError(str(e)) from None
        run = json.loads(row["run_json"])
        run_dir.mkdir(parents=True, exist_ok=True)
        if run.get("config") is not None:
            layout.write_config(run_dir, run["config"])
        if run.get("metrics_csv") is not None:
            layout.files(run_dir).metrics.write_text(run["metrics_csv"])
        for snap in run.get("snapshots") or []:
            snaps = layout.files(run_dir).snapshots
            snaps.mkdir(exist_ok=True)
            (snaps / f"epoch_{int(snap['epoch']):03d}.json").write_text(json.dumps(snap))
        blob = row.get("predictions_npz")
        if isinstance(blob, (bytes, bytearray)):
            with np.load(io.BytesIO(blob), allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
            variants = {
                v: {**{a: data[f"{v}_{a}"] for a in ARRAYS}, "epoch": int(data[f"{v}_epoch"])}
                for v in VARIANTS
                if f"{v}_pred" in data
            }
            meta = json.loads(str(data["meta"])) if "meta" in data else None
            write_predictions(layout.files(run_dir).predictions, variants, meta=meta)
        if run.get("summary") is not None:
            layout.write_summary(run_dir, run["summary"])
    return root


@contextlib.contextmanager
def opened(path: str | Path, filters: dict[str, list[str]] | None = None) -> Iterator[Path]:
    """The runs of the store at `path` that `filters` select, as a results tree in a temporary folder (removed
    afterwards): what `visionbench report STORE` and `visionbench compare` read. StoreError (one line) otherwise."""
    runs = read(path, filters)
    with tempfile.TemporaryDirectory(prefix="visionbench-store-") as tmp:
        yield materialize(runs, Path(tmp))
