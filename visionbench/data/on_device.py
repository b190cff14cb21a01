"""`data.on_device=true`: the training set as one uint8 tensor on the training device, augmented there.

For datasets held in memory as arrays (CIFAR-10, Fashion-MNIST, digits, synthetic) the loader path
spends its time turning each sample into a PIL image and back; here the whole training set stays a
(N, C, H, W) uint8 tensor on the device and a batch is one gather: random crop with zero padding
(`data.augment.crop_pad`), horizontal flip (`data.augment.hflip`), then /255 and the recipe's
normalisation, in the distribution of the loader's transforms (`transforms.build_train_transform`:
torchvision's RandomCrop(img_size, padding) with fill 0, RandomHorizontalFlip(p), ToTensor, Normalize).

    batches = DeviceBatches(images, targets, sampler, batch_size=64, drop_last=True, augment=DeviceAugment(...))
    for x, y in batches: ...            # x: float (B, C, H, W) normalised, on batches.device

Order and randomness follow the loader path's rules (docs/data.md#determinism): the order is the keyed
sampler's (the same `KeyedDistributedSampler`, so the same order as the loader path for a (seed, epoch),
and Lightning advances it with `set_epoch`), and a sample's crop offsets and flip are a hash of
(seed, epoch, position) (`seeding.sample_uniforms`: one SplitMix64 round per draw), so they do not
depend on the batch size, the device, the DDP rank or a resume. They are not the very numbers the
loader path draws (those come from torch's CPU generator), only the same distribution.

`refusal` says, in one line, why a config cannot use this path (other augmentations, a resize, a
dataset read from files); the data module raises it at construction, before any training.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..config import DataConfig
from .seeding import sample_uniforms
from .transforms import jitter_of

ARRAY_DATASETS = ("cifar10", "digits", "fashion_mnist", "synthetic")  # sources held as uint8 arrays
SUPPORTED = "data.augment.crop_pad, data.augment.hflip and the normalisation"
_DRAWS = {"dy": 0x1, "dx": 0x2, "flip": 0x3}  # one independent hash stream per draw


def refusal(cfg: DataConfig, native_size: int | None, img_size: int) -> str | None:
    """None when `data.on_device=true` can reproduce the config's training data; else the one line why."""
    if not cfg.on_device:
        return None
    if cfg.name not in (*ARRAY_DATASETS, "folder"):  # folder: its training images decoded into one array
        return (
            f"data.on_device=true needs a dataset held in memory as arrays ({', '.join(ARRAY_DATASETS)}), "
            f"not data.name={cfg.name}; set data.on_device=false"
        )
    if native_size != img_size:
        native = f"{native_size} px" if native_size else "images of more than one size (or not square)"
        return (
            f"data.on_device=true does not resize: data.img_size={img_size} differs from {cfg.name}'s "
            f"{native}; set data.img_size=null or data.on_device=false"
        )
    aug = cfg.augment
    unsupported = {
        "scale": aug.scale,
        "color_jitter": jitter_of(aug) if any(jitter_of(aug) or ()) else None,
        "auto_augment": aug.auto_augment,
        "re_prob": aug.re_prob or None,
        "repeated_aug": aug.repeated_aug if aug.repeated_aug != 1 else None,
    }
    for key, value in unsupported.items():
        if value is not None:
            shown = aug.color_jitter if key == "color_jitter" else value
            return (
                f"data.on_device=true cannot draw data.augment.{key}={shown}: it supports {SUPPORTED} only; "
                f"set data.on_device=false or drop data.augment.{key}"
            )
    return None


