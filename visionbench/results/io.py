"""File primitives of the results tree: atomic writes, CSV rows, and the errors a run directory raises.

Atomic writes: write a temporary file beside the target, then rename over it.

The temporary name carries the process id, so two processes never write the same temporary file,
and it is removed when the write fails (e.g. a full disk): a failed write leaves the previous
version of the target, never a torn or stray file.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path


class RunStateError(RuntimeError):
    """A run directory's file cannot be used as it is; the message names the file and what to do."""


class DiskFullError(OSError):
    """No space left on the device while writing `filename` (one line for the user)."""

    def __init__(self, filename):
        super().__init__(errno.ENOSPC, f"no space left on device writing {filename}", str(filename))

    def __str__(self) -> str:
        return self.strerror


def is_disk_full(error: BaseException) -> bool:
    """ENOSPC, as an OSError or as torch's serializer reports it (a RuntimeError naming the write)."""
    return (isinstance(error, OSError) and error.errno == errno.ENOSPC) or "No space left on device" in str(error)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success rename it over `path`, on failure delete it.

    A full disk becomes `DiskFullError(path)`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # created here, exclusively (O_EXCL: never through a link planted under a guessable name); the rename then
    # replaces whatever stands at `path`, a symlink included, and never writes through it
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{os.getpid()}", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    with contextlib.suppress(OSError):  # mkstemp's 0600 -> what open() would give (0666 less the umask)
        os.chmod(tmp, 0o666 & ~_umask())
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if is_disk_full(e) and not isinstance(e, DiskFullError):
            raise DiskFullError(path) from e
        raise


def sync_folder(folder: Path) -> None:
    """Flush a folder's entries (the renames in it) to disk, where the system allows it."""
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_bytes(path: Path, data: bytes | str) -> Path:
    """`data` (a str is written as UTF-8) into `path` through `atomic_path`: a symlink or hard link planted at `path`
    is replaced, never written through. Returns `path`. What the report and `visionbench compare --out` write."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
    return Path(path)


def _umask() -> int:
    """This process's umask (read from /proc where it can be, without changing it; else set and put back)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


def unwritable(directory: Path) -> str | None:
    """Why this process cannot create files in the existing `directory` ("read-only file system",
    "permission denied"); None when it can. (As root, permissions do not restrict: only a read-only
    mount does.)"""
    if os.access(directory, os.W_OK | os.X_OK):
        return None
    try:
        read_only = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # AttributeError: no statvfs (Windows)
        read_only = False
    return "read-only file system" if read_only else "permission denied"


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


@contextlib.contextmanager
def environ_set(values: Mapping[str, str]) -> Iterator[None]:
    """`values` set in os.environ while the block runs (processes started in it inherit them), each variable's
    previous value, or its absence, restored afterwards: a portable run's pinned variables for its workers
    (sweep/portable.py), MLflow's request limits for a probe (train/trackers.py)."""
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
