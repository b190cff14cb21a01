"""visionbench.data: every dataset from tiny fixtures in the exact on-disk formats, offline.

.venv/bin/python -m pytest tests/test_data.py -q
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image
from timm.data.auto_augment import RandAugment
from timm.data.distributed_sampler import RepeatAugSampler as TimmRepeatAugSampler
from timm.data.random_erasing import RandomErasing
from timm.data.transforms import RandomResizedCropAndInterpolation
from torch.utils.data.distributed import DistributedSampler
from torchvision import transforms as T

from visionbench import data
from visionbench.data.loading import RepeatAugSampler

from .fixtures import CIFAR_TEST_PER_CLASS, CIFAR_TRAIN_PER_CLASS, TINY_WNIDS, cifar_pixel, colour


def make(cfg: dict, batch_size: int = 8, seed: int = 0) -> data.VisionDataModule:
    return data.create_datamodule(cfg, batch_size=batch_size, seed=seed)


# ---- CIFAR-10 --------------------------------------------------------------------------
def test_cifar10_shapes_labels_normalisation(cifar_root):
    dm = make({"name": "cifar10", "root": str(cifar_root)})
    assert (dm.num_classes, dm.in_chans, dm.img_size) == (10, 3, 32)
    assert dm.mean == (0.4914, 0.4822, 0.4465) and dm.std == (0.2023, 0.1994, 0.2010)
    assert not dm.has_test and dm.test_dataloader() is None
    assert len(dm.train_set) == 50 * CIFAR_TRAIN_PER_CLASS and len(dm.val_set) == 10 * CIFAR_TEST_PER_CLASS
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (8, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    # val = the official test batch; a constant pixel v becomes (v/255 - mean) / std per channel
    for i in (0, 7, len(dm.val_set) - 1):
        img, label = dm.val_set[i]
        k = i % CIFAR_TEST_PER_CLASS
        expected = (cifar_pixel(label, 15 + k) / 255 - torch.tensor(dm.mean)) / torch.tensor(dm.std)
        assert label == i // CIFAR_TEST_PER_CLASS
        torch.testing.assert_close(img[:, 5, 9], expected.float())
    assert dm.val_set.source.classes[:2] == ["airplane", "automobile"]


def test_cifar10_missing_names_root_and_fix(tmp_path, monkeypatch):
    monkeypatch.delenv(data.DATA_ENV_VAR, raising=False)
    with pytest.raises(FileNotFoundError) as err:
        make({"name": "cifar10", "root": str(tmp_path / "nowhere")})
    msg = str(err.value)
    assert isinstance(err.value, data.DatasetNotFoundError)
    assert "data.root" in msg and str(tmp_path / "nowhere" / "cifar-10-batches-py") in msg
    assert "data.download=true" in msg and "VISIONBENCH_DATA" in msg
    # download requested: no error at construction (prepare_data would fetch it)
    make({"name": "cifar10", "root": str(tmp_path), "download": True})


def test_root_from_env_var(cifar_root, monkeypatch):
    monkeypatch.setenv(data.DATA_ENV_VAR, str(cifar_root))
    dm = make({"name": "cifar10"})
    assert dm.root == cifar_root.resolve() and dm.train_set is None  # nothing loaded before setup
    dm.setup()
    assert len(dm.train_set) == 100


def test_val_split_stratified_fixed_across_seeds(cifar_root):
    cfg = {"name": "cifar10", "root": str(cifar_root), "val_split": 0.2}
    a, b = make(cfg, seed=0), make(cfg, batch_size=4, seed=3)
    a.setup(), b.setup()
    assert a.has_test and b.has_test
    np.testing.assert_array_equal(a.val_set.indices, b.val_set.indices)
    assert Counter(a.val_set.targets.tolist()) == {c: 2 for c in range(10)}  # 20 % of 10 per class
    assert not set(a.val_set.indices) & set(a.train_set.indices)
    assert len(a.train_set) + len(a.val_set) == 100
    assert len(a.test_set) == 30 and a.test_set.source is not a.val_set.source  # official test batch
    assert a.test_dataloader() is not None
    both = make(cfg, seed=0)
    both.test_in_val = True
    val, test = both.val_dataloader()
    assert (len(val.dataset), len(test.dataset)) == (20, 30)
    # the held-out part is evaluated with the eval transform even when training is augmented
    c = make({**cfg, "augment": {"crop_pad": 4, "hflip": 0.5}})
    c.setup()
    assert not any(isinstance(t, T.RandomCrop) for t in c.val_set.transform.transforms)


def test_limits(cifar_root):
    dm = make({"name": "cifar10", "root": str(cifar_root), "limit_train": 10, "limit_val": 5, "val_split": 0.2})
    dm.setup()
    assert len(dm.train_set) == 10 and sorted(dm.train_set.targets.tolist()) == list(range(10))
    assert len(dm.val_set) == 5 and len(dm.test_set) == 5
    again = make({"name": "cifar10", "root": str(cifar_root), "limit_train": 10, "val_split": 0.2}, seed=7)
    again.setup()
    np.testing.assert_array_equal(dm.train_set.indices, again.train_set.indices)


def test_same_seed_same_batches(cifar_root):
    plain = {"name": "cifar10", "root": str(cifar_root)}
    order = lambda seed: [y.tolist() for _, y in make(plain, seed=seed).train_dataloader()]  # noqa: E731
    assert order(0) == order(0) and order(0) != order(1)
    # the order is a function of (seed, epoch): a resumed run's loader repeats epoch k's order
    loaders = [make(plain, seed=0).train_dataloader() for _ in range(2)]
    loaders[0].sampler.set_epoch(1)
    epoch1 = [y.tolist() for _, y in loaders[0]]
    assert epoch1 != order(0)
    loaders[1].sampler.set_epoch(1)
    assert [y.tolist() for _, y in loaders[1]] == epoch1
    # augmented, in worker processes: crops/flips (torch RNG) and RandAugment/erasing (python RNG)
    aug = {
        **plain,
        "num_workers": 2,
        "augment": {"crop_pad": 4, "hflip": 0.5, "auto_augment": "rand-m9-mstd0.5-inc1", "re_prob": 0.5},
    }
    batches = []
    for seed in (0, 0, 1):
        loader = make(aug, batch_size=16, seed=seed).train_dataloader()
        assert loader.persistent_workers and loader.worker_init_fn is not None
        assert loader.pin_memory == torch.cuda.is_available()
        batches.append(next(iter(loader))[0])
    assert torch.equal(batches[0], batches[1]) and not torch.equal(batches[0], batches[2])


# ---- augmentation --------------------------------------------------------------------------
def test_augment_pipelines(cifar_root):
    cfg = {
        "name": "cifar10",
        "root": str(cifar_root),
        "augment": {
            "crop_pad": 4,
            "hflip": 0.5,
            "auto_augment": "rand-m9-mstd0.5-inc1",
            "re_prob": 0.25,
            "re_mode": "pixel",
        },
    }
    dm = make(cfg)
    dm.setup()
    kinds = [type(t) for t in dm.train_set.transform.transforms]
    assert kinds[:3] == [T.RandomCrop, T.RandomHorizontalFlip, RandAugment] and kinds[-1] is RandomErasing
    assert dm.train_set.transform.transforms[0].padding == 4
    assert dm.train_set.transform.transforms[-1].mode == "pixel"
    assert dm.train_set[0][0].shape == (3, 32, 32)
    # ImageNet style: timm's random-resized-crop; 'rand-n2-m9' = 2 ops
    dm = make(
        {
            "name": "cifar10",
            "root": str(cifar_root),
            "img_size": 48,
            "augment": {"scale": [0.35, 1.0], "hflip": 0.5, "auto_augment": "rand-n2-m9"},
        }
    )
    dm.setup()
    tfs = dm.train_set.transform.transforms
    assert isinstance(tfs[0], RandomResizedCropAndInterpolation) and tfs[0].scale == (0.35, 1.0)
    assert [t.num_layers for t in tfs if isinstance(t, RandAugment)] == [2]
    assert dm.train_set[0][0].shape == (3, 48, 48) and dm.val_set[0][0].shape == (3, 48, 48)
    with pytest.raises(ValueError, match="alternatives"):
        make({"name": "cifar10", "root": str(cifar_root), "augment": {"crop_pad": 4, "scale": [0.5, 1.0]}})


def test_randaugment_inc1_survives_zero_bit_posterize():
    from visionbench.data.transforms import auto_augment

    ra = auto_augment("rand-m10-inc1", 32, (0.5, 0.5, 0.5))  # magnitude 10: posterize keeps 0 bits
    op = next(op for op in ra.ops if op.name == "PosterizeIncreasing")
    op.prob = 1.0
    out = op(Image.new("RGB", (32, 32), (200, 100, 50)))
    assert np.asarray(out).max() == 0


def test_repeated_aug_sampler(cifar_root):
    dm = make({"name": "cifar10", "root": str(cifar_root), "augment": {"repeated_aug": 3}}, seed=5)
    loader = dm.train_dataloader()
    sampler = loader.sampler
    assert isinstance(sampler, TimmRepeatAugSampler) and sampler.num_repeats == 3
    # a DistributedSampler, so Lightning's DDP set-up keeps it instead of wrapping it
    assert isinstance(sampler, DistributedSampler) and (sampler.num_replicas, sampler.rank) == (1, 0)
    # three ranks together see every image three times, each rank about one epoch's worth
    ranks = [list(RepeatAugSampler(dm.train_set, num_replicas=3, rank=r, num_repeats=3, seed=5)) for r in range(3)]
    assert all(len(r) == 34 for r in ranks)  # ceil(100 / 3)
    assert all(max(Counter(r).values()) == 1 for r in ranks)  # the copies of an image go to different ranks
    copies = Counter(i for r in ranks for i in r)
    assert set(copies.values()) == {3} and len(copies) == 34
    # the shuffle follows the seed and the epoch
    other = RepeatAugSampler(dm.train_set, num_replicas=1, rank=0, num_repeats=3, seed=6)
    assert list(sampler) != list(other)
    first = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) != first


# ---- Tiny ImageNet and ImageNet ------------------------------------------------------------
def test_tiny_imagenet_layout_and_label_mapping(tiny_root):
    dm = make({"name": "tiny_imagenet", "root": str(tiny_root), "val_split": 0.0})
    assert (dm.num_classes, dm.img_size, dm.in_chans) == (4, 64, 3)
    assert dm.classes == sorted(TINY_WNIDS)
    dm.setup()
    assert len(dm.train_set) == 20 and len(dm.val_set) == 8
    x, y = next(iter(dm.val_dataloader()))
    assert x.shape == (8, 3, 64, 64)

    def class_of_image(img: torch.Tensor) -> int:
        rgb = (img[:, 32, 32] * torch.tensor(dm.std) + torch.tensor(dm.mean)) * 255
        return int(np.argmin([np.abs(np.subtract(colour(c), rgb.numpy())).sum() for c in range(4)]))

    # a val image's annotation label is the class index of the train folder with its colour
    for i in range(1, len(dm.val_set)):  # 0 is the grayscale one
        img, label = dm.val_set[i]
        assert label == sorted(TINY_WNIDS).index(TINY_WNIDS[i % 4]) == class_of_image(img)
    for i in range(0, len(dm.train_set), 5):
        img, label = dm.train_set[i]
        assert label == class_of_image(img)
    assert dm.val_set[0][0].shape == (3, 64, 64)


def test_imagenet_folder(imagenet_root):
    dm = make({"name": "imagenet", "root": str(imagenet_root)}, batch_size=2)
    assert (dm.num_classes, dm.img_size, dm.in_chans) == (3, 224, 3)
    dm.setup()
    tfs = dm.val_set.transform.transforms
    assert isinstance(tfs[0], T.Resize) and tfs[0].size == 256 and tfs[1].size == (224, 224)
    assert dm.val_set[0][0].shape == (3, 224, 224)
    assert sorted(set(dm.val_set.targets.tolist())) == [0, 2]  # class 1 missing from val, 2 stays 2
    assert Counter(dm.train_set.targets.tolist()) == {0: 3, 1: 3, 2: 3}
    small = make(
        {
            "name": "imagenet",
            "root": str(imagenet_root / "imagenet"),
            "img_size": 32,
            "augment": {"scale": [0.08, 1.0], "hflip": 0.5},
        },
        batch_size=4,
    )
    x, y = next(iter(small.train_dataloader()))
    assert x.shape == (4, 3, 32, 32)
    with pytest.raises(data.DatasetNotFoundError, match="data.root"):
        make({"name": "imagenet", "root": str(imagenet_root / "missing")})


# ---- digits and synthetic --------------------------------------------------------------------
def test_digits_split_sizes_and_values():
    dm = make({"name": "digits"}, batch_size=64)
    assert (dm.num_classes, dm.in_chans, dm.img_size, dm.has_test) == (10, 1, 8, False)
    dm.setup()
    assert (len(dm.train_set), len(dm.val_set)) == (1437, 360)  # 1,797 images, 20 % test
    assert min(Counter(dm.val_set.targets.tolist()).values()) >= 34  # stratified: ~36 per class
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (64, 1, 8, 8)
    assert x.min().item() == pytest.approx((0 - 0.3053) / 0.3759, abs=1e-4)  # blank pixels
    assert x.max().item() == pytest.approx((1 - 0.3053) / 0.3759, abs=1e-4)  # value 16 -> 1.0
    held = make({"name": "digits", "val_split": 0.2, "img_size": 16}, batch_size=64)
    held.setup()
    assert held.has_test and len(held.train_set) + len(held.val_set) == 1437 and len(held.test_set) == 360
    np.testing.assert_array_equal(held.test_set.targets, dm.val_set.targets)  # same fixed test split
    assert held.train_set[0][0].shape == (1, 16, 16)


def test_synthetic_is_deterministic_and_sized():
    cfg = {
        "name": "synthetic",
        "synthetic": {"num_train": 40, "num_val": 12, "num_classes": 4, "img_size": 16, "in_chans": 3},
    }
    a, b, c = make(cfg, seed=1), make(cfg, seed=1), make(cfg, seed=2)
    assert (a.num_classes, a.in_chans, a.img_size) == (4, 3, 16)
    xa, ya = next(iter(a.train_dataloader()))
    xb, yb = next(iter(b.train_dataloader()))
    assert xa.shape == (8, 3, 16, 16) and torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(xa, next(iter(c.train_dataloader()))[0])
    assert len(a.val_set) == 12


# ---- config handling ----------------------------------------------------------------------------
def test_config_dictconfig_and_errors(cifar_root):
    cfg = OmegaConf.create(
        {
            "name": "cifar10",
            "root": str(cifar_root),
            "mean": [0.5, 0.5, 0.5],
            "std": [0.25, 0.25, 0.25],
            "augment": {"hflip": 0.5},
        }
    )
    dm = make(cfg)
    assert dm.mean == (0.5, 0.5, 0.5) and dm.std == (0.25, 0.25, 0.25)
    with pytest.raises(ValueError, match="data.augment.flip"):
        make({"name": "cifar10", "augment": {"flip": 0.5}})
    with pytest.raises(ValueError, match="known: .*digits"):
        make({"name": "mnist"})
    with pytest.raises(ValueError, match="channels"):
        make({"name": "digits", "mean": [0.5, 0.5, 0.5]})
    with pytest.raises(ValueError, match="val_split"):
        make({"name": "digits", "val_split": 1.0})


def test_lightning_trainer_runs_the_datamodule():
    import lightning as L
    from torch import nn

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))

        def training_step(self, batch, _):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def validation_step(self, batch, _, dataloader_idx=0):
            self.log("loss", nn.functional.cross_entropy(self.net(batch[0]), batch[1]))

        test_step = validation_step

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    dm = data.create_datamodule(
        {"name": "digits", "val_split": 0.2, "augment": {"repeated_aug": 2}}, batch_size=32, seed=0, test_in_val=True
    )
    trainer = L.Trainer(
        max_epochs=1,
        limit_train_batches=3,
        limit_val_batches=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(Tiny(), datamodule=dm)
    assert isinstance(trainer.train_dataloader.sampler, RepeatAugSampler)
    assert len(trainer.val_dataloaders) == 2  # [held-out val, official test]
    trainer.test(Tiny(), datamodule=dm, verbose=False)


def test_worker_seeds_mix_in_rank():
    import random

    from visionbench.data.loading import seed_worker

    def draws(rank: int) -> tuple[float, float, float]:
        torch.manual_seed(1234)  # what torch sets in a worker: base_seed + worker_id
        seed_worker(0, rank=rank)
        return random.random(), float(np.random.rand()), torch.rand(1).item()

    assert draws(0) == draws(0) and all(a != b for a, b in zip(draws(0), draws(1)))