class DeviceAugment:
    """Per-sample crop-with-padding, flip and normalisation of a batch gathered from a uint8 tensor.

    Args:
        crop_pad: zero padding on each side of the random crop (0 = no crop).
        hflip: probability of a horizontal flip.
        mean, std: per-channel normalisation (after /255), as `transforms._normalize`.
        seed: the run's seed.
    """

    def __init__(self, crop_pad: int, hflip: float, mean: Sequence[float], std: Sequence[float], seed: int):
        self.crop_pad, self.hflip, self.seed = int(crop_pad), float(hflip), int(seed)
        self.mean, self.std = tuple(map(float, mean)), tuple(map(float, std))

    def draw(self, epoch: int, positions: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row offsets, column offsets, flips) of the samples at `positions` of `epoch`: offsets uniform in
        0..2*crop_pad of the padded image (torchvision's RandomCrop), flips with probability hflip."""
        span = 2 * self.crop_pad + 1
        dy = np.floor(sample_uniforms(self.seed, epoch, positions, _DRAWS["dy"]) * span).astype(np.int64)
        dx = np.floor(sample_uniforms(self.seed, epoch, positions, _DRAWS["dx"]) * span).astype(np.int64)
        flip = sample_uniforms(self.seed, epoch, positions, _DRAWS["flip"]) < self.hflip
        return dy, dx, flip

    def pad(self, images: torch.Tensor) -> torch.Tensor:
        """The uint8 (N, C, H, W) set padded with zeros once (RandomCrop's fill 0 before ToTensor)."""
        p = self.crop_pad
        return F.pad(images, (p, p, p, p)) if p else images

    def apply(
        self,
        padded: torch.Tensor,
        index: torch.Tensor,
        dy: torch.Tensor,
        dx: torch.Tensor,
        flip: torch.Tensor,
        size: int,
    ) -> torch.Tensor:
        """The normalised float batch (B, C, size, size): sample `index[b]` of the padded set, cropped at
        (dy[b], dx[b]) and mirrored where flip[b], in one gather. All tensors on `padded`'s device."""
        device = padded.device
        ar = torch.arange(size, device=device)
        rows = dy[:, None] + ar  # (B, H)
        cols = torch.where(flip[:, None], dx[:, None] + (size - 1) - ar, dx[:, None] + ar)  # (B, W)
        _, c, hp, wp = padded.shape
        chans = torch.arange(c, device=device)
        # one flat index and index_select: on a loaded 2-core CPU, tens of µs a digits batch where indexing
        # with four broadcast index tensors (aten::index on two threads) took 1-4 ms (docs/bench.md)
        flat = ((index[:, None, None, None] * c + chans[None, :, None, None]) * hp + rows[:, None, :, None]) * wp
        flat = flat + cols[:, None, None, :]
        x = padded.reshape(-1).index_select(0, flat.reshape(-1)).view(flat.shape)
        mean = torch.tensor(self.mean, device=device).view(1, -1, 1, 1)
        std = torch.tensor(self.std, device=device).view(1, -1, 1, 1)
        return x.float().div_(255).sub_(mean).div_(std)  # ToTensor's /255, then Normalize's sub_/div_


class DeviceBatches:
    """Training batches drawn on the device from a uint8 training set; iterable like a DataLoader.

    Args:
        images: uint8 (N, C, H, W) training images (any device; moved to `device` on first iteration).
        targets: int64 (N,) labels.
        sampler: a keyed sampler (yields `SampleKey`s); exposed as `.sampler` so Lightning's `set_epoch`
            reaches it, as it reaches a DataLoader's.
        batch_size: samples per batch.
        drop_last: drop the last incomplete batch (as `loading.make_loader` for training).
        augment: the crop/flip/normalisation.
        device: where the set lives and batches are made.
    """

    def __init__(
        self,
        images: torch.Tensor,
        targets: torch.Tensor,
        sampler,
        batch_size: int,
        drop_last: bool,
        augment: DeviceAugment,
        device: torch.device | str = "cpu",
    ):
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(f"expected uint8 images (N, C, H, W), got {images.dtype} {tuple(images.shape)}")
        self.images, self.targets, self.sampler = images, targets, sampler
        self.batch_size, self.drop_last, self.augment = int(batch_size), bool(drop_last), augment
        self.device = torch.device(device)
        self.size = int(images.shape[-1])
        self._padded: torch.Tensor | None = None

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def _on_device(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._padded is None or self._padded.device != self.device:
            self._padded = self.augment.pad(self.images.to(self.device))
            self.targets = self.targets.to(self.device)
        return self._padded, self.targets

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        padded, targets = self._on_device()
        keys = list(self.sampler)
        index = np.fromiter((k.index for k in keys), dtype=np.int64, count=len(keys))
        positions = np.fromiter((k.position for k in keys), dtype=np.int64, count=len(keys))
        dy, dx, flip = self.augment.draw(keys[0].epoch if keys else 0, positions)  # one epoch per pass
        drawn = [torch.from_numpy(a).to(self.device, non_blocking=True) for a in (index, dy, dx, flip)]
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            part = [a[start : start + self.batch_size] for a in drawn]
            x = self.augment.apply(padded, part[0], part[1], part[2], part[3], self.size)
            yield x, targets.index_select(0, part[0])
