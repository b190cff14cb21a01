"""CIFAR-10 from torchvision's on-disk format (the python pickle batches).

    <data.root>/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}

    visionbench run recipe=cifar10_vgg8 data.root=/datasets      # or VISIONBENCH_DATA=/datasets
    visionbench run recipe=cifar10_vgg8 data.download=true       # where there is internet

The batches are read directly (not through `torchvision.datasets.CIFAR10`, whose md5 check
refuses anything but the exact official files); torchvision is used only to download.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from .base import VisionDataModule
from .datasets import ArrayDataset, find_dataset_dir, missing_dataset

FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
LAYOUT = f"    {FOLDER}/data_batch_1 .. data_batch_5, {TEST_BATCH}, batches.meta (python pickles)"


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One pickle batch as (images uint8 (N, 32, 32, 3), labels int64)."""
    with open(path, "rb") as f:
        # latin1 decodes the python-2 pickles' numpy payload correctly (as torchvision does)
        entry = pickle.load(f, encoding="latin1")
    entry = {k.decode() if isinstance(k, bytes) else k: v for k, v in entry.items()}
    data = np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    labels = np.asarray(entry["labels"], dtype=np.int64)
    return np.ascontiguousarray(data), labels


def read_class_names(folder: Path) -> list[str] | None:
    """`label_names` from batches.meta, when present."""
    meta = folder / "batches.meta"
    if not meta.exists():
        return None
    with open(meta, "rb") as f:
        entry = pickle.load(f, encoding="latin1")
    names = {k.decode() if isinstance(k, bytes) else k: v for k, v in entry.items()}.get("label_names")
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names] if names else None


class CIFAR10DataModule(VisionDataModule):
    """CIFAR-10: 50,000 train / 10,000 test images, 32 px, 10 classes."""

    name = "cifar10"
    native_size = 32
    default_img_size = 32
    # paper 004 App E (torchvision interface); recipes may override (paper 001 Table 8 uses others)
    default_mean = (0.4914, 0.4822, 0.4465)
    default_std = (0.2023, 0.1994, 0.2010)
    num_classes = 10
    in_chans = 3

    def _folder(self) -> Path | None:
        return find_dataset_dir(self.root, FOLDER, TEST_BATCH)

    def check(self) -> None:
        if self.cfg.download:
            return  # prepare_data() fetches it
        folder = self._folder()
        missing = [] if folder is None else [b for b in TRAIN_BATCHES if not (folder / b).exists()]
        if folder is None or missing:
            raise missing_dataset("CIFAR-10", self.cfg, self.root / FOLDER, LAYOUT, download=True)

    def prepare_data(self) -> None:
        """Download with torchvision when `data.download` is set and the files are missing."""
        if self.cfg.download and self._folder() is None:
            from torchvision.datasets import CIFAR10

            CIFAR10(str(self.root), train=True, download=True)

    def load_source(self, train: bool) -> ArrayDataset:
        folder = self._folder()
        if folder is None:
            raise missing_dataset("CIFAR-10", self.cfg, self.root / FOLDER, LAYOUT, download=True)
        parts = [read_batch(folder / b) for b in (TRAIN_BATCHES if train else (TEST_BATCH,))]
        dataset = ArrayDataset(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        dataset.classes = read_class_names(folder)
        return dataset
