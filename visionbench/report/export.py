"""`visionbench export RUNS_DIR OUT`: the compact, committable record of a results tree (results/record.py).

    visionbench export runs/digits_vgg4 results/digits_vgg4/record     # then commit the record
    visionbench report results/digits_vgg4/record      # the tables, per_example files and figures, from it

Every scored run (completed, diverged, failed) goes in: its summary (environment, every metric), its
config, its per-epoch curves and its per-example predictions; the activation snapshots only of the runs
the report draws (one per activation: `collect.snapshot_runs`). Runs still running or interrupted are left
out, with a note. A scored run whose files disagree with its summary (a config.yaml cut short or edited, a metric
its predictions contradict: results/integrity.py), or a predictions.npz that cannot go into the record as it is
(unreadable, arrays that are no classifier's predictions, or that would not come back exactly from the packed form)
stops the export with one line naming it. A record already in OUT is replaced in one step (results/record.py `write`: a kill at any instant
leaves the old record or the new one). Reporting a record writes the report's files into the folder that holds the
record, at the places they have in the tree: a committed record and its tables sit together (docs/reproducing.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..results import integrity, layout, record, sources
from ..results.io import RunStateError
from .arguments import parser
from .collect import scan_runs, snapshot_runs
from .errors import fail, os_reason


def export(runs_dir: str | Path, out: str | Path) -> tuple[list[Path], list[str]]:
    """Write the record of the tree `runs_dir` into `out`; (files written, notes on runs left out).

    Raises:
        FileNotFoundError: `runs_dir` does not exist.
        ValueError: no scored run under it; record.RecordError (a ValueError): a predictions.npz that cannot go
            into a record as it is.
        RunStateError: a run's summary.json or config.yaml that cannot be read; a scored run whose files disagree
            with its summary (results/integrity.py: a damaged config.yaml, a metric its predictions contradict).
    """
    root = Path(runs_dir)
    for run_dir in layout.find_run_dirs(root) if root.exists() else ():  # a damaged run: the export stops, whole
        try:
            summary = layout.read_summary(run_dir)
        except (OSError, RunStateError):
            continue  # scan_runs names it, and leaves it out
        if summary and not layout.unscored_reason(summary) and (problem := integrity.problem(run_dir, summary)):
            raise RunStateError(f"{problem}; a record holds whole runs only, nothing written")
    runs, notes = scan_runs(root)
    if not len(runs):
        raise ValueError(f"no finished run (summary.json) under {str(root)!r}; nothing to export")
    drawn = set(snapshot_runs(runs)["run_dir"])
    rows = []
    for run_dir in runs["run_dir"]:
        row = record.read_run(Path(run_dir))
        row["path"] = Path(run_dir).relative_to(root).as_posix()
        row["snapshots"] = row["snapshots"] if run_dir in drawn else []
        rows.append(row)
    files = {
        p.relative_to(root).as_posix(): layout.read_sequential(p.parent) for p in sorted(root.rglob(layout.SEQUENTIAL))
    }
    return record.write(out, root.resolve().name, rows, files), notes


def main(argv: list[str] | None = None) -> int:
    """`visionbench export RUNS_DIR OUT`; 0, or 2 with one line on stderr (nothing written)."""
    p = parser(
        "export",
        "Write the compact, committable record of a results tree: every run's summary, config, curves and "
        "per-example predictions (docs/reproducing.md). `visionbench report OUT` reads it.",
    )
    p.add_argument(
        "runs_dir", metavar="RUNS_DIR", help="a results tree (a recipe dir or a parent of several), or a store"
    )
    p.add_argument("out", metavar="OUT", help="the record's folder (record.json, predictions.<sha256>.npz)")
    args = p.parse_args(argv)
    if record.is_record(args.runs_dir):
        return fail("export", f"{args.runs_dir} is a record already; export a results tree")
    out = Path(args.out)
    if (
        out.exists()
        and not out.is_dir()
        or (
            out.is_dir() and not record.is_record(out) and not all(record.is_record_file(p.name) for p in out.iterdir())
        )
    ):
        return fail(
            "export",
            f"{out} exists and is not a record; give a new or empty folder (an existing record there is replaced)",
        )
    try:
        with sources.opened(args.runs_dir) as tree:  # a tree, or a store's runs (one observation each) as one
            written, notes = export(tree, out)
    except (FileNotFoundError, ValueError, RunStateError) as e:
        return fail("export", e)
    except OSError as e:
        return fail("export", os_reason(e, out))
    for note in notes:
        print(f"note: {note}; not in the record", file=sys.stderr)
    size = sum(p.stat().st_size for p in written)
    print(f"wrote {out} ({size / 1024:.0f} kB): {', '.join(p.name for p in written)}", file=sys.stderr)
    return 0
