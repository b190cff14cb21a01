"""The results directory as a sweep holds it: writable before the first run, in place until the last.

    check_writable(cfg)                    # ConfigError, one line, before anything is written (check_directory too)
    watch = ResultsWatch(recipe_dir)
    watch.check()                          # before each run and before each run's last write

A read-only (or not our own) results tree would fail every run at its first write with a traceback;
it fails here once instead, naming the directory and the fix. A results directory moved or deleted
while the sweep runs would be recreated, empty, by the next write (results split across two trees):
`ResultsWatch` notes the recipe directory's identity (device, inode) when the sweep first writes,
and `ResultsMoved` stops the sweep as soon as the directory is gone or is another one.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from ..config import ConfigError
from ..results.layout import first_link, first_unwritable


class ResultsMoved(RuntimeError):
    """The results directory was moved or deleted during the sweep; the message says what to do."""


def check_directory(cfg: DictConfig) -> None:
    """ConfigError (key results_dir) when a file stands where the results tree's directories are (results_dir
    itself, a parent, or <results_dir>/<recipe>): `visionbench run` and `estimate` refuse it in one line."""
    recipe_dir = Path(cfg.results_dir) / cfg.recipe
    existing = next((p for p in (recipe_dir, *recipe_dir.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise ConfigError(
            f"results_dir {cfg.results_dir}: {existing} is a file, not a directory; pass "
            "results_dir=<a directory> (it is created if missing)",
            "results_dir",
        )


def check_writable(cfg: DictConfig) -> None:
    """ConfigError (key results_dir) when this process cannot write the sweep's results tree: the recipe
    directory and everything in it, or the nearest existing parent of a directory still to create; or when a
    folder of it (the recipe's, a setting's, an activation's, a run's) is a symbolic link: resuming or extending
    the sweep would write whole runs where the link points (docs/reproducing.md, "Trees from someone else")."""
    check_directory(cfg)
    link = first_link(Path(cfg.results_dir) / cfg.recipe)
    if link is not None:
        raise ConfigError(
            f"results_dir {cfg.results_dir}: {link} is a symbolic link (to {os.readlink(link)}); a sweep writes whole "
            "runs into its folders and will not write where a link points — replace it with a real folder "
            f"(e.g. cp -r --dereference) or pass results_dir=<another directory>",
            "results_dir",
        )
    found = first_unwritable(Path(cfg.results_dir) / cfg.recipe)
    if found:
        where, why = found
        raise ConfigError(
            f"results_dir {cfg.results_dir}: {where} is not writable ({why}); make it writable "
            f"(chmod -R u+w {where}) or pass results_dir=<a writable directory>",
            "results_dir",
        )


@dataclass
class ResultsWatch:
    """The recipe directory of a sweep; `check` creates it the first time, then insists it is the same."""

    path: Path
    identity: tuple[int, int] | None = None

    def check(self) -> None:
        """Raise `ResultsMoved` when the directory noted on the first call is gone or replaced."""
        if self.identity is None:
            self.path.mkdir(parents=True, exist_ok=True)
            self.identity = self._stat()
            return
        if self.moved():
            now = self._stat()
            what = "deleted or moved" if now is None else "replaced by another directory"
            raise ResultsMoved(
                f"the results directory {self.path} was {what} during the sweep; stopped so that "
                "results are not split across two trees — put it back (or rerun the command with "
                "results_dir=<its new place>) to resume"
            )

    def moved(self) -> bool:
        """Whether the directory noted by the first `check` is gone or replaced (False before that)."""
        return self.identity is not None and self._stat() != self.identity

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_dev, st.st_ino


@contextlib.contextmanager
def quiet_writer_threads(watch: ResultsWatch):
    """While the sweep runs: a background writer thread (TensorBoard's event writer) that fails because
    the watched directory went away prints no traceback (the sweep says it in one line, `ResultsMoved`);
    every other thread error is reported as before."""
    previous = threading.excepthook

    def hook(args) -> None:
        if not (isinstance(args.exc_value, OSError) and watch.moved()):
            previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous
