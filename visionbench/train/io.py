"""Atomic file writes: write a temporary file beside the target, then rename over it."""
from __future__ import annotations

import csv
import io
import os
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_csv_rows(path: Path) -> list[dict]:
    """The rows of a CSV file as dicts of strings; [] when the file does not exist."""
    path = Path(path)
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_csv_rows(path: Path, rows: list[dict]) -> None:
    """All rows as CSV with the union of their keys as columns (epoch first), atomically."""
    fields: list[str] = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, restval="")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())
