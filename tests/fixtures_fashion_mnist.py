"""A tiny Fashion-MNIST in the exact IDX format (no download): big-endian int32 magic (2051 images, 2049 labels)
and dims, then one unsigned byte per pixel / label. `write_fmnist(root / "fashion-mnist")` gives a data root
the fashion_mnist loader reads (tests/test_fashion_mnist.py; usable as a `roots` entry elsewhere)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

TRAIN_PER_CLASS, TEST_PER_CLASS = 6, 2
TEST_OFFSET = 10


def idx_bytes(array: np.ndarray, magic: int) -> bytes:
    head = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return head + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def pixel(label: int, k: int) -> int:
    """A fixture image is constant; its value encodes the label (and the image's index in its class)."""
    return 20 * label + k


def split_arrays(per_class: int, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 28, 28), labels (N,)) uint8, classes interleaved."""
    labels = np.array([c for k in range(per_class) for c in range(10)], dtype=np.uint8)
    ks = np.array([k for k in range(per_class) for _ in range(10)])
    images = np.stack([np.full((28, 28), pixel(c, offset + k), dtype=np.uint8) for c, k in zip(labels, ks)])
    return images, labels


def write_fmnist(folder: Path, gz: bool = False, skip: tuple[str, ...] = ()) -> Path:
    """The four files (plain or .gz) of a tiny Fashion-MNIST in `folder` (60 train, 20 test images)."""
    folder.mkdir(parents=True, exist_ok=True)
    train, test = split_arrays(TRAIN_PER_CLASS), split_arrays(TEST_PER_CLASS, offset=TEST_OFFSET)
    content = {
        "train-images-idx3-ubyte": idx_bytes(train[0], 2051),
        "train-labels-idx1-ubyte": idx_bytes(train[1], 2049),
        "t10k-images-idx3-ubyte": idx_bytes(test[0], 2051),
        "t10k-labels-idx1-ubyte": idx_bytes(test[1], 2049),
    }
    for name, payload in content.items():
        if name in skip:
            continue
        if gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(payload))
        else:
            (folder / name).write_bytes(payload)
    return folder
