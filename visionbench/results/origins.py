"""Where the runs being read came from. A record or a store is read as a results tree written into a temporary
folder (removed when its reader is done): a note that says how to fix one of its runs must name the record or the
store's sources, never that folder. The readers register their tree here (`registered`); `fix_command` words the
fix for any run folder, of a tree, a record or a store."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from .predictions import FIX

# a materialised tree (its path as text) → the fix for run folders below it (their paths, the tree's replaced)
_OPENED: dict[str, Callable[[str, str], str]] = {}


@contextlib.contextmanager
def registered(tree: str | Path, fix: Callable[[str, str], str]) -> Iterator[None]:
    """While open, runs below `tree` are fixed by `fix(run_dirs, tree)` (run_dirs: one run folder, or several
    joined by spaces)."""
    _OPENED[str(tree)] = fix
    try:
        yield
    finally:
        _OPENED.pop(str(tree), None)


@contextlib.contextmanager
def temporary_folder(kind: str) -> Iterator[Path]:
    """A temporary folder to write a record's or a store's runs into (`kind`: "record", "store"), removed afterwards.
    Its name holds this process's id: the folders of readers that were killed before they could remove theirs
    (kill -9, a SIGTERM) are removed by the next reader, so none is left behind for long."""
    base = Path(tempfile.gettempdir())
    named = re.compile(rf"visionbench-{kind}-(\d+)-.+")
    for old in base.glob(f"visionbench-{kind}-*"):
        m = named.fullmatch(old.name)
        if m and old.is_dir() and not old.is_symlink() and not _alive(int(m.group(1))):
            shutil.rmtree(old, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f"visionbench-{kind}-{os.getpid()}-") as tmp:
        yield Path(tmp)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True  # another user's process, or no such number: leave it
    return True


def of_record(folder: str) -> Callable[[str, str], str]:
    """Runs of the record at `folder`: rewrite them in the runs it was exported from (RUNS_DIR), export again."""
    return lambda run_dirs, tree: (
        f"{FIX.format(run_dir=run_dirs.replace(tree, 'RUNS_DIR'))} && visionbench export RUNS_DIR {folder}"
    )


def of_store(store: str, sources: list[str]) -> Callable[[str, str], str]:
    """Runs of a store (whose parts are never rewritten): rewrite them in the tree they were collected from, then
    collect that tree into a new store."""
    held = ", ".join(sorted(set(sources))) or "?"
    return lambda run_dirs, tree: (
        f"{FIX.format(run_dir=run_dirs.replace(tree, 'SOURCE'))} in the tree {store} collected them from "
        f"(SOURCE: {held}), then visionbench collect SOURCE --into NEW_STORE"
    )


def fix_command(run_dirs) -> str:
    """The command that rewrites the predictions of `run_dirs` (one run folder, or several joined by spaces)."""
    text = str(run_dirs)
    for tree, fix in _OPENED.items():
        if tree in text:
            return fix(text, tree)
    return FIX.format(run_dir=text)


def materialised(run_dir) -> bool:
    """Whether `run_dir` lies in a record's or a store's runs written into a temporary folder (not the user's)."""
    return any(tree in str(run_dir) for tree in _OPENED)
