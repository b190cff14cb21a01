"""One table of every run: a store of runs collected from results trees and records (docs/store.md).

    visionbench collect runs/digits_vgg4 other-machine/digits_vgg4 --into runs.store   # then add more pieces
    visionbench report runs.store act=relu,rational      # the report of the runs it holds, into runs.store/_report/
    >>> store.read("runs.store", {"recipe": ["digits_vgg4"]})   # one row per run, as a pandas DataFrame

A store is a folder:

    _store.json                  the marker: {"format": "visionbench-store", "version": 1}
    part-<17 digits>.parquet     one file per collect that added runs, never changed afterwards; the digits count
                                 down (10^17 minus the microseconds since 1970), so the newest file sorts first
    _curves/part-<digits>.parquet  the per-epoch curves of each part's runs, as a long table (CURVE_COLUMNS)
    _report/                     `visionbench report STORE`'s files (tables, figures), at their places in the tree

One row per observation (`COLUMNS` below, `metric.<name>` for every metric of its summary, `env.*`, `placement.*`,
`cfg.<key>` for every configuration key; `_curves/` holds the per-epoch curves as a long table) with, in
`run_json`, everything `results/record.py` `read_run` reads of its folder (summary, config, curves, activation
snapshots) and, in `predictions_npz`, its per-example predictions: enough to write the run folder back
(`opened`), so that `visionbench report STORE` and `visionbench compare` read a store as they read a tree.

Identity: a run is (recipe, setting, act label, seed, config hash); its result (`result_sha256`) is the SHA-256 of
what it computed (status, metrics, curves but their timings, predictions); an observation is an identity with a
result. The same observation collected again (from its tree, a copy, its record, a rerun with the same numbers)
adds nothing; another result under a held identity (a rerun on another device) is kept as another observation.
`content_sha256` (summary, config, curves and predictions as collected, times included: not of its snapshots, the
report's drawings) is checked on read with the columns (`_checked`): a changed or unreadable row is left out,
named. A table holds one observation per run (`one_per_place` says what tells several apart and the selectors).

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
import io
import json
import math
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from . import layout, origins, record
from .identity import diff_configs, shared_part
from .io import atomic_path, sync_folder
from .predictions import ARRAYS, VARIANTS
from .run_writer import write_run
from .safe_paths import UnsafePath, inside
from .store_row import COLUMNS, METRIC, as_text, content_sha256, curve_rows, result_sha256

FORMAT = "visionbench-store"
VERSION = 1
MARKER = "_store.json"
REPORT = "_report"  # <STORE>/_report/: the report's files of a store (a leading _: Parquet readers skip it)
_PART = re.compile(r"part-\d{17}\.parquet")
_TEMP = re.compile(r"\.part-\d{17}\.parquet\..*\.tmp(\d+)")
IDENTITY = ("recipe", "setting", "act", "seed", "config_hash")
# one observation of a run: its identity and its result (a rerun with the same result is the same observation)
OBSERVATION = (*IDENTITY, "result_sha256")
# report STORE recipe=a,b act=x,y config=HASH source=PATH env.device=NAME cfg.epochs=10: the runs selected
FILTERS = ("recipe", "act", "config", "source")
PREFIXES = ("env.", "cfg.")  # and any env.* or cfg.* column
CURVES = "_curves"  # <STORE>/_curves/part-<digits>.parquet: the per-epoch curves as a long table, one per part
CURVE_COLUMNS = ("recipe", "setting", "act", "seed", "config_hash", "result_sha256", "epoch", "metric", "value")
_TYPES = {"s": pa.string(), "i": pa.int64(), "f": pa.float64(), "b": pa.bool_(), "y": pa.binary()}


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
        pq.write_table(table, f, compression="zstd", row_group_size=BATCH)  # a reader holds one group at a time
        f.flush()
        os.fsync(f.fileno())
    sync_folder(store)
    _write_curves(store / CURVES / target.name, rows)
    return target


def _complete_curves(store: Path) -> None:
    """The curves of every part that has none yet (a store from before them, or a collect killed between its part
    and its curves): written from the part's own rows."""
    for part in parts(store):
        if not (store / CURVES / part.name).is_file():
            try:
                rows = pq.read_table(part, columns=[*OBSERVATION[:5], "run_json", "predictions_npz"]).to_pylist()
            except (OSError, pa.ArrowException) as e:
                raise _unreadable(part, e) from None
            for row in rows:
                row["result_sha256"] = _hashes(row["run_json"], row["predictions_npz"])[1]
            _write_curves(store / CURVES / part.name, rows)


