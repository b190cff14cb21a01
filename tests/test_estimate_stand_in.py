"""`visionbench estimate` before the download (bench/estimate.py, data/synthetic.py `stand_in`; docs/running.md,
"Before a sweep"): a dataset of known shape that is not on disk is priced on a synthetic stand-in of its shape, and
one note says so; the stand-in's loaders have the real dataset's lengths, classes, image size and transforms.

CIFAR-10 is estimated whole in the default suite (a small batch keeps it to seconds); Tiny ImageNet's and ImageNet's
stand-ins are checked through their loaders there (no model timed), and estimated whole in the slow tests.
"""

from __future__ import annotations

import pytest

from tests.fixtures import write_cifar10
from visionbench.cli import main
from visionbench.config import typed
from visionbench.data import DATAMODULES, create_datamodule, standing_in
from visionbench.data.synthetic import SHAPES, VARYING_SIDE
from visionbench.sweep.preflight import load_config


def _note(text: str) -> list[str]:
    return [line for line in text.splitlines() if "priced on a synthetic stand-in" in line]


def test_cifar10_not_on_disk_is_priced_on_a_stand_in_of_its_shape_in_one_line(tmp_path, capsys):
    results, root = tmp_path / "results", tmp_path / "datasets"
    code = main(
        ["estimate", "recipe=cifar10_vgg8", "act=relu", "seeds=2", "batch_size=16", f"data.root={root}"]
        + [f"results_dir={results}", "parallel=1"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    (note,) = _note(out)
    assert note == (
        f"note: CIFAR-10 not found under {root}: priced on a synthetic stand-in of its shape (50,000 train images "
        "32×32, 10,000 test, 10 classes; the recipe's splits and transforms); timing of decoding/loading from disk "
        "not included"
    )
    row = next(line for line in out.splitlines() if line.startswith("| relu"))
    assert row.split("|")[3].strip() == str(50_000 // 16)  # val_split 0: every train image, full batches
    assert "projected total:" in out and not results.exists() and not root.exists()
    assert DATAMODULES["cifar10"].__name__ == "CIFAR10DataModule"  # the stand-in lives only inside the estimate


def test_the_dataset_on_disk_is_priced_as_it_is(tmp_path, capsys):
    root = tmp_path / "datasets"
    root.mkdir()
    write_cifar10(root)
    cfg = load_config(["recipe=cifar10_vgg4", f"data.root={root}", "results_dir=/nonexistent"])
    with standing_in(cfg.data) as note:
        assert note is None
        assert type(create_datamodule(cfg.data, batch_size=8)).__name__ == "CIFAR10DataModule"


@pytest.mark.parametrize(
    ("recipe", "name", "classes", "size"),
    [
        ("tinyimagenet_vit_s8", "tiny_imagenet", 200, 64),
        ("imagenet_resnet50", "imagenet", 1000, 224),
        ("cifar10_vgg8_aug", "cifar10", 10, 32),
    ],
)
def test_a_stand_in_has_the_datasets_lengths_classes_and_transforms(tmp_path, recipe, name, classes, size):
    """The stand-in's loaders as the real module's would be: every train image in the steps, the recipe's image
    size out of its transforms, balanced labels of every class; nothing read from disk."""
    cfg = load_config([f"recipe={recipe}", f"data.root={tmp_path / 'none'}", "data.num_workers=0"])
    shape = SHAPES[name]
    with standing_in(cfg.data) as note:
        assert note is not None and note.startswith(f"{shape.title} not found under {tmp_path / 'none'}: ")
        dm = create_datamodule(cfg.data, batch_size=4, seed=0, test_in_val=True)
        train = dm.train_dataloader()
        x, y = next(iter(train))
    held = round(shape.train * cfg.data.val_split)
    assert abs(len(dm.train_set) - (shape.train - held)) <= classes  # a stratified split rounds per class
    aug = cfg.data.augment  # the recipe's repeated augmentation (Tiny ImageNet ViT: each image 3 times an epoch)
    assert len(train) == len(dm.train_set) * (int(aug.repeated_aug) if aug.repeated_aug_epoch == "expand" else 1) // 4
    assert len(dm.test_set if dm.has_test else dm.val_set) == shape.test
    assert (dm.num_classes, dm.img_size, tuple(x.shape)) == (classes, size, (4, shape.chans, size, size))
    assert set(dm.train_set.source.targets[: 10 * classes]) == set(range(classes))
    if shape.side is None:
        assert f"drawn at {VARYING_SIDE}×{VARYING_SIDE}" in note
    assert not DATAMODULES[name].__name__.startswith("StandIn")  # restored after the block
    assert not (tmp_path / "none").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("recipe", "title", "shape"),
    [
        ("tinyimagenet_vit_s8", "Tiny ImageNet", "100,000 train images 64×64, 10,000 val, 200 classes"),
        ("imagenet_resnet50", "ImageNet", f"1,281,167 train images of varying size (drawn at {VARYING_SIDE}×"),
    ],
)
def test_tiny_imagenet_and_imagenet_are_estimated_whole_on_their_stand_ins(tmp_path, capsys, recipe, title, shape):
    root = tmp_path / "datasets"
    args = ["act=relu", "seeds=1", "batch_size=8", "data.num_workers=0", "parallel=1", f"data.root={root}"]
    assert main(["estimate", f"recipe={recipe}", f"results_dir={tmp_path / 'r'}", *args]) == 0
    out = capsys.readouterr().out
    (note,) = _note(out)
    assert f"{title} not found under {root}: priced on a synthetic stand-in of its shape ({shape}" in note
    cfg = typed(load_config([f"recipe={recipe}", *args]))
    train = SHAPES[cfg.data.name].train - round(SHAPES[cfg.data.name].train * cfg.data.val_split)
    aug = cfg.data.augment
    repeats = int(aug.repeated_aug) if aug.repeated_aug_epoch == "expand" else 1
    row = next(line for line in out.splitlines() if line.startswith("| relu"))
    assert int(row.split("|")[3]) == train * repeats // 8
