"""`data.on_device=true` (data/on_device.py, docs/data.md): the training set as a uint8 tensor on
the device, cropped, flipped and normalised there in the loader path's distribution, in the loader path's
order, seeded per (seed, epoch, position), so a resumed run repeats the uninterrupted one."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from scipy import stats

from visionbench import data
from visionbench.config import AugmentConfig
from visionbench.data.on_device import DeviceAugment
from visionbench.data.seeding import sample_seed, seeded_rngs
from visionbench.data.transforms import build_train_transform

from .helpers import epoch_batches, metric_rows, sweep_small

AUG = {"crop_pad": 1, "hflip": 0.5}


def digits(on_device: bool, augment: dict | None = None, seed: int = 0) -> data.VisionDataModule:
    cfg = {"name": "digits", "val_split": 0.2, "on_device": on_device, "augment": augment or {}}
    return data.create_datamodule(cfg, batch_size=64, seed=seed)


def test_without_augmentation_the_batches_are_the_loader_paths_exactly():
    on, off = digits(True).train_dataloader(), digits(False).train_dataloader()
    assert len(on) == len(off) == 17
    for e in (0, 3):
        (x, y), (x0, y0) = epoch_batches(on, e), epoch_batches(off, e)
        assert torch.equal(y, y0) and torch.equal(x, x0)


def test_with_augmentation_the_order_is_the_loader_paths_and_draws_are_seeded_per_seed_and_epoch():
    on, off = digits(True, AUG).train_dataloader(), digits(False, AUG).train_dataloader()
    (x1, y1), (_, y0) = epoch_batches(on, 1), epoch_batches(off, 1)
    assert torch.equal(y1, y0)  # same order, hence the same labels per epoch
    again, _ = epoch_batches(on, 1)
    assert torch.equal(again, x1)  # one (seed, epoch): the same batches
    assert not torch.equal(epoch_batches(on, 2)[0], x1)  # another epoch: other draws
    assert not torch.equal(epoch_batches(digits(True, AUG, seed=1).train_dataloader(), 1)[0], x1)
    fresh = digits(True, AUG).train_dataloader()  # a fresh process (a resume) at epoch 1
    assert torch.equal(epoch_batches(fresh, 1)[0], x1)


def test_a_restored_data_module_draws_the_resumed_epoch():
    dm = digits(True, AUG)
    dm.load_state_dict({"train_epoch": 2})
    x, _ = zip(*dm.train_dataloader())  # no set_epoch: what Lightning iterates before it calls it
    assert torch.equal(torch.cat(x), epoch_batches(digits(True, AUG).train_dataloader(), 2)[0])


def _image(pad: int):
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)  # random: every crop/flip looks different
    mean, std = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)
    aug = DeviceAugment(pad, 0.5, mean, std, seed=0)
    padded = aug.pad(torch.from_numpy(img).permute(2, 0, 1)[None].contiguous())
    return img, aug, padded, mean, std


def _candidates(aug: DeviceAugment, padded: torch.Tensor, pad: int) -> dict[bytes, tuple[int, int, bool]]:
    """Every (dy, dx, flip) output of the image, keyed by its bytes."""
    span = 2 * pad + 1
    grid = [(dy, dx, f) for dy in range(span) for dx in range(span) for f in (False, True)]
    dy, dx, f = (torch.tensor(v) for v in zip(*grid))
    out = aug.apply(padded, torch.zeros(len(grid), dtype=torch.long), dy, dx, f, 8)
    return {o.numpy().tobytes(): g for o, g in zip(out, grid)}


def test_each_draw_is_the_torchvision_crop_and_flip_and_the_distribution_is_the_loader_paths():
    pad, n = 2, 1500
    img, aug, padded, mean, std = _image(pad)
    outputs = _candidates(aug, padded, pad)
    assert len(outputs) == 2 * (2 * pad + 1) ** 2

    # the loader path: torchvision's RandomCrop(padding) + flip + normalise, seeded per position
    transform = build_train_transform(AugmentConfig(crop_pad=pad, hflip=0.5), 8, mean, std, native_size=8)
    pil = Image.fromarray(img)
    loader = []
    for p in range(n):
        with seeded_rngs(sample_seed(0, 0, p)):
            x = transform(pil)
        loader.append(outputs[x.numpy().tobytes()])  # a KeyError here: a crop the device path cannot give
    dy, dx, flip = aug.draw(0, range(n))
    device = list(zip(dy.tolist(), dx.tolist(), flip.tolist()))

    for i, span in ((0, 5), (1, 5), (2, 2)):  # row offsets, column offsets, flips: loader vs device counts
        table = [
            [sum(c[i] == v for c in sample) for v in (range(span) if span > 2 else (False, True))]
            for sample in (loader, device)
        ]
        assert stats.chi2_contingency(table).pvalue > 0.01, table
        expected = [n / len(table[1])] * len(table[1])
        assert stats.chisquare(table[1], expected).pvalue > 0.01, table[1]


def test_a_resumed_on_device_run_repeats_the_uninterrupted_one(tmp_path, crash_in_epoch_3):
    args = ("recipe=digits_vgg4_aug", "data.on_device=true")
    crashed = sweep_small(tmp_path / "resumed", *args)
    assert crashed.status == "failed" and len(metric_rows(crashed.run_dir / "metrics.csv")) == 2  # killed after epoch 2
    crash_in_epoch_3()
    resumed = sweep_small(tmp_path / "resumed", *args)
    straight = sweep_small(tmp_path / "straight", *args)
    assert resumed.status == straight.status == "completed"
    expected = metric_rows(straight.run_dir / "metrics.csv")
    assert metric_rows(resumed.run_dir / "metrics.csv") == expected and len(expected) == 3


def test_an_unaugmented_on_device_run_trains_exactly_as_the_loader_path(tmp_path):
    on = sweep_small(tmp_path / "on", "recipe=digits_vgg4", "epochs=1", "data.on_device=true")
    off = sweep_small(tmp_path / "off", "recipe=digits_vgg4", "epochs=1")
    assert on.status == off.status == "completed"
    assert metric_rows(on.run_dir / "metrics.csv") == metric_rows(off.run_dir / "metrics.csv")


def test_bench_data_times_both_paths_and_refuses_what_on_device_cannot_draw(tmp_path, capsys):
    from visionbench.cli import main

    assert (
        main(
            ["bench", "data", "recipe=digits_vgg4_aug", "data.limit_train=256", "--rounds", "1", "--out", str(tmp_path)]
        )
        == 0
    )
    report = (tmp_path / "data_digits_vgg4_aug.md").read_text()
    assert "| loader | 0 workers, cpu |" in report and "| on device | cpu |" in report
    capsys.readouterr()
    assert main(["bench", "data", "data.augment.auto_augment=rand-m9", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("visionbench bench data: data.on_device=true cannot draw data.augment.auto_augment")
    assert len(err.splitlines()) == 1
