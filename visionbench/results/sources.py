"""The one door to runs: a results tree, a record (`visionbench export`) or a store (`visionbench collect`), each read
as a results tree, and the collecting of any of them into a store. report, compare, export and collect come through
here; nothing else tells the three apart.

    with sources.opened("results/digits_vgg4/record") as tree: ...     # a record, materialised
    with sources.opened("runs.store", {"act": ["relu"]}) as tree: ...  # a store's runs, selected
    sources.collect(["runs/digits_vgg4", "results/zoo/record"], "runs.store")
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from . import layout, record, store, store_row
from .io import RunStateError

STORE, RECORD, TREE = "store", "record", "tree"


def kind(path: str | Path) -> str:
    """What `path` is: a store, a record, or (else) a results tree."""
    return STORE if store.is_store(path) else RECORD if record.is_record(path) else TREE


@contextlib.contextmanager
def opened(path: str | Path, filters: dict[str, list[str]] | None = None) -> Iterator[Path]:
    """The runs of `path` as a results tree: a tree itself, a record's or a store's (selected by `filters`)
    materialised in a temporary folder, removed afterwards. StoreError for selectors on what is no store,
    RecordError (or StoreError) for a damaged record or store, in one line."""
    what = kind(path)
    if filters and what != STORE:
        raise store.StoreError(
            f"{path} is no store: {', '.join(filters)}= select the runs of a store (visionbench collect ... --into STORE)"
        )
    if what == STORE:
        with store.opened(path, filters) as tree:
            yield tree
    elif what == RECORD:
        with record.opened(path) as tree:
            yield tree
    else:
        yield Path(path)


def report_folder(path: str | Path) -> Path | None:
    """Where a report of `path` writes its files when they cannot go beside its runs: a store's `_report/`, the
    folder holding a record; None for a tree (its files go beside its runs)."""
    what = kind(path)
    return store.report_dir(path) if what == STORE else record.record_dir(path).parent if what == RECORD else None


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
        rows.append(store_row.of(run_dir, layout.recipe_root(run_dir, summary), source, run))
    return rows, skipped, left


def collect(sources: list[str], into: str | Path) -> tuple[list[str], list[str], list[str], Path | None]:
    """Collect the runs of `sources` (trees, records, stores) into the store `into` (created when missing).

    A run already held with the same result (its metrics, curves and predictions: `result_sha256`), whenever or
    wherever it ran, adds nothing; one with another result (a rerun on another device, another CPU) is kept as
    another observation of that run, with its environment and source.

    Returns (one line per source: "collected N runs from X (M new, K already in the store)", the lines of what was
    skipped (damage), the lines of runs left out (still running, interrupted), the part written or None).

    Raises:
        StoreError: `into` is no store and no new or empty folder; a source that does not exist, is the store
            itself, or is no results tree, record or store.
    """
    target = Path(into)
    store.check_target(target)
    held = store.held(target)
    known, runs_held = held.observations, held.runs  # what the store holds, then this collect's runs too
    lines, skipped, left, new_rows = [], [], [], []
    for source in sources:
        label = str(source)
        path = Path(source)
        if not path.exists():
            raise store.StoreError(f"{label} does not exist")
        if path.resolve() == target.resolve():
            raise store.StoreError(
                f"{label} is the store collected into; give the trees, records or other stores to add"
            )
        try:
            with opened(path) as tree:
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
            raise store.StoreError(
                f"{label} holds no run (<recipe>/<act>/seed_<k>/summary.json), and is no record "
                f"(record.json) and no store ({store.MARKER}){hint}"
            )
        fresh = already = other = 0
        for row in rows:
            key = store.observation_key(row)
            if key in known:
                already += 1
                continue
            other += store.run_key(row) in runs_held
            known.add(key)
            runs_held.add(store.run_key(row))
            new_rows.append(row)
            fresh += 1
        more = f"; {other} of them other results of runs it holds (other observations)" if other else ""
        lines.append(f"collected {len(rows)} runs from {label} ({fresh} new, {already} already in the store{more})")
    written = store.add(target, new_rows, held.columns) if new_rows else None
    return lines, skipped, left, written
