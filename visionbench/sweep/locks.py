"""One process per run directory: a second `visionbench run` on the same results skips the runs
another live process is training, and says so (an advisory `flock`, released when its holder
exits or dies; on systems without `fcntl` there is no lock).

Under DDP every rank runs the same command and trains the same run together: only rank 0 takes
the lock (the others would find it held and skip, leaving rank 0 waiting for them forever)."""
from __future__ import annotations

import os
from pathlib import Path

from .ranks import is_rank_zero

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

LOCK_NAME = ".lock"


class RunLocked(RuntimeError):
    """Another live process holds the run directory."""


class RunLock:
    """`with RunLock(run_dir):` hold the run directory for this process; `RunLocked` if another does."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_NAME
        self._file = None

    def __enter__(self) -> "RunLock":
        if fcntl is None or not is_rank_zero():  # rank 0 of this DDP job holds it
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            holder = f.read().strip() or "?"
            f.close()
            raise RunLocked(f"{self.path.parent} is being trained by another visionbench process (pid {holder}); "
                            "skipped here") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        self._file = f
        return self

    def __exit__(self, *exc) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
