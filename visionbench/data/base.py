"""`VisionDataModule`: splits, transforms and loaders common to every dataset.

A dataset module subclasses it, sets the class attributes (size, statistics, classes) and
implements `load_source(train)`; `check()` can fail early when files are missing. A dataset held in
a few files names them (`data_files`), so that a run records their digest (`data_digest`, data/digest.py);
one of image files is digested by its file list (`image_files`).

Split semantics (`data.val_split`):
- `> 0`: val = a stratified, fixed held-out part of train (model selection), test = the
  official test/val set, `has_test` is True;
- `== 0`: val = the official test/val set (as the papers report), no test split.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..config import DataConfig
from . import digest
from .datasets import TransformSubset, root_dir, root_source
from .keyed_samplers import KeyedDistributedSampler, KeyedExpandedRepeatAugSampler, KeyedRepeatAugSampler
from .loading import make_loader
from .on_device import DeviceAugment, DeviceBatches, refusal
from .splits import stratified_limit, stratified_split
from .transforms import build_eval_transform, build_train_transform, is_random


class VisionDataModule(L.LightningDataModule):
    """Base data module.

    Args:
        cfg: the validated `data:` block.
        batch_size: per-process batch size of every loader.
        seed: the run's seed (shuffle order, loader workers); splits do not depend on it.
        test_in_val: when `has_test`, `val_dataloader()` returns `[val, test]` (in that order).

    Attributes:
        num_classes, in_chans, img_size, mean, std: what the model and Mixup need.
        has_test: True when there is a test split apart from val (`val_split > 0`).
    """

    name: ClassVar[str] = ""
    native_size: ClassVar[int | None] = None  # side of the stored images; None = sizes vary
    default_img_size: ClassVar[int] = 224
    default_mean: ClassVar[tuple[float, ...]] = (0.485, 0.456, 0.406)
    default_std: ClassVar[tuple[float, ...]] = (0.229, 0.224, 0.225)
    in_memory: ClassVar[bool] = False  # small and decoded: cache deterministic transforms
    num_classes: int = 0
    in_chans: int = 3

    def __init__(
        self, cfg: DataConfig, batch_size: int, seed: int = 0, test_in_val: bool = False, aug_seed: int | None = None
    ):
        super().__init__()
        self.cfg = cfg
        self.batch_size = int(batch_size)
        self.seed = int(seed)  # the sampler's order (train/seeds.py: `order`)
        self.aug_seed = self.seed if aug_seed is None else int(aug_seed)  # every augmentation draw (`aug`)
        self.test_in_val = bool(test_in_val)
        self.root = root_dir(cfg)
        self.img_size = cfg.img_size or self.default_img_size
        self.mean = tuple(cfg.mean or self.default_mean)
        self.std = tuple(cfg.std or self.default_std)
        self.has_test = cfg.val_split > 0
        self.train_set: TransformSubset | None = None
        self.val_set: TransformSubset | None = None
        self.test_set: TransformSubset | None = None
        self._restored_epoch = 0  # from a resumed checkpoint: see `_next_epoch`
        self._device_set: tuple[torch.Tensor, torch.Tensor] | None = None  # data.on_device: (images, targets)
        why = refusal(cfg, self.native_size, self.img_size)  # data.on_device=true: what it cannot reproduce
        if why:
            raise ValueError(why)
        self.check()  # fail at construction, before a model is built, when data is missing
        for key, stats in (("mean", self.mean), ("std", self.std)):
            if len(stats) != self.in_chans:
                raise ValueError(f"data.{key} has {len(stats)} values, {self.name} has {self.in_chans} channels")

    # ---- what a dataset module provides -------------------------------------------
    def check(self) -> None:
        """Raise `DatasetNotFoundError` if the dataset is not on disk (and will not be downloaded)."""

    def load_source(self, train: bool) -> Dataset:
        """The untransformed official train (or test/val) set, with a `targets` array."""
        raise NotImplementedError

    def sources(self) -> tuple[Dataset, Dataset]:
        """The official train and test/val sets (`load_source`); ValueError, one line, when either holds no
        image: every split (train, val, test) needs one, or a run would score an empty set as 0 %."""
        train_src, official = self.load_source(train=True), self.load_source(train=False)
        for source, what in ((train_src, "training set"), (official, "test set")):
            if len(source) == 0:
                raise ValueError(
                    f"{self.name} at {self.root} (from {root_source(self.cfg)}): its official {what} "
                    "holds 0 images; every split (train, val, test) needs at least one image — replace "
                    "the files with a complete copy of the dataset"
                )
        return train_src, official

    def own_val_source(self) -> Dataset | None:
        """A model-selection set of the dataset's own, apart from train and the official test set (None: none)."""
        return None

    def summary_facts(self) -> dict:
        """What a run's summary.json records of the data (`dataset`; {}: nothing)."""
        return {}

    def data_files(self) -> list[Path]:
        """The files that hold the whole dataset, hashed by their contents for the data digest; [] for a dataset
        of image files (too many to hash on every run: `image_files` names them)."""
        return []

    def image_files(self) -> list[tuple[str, int]]:
        """(path, label) of every image file the set-up module reads: its sources' (`FileDataset`s)."""
        self._ensure_setup()
        sources = {id(s.source): s.source for s in (self.train_set, self.val_set, self.test_set) if s is not None}
        return [(p, int(t)) for src in sources.values() for p, t in zip(getattr(src, "paths", ()), src.targets)]

    def data_digest(self) -> dict:
        """What identifies the data a run read (summary.json `environment.data`): the digest of `data_files`'
        contents, else of the `image_files` list (data/digest.py)."""
        files = self.data_files()
        return digest.of_contents(files) if files else digest.of_listing(self.image_files())

    # ---- Lightning hooks ------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        """Load sources, split, cap and wrap them in transforms (once; every stage shares them)."""
        if self.train_set is not None:
            return
        cfg = self.cfg
        train_src, official = self.sources()
        train_idx, own_val = np.arange(len(train_src)), self.own_val_source()
        if own_val is not None:  # a dataset with its own val and test sets (data.name=folder with val/ and test/)
            val_part, test_part = (own_val, np.arange(len(own_val))), (official, np.arange(len(official)))
        elif self.has_test:
            train_idx, held_idx = stratified_split(train_src.targets, cfg.val_split)
            val_part, test_part = (train_src, held_idx), (official, np.arange(len(official)))
        else:
            val_part, test_part = (official, np.arange(len(official))), None
        train_idx = self._limit(train_src, train_idx, cfg.limit_train)

        native = self.native_size
        train_tf = build_train_transform(cfg.augment, self.img_size, self.mean, self.std, native)
        eval_tf = build_eval_transform(self.img_size, self.mean, self.std, native)
        # a training transform without randomness is as cacheable as the eval one
        cache_train = self.in_memory and not is_random(cfg.augment)
        # random transforms are seeded per sample from (seed, epoch, position): docs/data.md#determinism
        self.train_set = TransformSubset(train_src, train_idx, train_tf, cache=cache_train, seed=self.aug_seed)
        src, idx = val_part
        self.val_set = TransformSubset(src, self._limit(src, idx, cfg.limit_val), eval_tf, cache=self.in_memory)
        if test_part is not None:
            src, idx = test_part
            self.test_set = TransformSubset(src, self._limit(src, idx, cfg.limit_val), eval_tf, cache=self.in_memory)

    @staticmethod
    def _limit(source: Dataset, indices: np.ndarray, n: int | None) -> np.ndarray:
        if n is None:
            return indices
        return indices[stratified_limit(np.asarray(source.targets)[indices], n)]

    def _ensure_setup(self) -> None:
        # outside a Trainer (notebooks, tests) nobody calls the hooks for us
        if self.train_set is None:
            self.prepare_data()
            self.setup()

    def _world(self) -> tuple[int, int]:
        """(world size, global rank): from the Trainer if attached, else torch.distributed."""
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            return int(trainer.world_size), int(trainer.global_rank)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_world_size(), torch.distributed.get_rank()
        return 1, 0

    # ---- the epoch of the training sampler ------------------------------------------
    def _next_epoch(self) -> int:
        """The epoch the Trainer trains next: what Lightning passes to the sampler's `set_epoch`
        before each epoch (`fit_loop.epoch_progress.current.processed`), 0 outside a Trainer.

        The sampler is set to it as it is built, because a resumed run's first iterator exists
        before Lightning calls `set_epoch`, and a loader with workers draws its first batches of
        indices right then: the iterator is made when `trainer.estimated_stepping_batches` first
        builds the loader, in `configure_optimizers`, before the loop state is restored (and,
        Lightning >= 2.5.3, issue #21938, `setup_data` makes it before `set_epoch` anyway).
        The restored value comes from the checkpoint (`load_state_dict`), which Lightning loads
        into the data module before `configure_optimizers` (DDP, single device; not FSDP or DeepSpeed,
        which restore after setup).
        """
        loop = getattr(getattr(self, "trainer", None), "fit_loop", None)
        processed = int(loop.epoch_progress.current.processed) if loop is not None else 0
        return max(processed, self._restored_epoch)

    def state_dict(self) -> dict:
        """Saved in every checkpoint (Lightning's data-module hook): the epoch a resume trains first."""
        return {"train_epoch": self._next_epoch()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restored from the checkpoint a run resumes from, before the training loader is built."""
        self._restored_epoch = int(state_dict.get("train_epoch", 0))

    def train_dataloader(self) -> DataLoader | DeviceBatches:
        """Shuffled (or repeated-augmentation sampled) training batches.

        With `augment.repeated_aug: K > 1` an epoch is K x N samples (`repeated_aug_epoch: expand`,
        004 code) or N samples (`deit`); the Trainer's steps per epoch follow `len()` of this loader.
        The shuffle is a sampler seeded with (seed, epoch), which the Trainer advances with
        `set_epoch`: a run resumed at epoch k sees epoch k's order. The samplers yield
        `SampleKey`s (index, epoch, position), from which the training set seeds each sample's
        augmentation, so it does not depend on `num_workers`, the rank or a resume
        (`keyed_samplers.py`). All are `DistributedSampler`s that shard per rank, so Lightning
        keeps them under DDP. With `data.on_device=true` the same sampler drives `DeviceBatches`
        (`on_device.py`): the set lives on the Trainer's device and is augmented there.
        """
        self._ensure_setup()
        world, rank = self._world()
        aug = self.cfg.augment
        if aug.repeated_aug > 1:
            expand = aug.repeated_aug_epoch == "expand"
            sampler_cls = KeyedExpandedRepeatAugSampler if expand else KeyedRepeatAugSampler
            sampler = sampler_cls(
                self.train_set, num_replicas=world, rank=rank, num_repeats=aug.repeated_aug, seed=self.seed
            )
        else:
            sampler = KeyedDistributedSampler(
                self.train_set, num_replicas=world, rank=rank, shuffle=True, seed=self.seed
            )
        sampler.set_epoch(self._next_epoch())
        if self.cfg.on_device:
            return self._device_batches(sampler)
        return make_loader(
            self.train_set, self.batch_size, self.seed, self.cfg.num_workers, train=True, sampler=sampler, rank=rank
        )

    def _device_batches(self, sampler) -> DeviceBatches:
        """`DeviceBatches` over the training part, on the Trainer's device (CPU outside a Trainer); the
        uint8 tensor is built once and moved on the first iteration."""
        if self._device_set is None:
            ds = self.train_set
            images = np.asarray(getattr(ds.source, "images", None))
            if images.dtype != np.uint8 or images.ndim != 4:
                raise ValueError(f"data.on_device=true: {self.name}'s training source holds no uint8 image array")
            chw = torch.from_numpy(np.ascontiguousarray(images[ds.indices].transpose(0, 3, 1, 2)))
            self._device_set = chw, torch.as_tensor(ds.targets, dtype=torch.int64)
        trainer = getattr(self, "trainer", None)
        device = trainer.strategy.root_device if trainer is not None else torch.device("cpu")
        aug = self.cfg.augment
        augment = DeviceAugment(aug.crop_pad, aug.hflip, self.mean, self.std, self.aug_seed)
        images, targets = self._device_set
        return DeviceBatches(
            images,
            targets,
            sampler,
            self.batch_size,
            drop_last=len(sampler) >= self.batch_size,
            augment=augment,
            device=device,
        )

    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        """Model-selection set: held-out train part if `has_test`, else the official test/val set.

        With `test_in_val` (and `has_test`) it is `[val, test]`, so the test set is scored
        every epoch and the test accuracy at the best-val epoch can be reported.
        """
        self._ensure_setup()
        val = make_loader(self.val_set, self.batch_size, self.seed, self.cfg.num_workers, train=False)
        if self.test_in_val and self.test_set is not None:
            return [val, self.test_dataloader()]
        return val

    def test_dataloader(self) -> DataLoader | None:
        """The official test/val set when `has_test`; None otherwise (it is already val)."""
        self._ensure_setup()
        if self.test_set is None:
            return None
        return make_loader(self.test_set, self.batch_size, self.seed, self.cfg.num_workers, train=False)

    def __str__(self) -> str:
        # Lightning's __str__ builds every dataloader, i.e. loads the data just to print it
        return repr(self)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(root={str(self.root)!r}, classes={self.num_classes}, "
            f"img_size={self.img_size}, in_chans={self.in_chans}, has_test={self.has_test})"
        )
