"""scikit-learn's 8x8 handwritten digits: 1,797 real images shipped with the library, offline.

    visionbench run                      # = recipe=digits_vgg4, the embedded default

Pixel values 0..16 are scaled to 0..255 uint8 (so the pipeline is the same as for any
image dataset; /255 later gives [0, 1]). The official test split is fixed: a stratified
20 % with random_state 0, so results are comparable across runs and machines. Everything
is held in memory, and deterministic transforms are applied once and cached.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import numpy as np

from .base import VisionDataModule
from .datasets import ArrayDataset
from .splits import stratified_split

TEST_FRACTION = 0.2
SKLEARN_FILE = ("sklearn.datasets.data", "digits.csv.gz")  # (package, name): what load_digits reads


@functools.lru_cache(maxsize=1)
def load_digits_uint8() -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 digits as (uint8 images (N, 8, 8, 1), int64 labels)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    return images, digits.target.astype(np.int64)


def digits_split(train: bool) -> tuple[np.ndarray, np.ndarray]:
    """The fixed train (80 %) or test (20 %) part of the digits."""
    images, targets = load_digits_uint8()
    train_idx, test_idx = stratified_split(targets, TEST_FRACTION)
    idx = train_idx if train else test_idx
    return images[idx], targets[idx]


class DigitsDataModule(VisionDataModule):
    """Digits: 1,437 train / 360 test grayscale images, 8 px (upsampled if data.img_size asks), 10 classes."""

    name = "digits"
    native_size = 8
    default_img_size = 8
    # statistics of all 1,797 images after scaling to [0, 1]
    default_mean = (0.3053,)
    default_std = (0.3759,)
    in_memory = True
    num_classes = 10
    in_chans = 1

    def data_files(self) -> list[Path]:
        """scikit-learn's digits.csv.gz, the file `load_digits` reads."""
        package, name = SKLEARN_FILE
        return [Path(str(resources.files(package) / name))]

    def load_source(self, train: bool) -> ArrayDataset:
        dataset = ArrayDataset(*digits_split(train))
        dataset.classes = [str(d) for d in range(10)]
        return dataset
