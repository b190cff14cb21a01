"""Dataset building blocks shared by every data module.

A *source* dataset returns untransformed `(PIL image, label)` pairs and has a `targets`
array, so splits can be computed from labels without decoding a single image;
`TransformSubset` picks indices of a source and applies a transform. The same source thus
serves the training part (augmented) and the held-out validation part (eval transform).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import Dataset

from ..config import DataConfig
from .seeding import SampleKey, preserved_rngs, sample_seed, seed_rngs


class DatasetNotFoundError(FileNotFoundError):
    """A dataset is missing on disk; the message says where it was looked for and how to fix it."""


DATA_ENV_VAR = "VISIONBENCH_DATA"


def root_dir(cfg: DataConfig) -> Path:
    """Where datasets live: `data.root`, else `$VISIONBENCH_DATA`, else `./data` (absolute)."""
    return Path(cfg.root or os.environ.get(DATA_ENV_VAR) or "data").expanduser().resolve()


def cache_dir() -> Path:
    """visionbench's own cache folder, `${XDG_CACHE_HOME:-~/.cache}/visionbench`: what is computed from the data
    (file digests, a folder's image statistics) is kept here, never in the data's folder."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "visionbench"


def root_source(cfg: DataConfig) -> str:
    """Which setting chose `root_dir(cfg)`, for error messages."""
    if cfg.root:
        return "data.root"
    if os.environ.get(DATA_ENV_VAR):
        return f"${DATA_ENV_VAR} (data.root is null)"
    return f"the default ./data (data.root is null and ${DATA_ENV_VAR} unset)"


class CorruptDataError(ValueError):
    """A dataset file that cannot be used (truncated, wrong content); the message names the file and the fix."""


def corrupt(path: str | Path, problem: str) -> CorruptDataError:
    """`CorruptDataError`: one line with the file, what is wrong with it and what to do."""
    return CorruptDataError(f"{path}: {problem}; replace the file with an intact copy of the dataset")


def missing_dataset(title: str, cfg: DataConfig, expected: Path, layout: str, download: bool = False):
    """A `DatasetNotFoundError` naming `data.root`, the expected path and the fixes."""
    fixes = [f"point data.root=/path/to/datasets (or ${DATA_ENV_VAR}) at the directory holding it"]
    if download:
        fixes.insert(0, "set data.download=true on a machine with internet access")
    return DatasetNotFoundError(
        f"{title} not found at {expected}\n"
        f"  data root: {root_dir(cfg)} (from {root_source(cfg)})\n"
        f"  expected layout:\n{layout}\n"
        f"  fix: " + "; or ".join(fixes)
    )


def find_dataset_dir(root: Path, folder: str, marker: str) -> Path | None:
    """`root/folder` if it holds `marker`, else `root` itself if it does (root may be the dataset)."""
    for candidate in (root / folder, root):
        if (candidate / marker).exists():
            return candidate
    return None


IMAGE_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)  # UnidentifiedImageError: OSError


