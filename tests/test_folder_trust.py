"""data.name=folder with a folder from someone else (visionbench/data/folder.py, docs/data.md): 16-bit images keep
their contrast, the walk follows no folder link and no link out of data.root, reads only regular files, writes
nothing into the folder (nor reads a stats file found there), and a split the recipe cannot carve is refused up
front; each refusal one line, exit 2, nothing written.

    .venv/bin/python -m pytest tests/test_folder_trust.py -q
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from torchvision.datasets.folder import IMG_EXTENSIONS, make_dataset

from visionbench import data
from visionbench.cli import main
from visionbench.data import folder as folder_mod


@pytest.fixture(autouse=True)
def _cache_and_alarm(tmp_path, monkeypatch):
    """The stats cache in tmp_path; and a hang (a FIFO opened) fails the test after 60 s instead of holding the suite."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def hung(*_):
        raise TimeoutError("hung: a FIFO or device was opened")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def write_gray(
    root: Path, classes: dict[str, int], n: int = 5, dtype=np.uint16, splits=("train",), per_split: dict | None = None
) -> Path:
    """root/<split>/<class>/<k>.png: n constant images of each class's value (+k), 16-bit unless dtype says."""
    for split in splits:
        for name, value in classes.items():
            d = root / split / name
            d.mkdir(parents=True)
            for k in range((per_split or {}).get(split, n)):
                Image.fromarray(np.full((8, 8), value + k, dtype)).save(d / f"{k}.png")
    return root


def make(root: Path, **cfg) -> data.VisionDataModule:
    return data.create_datamodule({"name": "folder", "root": str(root), **cfg}, batch_size=4, seed=0)


def pixels(dm, train: bool = True) -> dict[int, set[int]]:
    """{label: the 8-bit values its decoded images hold}, as the loader's transforms receive them."""
    source = dm.load_source(train)
    out: dict[int, set[int]] = {}
    for i in range(len(source)):
        img, label = source[i]
        out.setdefault(label, set()).update(np.unique(np.asarray(img)).tolist())
    return out


def refused(tmp_path, monkeypatch, capsys, root: Path, *args: str) -> str:
    """`visionbench run` on the folder: exit 2, one line on stderr (returned), no training, nothing written."""
    from visionbench.sweep import sweep

    monkeypatch.setattr(sweep, "execute_jobs", lambda *a, **k: pytest.fail("a bad folder reached training"))
    monkeypatch.chdir(tmp_path)
    code = main(
        [
            "run",
            "data.name=folder",
            f"data.root={root}",
            "act=relu",
            "seeds=1",
            "epochs=1",
            f"results_dir={tmp_path / 'r'}",
            *args,
        ]
    )
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("visionbench run: "), lines[0]
    assert not (tmp_path / "r").exists()
    return lines[0]


# ---- bit depth ----------------------------------------------------------------------------------------------
def test_16_bit_classes_stay_distinguishable_not_clipped_to_white(tmp_path):
    """Two classes of 16-bit PNGs (20000 and 40000): PIL's convert("L") made both all 255; scaled by their
    16-bit range they are 78 and 156, and the statistics are theirs, not white's."""
    root = write_gray(
        tmp_path / "d", {"dark": 20000, "bright": 40000}, splits=("train", "test"), per_split={"train": 5, "test": 2}
    )
    assert Image.open(root / "train" / "dark" / "0.png").mode.startswith("I;16")
    dm = make(root)
    assert dm.in_chans == 1 and dm.facts.value_range == [0.0, 65535.0]
    assert dm.summary_facts()["value_range"] == [0.0, 65535.0]  # what a run records of how it read them
    train = pixels(dm)
    bright, dark = sorted(train[0]), sorted(train[1])  # classes sorted: bright = 0, dark = 1
    assert bright == [156] and dark == [78]
    assert pixels(dm, train=False) == train  # the test images alike
    assert 0.4 < dm.facts.mean[0] < 0.5 and dm.facts.std[0] > 0.1  # (78 + 156) / 2 / 255 = 0.459
    dm.setup()
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 1, 8, 8) and len(set(x[:, 0, 0, 0].tolist())) == len(set(y.tolist()))


