"""DataLoaders that give the same batches for the same seed: seeded order, seeded workers.

- Training order comes from a sampler seeded with (seed, epoch) (see `base.train_dataloader`);
  the loader's `torch.Generator`, seeded with the run's seed, gives the workers' base seed.
- Each worker seeds `random`, `numpy` and `torch` from its torch seed and the process rank, as
  augmentations draw from all three: timm's RandAugment picks its ops with `numpy` and draws
  probabilities and magnitude noise from `random`; timm's RandomErasing draws boxes from `random`
  and per-pixel noise from `torch`; torchvision's crops, flips and RandAugment draw from `torch`.
  With `num_workers=0` augmentation runs in the main process and follows its global seed, which
  `train.run` sets with `lightning.seed_everything(seed)`.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Iterator

import numpy as np
import torch
from timm.data.distributed_sampler import RepeatAugSampler as _TimmRepeatAugSampler
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data.distributed import DistributedSampler


def seed_worker(worker_id: int, rank: int = 0) -> None:
    """`worker_init_fn`: derive the worker's random/numpy/torch seeds from its torch seed and rank.

    torch already sets `initial_seed() = base_seed + worker_id`, with `base_seed` drawn from
    the loader's generator; mixing in the rank keeps DDP ranks from augmenting in lockstep.
    """
    state = np.random.SeedSequence([torch.initial_seed(), rank]).generate_state(2, dtype=np.uint64)
    random.seed(int(state[0]))
    np.random.seed(int(state[0] % 2**32))
    torch.manual_seed(int(state[1] % 2**63))


class RepeatAugSampler(_TimmRepeatAugSampler, DistributedSampler):
    """timm's repeated-augmentation sampler (DeiT), with a shuffle that depends on the run's seed.

    `data.augment.repeated_aug_epoch: deit`. Each image is repeated `num_repeats` times, the
    copies spread over ranks, and each rank yields about `len(dataset) / world` indices: an
    epoch keeps its usual length, so only about N / num_repeats distinct images are seen per
    epoch. `ExpandedRepeatAugSampler` is the 004 code's epoch instead.
    timm seeds the shuffle with the epoch only; here it is seeded with (seed, epoch) so that
    seeds of a sweep differ in data order too, as they do without repeated augmentation.

    It is also a `DistributedSampler` so that Lightning, which replaces any other sampler
    by a distributed one under DDP, leaves it alone: it shards per rank by itself.
    """

    _EPOCH_STRIDE = 1 << 20  # > any epoch count, so (seed, epoch) pairs never collide

    def __init__(self, dataset: Dataset, num_replicas: int, rank: int, num_repeats: float = 3, seed: int = 0):
        if float(num_repeats).is_integer():
            num_repeats = int(num_repeats)  # timm takes the fractional code path for any float
        _TimmRepeatAugSampler.__init__(
            self, dataset, num_replicas=num_replicas, rank=rank, shuffle=True, num_repeats=num_repeats
        )
        self.seed = int(seed)
        self.drop_last = False  # read by code that inspects DistributedSamplers
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        """Lightning calls this each epoch; timm's `__iter__` seeds its shuffle with `self.epoch`."""
        super().set_epoch(self.seed * self._EPOCH_STRIDE + int(epoch))


class ExpandedRepeatAugSampler(RepeatAugSampler):
    """Repeated augmentation whose epoch is `num_repeats` x N samples: every index exactly
    `num_repeats` times per epoch (`data.augment.repeated_aug_epoch: expand`, the default).

    This is the epoch of the authors' Tiny ImageNet sampler (004 code: `__len__` is
    N * num_repeats; 004 App G: each image 3 times per epoch, an epoch of 3 x 100k samples),
    so steps per epoch, warmup in steps and the EMA horizon are 3x those of a plain epoch.
    As there, the repeated index list is shuffled as a whole, so the copies of an image land
    in random batches; the shuffle is seeded with (seed, epoch) as in `RepeatAugSampler`.

    Under DDP the K*N indices are split across ranks like `DistributedSampler` does (rank r
    takes positions r, r + world, ...), so each rank yields ceil(K*N / world) of them and no
    index is lost. When K*N is not divisible by the world size, the list is padded by repeating
    its first few entries (as `DistributedSampler` pads), so a few indices are then seen
    K + 1 times; with one process, or K*N divisible by the world, there is no padding.
    """

    def __init__(self, dataset: Dataset, num_replicas: int, rank: int, num_repeats: int = 3, seed: int = 0):
        if not float(num_repeats).is_integer():
            raise ValueError(
                f"data.augment.repeated_aug must be an integer with repeated_aug_epoch=expand, "
                f"got {num_repeats!r} (fractional repeats: repeated_aug_epoch=deit)"
            )
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, num_repeats=int(num_repeats), seed=seed)
        # timm's __init__ already set num_samples = ceil(K*N / world), total_size = num_samples * world

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator()
        g.manual_seed(self.epoch)  # (seed, epoch), see RepeatAugSampler.set_epoch
        repeated = torch.arange(len(self.dataset)).repeat(self.num_repeats)
        indices = repeated[torch.randperm(len(repeated), generator=g)].tolist()
        padding = self.total_size - len(indices)  # pad to a multiple of the world size
        indices += (indices * math.ceil(padding / max(1, len(indices))))[:padding]
        return iter(indices[self.rank : self.total_size : self.num_replicas])


def make_loader(
    dataset: Dataset,
    batch_size: int,
    seed: int,
    num_workers: int,
    train: bool,
    sampler: Sampler | None = None,
    rank: int = 0,
) -> DataLoader:
    """A DataLoader with the project's conventions.

    Args:
        dataset: the (transformed) dataset.
        batch_size: samples per batch.
        seed: the run's seed; fixes shuffling and worker seeds.
        num_workers: loader worker processes (0 = main process).
        train: shuffle, and drop the last incomplete batch (timm's Mixup needs even batches)
            unless the epoch is shorter than one batch.
        sampler: replaces shuffling (e.g. `RepeatAugSampler`).
        rank: this process's global rank, mixed into worker seeds.

    Returns:
        The DataLoader; pinned memory only when CUDA is available.
    """
    generator = torch.Generator()
    generator.manual_seed(int(seed))
    epoch_len = len(sampler) if sampler is not None else len(dataset)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=train and sampler is None,
        sampler=sampler,
        num_workers=num_workers,
        pin_memory=torch.cuda.is_available(),
        persistent_workers=num_workers > 0,
        drop_last=train and epoch_len >= batch_size,
        generator=generator,
        worker_init_fn=functools.partial(seed_worker, rank=rank) if num_workers > 0 else None,
    )
