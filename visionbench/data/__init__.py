"""Data modules of visionbench: one per dataset, built from a recipe's `data:` block.

    >>> from visionbench import data
    >>> dm = data.create_datamodule({"name": "digits", "val_split": 0.2}, batch_size=64, seed=0)
    >>> dm.num_classes, dm.in_chans, dm.img_size, dm.has_test
    (10, 1, 8, True)
    >>> x, y = next(iter(dm.train_dataloader()))      # x: (64, 1, 8, 8) normalised, y: (64,)

Datasets live under `data.root`, else `$VISIONBENCH_DATA`, else `./data` (docs/data.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from ..config import AugmentConfig, DataConfig, block
from .base import VisionDataModule
from .cifar10 import CIFAR10DataModule
from .datasets import DATA_ENV_VAR, DatasetNotFoundError
from .digits import DigitsDataModule
from .fashion_mnist import FashionMNISTDataModule
from .folder import FolderDataModule
from .imagenet import ImageNetDataModule
from .synthetic import SyntheticDataModule, missing, stand_in, stand_in_note
from .tiny_imagenet import TinyImageNetDataModule

DATAMODULES: dict[str, type[VisionDataModule]] = {
    cls.name: cls
    for cls in (
        CIFAR10DataModule,
        TinyImageNetDataModule,
        ImageNetDataModule,
        DigitsDataModule,
        FashionMNISTDataModule,
        SyntheticDataModule,
        FolderDataModule,
    )
}


def names() -> list[str]:
    """Known dataset names (`data.name`)."""
    return sorted(DATAMODULES)


def create_datamodule(
    data_cfg: Mapping | DataConfig | None,
    batch_size: int,
    seed: int = 0,
    *,
    test_in_val: bool = False,
    aug_seed: int | None = None,
) -> VisionDataModule:
    """Build the data module a recipe's `data:` block describes.

    Args:
        data_cfg: the `data:` block (dict or OmegaConf DictConfig; missing keys take
            the schema's defaults (visionbench/config/), unknown keys are an error), or a `DataConfig`.
        batch_size: per-process batch size.
        seed: the run's seed; fixes shuffling and augmentation, never the splits.
        aug_seed: the augmentation's own seed (train/seeds.py), when not `seed`.
        test_in_val: when there is a test split (`val_split > 0`), `val_dataloader()`
            returns `[val, test]`, so the test set is scored every epoch.

    Returns:
        A LightningDataModule with `num_classes`, `in_chans`, `img_size`, `mean`, `std`, `has_test`.

    Raises:
        ValueError: unknown dataset name or invalid settings.
        DatasetNotFoundError: the dataset is not on disk (a FileNotFoundError).
    """
    cfg = data_cfg if isinstance(data_cfg, DataConfig) else block("data", data_cfg)
    if cfg.name not in DATAMODULES:
        raise ValueError(f"unknown dataset data.name={cfg.name!r}; known: {', '.join(names())}")
    return DATAMODULES[cfg.name](cfg, batch_size=batch_size, seed=seed, test_in_val=test_in_val, aug_seed=aug_seed)


@contextlib.contextmanager
def standing_in(data_cfg: Mapping | DataConfig) -> Iterator[str | None]:
    """Inside the block, the dataset `data_cfg` names, when it is one of known shape (data/synthetic.py `SHAPES`)
    and not on disk, is built as a synthetic stand-in of its shape (`create_datamodule` gives it); yields the one
    line that says so, None where nothing stands in (the dataset is there, or of no known shape: its own errors
    stand). `visionbench estimate` prices a sweep in it before the dataset is downloaded."""
    cfg = data_cfg if isinstance(data_cfg, DataConfig) else block("data", data_cfg)
    real = DATAMODULES.get(cfg.name)
    if real is None or not missing(real, cfg):
        yield None
        return
    DATAMODULES[cfg.name] = stand_in(real)
    try:
        yield stand_in_note(cfg)
    finally:
        DATAMODULES[cfg.name] = real


__all__ = [
    "AugmentConfig",
    "DATAMODULES",
    "DATA_ENV_VAR",
    "DataConfig",
    "DatasetNotFoundError",
    "VisionDataModule",
    "create_datamodule",
    "names",
    "standing_in",
]