def test_12_bit_data_in_16_bit_pngs_is_scaled_by_the_bits_it_uses(tmp_path):
    root = write_gray(tmp_path / "d", {"a": 1000, "b": 4000})  # 12-bit values (a camera's 0..4095)
    dm = make(root)
    assert dm.facts.value_range == [0.0, 4095.0]
    values = pixels(dm)
    assert max(values[1]) == round(4004 / 4095 * 255) and min(values[0]) == round(1000 / 4095 * 255)


def test_float_images_in_0_1_are_scaled_not_black(tmp_path):
    root = tmp_path / "d"
    for name, value in {"a": 0.25, "b": 0.75}.items():
        (root / "train" / name).mkdir(parents=True)
        for k in range(5):
            Image.fromarray(np.full((8, 8), value, np.float32)).save(root / "train" / name / f"{k}.tif")
    dm = make(root)
    assert dm.facts.value_range == [0.0, 1.0]
    assert pixels(dm) == {0: {64}, 1: {191}}


def test_8_bit_images_are_read_as_before(tmp_path):
    root = write_gray(tmp_path / "d", {"a": 30, "b": 200}, dtype=np.uint8)
    dm = make(root)
    kept, held = pixels(dm), pixels(dm, train=False)  # train/ alone: a fixed 20 % of it is the test set
    assert dm.facts.value_range is None
    assert {c: kept[c] | held[c] for c in (0, 1)} == {0: set(range(30, 35)), 1: set(range(200, 205))}


# ---- the walk: links, special files -------------------------------------------------------------------------
def test_a_symlink_loop_is_refused_not_followed(tmp_path, monkeypatch, capsys):
    """train/cat/loop -> .. made torchvision's walk read train/ again under `cat` (820 images instead of 20)."""
    root = write_gray(tmp_path / "d", {"cat": 100, "dog": 200}, dtype=np.uint8)
    os.symlink("..", root / "train" / "cat" / "loop")
    line = refused(tmp_path, monkeypatch, capsys, root)
    assert line == (
        f"visionbench run: {root}/train/cat/loop: a symlink to a folder (..); refused: visionbench follows "
        "no folder link inside data.root (a loop, or another folder's images read under this name); "
        "replace the link by the folder itself or delete it"
    )


def test_a_symlinked_class_folder_is_refused(tmp_path):
    root = write_gray(tmp_path / "d", {"cat": 100, "dog": 200}, dtype=np.uint8)
    os.symlink(root / "train" / "cat", root / "train" / "cow")
    with pytest.raises(folder_mod.FolderLayoutError, match=r"train/cow: a symlink to a folder"):
        make(root)


def test_a_symlink_out_of_data_root_is_refused(tmp_path, monkeypatch, capsys):
    root = write_gray(tmp_path / "d", {"cat": 100, "dog": 200}, dtype=np.uint8)
    secret = tmp_path / "private.png"
    Image.new("L", (8, 8)).save(secret)
    os.symlink(secret, root / "train" / "dog" / "x.png")
    line = refused(tmp_path, monkeypatch, capsys, root)
    assert line == (
        f"visionbench run: {root}/train/dog/x.png: a symlink leading outside data.root {root} (to "
        f"{secret}); refused: an image must lie inside data.root; copy the file in (or hard-link it)"
    )


def test_a_symlink_to_an_image_inside_data_root_is_read(tmp_path):
    root = write_gray(tmp_path / "d", {"cat": 100, "dog": 200}, dtype=np.uint8)
    os.symlink("0.png", root / "train" / "cat" / "again.png")
    dm = make(root)
    assert dm.facts.counts == {"train": 11}
    assert str(root / "train" / "cat" / "again.png") in [p for p, _ in dm.splits["train"]]


