"""One process per run directory: a second `visionbench run` on the same results skips the runs
another live process is training, and says so.

    with RunLock(run_dir):      # RunLocked if another live process holds run_dir
        train(...)

The lock is `filelock.FileLock` (an advisory `flock` on POSIX, `msvcrt.locking` on Windows): the
kernel drops it when its holder exits or dies, so a killed sweep's lock is taken over by the next
run without any stale-lock cleanup. The holder's pid is written into the lock file (filelock opens
it without truncating) so the skip message can name it.

Under DDP every rank runs the same command and trains the same run together: only rank 0 takes
the lock (the others would find it held and skip, leaving rank 0 waiting for them forever)."""

from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock, Timeout

from .ranks import is_rank_zero

LOCK_NAME = ".lock"


class RunLocked(RuntimeError):
    """Another live process holds the run directory."""


class RunLock:
    """`with RunLock(run_dir):` hold the run directory for this process; `RunLocked` if another does."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_NAME
        self._lock: FileLock | None = None

    def __enter__(self) -> RunLock:
        if not is_rank_zero():  # rank 0 of this DDP job holds it
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.path, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            holder = self.path.read_text().strip() if self.path.exists() else ""
            raise RunLocked(
                f"{self.path.parent} is being trained by another visionbench process (pid {holder or '?'}); "
                "skipped here"
            ) from None
        self.path.write_text(str(os.getpid()))  # same inode: the lock stays held
        self._lock = lock
        return self

    def __exit__(self, *exc) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None
