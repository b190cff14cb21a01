"""Random images and labels, for speed tests (`data.name=synthetic`, sizes in `data.synthetic`).

    visionbench bench ... data.name=synthetic data.synthetic.img_size=224 data.synthetic.num_classes=1000

Uniform uint8 pixels and balanced labels (every class present, so val_split works), drawn
from the run's seed: the same seed gives the same data. Train and val are independent draws.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..config import DataConfig
from .base import VisionDataModule
from .datasets import ArrayDataset


class SyntheticDataModule(VisionDataModule):
    """Synthetic data of the size `data.synthetic` gives."""

    name = "synthetic"
    in_memory = True

    def __init__(
        self, cfg: DataConfig, batch_size: int, seed: int = 0, test_in_val: bool = False, aug_seed: int | None = None
    ):
        spec = cfg.synthetic
        if spec.in_chans not in (1, 3):
            raise ValueError(f"data.synthetic.in_chans must be 1 or 3, got {spec.in_chans}")
        if min(spec.num_train, spec.num_val, spec.num_classes, spec.img_size) < 1:
            raise ValueError(f"data.synthetic sizes must be >= 1, got {spec}")
        self.num_classes = spec.num_classes
        self.in_chans = spec.in_chans
        self.native_size = self.default_img_size = spec.img_size
        # the exact statistics of uniform pixels in [0, 1]
        self.default_mean = (0.5,) * spec.in_chans
        self.default_std = (1 / math.sqrt(12),) * spec.in_chans
        super().__init__(cfg, batch_size, seed, test_in_val, aug_seed)

    def data_digest(self) -> dict:
        """No files: the generator's parameters (the pixels are drawn from each run's seed)."""
        return {"of": "synthetic", "synthetic": dataclasses.asdict(self.cfg.synthetic)}

    def load_source(self, train: bool) -> ArrayDataset:
        spec = self.cfg.synthetic
        n = spec.num_train if train else spec.num_val
        rng = np.random.default_rng([self.seed, 0 if train else 1])
        images = rng.integers(0, 256, size=(n, spec.img_size, spec.img_size, spec.in_chans), dtype=np.uint8)
        targets = rng.permutation(np.arange(n) % spec.num_classes)
        return ArrayDataset(images, targets)