def test_a_dangling_symlink_is_one_line(tmp_path, monkeypatch, capsys):
    root = write_gray(tmp_path / "d", {"cat": 100, "dog": 200}, dtype=np.uint8)
    os.symlink("gone.png", root / "train" / "cat" / "x.png")
    line = refused(tmp_path, monkeypatch, capsys, root)
    assert line == (
        f"visionbench run: {root}/train/cat/x.png: a dangling symlink (to gone.png: No such file or "
        "directory); point it at the image or delete it"
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_a_fifo_named_png_is_refused_never_opened(tmp_path, monkeypatch, capsys):
    root = write_gray(tmp_path / "d", {"cat": 100, "dog": 200}, dtype=np.uint8)
    os.mkfifo(root / "train" / "cat" / "f.png")
    line = refused(tmp_path, monkeypatch, capsys, root)
    assert line == (
        f"visionbench run: {root}/train/cat/f.png: a FIFO (named pipe), not a regular file; refused "
        "(never opened): visionbench reads only regular image files; delete it or replace it with the image"
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_a_fifo_that_replaced_an_image_since_the_scan_is_not_read(tmp_path):
    """The loader's own guard: opened non-blocking, refused before a byte is read (no hang)."""
    os.mkfifo(tmp_path / "late.png")
    with pytest.raises(folder_mod.FolderLayoutError, match=r"late.png: a FIFO \(named pipe\), not a regular file"):
        folder_mod.open_image(str(tmp_path / "late.png"), "L")


def test_the_walk_lists_files_in_torchvisions_order(tmp_path):
    """Same images in the same order as make_dataset: the splits (and so every earlier run's images) are unchanged."""
    root = write_gray(tmp_path / "d", {"cat": 100, "dog": 200}, dtype=np.uint8)
    for sub in ("b", "a", "a/z", "a b"):
        (root / "train" / "cat" / sub).mkdir(parents=True, exist_ok=True)
        Image.new("L", (8, 8)).save(root / "train" / "cat" / sub / "1.png")
    (root / "train" / "cat" / "notes.txt").write_text("not an image")
    expected = make_dataset(str(root / "train"), {"cat": 0, "dog": 1}, extensions=IMG_EXTENSIONS)
    assert folder_mod._samples(root / "train", ["cat", "dog"], root) == expected


# ---- splits the recipe cannot carve: refused before any run -------------------------------------------------
def test_one_image_per_class_with_a_test_folder_is_refused_up_front(tmp_path, monkeypatch, capsys):
    """digits_vgg4 selects on a stratified 0.2 of train/ (data.val_split=0.2): one image per class cannot be split;
    it failed inside every run, now once, before any, saying what is needed."""
    root = write_gray(
        tmp_path / "d", {"a": 30, "b": 200}, dtype=np.uint8, splits=("train", "test"), per_split={"train": 1, "test": 2}
    )
    line = refused(tmp_path, monkeypatch, capsys, root)
    assert line == (
        f"visionbench run: {root}/train: data.val_split=0.2 holds out a stratified 0.2 of train/ for model "
        "selection, which needs at least 2 images of every class and at least 2 images (2 classes) on each "
        "side; it has 2 images, class 'a' only 1; add training images, give a val/ folder (it then "
        "selects), or set data.val_split=0 (the official set then selects as well)"
    )
    make(root, val_split=0.0).setup()  # without the split it is a (tiny) valid folder


# ---- the folder is read, never written ----------------------------------------------------------------------
def test_a_stats_file_inside_the_folder_is_neither_read_nor_written(tmp_path):
    """A received folder may carry a `.visionbench_stats.json` (what visionbench once wrote into DIR) that says
    anything: the facts come from the images, cached in visionbench's own cache, and DIR is left as it was."""
    root = write_gray(tmp_path / "d", {"a": 30, "b": 200}, dtype=np.uint8)
    classes, splits = folder_mod.layout(root, "data.root")
    forged = {
        "version": folder_mod.STATS_VERSION,
        "digest": folder_mod.digest(splits, root),
        "classes": classes,
        "counts": {"train": 10},
        "sizes": {"8x8": 8},
        "in_chans": 3,
        "native_size": 8,
        "img_size": 8,
        "mean": [0.9, 0.9, 0.9],
        "std": [0.01, 0.01, 0.01],
        "value_range": None,
    }
    (root / ".visionbench_stats.json").write_text(json.dumps(forged))
    before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}
    dm = make(root)
    assert dm.in_chans == 1 and dm.facts.mean != [0.9] and dm.facts.mean[0] < 0.5
    assert folder_mod.stats_path(root).is_relative_to(tmp_path / "cache")
    assert {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")} == before
