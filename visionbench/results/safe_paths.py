"""Paths that come from a file or a label someone else wrote — a record's run paths, an activation's label, a plugin's
registered name, a tree's planted symlinks — resolved in one place, and refused when they would leave their root.

    run = inside(tree, record_entry["path"], what="record.json runs[3].path")   # tree/relu/seed_0, or UnsafePath
    name = component(label, what="activation label")                            # one path component, or UnsafePath
    within(tree, tree / "table.md", what="table.md")                            # no symlink leads out of tree

Refused: an absolute path, a `..` or empty component, a NUL, a backslash (a Windows separator), and any path whose
real location (symlinks followed) is outside the root. Writes never follow a symlink at the target: they go through
`io.atomic_path` (a fresh temporary file created exclusively beside the target, renamed over it: a planted link is
replaced, its target untouched). docs/reproducing.md, "Files from someone else", states the threat model.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from .io import RunStateError


class UnsafePath(RunStateError):
    """A path read from a file or a label that would leave its root (one line: what, the path, why)."""


def _why(text: str) -> str | None:
    """Why the relative path `text` ('/'-joined) cannot be used as one, None when it can."""
    if not isinstance(text, str) or not text:
        return "it is empty or not a string"
    if "\x00" in text:
        return "it holds a NUL character"
    if "\\" in text:
        return "it holds a backslash"
    if text.startswith("/") or PurePosixPath(text).is_absolute() or (len(text) > 1 and text[1] == ":"):
        return "it is absolute"
    parts = text.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "it has an empty, '.' or '..' component"
    return None


def inside(root: str | Path, relative: str, what: str) -> Path:
    """`root / relative`, refused (UnsafePath) when `relative` is not a plain relative path or when the result,
    symlinks followed, lies outside `root`."""
    why = _why(relative)
    if why:
        raise UnsafePath(
            f"{what} is {relative!r}: refused, {why}; a path read from a file must stay inside its folder {root}"
        )
    path = Path(root) / relative
    within(root, path, what)
    return path


def component(name: str, what: str) -> str:
    """`name` when it is one plain path component (no '/', no '..'); UnsafePath otherwise."""
    why = _why(name) or ("it holds a '/'" if "/" in name else None)
    if why:
        raise UnsafePath(f"{what} {name!r} cannot name a folder: {why}")
    return name


def within(root: str | Path, path: str | Path, what: str) -> Path:
    """`path`, refused (UnsafePath) when its real location (every symlink on the way followed, the missing tail
    taken as written) is outside the real location of `root`."""
    base = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != base and not real.startswith(base.rstrip(os.sep) + os.sep):
        raise UnsafePath(
            f"{what}: {path} leads outside {root} (to {real}); refused — a symlink or path in a "
            "received tree may not point out of it"
        )
    return Path(path)
