"""Random images and labels, for speed tests (`data.name=synthetic`, sizes in `data.synthetic`).

    visionbench bench ... data.name=synthetic data.synthetic.img_size=224 data.synthetic.num_classes=1000

Uniform uint8 pixels and balanced labels (every class present, so val_split works), drawn
from the run's seed: the same seed gives the same data. Train and val are independent draws.

A stand-in of a known dataset that is not on disk (`stand_in`, `SHAPES`): its data module with random images of
the dataset's shape (images, side, classes, channels) in place of its files, so that `visionbench estimate` prices
a sweep before the download (data.standing_in).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

from ..config import DataConfig
from .base import VisionDataModule
from .datasets import ArrayDataset, DatasetNotFoundError, root_dir


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


# ---- a stand-in of a dataset that is not on disk (`visionbench estimate`: the price before the download) ----------
@dataclasses.dataclass(frozen=True)
class Shape:
    """What a dataset holds: its title, train and official test/val images, stored side (None: sizes vary), classes
    and channels, and what its official held-out set is called."""

    title: str
    train: int
    test: int
    side: int | None
    classes: int
    chans: int = 3
    test_name: str = "test"


SHAPES = {
    "cifar10": Shape("CIFAR-10", 50_000, 10_000, 32, 10),
    "fashion_mnist": Shape("Fashion-MNIST", 60_000, 10_000, 28, 10, chans=1),
    "tiny_imagenet": Shape("Tiny ImageNet", 100_000, 10_000, 64, 200, test_name="val"),
    "imagenet": Shape("ImageNet", 1_281_167, 50_000, None, 1000, test_name="val"),
}
VARYING_SIDE = 384  # a stand-in image of a dataset whose sizes vary (ImageNet's average is about 400 x 350)


class RandomImages(Dataset):
    """`n` uint8 images (PIL, L or RGB) of `side` px drawn one by one as they are asked for, from (seed, split,
    index): a stand-in of a dataset of image files, never held in memory. Balanced labels, as `load_source` gives."""

    def __init__(self, n: int, side: int, chans: int, classes: int, seed: int, split: int):
        self.side, self.chans, self.key = side, chans, (seed, split)
        self.targets = np.random.default_rng([seed, split]).permutation(np.arange(n) % classes)

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        rng = np.random.default_rng([*self.key, int(index)])
        pixels = rng.integers(0, 256, size=(self.side, self.side, self.chans), dtype=np.uint8)
        return Image.fromarray(pixels[..., 0] if self.chans == 1 else pixels), int(self.targets[index])


def shape_line(shape: Shape) -> str:
    """`50,000 train images 32×32, 10,000 test, 10 classes`."""
    size = f"{shape.side}×{shape.side}" if shape.side else f"of varying size (drawn at {VARYING_SIDE}×{VARYING_SIDE})"
    gray = ", grayscale" if shape.chans == 1 else ""
    return f"{shape.train:,} train images {size}{gray}, {shape.test:,} {shape.test_name}, {shape.classes} classes"


def stand_in(cls: type[VisionDataModule]) -> type[VisionDataModule]:
    """The data module `cls` (a dataset of `SHAPES`) with synthetic images of its shape in place of its files: its
    splits, limits, transforms, samplers and loaders as the real one's, nothing read from disk or downloaded.
    A dataset held in memory (CIFAR-10, Fashion-MNIST) is drawn whole, as it would be read; one of image files,
    image by image (`RandomImages`)."""
    shape = SHAPES[cls.name]

    class StandIn(cls):
        def check(self) -> None:
            self.num_classes = shape.classes

        def prepare_data(self) -> None:  # no download
            pass

        def load_source(self, train: bool) -> Dataset:
            n, side, split = shape.train if train else shape.test, shape.side or VARYING_SIDE, 0 if train else 1
            if not self.in_memory:
                return RandomImages(n, side, shape.chans, shape.classes, self.seed, split)
            rng = np.random.default_rng([self.seed, split])
            images = rng.integers(0, 256, size=(n, side, side, shape.chans), dtype=np.uint8)
            return ArrayDataset(images, rng.permutation(np.arange(n) % shape.classes))

        def data_files(self) -> list:
            return []

        def data_digest(self) -> dict:
            return {"of": f"synthetic stand-in of {cls.name}", "shape": dataclasses.asdict(shape)}

    StandIn.__name__ = StandIn.__qualname__ = f"StandIn{cls.__name__}"
    return StandIn


def missing(cls: type[VisionDataModule], cfg: DataConfig) -> bool:
    """Whether `cls`'s dataset (one of `SHAPES`) is not on disk where `cfg` says (a download it would do aside)."""
    if cls.name not in SHAPES:
        return False
    try:
        cls(dataclasses.replace(cfg, download=False), batch_size=1)
    except DatasetNotFoundError:
        return True
    except ValueError:  # there, but unusable: the real module says so in its own words
        return False
    return False


def stand_in_note(cfg: DataConfig) -> str:
    """The one line an estimate priced on a stand-in prints."""
    shape = SHAPES[cfg.name]
    return (
        f"{shape.title} not found under {root_dir(cfg)}: priced on a synthetic stand-in of its shape "
        f"({shape_line(shape)}; the recipe's splits and transforms); timing of decoding/loading from disk not included"
    )