def _write_curves(target: Path, rows: list[dict]) -> None:
    """The per-epoch curves of `rows` as one long table (CURVE_COLUMNS: a run's identity and result, the epoch, the
    metric's name and value), which pandas or DuckDB read without unpacking run_json."""
    table: dict[str, list] = {c: [] for c in CURVE_COLUMNS}
    for row in rows:
        for line in curve_rows(json.loads(row["run_json"]).get("metrics_csv")):
            epoch = line.get("epoch")
            if not isinstance(epoch, float):
                continue
            for metric, value in line.items():
                if metric != "epoch" and isinstance(value, float):
                    for c in CURVE_COLUMNS[:6]:
                        table[c].append(row.get(c))
                    table["epoch"].append(int(epoch))
                    table["metric"].append(metric)
                    table["value"].append(value)
    types = {"seed": pa.int64(), "epoch": pa.int64(), "value": pa.float64()}
    schema = pa.schema([(c, types.get(c, pa.string())) for c in CURVE_COLUMNS])
    target.parent.mkdir(exist_ok=True)
    with atomic_path(target) as tmp, open(tmp, "wb") as f:
        pq.write_table(pa.table(table, schema=schema), f, compression="zstd")
        f.flush()
        os.fsync(f.fileno())


def _remove_stale_temps(store: Path) -> None:
    """The temporary files of collects whose process is gone (a kill -9 mid-write)."""
    folders = [store, *([store / CURVES] if (store / CURVES).is_dir() else [])]
    for p in (p for folder in folders for p in folder.iterdir()):
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
        frame = table.to_pandas().assign(_part=p.name)
        if columns and "result_sha256" in columns and "result_sha256" not in have:  # a part from before results
            blobs = pq.read_table(p, columns=["run_json", "predictions_npz"]).to_pandas()
            frame["result_sha256"] = [
                _hashes(j, b)[1] if j is not None else None for j, b in zip(blobs["run_json"], blobs["predictions_npz"])
            ]
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=[*(columns or COLUMNS), "_part"])
    return pd.concat(frames, ignore_index=True)


def _hashes(run_json: str, blob) -> tuple[str, str]:
    """(content_sha256, result_sha256) of a row, from what it holds (run_json, predictions_npz)."""
    run, arrays = json.loads(run_json), _npz_arrays(blob)
    return content_sha256(run, arrays), result_sha256(run, arrays)


