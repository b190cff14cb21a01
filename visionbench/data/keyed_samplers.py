"""Training samplers that yield `SampleKey`s (index, epoch, position) instead of bare indices.

The key carries the epoch into the loader workers with each index, so a worker can seed the
sample's augmentation from (seed, epoch, position) (`seeding.py`, `datasets.TransformSubset`).
The epoch rides along with the index rather than living on the dataset because the dataset
object lives in the worker processes: with `persistent_workers` (on whenever `num_workers > 0`)
they keep the copy made when they started, so an epoch set on the main process's dataset would
never reach them; the indices, though, are sent to them every epoch.

The position is the sample's place in the epoch's global order, before it is split across DDP
ranks: every sampler here hands rank r the positions r, r + world, r + 2 world, ... Each class is
the `DistributedSampler` (or repeated-augmentation sampler) of the same name, with the same order
and length, so Lightning, which keeps `DistributedSampler`s under DDP, keeps these too.
"""

from __future__ import annotations

from collections.abc import Iterator

from torch.utils.data.distributed import DistributedSampler

from .loading import ExpandedRepeatAugSampler, RepeatAugSampler
from .seeding import SampleKey


class EpochKeys:
    """Mixin for a rank-strided sampler: remembers the epoch `set_epoch` was given (Lightning
    calls it before each epoch, a resumed run included) and keys each index with it."""

    key_epoch: int = 0

    def set_epoch(self, epoch: int) -> None:
        self.key_epoch = int(epoch)
        super().set_epoch(epoch)

    def __iter__(self) -> Iterator[SampleKey]:
        rank, world, epoch = int(self.rank), int(self.num_replicas), self.key_epoch
        for i, index in enumerate(super().__iter__()):
            yield SampleKey(int(index), epoch, rank + i * world)


class KeyedDistributedSampler(EpochKeys, DistributedSampler):
    """torch's `DistributedSampler` (shuffle seeded with seed + epoch), yielding keys."""


class KeyedRepeatAugSampler(EpochKeys, RepeatAugSampler):
    """`loading.RepeatAugSampler` (DeiT's repeated augmentation), yielding keys."""


class KeyedExpandedRepeatAugSampler(EpochKeys, ExpandedRepeatAugSampler):
    """`loading.ExpandedRepeatAugSampler` (an epoch of K x N samples), yielding keys."""
