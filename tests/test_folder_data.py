"""data.name=folder: your own images in the ImageFolder layout (visionbench/data/folder.py, docs/data.md).

.venv/bin/python -m pytest tests/test_folder_data.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from visionbench import data
from visionbench.cli import main
from visionbench.data import folder as folder_mod
from visionbench.data.on_device import DeviceBatches

CLASSES = ["circle", "square", "triangle"]
COLOURS = [(220, 40, 40), (40, 200, 60), (50, 70, 230)]


def shape(c: int, k: int, size: int = 12, gray: bool = False) -> Image.Image:
    """A coloured circle, square or triangle (class c) on a dark background, shifted by k."""
    img = Image.new("RGB", (size, size), (k * 7 % 60, 30, 20))
    draw, o = ImageDraw.Draw(img), k % 3
    if c == 0:
        draw.ellipse([1 + o, 1, size - 3 + o, size - 3], fill=COLOURS[c])
    elif c == 1:
        draw.rectangle([2, 2 + o, size - 4, size - 4 + o], fill=COLOURS[c])
    else:
        draw.polygon([(size // 2, 1 + o), (1, size - 2), (size - 1, size - 2)], fill=COLOURS[c])
    return img.convert("L") if gray else img


def write_folder(root: Path, splits=("train", "test"), per_class: int = 10, gray: bool = False, sizes=None) -> Path:
    """root/<split>/<class>/<k>.png: 3 classes of 12x12 shapes, `per_class` in train, 4 in val/test."""
    for split in splits:
        for c, name in enumerate(CLASSES):
            d = root / split / name
            d.mkdir(parents=True)
            for k in range(per_class if split == "train" else 4):
                size = sizes[k % len(sizes)] if sizes else 12
                shape(c, k, size, gray).save(d / f"{k}.png")
    return root


@pytest.fixture(autouse=True)
def _cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # where the folder's facts are cached


def make(root: Path, **cfg) -> data.VisionDataModule:
    return data.create_datamodule({"name": "folder", "root": str(root), **cfg}, batch_size=8, seed=0)


@pytest.mark.parametrize(
    "splits, val_split, sizes",
    [
        (("train",), 0.0, (24, 6, None)),  # test = a fixed 20 % of train/, which is val without val_split
        (("train",), 0.2, (19, 5, 6)),
        (("train", "test"), 0.0, (30, 12, None)),
        (("train", "test"), 0.2, (24, 6, 12)),
        (("train", "val"), 0.0, (30, 12, None)),  # val/ alone: the official set, as ImageNet's
        (("train", "val", "test"), 0.0, (30, 12, 12)),
        (("train", "val", "test"), 0.2, (30, 12, 12)),  # val/ selects: val_split unused
    ],
)
def test_layouts_split_as_the_builtins(tmp_path, splits, val_split, sizes):
    dm = make(write_folder(tmp_path / "d", splits), val_split=val_split)
    assert (dm.num_classes, dm.in_chans, dm.img_size, dm.classes) == (3, 3, 12, CLASSES)
    dm.setup()
    n_test = len(dm.test_set) if dm.test_set is not None else None
    assert (len(dm.train_set), len(dm.val_set), n_test) == sizes
    assert dm.has_test == (n_test is not None)
    assert sorted(set(dm.train_set.targets)) == [0, 1, 2] and sorted(set(dm.val_set.targets)) == [0, 1, 2]
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (8, 3, 12, 12) and y.dtype == torch.int64
    if "val" in splits and "test" in splits:  # val/ images, not train's
        assert all("/val/" in p for p in dm.val_set.source.paths)


def test_grayscale_images_give_one_channel(tmp_path):
    dm = make(write_folder(tmp_path / "d", gray=True))
    assert dm.in_chans == 1 and len(dm.mean) == len(dm.std) == 1
    x, _ = next(iter(dm.train_dataloader()))
    assert x.shape == (8, 1, 12, 12)


def test_statistics_are_those_of_the_training_images(tmp_path):
    root = write_folder(tmp_path / "d", ("train",))
    dm = make(root)
    dm.setup()
    pixels = np.concatenate(
        [
            np.asarray(Image.open(p).convert("RGB"), dtype=np.float64).reshape(-1, 3) / 255
            for p in dm.train_set.source.paths
        ]
    )  # the training source: train/ less its test part
    np.testing.assert_allclose(dm.mean, pixels.mean(0), atol=1e-6)
    np.testing.assert_allclose(dm.std, pixels.std(0), atol=1e-6)
    given = make(root, img_size=16, mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25])
    assert (given.img_size, given.mean, given.std) == (16, (0.5,) * 3, (0.25,) * 3)
    assert next(iter(given.train_dataloader()))[0].shape == (8, 3, 16, 16)


def test_mixed_sizes_take_the_median_shorter_side_and_resize(tmp_path):
    dm = make(write_folder(tmp_path / "d", ("train",), sizes=(12, 12, 16)))
    assert dm.native_size is None and dm.img_size == 12
    assert set(dm.facts.sizes) == {"12x12", "16x16"} and sum(dm.facts.sizes.values()) == 24  # the training source
    assert next(iter(dm.train_dataloader()))[0].shape == (8, 3, 12, 12)


def test_stats_are_cached_and_recomputed_when_the_folder_changes(tmp_path, monkeypatch):
    root = write_folder(tmp_path / "d")
    calls = []
    compute = folder_mod.compute_facts
    monkeypatch.setattr(folder_mod, "compute_facts", lambda *a: calls.append(1) or compute(*a))
    first = make(root)
    cached = json.loads(folder_mod.stats_path(root).read_text())
    assert cached["classes"] == CLASSES and cached["mean"] == list(first.mean) and len(calls) == 1
    assert make(root).mean == first.mean and len(calls) == 1  # read from the file
    shape(0, 3).rotate(90).save(root / "train" / "circle" / "new.png")  # a new image: scanned again
    assert make(root).facts.counts["train"] == 31 and len(calls) == 2
    Image.new("RGB", (12, 12), (255, 255, 255)).save(root / "train" / "circle" / "new.png")  # changed in place
    assert make(root).mean != first.mean and len(calls) == 3
    make(root)
    assert len(calls) == 3


def listing(root: Path) -> dict[str, tuple[int, int]]:
    """{relative path: (size, mtime_ns)} of everything under `root`, folders included."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def test_the_data_folder_is_read_never_written(tmp_path, monkeypatch):
    root = write_folder(tmp_path / "d")
    before = listing(root)
    write = folder_mod.atomic_write_text

    def refuse_in_root(path, text):
        assert root not in Path(path).parents, f"wrote {path} into the data folder"
        write(path, text)

    monkeypatch.setattr(folder_mod, "atomic_write_text", refuse_in_root)
    make(root)
    assert listing(root) == before
    assert folder_mod.stats_path(root).parent == tmp_path / "cache" / "visionbench" / "folder_stats"
    assert json.loads(folder_mod.stats_path(root).read_text())["root"] == str(root.resolve())
    monkeypatch.setattr(folder_mod, "compute_facts", lambda *a: pytest.fail("not read from the cache"))
    assert make(root).classes == CLASSES and listing(root) == before