def _npz_arrays(blob) -> dict[str, np.ndarray] | None:
    """A row's predictions_npz as its arrays by name, None where it has none."""
    if not isinstance(blob, (bytes, bytearray)):
        return None
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _checked(runs: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The rows whose content is what they were collected with (their content_sha256, recomputed), and one line
    per row left out: changed since it was collected, or unreadable."""
    keep, notes = [], []
    if "result_sha256" not in runs.columns:  # a part from before results
        runs = runs.assign(result_sha256=None)
    for i, row in runs.iterrows():
        try:
            content, result = _hashes(row["run_json"], row.get("predictions_npz"))
        except (TypeError, ValueError, OSError, KeyError) as e:  # no JSON, an npz that is none, an object array
            notes.append(f"{row['_part']}: {_describe(row)} is unreadable ({type(e).__name__}); left out")
            continue
        if content != row["content_sha256"]:
            notes.append(
                f"{row['_part']}: {_describe(row)} has been changed since it was collected (its content hash is "
                f"{content[:12]}…, it was collected as {str(row['content_sha256'])[:12]}…); left out"
            )
            continue
        differs = _columns_differ(row)
        if differs:
            notes.append(
                f"{row['_part']}: {_describe(row)}: its columns disagree with the run it holds ({differs}); "
                "the row has been changed since it was collected; left out"
            )
            continue
        if not isinstance(row.get("result_sha256"), str):
            runs.at[i, "result_sha256"] = result
        keep.append(i)
    return runs.loc[keep], notes


def _columns_differ(row) -> str | None:
    """The first column of `row` that its run_json's summary contradicts (a metric, the status, the config hash)."""
    summary = json.loads(row["run_json"]).get("summary") or {}
    expected = {f"{METRIC}{k}": v for k, v in layout.metric_values(summary).items()}
    expected |= {"status": as_text(summary.get("status")), "config_hash": as_text(summary.get("config_hash"))}
    for column, want in expected.items():
        have = row.get(column)
        same = (
            (isinstance(have, float) and math.isnan(have) and math.isnan(want))
            if isinstance(want, float) and math.isnan(want)
            else have == want
        )
        if not same:
            return f"{column}: {have!r} in the row, {want!r} in its summary"
    return None


def _identity(row, keys: tuple = IDENTITY) -> tuple:
    return tuple(None if (isinstance(row[k], float) and math.isnan(row[k])) else row[k] for k in keys)


def _describe(row) -> str:
    setting = "" if row["setting"] in ("{}", None) else f" setting {row['setting']}"
    return f"{row['recipe']}{setting} {row['act']} seed {row['seed']} (config {row['config_hash']})"


# --- adding (results/sources.py `collect` reads the sources) -----------------------------------------------


@dataclass
class Held:
    """What a store holds, as a collect needs it: its observations, its runs (identities), its parts' columns."""

    observations: set
    runs: set
    columns: list[str]


def held(path: str | Path) -> Held:
    """What the store at `path` holds (nothing when it is new), after removing the temporary files of collects that
    were killed and writing the curves of parts that have none."""
    path = Path(path)
    if not is_store(path):
        return Held(set(), set(), [])
    _remove_stale_temps(path)
    _complete_curves(path)
    rows = _read_parts(path, list(OBSERVATION))
    return Held(
        {observation_key(r) for _, r in rows.iterrows()},
        {run_key(r) for _, r in rows.iterrows()},
        [c for p in parts(path) for c in _schema(p)],
    )


def observation_key(row) -> tuple:
    """A row's observation: its run's identity and its result."""
    return _identity(row, OBSERVATION)


def run_key(row) -> tuple:
    """A row's run: recipe, setting, act, seed, config hash."""
    return _identity(row)


def add(path: str | Path, rows: list[dict], columns: list[str]) -> Path:
    """Write `rows` into the store at `path` as one new part (creating the store, marker first, when it is new);
    `columns`: the columns of its parts so far (`held`). Returns the part."""
    path = Path(path)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    for row in rows:
        row["collected_at"] = now
    if not is_store(path):
        path.mkdir(parents=True, exist_ok=True)
        with atomic_path(path / MARKER) as tmp, open(tmp, "w") as f:
            f.write(json.dumps({"format": FORMAT, "version": VERSION}) + "\n")
            f.flush()
            os.fsync(f.fileno())
    return _write_part(path, rows, columns)


# --- reading -----------------------------------------------------------------------------------------


def is_filter(key: str) -> bool:
    """Whether `key` selects a store's runs: recipe, act, config, source, or any env.* or cfg.* column."""
    return key in FILTERS or (key.startswith(PREFIXES) and len(key) > 4)


SELECTORS = "recipe=A,B act=X,Y config=HASH source=PATH env.KEY=VALUE cfg.KEY=VALUE"


def parse_filters(args: list[str]) -> dict[str, list[str]]:
    """`recipe=a,b act=x config=HASH env.device=NAME cfg.epochs=10` as {key: values}; StoreError for another key."""
    out: dict[str, list[str]] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not is_filter(key):
            raise StoreError(f"unknown selector {arg!r}; a store's runs are selected by {SELECTORS}")
        out.setdefault(key, []).extend(v.strip() for v in value.split(",") if v.strip())
    return out


def take_filters(argv: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """(the other arguments, the selectors) of a command line that may name a store (`is_filter`'s keys)."""
    rest, selectors = [], []
    for arg in argv:
        (selectors if "=" in arg and not arg.startswith("-") and is_filter(arg.partition("=")[0]) else rest).append(arg)
    return rest, parse_filters(selectors)


BLOBS = ("run_json", "predictions_npz")  # a row's run: read batch by batch, never the whole store at once
BATCH = 256  # rows per batch read from a part
PROGRESS = 2000  # a store of at least this many rows says how far reading and writing have come


# the columns a report of a store keeps of each row while it reads (and any it is selected by)
KEPT = (*OBSERVATION, "setting_label", "status", "source", "source_path", "run_path", "env.device", "_part", "_row")


def _scan(path: Path, say=None, keep: tuple | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Every row of the store without its run (BLOBS), checked batch by batch (`_checked`), with its place (`_part`,
    `_row`), and the lines of the rows left out. `keep`: the columns kept of each row (None: every small one).
    Memory: the columns kept, and one batch of runs."""
    total = sum(_rows_of(p) for p in parts(path))
    light, notes, done = [], [], 0
    for p in parts(path):
        row = 0
        try:
            for batch in _groups(p):
                frame = batch.to_pandas().assign(_part=p.name, _row=range(row, row + batch.num_rows))
                row += batch.num_rows
                kept, dropped = _checked(frame)
                light.append(kept[[c for c in kept.columns if c not in BLOBS and (keep is None or c in keep)]])
                notes += dropped
                done += batch.num_rows
                if say and total >= PROGRESS and (done // PROGRESS != (done - batch.num_rows) // PROGRESS):
                    say(f"checked {done} of {total} rows")
        except (OSError, pa.ArrowException) as e:
            raise _unreadable(p, e) from None
    if not light:
        return pd.DataFrame(columns=[*COLUMNS, "_part", "_row"]).drop(columns=list(BLOBS)), notes
    runs = pd.concat(light, ignore_index=True)
    return runs.drop_duplicates(subset=list(OBSERVATION), keep="last").reset_index(drop=True), notes


def _rows_of(p: Path) -> int:
    try:
        return pq.ParquetFile(p).metadata.num_rows
    except (OSError, pa.ArrowException) as e:
        raise _unreadable(p, e) from None


def _schema(p: Path) -> list[str]:
    try:
        return pq.read_schema(p).names
    except (OSError, pa.ArrowException) as e:
        raise _unreadable(p, e) from None


def _groups(p: Path, columns: list[str] | None = None) -> Iterator[pa.Table]:
    """A part's row groups, one at a time (BATCH rows each in the parts this visionbench writes; a reader holds one
    group, where pyarrow's iter_batches keeps what it read of the whole file)."""
    part = pq.ParquetFile(p)
    for g in range(part.metadata.num_row_groups):
        yield part.read_row_group(g, columns=columns)


def _unreadable(p: Path, e: Exception) -> StoreError:
    return StoreError(
        f"{p} is unreadable ({type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
        "); a store's parts are never rewritten: restore it from a copy or remove it and "
        "collect its runs again"
    )


def _select(runs: pd.DataFrame, filters: dict[str, list[str]] | None, path: Path) -> pd.DataFrame:
    selected = runs
    for key, values in (filters or {}).items():
        column = "config_hash" if key == "config" else key
        if column not in runs.columns:
            known = sorted(c for c in runs.columns if c.startswith(key.split(".")[0] + "."))
            raise StoreError(
                f"no column {column!r} in {path} to select by; it has {', '.join(known[:12]) or 'none of that kind'}"
                + (f" and {len(known) - 12} more" if len(known) > 12 else "")
            )
        if values:
            have = selected[column].astype(str).where(selected[column].notna(), "null")
            if column == "config_hash":  # a hash, or the start of one
                selected = selected[have.map(lambda h, vs=tuple(values): h.startswith(vs))]
            else:
                selected = selected[have.isin(values)]
    if not len(selected):
        asked = " ".join(f"{k}={','.join(v)}" for k, v in (filters or {}).items())
        raise StoreError(f"no run in {path} matches {asked or 'anything'}; it holds {holdings(runs, filters)}")
    return selected.reset_index(drop=True)


def _runs_of(path: Path, runs: pd.DataFrame) -> Iterator[tuple[dict, dict]]:
    """(small columns, run columns) of each row of `runs` (from `_scan`), read part by part, batch by batch."""
    wanted: dict[str, dict[int, dict]] = {}
    for row in runs.to_dict("records"):
        wanted.setdefault(row["_part"], {})[int(row["_row"])] = row
    for name, rows in wanted.items():
        offset = 0
        for batch in _groups(Path(path) / name, list(BLOBS)):
            blobs = batch.to_pydict()
            for i in range(batch.num_rows):
                if offset + i in rows:
                    yield rows[offset + i], {c: blobs[c][i] for c in BLOBS}
            offset += batch.num_rows


def read(path: str | Path, filters: dict[str, list[str]] | None = None, runs: bool = True) -> pd.DataFrame:
    """The store's observations, one row each (an observation collected twice concurrently: its latest row), oldest
    collect first, selected by `filters` ({"recipe": [...], "act": [...], "config": [HASH], "source": [...],
    "env.device": [...], "cfg.epochs": [...]}). Each row is checked against its content hash and its run: a row
    changed since it was collected, or unreadable, is left out, named in `frame.attrs["notes"]`. `runs=False`: without
    the run columns (run_json, predictions_npz), in the memory of the small columns only.

    Raises:
        StoreError: no store, an unreadable part, a filter that selects nothing (the line names what it holds).
    """
    path = Path(path)
    if not is_store(path):
        raise StoreError(f"{path} is no store (no {MARKER}); `visionbench collect TREE --into {path}` makes one")
    _marker(path)
    light, notes = _scan(path)
    selected = _select(light, filters, path)
    if runs:
        blobs = {(small["_part"], small["_row"]): big for small, big in _runs_of(path, selected)}
        for c in BLOBS:
            selected[c] = [blobs[(p, r)][c] for p, r in zip(selected["_part"], selected["_row"])]
    out = selected.drop(columns=["_part", "_row"])
    out.attrs["notes"] = notes
    return out


def holdings(runs: pd.DataFrame, filters: dict[str, list[str]] | None = None) -> str:
    """What a frame of runs holds, in a line: per recipe its activations, and the values of the selected keys."""
    if not len(runs):
        return "no run"
    parts_ = [f"recipe {recipe}: act {', '.join(sorted(set(g['act'])))}" for recipe, g in runs.groupby("recipe")]
    for key in filters or {}:
        column = "config_hash" if key == "config" else key
        if column not in ("recipe", "act") and column in runs.columns:
            values = sorted({str(v) for v in runs[column].dropna()})
            parts_.append(
                f"{key} {', '.join(values[:8])}" + (f" and {len(values) - 8} more" if len(values) > 8 else "")
            )
    return "; ".join(parts_)


def one_per_place(runs: pd.DataFrame, path: str | Path) -> None:
    """StoreError unless each run folder of the tree has one observation: several configurations of one recipe, or
    several observations of one run (reruns on other devices, other sources), are named with what tells them apart
    and the selectors that pick one."""
    crowded = runs[runs.duplicated("run_path", keep=False)]
    if not len(crowded):
        return
    configs = sorted(set(crowded["config_hash"].astype(str)))
    if len(configs) > 1:
        one = crowded.drop_duplicates("config_hash")
        first = {
            small["config_hash"]: shared_part(json.loads(big["run_json"]).get("config") or {})
            for small, big in _runs_of(Path(path), one)
        }
        base = first[configs[0]]
        differ = [f"{h}: " + "; ".join(diff_configs(base, first[h], labels=(configs[0], h))[:3]) for h in configs[1:]]
        raise StoreError(
            f"{path} holds {len(configs)} configurations of {', '.join(sorted(set(crowded['recipe'])))} (config "
            f"{', '.join(configs)}; {' | '.join(differ)}); a table holds one: select it with config=HASH "
            f"(or a cfg.KEY=VALUE)"
        )
    row = crowded.iloc[0]
    same = crowded[crowded["run_path"] == row["run_path"]]
    told = [f"env.device {d!r} from {src}" for d, src in zip(same["env.device"], same["source"])]
    raise StoreError(
        f"{path} holds {len(same)} observations of {_describe(row)} ({'; '.join(told)}) and "
        f"{crowded['run_path'].nunique()} such runs in all: reruns with other results; a table holds one "
        "observation of each run: select them with env.KEY=VALUE (env.device=…) or source=PATH "
        "(visionbench compare STORE STORE --select-a … --select-b … puts two side by side)"
    )


def _variants(blob) -> tuple[dict, dict | None] | None:
    """A row's predictions_npz as (variants, meta), None where it has none."""
    data = _npz_arrays(blob)
    if data is None:
        return None
    variants = {
        v: {**{a: data[f"{v}_{a}"] for a in ARRAYS}, "epoch": int(data[f"{v}_epoch"])}
        for v in VARIANTS
        if f"{v}_pred" in data
    }
    return variants, (json.loads(str(data["meta"])) if "meta" in data else None)


def materialize(path: str | Path, runs: pd.DataFrame, into: Path, say=None) -> Path:
    """Write the runs of the store at `path` that `runs` (from `_scan`: one observation per run folder,
    `one_per_place`) names as a results tree under `into`, batch by batch; returns its root (`into/runs`)."""
    root = Path(into) / "runs"
    for done, (small, big) in enumerate(_runs_of(Path(path), runs), 1):
        if say and len(runs) >= PROGRESS and done % PROGRESS == 0:
            say(f"wrote {done} of {len(runs)} runs as a tree")
        row = {**small, **big}
        try:
            run_dir = inside(root, row["run_path"], "run_path")
        except UnsafePath as e:
            raise StoreError(str(e)) from None
        run = json.loads(row["run_json"])
        write_run(
            run_dir,
            summary=run.get("summary"),
            config=run.get("config"),
            metrics_csv=run.get("metrics_csv"),
            snapshots=run.get("snapshots") or (),
            predictions=_variants(row.get("predictions_npz")),
        )
    return root


@contextlib.contextmanager
def opened(path: str | Path, filters: dict[str, list[str]] | None = None) -> Iterator[Path]:
    """The runs of the store at `path` that `filters` select, as a results tree in a temporary folder (removed
    afterwards): what `visionbench report STORE` and `visionbench compare` read. StoreError (one line) otherwise."""
    path = Path(path)
    if not is_store(path):
        raise StoreError(f"{path} is no store (no {MARKER}); `visionbench collect TREE --into {path}` makes one")
    _marker(path)

    def say(message: str) -> None:
        print(f"visionbench: {path}: {message}", file=sys.stderr, flush=True)

    light, notes = _scan(path, say, keep=(*KEPT, *(filters or {}), "config_hash"))
    runs = _select(light, filters, path)
    one_per_place(runs, path)
    for note in notes:
        say(f"note: {note}")
    with origins.temporary_folder("store") as tmp:
        tree = materialize(path, runs, Path(tmp), say)
        with origins.registered(tree, origins.of_store(str(path), list(runs["source"]))):
            yield tree
