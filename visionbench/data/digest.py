"""The digest of the data a run read (summary.json `environment.data`): what tells two runs' data apart.

    >>> from visionbench.data import digest
    >>> digest.of_contents([Path("cifar-10-batches-py/data_batch_1"), ...])
    {"sha256": "…", "of": "contents", "files": {"data_batch_1": "…", ...}}
    >>> digest.of_listing([("tiny-imagenet-200/train/n01443537/images/a.JPEG", 0), ...])
    {"sha256": "…", "of": "file list (path, size, label)", "n_files": 110000}

Datasets held in a few files (digits, Fashion-MNIST, CIFAR-10) are hashed whole: SHA-256 of each file's contents,
and `sha256` is the one file's own digest (what `sha256sum FILE` prints), or for several files the SHA-256 of their
`sha256sum` lines (`<sha256>  <relative path>`, sorted by path). Datasets of image files (Tiny ImageNet, ImageNet,
data.name=folder) are too large to hash on every run: their digest is of the sorted (relative path, size, label)
list, which a renamed, resized, added, removed or relabelled image changes (an image rewritten to the same size
does not).

File digests are computed once and cached in ${XDG_CACHE_HOME:-~/.cache}/visionbench/digests.json, by absolute
path, valid while the file's size and mtime_ns are unchanged; a cache that cannot be read is ignored and rewritten.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from ..results.io import atomic_write_text
from .datasets import cache_dir

LISTING = "file list (path, size, label)"


def cache_path() -> Path:
    """Where the file digests are cached."""
    return cache_dir() / "digests.json"


def _load_cache() -> dict:
    """The cached digests; {} when the cache is missing, unreadable or not a JSON object."""
    try:
        cache = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def _save_cache(cache: dict) -> None:
    """Write the cache atomically; a cache that cannot be written is only a lost shortcut."""
    with contextlib.suppress(OSError):
        atomic_write_text(cache_path(), json.dumps(cache, indent=1, sort_keys=True))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_sha256(path: str | Path, cache: dict) -> str:
    """SHA-256 of the file's contents: from `cache` while its size and mtime are the cached ones, else read (and
    `cache` updated)."""
    path = Path(path).resolve()
    st = path.stat()
    entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    hit = cache.get(str(path))
    if isinstance(hit, dict) and isinstance(hit.get("sha256"), str) and {k: hit.get(k) for k in entry} == entry:
        return hit["sha256"]
    cache[str(path)] = {**entry, "sha256": _sha256(path)}
    return cache[str(path)]["sha256"]


def _relative(paths: list[Path]) -> list[str]:
    """The paths relative to the folder they share (a file alone: its name), so a moved dataset keeps its digest."""
    base = os.path.commonpath([str(p.parent) for p in paths])
    return [os.path.relpath(p, base) for p in paths]


def of_contents(paths: Iterable[str | Path]) -> dict:
    """The digest of the files' contents (module docstring): {"sha256", "of": "contents", "files": {path: sha256}}."""
    paths = sorted(Path(p).resolve() for p in paths)
    if not paths:
        raise ValueError("no files to digest")
    cache = _load_cache()
    files = dict(zip(_relative(paths), (file_sha256(p, cache) for p in paths)))
    _save_cache(cache)
    if len(files) == 1:
        total = next(iter(files.values()))
    else:
        total = hashlib.sha256("".join(f"{sha}  {name}\n" for name, sha in sorted(files.items())).encode()).hexdigest()
    return {"sha256": total, "of": "contents", "files": files}


def of_listing(samples: Iterable[tuple[str | Path, int]]) -> dict:
    """The digest of an image dataset's file list: SHA-256 of the sorted `<relative path>\\t<size>\\t<label>` lines."""
    samples = [(Path(p), int(label)) for p, label in samples]
    if not samples:
        raise ValueError("no files to digest")
    names = _relative([p for p, _ in samples])
    lines = sorted(f"{name}\t{p.stat().st_size}\t{label}\n" for name, (p, label) in zip(names, samples))
    return {"sha256": hashlib.sha256("".join(lines).encode()).hexdigest(), "of": LISTING, "n_files": len(lines)}