def test_two_folders_never_share_a_cache_file(tmp_path, monkeypatch):
    import shutil

    a = write_folder(tmp_path / "a")
    b = Path(shutil.copytree(a, tmp_path / "b"))  # copy2: the same names, sizes and mtimes, the same digest
    assert folder_mod.digest(folder_mod.layout(a, "")[1], a) == folder_mod.digest(folder_mod.layout(b, "")[1], b)
    calls = []
    compute = folder_mod.compute_facts
    monkeypatch.setattr(folder_mod, "compute_facts", lambda *a: calls.append(1) or compute(*a))
    make(a), make(b)
    assert len(calls) == 2 and folder_mod.stats_path(a) != folder_mod.stats_path(b)
    assert len(list((tmp_path / "cache" / "visionbench" / "folder_stats").glob("*.json"))) == 2
    Image.new("RGB", (12, 12), (255, 255, 255)).save(b / "train" / "circle" / "0.png")  # b changes, a does not
    assert make(b).mean != make(a).mean and len(calls) == 3


def test_on_device_batches_equal_the_loader_path(tmp_path):
    root = write_folder(tmp_path / "d", ("train",))
    loader, device = make(root), make(root, on_device=True)
    batches = device.train_dataloader()
    assert isinstance(batches, DeviceBatches)
    for (x1, y1), (x2, y2) in zip(loader.train_dataloader(), batches):
        torch.testing.assert_close(x2, x1)
        assert torch.equal(y1, y2)
    aug = make(root, on_device=True, augment={"crop_pad": 2, "hflip": 0.5})
    assert next(iter(aug.train_dataloader()))[0].shape == (8, 3, 12, 12)