def unreadable_image(e: Exception) -> str:
    """`unreadable image (<why>)`: the first line of PIL's error (not the path or file object it may repeat)."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, UnidentifiedImageError):  # its message repeats the path (or a file object)
        first = "not an image format PIL can identify"
    return f"unreadable image ({first})"


@contextlib.contextmanager
def reading_image(path: str | Path, error: Callable[[str | Path, str], Exception] = corrupt) -> Iterator[None]:
    """Inside the block, PIL's errors reading the image `path` become `error(path, unreadable_image(e))`, one line
    naming the file (PIL alone says "image file is truncated", without the path, from deep inside a DataLoader
    worker); a `CorruptDataError` raised in the block passes as it is."""
    try:
        yield
    except IMAGE_ERRORS as e:
        if isinstance(e, CorruptDataError):
            raise
        raise error(path, unreadable_image(e)) from None


def _open_binary(path: str | Path) -> IO[bytes]:
    return open(path, "rb")


def load_image(
    path: str | Path,
    mode: str | None = "RGB",
    *,
    read: Callable[[str | Path], IO[bytes]] = _open_binary,
    adapt: Callable[[Image.Image], Image.Image] | None = None,
    error: Callable[[str | Path, str], Exception] = corrupt,
) -> Image.Image:
    """The image file `path` decoded, `adapt`ed (e.g. a 16-bit image scaled to 8 bits) and converted to `mode`
    (default RGB: Tiny ImageNet and ImageNet hold some grayscale/CMYK JPEGs; None: as stored). `read(path)` opens
    the file (default `open(path, "rb")`); an unreadable file is `error(path, "unreadable image (...)")`
    (`reading_image`; default a `CorruptDataError`)."""
    with reading_image(path, error), read(path) as f:
        img = Image.open(f)
        img.load()
        if adapt is not None:
            img = adapt(img)
        return img.convert(mode) if mode and img.mode != mode else img


class ArrayDataset(Dataset):
    """In-memory uint8 images (N, H, W, C) with labels; items are PIL images (mode L or RGB)."""

    def __init__(self, images: np.ndarray, targets: Sequence[int]):
        if images.ndim != 4 or images.dtype != np.uint8:
            raise ValueError(f"expected uint8 images of shape (N, H, W, C), got {images.dtype} {images.shape}")
        self.images = images
        self.targets = np.asarray(targets, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        img = self.images[index]
        img = Image.fromarray(img[..., 0] if img.shape[-1] == 1 else img)
        return img, int(self.targets[index])


class FileDataset(Dataset):
    """Image files with labels, decoded lazily to RGB (or `mode`: "L" for grayscale)."""

    def __init__(self, samples: Sequence[tuple[str, int]], mode: str = "RGB"):
        self.paths = [str(p) for p, _ in samples]
        self.mode = mode
        self.targets = np.asarray([t for _, t in samples], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        return load_image(self.paths[index], self.mode), int(self.targets[index])


class TransformSubset(Dataset):
    """`source[indices]` with `transform` applied to the image.

    Args:
        source: a source dataset (untransformed items, `targets` attribute).
        indices: which of its samples to use.
        transform: PIL image -> tensor.
        cache: apply the (deterministic!) transform once up front and keep the tensors;
            for small in-memory datasets (digits, synthetic), where per-item work dominates.
        seed: the run's seed, for a random (training) transform. An item asked for by a
            `SampleKey` (what the keyed training samplers yield) is then transformed under RNGs
            seeded with `sample_seed(seed, key.epoch, key.position)`, whatever process does it.
            A plain int index, or `seed=None`, draws from the global RNGs as they are.
    """

    def __init__(
        self, source: Dataset, indices: Sequence[int], transform: Callable, cache: bool = False, seed: int | None = None
    ):
        self.source = source
        self.indices = np.asarray(indices, dtype=np.int64)
        self.transform = transform
        self.seed = None if seed is None else int(seed)
        self.targets = np.asarray(source.targets)[self.indices]
        self._cache = None
        if cache:
            self._cache = torch.stack([transform(source[int(i)][0]) for i in self.indices]) if len(self) else None

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, key: int | SampleKey) -> tuple[torch.Tensor, int]:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: Sequence[int | SampleKey]) -> list[tuple[torch.Tensor, int]]:
        """A batch of items (torch's DataLoader fetches whole batches through this method).

        Keyed items are seeded one by one inside one `preserved_rngs` block: the caller's
        global RNG states are saved and restored once per batch, not once per sample."""
        if self._cache is not None or self.seed is None or not all(isinstance(k, SampleKey) for k in keys):
            return [self._item(k) for k in keys]
        items = []
        with preserved_rngs():
            for key in keys:
                seed_rngs(sample_seed(self.seed, key.epoch, key.position))
                items.append(self._item(key))
        return items

    def _item(self, key: int | SampleKey) -> tuple[torch.Tensor, int]:
        index = key.index if isinstance(key, SampleKey) else int(key)
        if self._cache is not None:
            return self._cache[index], int(self.targets[index])
        img, target = self.source[int(self.indices[index])]
        return self.transform(img), target
