"""Per-sample augmentation seeds: a sample's randomness is a function of (seed, epoch, position).

A training sample is named by a `SampleKey`: its dataset index, the epoch, and its position in
that epoch's global sample order (before the order is sharded across DDP ranks). Its augmentation
draws from RNGs seeded with `sample_seed(seed, epoch, position)`, so it is the same whatever
process computes it: the main process (`num_workers=0`), any of any number of loader workers,
any DDP rank, a fresh process after a resume. Two copies of one image in an epoch (repeated
augmentation) sit at different positions and so get different augmentations.

    with seeded_rngs(sample_seed(seed, epoch, position)):
        x = transform(img)          # torchvision/timm transforms draw from the global RNGs

A batch seeds each of its samples with `seed_rngs` inside one `preserved_rngs` block.

`sample_seeds` is the vectorised form, for code that seeds a batch at once (e.g. on device).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import get_worker_info

_MASK64 = (1 << 64) - 1


class SampleKey(NamedTuple):
    """What a keyed sampler yields and a seeded dataset's `__getitem__` takes (docs/data.md)."""

    index: int  # which sample of the dataset
    epoch: int  # the training epoch (0-based, as Lightning's `set_epoch`)
    position: int  # the sample's place in the epoch's global order, over all DDP ranks


_GAMMA, _M1, _M2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _splitmix64(x: int) -> int:
    """SplitMix64's finaliser (Steele et al. 2014) on a 64-bit int: a bijective, well-mixed hash."""
    x = (x + _GAMMA) & _MASK64
    x = ((x ^ (x >> 30)) * _M1) & _MASK64
    x = ((x ^ (x >> 27)) * _M2) & _MASK64
    return x ^ (x >> 31)


def _splitmix64_array(x: np.ndarray) -> np.ndarray:
    """`_splitmix64` on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(_GAMMA)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(_M1)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(_M2)
        return x ^ (x >> np.uint64(31))


def _run_epoch_hash(seed: int, epoch: int) -> int:
    return _splitmix64(_splitmix64(int(seed) & _MASK64) ^ (int(epoch) & _MASK64))


def sample_seed(seed: int, epoch: int, position: int) -> int:
    """The 64-bit seed of the sample at `position` of epoch `epoch` of the run seeded `seed`.

    A chained hash of the three numbers: distinct triples give unrelated seeds (seed s, epoch e+1
    is not seed s+1, epoch e, as it would be under a `seed + epoch` rule).
    """
    return _splitmix64(_run_epoch_hash(seed, epoch) ^ (int(position) & _MASK64))


def sample_seeds(seed: int, epoch: int, positions) -> np.ndarray:
    """`sample_seed` of many positions at once (uint64 array), e.g. to seed a batch on device."""
    pos = np.asarray(positions, dtype=np.int64).astype(np.uint64)
    return _splitmix64_array(np.uint64(_run_epoch_hash(seed, epoch)) ^ pos)


def sample_uniforms(seed: int, epoch: int, positions, stream: int) -> np.ndarray:
    """Uniform floats in [0, 1) (float64, 32 random bits each), one per position, from (seed, epoch,
    position) and `stream` (a small int: one independent stream per kind of draw, e.g. crop row, column, flip)."""
    keys = sample_seeds(seed, epoch, positions) ^ np.uint64(stream)
    return (_splitmix64_array(keys) >> np.uint64(32)).astype(np.float64) / 2.0**32


def seed_rngs(seed: int) -> None:
    """Seed Python's `random`, NumPy's global RNG and torch's CPU generator from one 64-bit seed.

    These are the three RNGs image transforms draw from (timm: `random` and `numpy`; torchvision
    and timm's RandomErasing: torch). Not `torch.manual_seed`: that would reseed CUDA's too.
    """
    seed = int(seed) & _MASK64
    random.seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)
    torch.default_generator.manual_seed(seed)


@contextmanager
def preserved_rngs() -> Iterator[None]:
    """Restore the states of the three global RNGs of `seed_rngs` after the block.

    In the main process (`num_workers=0`) this keeps per-sample seeding from shifting the
    process's own stream (dropout, Mixup), so training is the same as with workers. A loader
    worker draws from them for nothing else, so there nothing is saved (saving NumPy's state
    costs ~0.1 ms: once per batch, not per sample).
    """
    if get_worker_info() is not None:
        yield
        return
    saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.set_rng_state(saved[2])


@contextmanager
def seeded_rngs(seed: int) -> Iterator[None]:
    """The global RNGs seeded with `seed` for the block, then restored (`preserved_rngs`)."""
    with preserved_rngs():
        seed_rngs(seed)
        yield
