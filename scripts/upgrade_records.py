"""Seal records of format 1 (before a record held the SHA-256 of its own content) as format 2, in place.

    .venv/bin/python scripts/upgrade_records.py results/*/record

Each record is read as it is (format 1 is unchecked: run this only on records you trust, e.g. the committed ones,
whose content git's history vouches for), materialised in a temporary folder and exported again into its own folder
with `visionbench export`'s code (report/export.py `export`) — the record export would write from those runs. The
script then checks that nothing but the seal changed: the same root, files, bases and runs in record.json, and the
same arrays, bit for bit, in the predictions file; otherwise it fails, naming the record. The folder ends with
record.json and predictions.<sha256>.npz (format 1's predictions.npz is removed by the export, after the new
record.json is in place). A record of format 2 is left as it is.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from visionbench.report.export import export
from visionbench.results import record

KEPT = ("root", "files", "bases", "runs")  # what a record says; the seal (version, predictions, sha256) is new


def upgrade(folder: Path) -> str:
    old = json.loads((folder / record.RECORD).read_text(encoding="utf-8"))
    if old.get("version") == record.VERSION:
        return f"{folder}: format {record.VERSION} already; left as it is"
    _, old_arrays = record.read(folder, format_1=True)
    with tempfile.TemporaryDirectory(prefix="visionbench-upgrade-") as tmp:
        tree = record.materialize(folder, tmp, format_1=True)
        export(tree, folder)
    new, new_arrays = record.read(folder)
    changed = [k for k in KEPT if new[k] != old[k]]
    if (
        changed
        or new_arrays.keys() != old_arrays.keys()
        or not all(
            new_arrays[k].dtype == old_arrays[k].dtype and np.array_equal(new_arrays[k], old_arrays[k])
            for k in old_arrays
        )
    ):
        raise SystemExit(
            f"{folder}: the re-exported record differs from the old one ({', '.join(changed) or 'arrays'})"
        )
    return f"{folder}: sealed as format {record.VERSION} ({new['predictions']}); content and arrays unchanged"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    for path in argv:
        print(upgrade(record.record_dir(Path(path))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