# ---- bad layouts: one line, exit 2, nothing written, nothing trained --------------------------------------
def _empty_class(root):
    write_folder(root)
    for p in (root / "train" / "square").iterdir():
        p.unlink()
    return root / "train" / "square", "a class folder with no image"


def _classes_differ(root):
    write_folder(root)
    (root / "test" / "triangle").rename(root / "test" / "hexagon")
    return root / "test", "its classes differ from"


def _unreadable(root):
    write_folder(root)
    bad = root / "test" / "circle" / "2.png"
    bad.write_bytes(bad.read_bytes()[:40])  # truncated
    return bad, "unreadable image"


def _no_train(root):
    write_folder(root, ("test",))
    return root, "has no train/ folder"


def _missing_root(root):
    return root, "is not a folder; point data.root"


def _one_class(root):
    (root / "train" / "only").mkdir(parents=True)
    shape(0, 0).save(root / "train" / "only" / "a.png")
    return root / "train", "needs at least 2"


@pytest.mark.parametrize("make_bad", [_no_train, _empty_class, _classes_differ, _unreadable, _missing_root, _one_class])
def test_a_bad_layout_is_one_line_before_training(tmp_path, monkeypatch, capsys, make_bad):
    from visionbench.sweep import sweep

    monkeypatch.setattr(sweep, "execute_jobs", lambda *a, **k: pytest.fail("a bad layout reached training"))
    monkeypatch.chdir(tmp_path)
    path, words = make_bad(tmp_path / "d")
    before = sorted((str(p), p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    code = main(["run", "data.name=folder", f"data.root={tmp_path / 'd'}", "act=relu", "seeds=1", "epochs=1"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"visionbench run: {path}") and words in lines[0], lines[0]
    assert sorted((str(p), p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before  # nothing written


def test_on_device_with_mixed_sizes_is_refused_in_one_line(tmp_path):
    root = write_folder(tmp_path / "d", ("train",), sizes=(12, 16))
    with pytest.raises(ValueError, match="images of more than one size"):
        make(root, on_device=True)


# ---- end to end ---------------------------------------------------------------------------------------------
@pytest.mark.slow  # a trained sweep and its report (11 s); the folder's reading is tested above in make test
def test_a_folder_trains_and_reports(tmp_path, capsys):
    root = write_folder(tmp_path / "d")
    before = listing(root)
    results = tmp_path / "r"
    code = main(
        ["run", "data.name=folder", f"data.root={root}", "act=relu", "seeds=1", "epochs=1", f"results_dir={results}"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "relu               seed 0: completed" in out and "| relu | 1 |" in out
    summary = json.loads((results / "digits_vgg4" / "relu" / "seed_0" / "summary.json").read_text())
    assert summary["dataset"]["classes"] == CLASSES and summary["dataset"]["img_size"] == 12
    assert summary["dataset"]["images"] == {"train": 30, "test": 12}
    assert (results / "digits_vgg4" / "table.md").exists()
    assert listing(root) == before  # a run reads the data folder, never writes it
