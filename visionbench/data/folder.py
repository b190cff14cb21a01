"""Your own images (`data.name=folder`): torchvision's ImageFolder layout under `data.root`.

    DIR/train/<class>/*.png|jpg|...     required; class index = position of <class> in sorted order
    DIR/val/<class>/...                 optional: the model-selection set (then data.val_split is unused)
    DIR/test/<class>/...                optional: the official test set

    visionbench run data.name=folder data.root=DIR act=relu,gelu seeds=2 epochs=2

The splits follow the built-ins' rule (docs/data.md#validation-and-test-dataval_split): the "official" eval
set is test/, else val/, else a fixed stratified 20 % of train/ (random_state 0, as digits); `data.val_split > 0`
carves the model-selection set from train (stratified, fixed) and tests on the official set; with both val/
and test/, val/ selects and test/ tests.

Scanned at construction (`scan`), before any training: the class folders as torchvision's `find_classes`, the
files in `make_dataset`'s order, but by a walk that follows no folder symlink and reads only regular files inside
DIR (`_walk`: a symlinked folder, a link leading out of DIR, a dangling link, a FIFO or device named *.png is
refused in one line, never opened); a bad layout is one line naming the path and the fix (`FolderLayoutError`),
and so is a split that the recipe's `data.val_split` cannot carve (`check_splits`). Every image is decoded once;
the facts found (image size, grayscale or RGB, per-channel mean/std of the training images, the value range of
16-bit and float images) are cached in visionbench's own cache folder (data/datasets.py `cache_dir`:
${XDG_CACHE_HOME:-~/.cache}/visionbench/folder_stats/), one file per folder named by DIR's resolved path and
holding it, valid for a digest of every image file's path, class, size and mtime: a changed folder is scanned
again. DIR itself is read, never written.

Bit depth (`open_image`): 8-bit images are read as they are; 16-bit (PIL I;16), 32-bit integer (I) and float (F)
grayscale images are scaled linearly by the folder's value range (`FolderFacts.value_range`: integer images
[0, 2^k - 1] with k the bits their largest value needs, at least 8; float images [0, 1] when they lie in it, else
their [min, max]) to 8 bits, never clipped at 255 as PIL's convert("L") clips them.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image
from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes

from ..config import DataConfig
from ..results.io import atomic_write_text
from ..results.safe_paths import UnsafePath, within
from .base import VisionDataModule
from .datasets import (
    ArrayDataset,
    CorruptDataError,
    DatasetNotFoundError,
    FileDataset,
    cache_dir,
    load_image,
    reading_image,
    root_dir,
    root_source,
)
from .splits import stratified_split

SPLITS = ("train", "val", "test")
STATS_FOLDER = "folder_stats"  # under cache_dir(): one file of facts per data folder
STATS_VERSION = 2  # 2: value_range (16-bit and float images scaled, not clipped); the walk that follows no folder link
TEST_FRACTION = 0.2  # train/ alone: the fixed stratified part that is the official test set (as digits)
GRAY_MODES = ("1", "L", "LA", "I", "I;16", "I;16L", "I;16B", "I;16N", "F")
DEEP_MODES = ("I", "I;16", "I;16L", "I;16B", "I;16N", "F")  # more than 8 bits: scaled by the folder's value range
DOC = "docs/data.md#your-own-images-datanamefolder"


class FolderLayoutError(CorruptDataError):
    """A folder that does not hold the ImageFolder layout (or an image that cannot be read): one line, path and fix."""


@dataclass
class FolderFacts:
    """What a scan of the folder found (cached in the stats file)."""

    digest: str
    classes: list[str]
    counts: dict[str, int]  # images per split present
    sizes: dict[str, int]  # "WxH" -> number of training images
    in_chans: int
    native_size: int | None  # side of the training images when all are one square size
    img_size: int  # native_size, else the median shorter side of the training images
    mean: list[float] = field(default_factory=list)
    std: list[float] = field(default_factory=list)
    value_range: list[float] | None = None  # [lo, hi] of the 16-bit / float images (DEEP_MODES), None without any


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _no_folder_link(path: Path) -> None:
    """FolderLayoutError when the folder `path` is a symlink: the walk follows no folder link (a loop such as
    train/cat/loop -> .. would read train/ again under `cat`; a link out of data.root reads files from elsewhere)."""
    if os.path.islink(path):
        raise FolderLayoutError(
            f"{path}: a symlink to a folder ({os.readlink(path)}); refused: visionbench follows no "
            f"folder link inside data.root (a loop, or another folder's images read under this "
            f"name); replace the link by the folder itself or delete it"
        )


def _image_file(path: str, root: Path, entry: os.DirEntry) -> None:
    """FolderLayoutError unless `path` is a regular file, or a symlink to a regular file inside `root`: a dangling
    or looping link, a link out of data.root, a FIFO, device or socket named like an image is refused, never opened."""
    if entry.is_symlink():
        try:
            st = os.stat(path)
        except OSError as e:  # dangling (ENOENT) or a loop of links (ELOOP)
            dangling = not os.path.lexists(os.path.realpath(path))
            what = "a dangling symlink" if dangling else "a symlink that cannot be followed"
            raise FolderLayoutError(
                f"{path}: {what} (to {os.readlink(path)}: {e.strerror}); point it at the image or delete it"
            ) from None
        try:
            within(root, path, path)
        except UnsafePath:
            raise FolderLayoutError(
                f"{path}: a symlink leading outside data.root {root} (to "
                f"{os.path.realpath(path)}); refused: an image must lie inside data.root; copy the "
                f"file in (or hard-link it)"
            ) from None
    elif entry.is_file(follow_symlinks=False):  # a regular file (the directory entry's type: no system call)
        return
    else:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError as e:
            raise FolderLayoutError(
                f"{path}: cannot be read ({e.strerror}); fix its permissions or delete it"
            ) from None
    if not stat.S_ISREG(st.st_mode):
        raise FolderLayoutError(
            f"{path}: {_kind(st.st_mode)}, not a regular file; refused (never opened): visionbench "
            f"reads only regular image files; delete it or replace it with the image"
        )


def _walk(top: Path, root: Path) -> list[tuple[str, list[str]]]:
    """(folder, its image files) under `top`, without following a folder link (refused: `_no_folder_link`), every
    image file checked by `_image_file`; sorted as torchvision's `make_dataset` sorts `os.walk`'s folders."""
    found, stack = [], [str(top)]
    while stack:
        folder = stack.pop()
        files = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    path = os.path.join(folder, entry.name)
                    if entry.is_symlink() and os.path.isdir(path):
                        _no_folder_link(Path(path))
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(path)
                    elif entry.name.lower().endswith(IMG_EXTENSIONS):
                        _image_file(path, root, entry)
                        files.append(entry.name)
        except OSError as e:
            raise FolderLayoutError(f"{folder}: cannot be listed ({e.strerror}); fix its permissions") from None
        found.append((folder, sorted(files)))
    return sorted(found)


def _samples(split_dir: Path, classes: list[str], root: Path) -> list[tuple[str, int]]:
    """[(path, class index)] of every image file of the split, in torchvision's `make_dataset` order."""
    samples = []
    for index, name in enumerate(classes):
        top = split_dir / name
        _no_folder_link(top)
        samples += [(os.path.join(folder, f), index) for folder, files in _walk(top, root) for f in files]
    return samples


def layout(root: Path, source: str) -> tuple[list[str], dict[str, list[tuple[str, int]]]]:
    """(classes, {split: [(path, class index)]}) of the splits present; `FolderLayoutError` (one line) when
    root or train/ is missing, a class folder holds no image, or val/ or test/ has other classes than train/."""
    if not root.is_dir():
        raise DatasetNotFoundError(
            f"{root} (data.name=folder, root from {source}) is not a folder; point data.root "
            f"at the folder holding train/<class>/<images> ({DOC})"
        )
    if not (root / "train").is_dir():
        raise FolderLayoutError(
            f"{root} has no train/ folder; put the training images in {root}/train/<class>/ "
            f"(and optionally {root}/val/<class>/, {root}/test/<class>/; {DOC})"
        )
    splits: dict[str, list[tuple[str, int]]] = {}
    classes: list[str] = []
    for split in SPLITS:
        folder = root / split
        if not folder.is_dir():
            continue
        _no_folder_link(folder)
        try:
            found = find_classes(str(folder))[0]
        except FileNotFoundError:
            found = []
        if split == "train":
            classes = found
            if len(classes) < 2:
                raise FolderLayoutError(
                    f"{folder} holds {len(classes)} class folder(s) {classes}; classification "
                    f"needs at least 2: put each class's images in its own {folder}/<class>/"
                )
        elif found != classes:
            missing, extra = sorted(set(classes) - set(found)), sorted(set(found) - set(classes))
            what = "; ".join(f"{k} {', '.join(v)}" for k, v in (("missing", missing), ("extra", extra)) if v)
            raise FolderLayoutError(
                f"{folder}: its classes differ from {root}/train's ({what}); give {split}/ "
                f"the same class folders as train/"
            )
        samples = _samples(folder, classes, root)
        counts = Counter(t for _, t in samples)
        empty = [c for i, c in enumerate(classes) if not counts[i]]
        if empty:
            raise FolderLayoutError(
                f"{folder / empty[0]}: a class folder with no image ({', '.join(IMG_EXTENSIONS)}); "
                f"add its images or delete the folder from every split"
            )
        splits[split] = samples
    return classes, splits


def digest(splits: dict[str, list[tuple[str, int]]], root: Path) -> str:
    """sha256 of every image's split-relative path, size and mtime: what the cached facts were computed from."""
    h = hashlib.sha256(f"v{STATS_VERSION}".encode())
    for samples in splits.values():
        for path, target in samples:
            st = os.stat(path)
            h.update(f"{os.path.relpath(path, root)}\t{target}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _unreadable(path: str, problem: str) -> FolderLayoutError:
    """An image that cannot be decoded (`reading_image`'s error): one line, the file and the fix."""
    return FolderLayoutError(f"{path}: {problem}; replace or delete the file")


def _read(path: str):
    """The file opened for reading, refused (FolderLayoutError) unless it is a regular file: opened non-blocking, so
    a FIFO that replaced an image since the scan cannot hang the run, and checked before a byte is read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FolderLayoutError(
                f"{path}: {_kind(mode)}, not a regular file; refused (not read): visionbench reads "
                f"only regular image files; delete it or replace it with the image"
            )
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _int_range(lo: float, hi: float) -> list[float]:
    """[min(0, lo), 2^k - 1]: k the bits the largest value needs, at least 8 (12-bit data in 16-bit PNGs: 4095)."""
    return [float(min(0, lo)), float(2 ** max(8, int(hi).bit_length()) - 1)]


def deep_range(extrema: list[tuple[str, float, float]]) -> list[float] | None:
    """The [lo, hi] that 16-bit, integer and float images (DEEP_MODES) are scaled to 8 bits by, from every such
    image's (mode, min, max): integers `_int_range`, floats [0, 1] when they lie in it, else their [min, max];
    None when there is none."""
    parts = []
    ints = [(lo, hi) for m, lo, hi in extrema if m != "F"]
    if ints:
        parts.append(_int_range(min(lo for lo, _ in ints), max(hi for _, hi in ints)))
    floats = [(lo, hi) for m, lo, hi in extrema if m == "F"]
    if floats:
        lo, hi = min(lo for lo, _ in floats), max(hi for _, hi in floats)
        parts.append([0.0, 1.0] if lo >= 0 and hi <= 1 else [float(lo), float(hi)])
    if not parts:
        return None
    lo, hi = min(p[0] for p in parts), max(p[1] for p in parts)
    return [lo, hi if hi > lo else lo + 1.0]


def to_8bit(img: Image.Image, value_range: list[float] | None = None) -> Image.Image:
    """A 16-bit / integer / float grayscale image as 8-bit L, scaled linearly from `value_range` (the folder's;
    without one, the image's own by the same rule) to [0, 255] and rounded: never PIL's convert("L"), which clips
    every value above 255 to white."""
    a = np.asarray(img, dtype=np.float64)
    if value_range is None:
        value_range = deep_range([(img.mode, float(a.min()), float(a.max()))])
    lo, hi = value_range
    scaled = np.rint((a - lo) * (255.0 / (hi - lo)))
    return Image.fromarray(np.clip(scaled, 0, 255).astype(np.uint8), mode="L")


def open_image(path: str, mode: str | None = None, value_range: list[float] | None = None) -> Image.Image:
    """The decoded image (converted to `mode` if given; a 16-bit or float one scaled by `value_range`: `to_8bit`);
    `FolderLayoutError` naming the file when it cannot be read or is not a regular file (datasets.py `load_image`,
    the file opened by `_read`)."""

    def deep(img: Image.Image) -> Image.Image:
        return to_8bit(img, value_range) if mode and img.mode in DEEP_MODES else img

    return load_image(path, mode, read=_read, adapt=deep, error=_unreadable)


class FolderImages(FileDataset):
    """The folder's image files, decoded lazily by `open_image` (16-bit and float images scaled by the folder's
    value range, only regular files read)."""

    def __init__(self, samples, mode: str, value_range: list[float] | None = None):
        super().__init__(samples, mode=mode)
        self.value_range = value_range

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        return open_image(self.paths[index], self.mode, self.value_range), int(self.targets[index])


def train_test_parts(splits: dict[str, list[tuple[str, int]]]) -> tuple[list, list]:
    """(training source, official test source) as sample lists: test/, else val/, else the fixed 20 % of train/."""
    train = splits["train"]
    for split in ("test", "val"):
        if split in splits:
            return train, splits[split]
    try:
        kept, held = stratified_split(np.array([t for _, t in train]), TEST_FRACTION)
    except ValueError as e:
        raise FolderLayoutError(
            f"{train[0][0].rsplit(os.sep, 2)[0]}: without test/ or val/ the test set is a "
            f"stratified {TEST_FRACTION:g} of train/, and {e}; add images or a test/ folder"
        ) from None
    return [train[i] for i in kept], [train[i] for i in held]


def compute_facts(classes: list[str], splits: dict[str, list[tuple[str, int]]], key: str) -> FolderFacts:
    """Decode every image once: channels, sizes and per-channel mean/std of the training source; every other
    image is decoded too, so an unreadable one fails here, before training."""
    train, _ = train_test_parts(splits)
    modes, sizes, extrema = set(), Counter(), []
    train_paths = {p for p, _ in train}
    for samples in splits.values():  # headers (the training images' mode decides the channels the statistics are
        for path, _ in samples:  # taken in); 16-bit and float images decoded for their value range
            with reading_image(path, _unreadable), _read(path) as f, Image.open(f) as img:
                if path in train_paths:
                    modes.add(img.mode)
                    sizes[img.size] += 1
                if img.mode in DEEP_MODES:
                    lo, hi = img.getextrema()
                    extrema.append((img.mode, float(lo), float(hi)))
    mode = "L" if modes <= set(GRAY_MODES) else "RGB"
    in_chans = 1 if mode == "L" else 3
    deep = deep_range(extrema)
    total, total_sq, n = np.zeros(in_chans), np.zeros(in_chans), 0
    for samples in splits.values():
        for path, _ in samples:
            img = open_image(path, mode, deep)
            if path in train_paths:
                x = np.asarray(img, dtype=np.float64).reshape(-1, in_chans) / 255.0
                total += x.sum(0)
                total_sq += (x * x).sum(0)
                n += len(x)
    mean = total / n
    std = np.sqrt(np.maximum(total_sq / n - mean**2, 0.0))
    w0, h0 = sizes.most_common(1)[0][0]
    native = w0 if len(sizes) == 1 and w0 == h0 else None
    shorter = np.repeat([min(wh) for wh in sizes], list(sizes.values()))  # one per training image
    img_size = native or int(np.median(shorter))
    return FolderFacts(
        digest=key,
        classes=list(classes),
        counts={s: len(v) for s, v in splits.items()},
        sizes={f"{w}x{h}": k for (w, h), k in sizes.most_common()},
        in_chans=in_chans,
        native_size=native,
        img_size=img_size,
        mean=[round(float(m), 6) for m in mean],
        std=[round(float(s), 6) if s > 1e-6 else 1.0 for s in std],
        value_range=deep,
    )


def stats_path(root: Path) -> Path:
    """Where the facts of the data folder `root` are cached: in visionbench's cache folder, never in `root` (a
    user's data folder is read, never written), one file per folder, named by the sha256 of its resolved path."""
    name = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:32]
    return cache_dir() / STATS_FOLDER / f"{name}.json"


def load_facts(root: Path, key: str) -> FolderFacts | None:
    """The cached facts of folder `root` when they were computed from its files as they are (`digest` == `key`,
    this STATS_VERSION, the same resolved folder); None otherwise."""
    try:
        cached = json.loads(stats_path(root).read_text())
        if (
            cached.get("version") == STATS_VERSION
            and cached.get("root") == str(root.resolve())
            and cached.get("digest") == key
        ):
            return FolderFacts(**{k: v for k, v in cached.items() if k not in ("version", "root")})
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return None


def save_facts(root: Path, facts: FolderFacts) -> Path | None:
    """Write the facts of folder `root` to its cache file (`stats_path`); None when it cannot be written (the next
    run scans again)."""
    path = stats_path(root)
    text = json.dumps({"version": STATS_VERSION, "root": str(root.resolve()), **asdict(facts)}, indent=1)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    except OSError:
        return None
    return path


def scan(cfg: DataConfig) -> tuple[FolderFacts, dict[str, list[tuple[str, int]]]]:
    """The folder's checked layout and its facts (cached: `load_facts`, computed and saved otherwise)."""
    root = root_dir(cfg)
    classes, splits = layout(root, root_source(cfg))
    key = digest(splits, root)
    facts = load_facts(root, key)
    if facts is None:
        facts = compute_facts(classes, splits, key)
        save_facts(root, facts)
    return facts, splits


class FolderDataModule(VisionDataModule):
    """Your own images in the ImageFolder layout (module docstring): size, channels and statistics found from
    train/ unless `data.img_size`, `data.mean`, `data.std` give them."""

    name = "folder"

    def __init__(
        self, cfg: DataConfig, batch_size: int, seed: int = 0, test_in_val: bool = False, aug_seed: int | None = None
    ):
        facts, self.splits = scan(cfg)  # before the base's checks: they need the size and the channels
        self.facts = facts
        self.classes = facts.classes
        self.num_classes, self.in_chans = len(facts.classes), facts.in_chans
        self.native_size, self.default_img_size = facts.native_size, facts.img_size
        self.default_mean, self.default_std = tuple(facts.mean), tuple(facts.std)
        self._mode = "L" if facts.in_chans == 1 else "RGB"
        self._train, self._official = train_test_parts(self.splits)
        super().__init__(cfg, batch_size=batch_size, seed=seed, test_in_val=test_in_val, aug_seed=aug_seed)
        self.has_test = cfg.val_split > 0 or ("val" in self.splits and "test" in self.splits)
        self.check_splits()

    def check_splits(self) -> None:
        """Refuse, before any run, a training source that `setup` cannot split: with `data.val_split > 0` and no
        val/ beside test/, the model-selection set is a stratified part of it, which needs 2 images of every class
        (one on each side) and at least one image per class in each part (FolderLayoutError, one line)."""
        if not self.has_test or ("val" in self.splits and "test" in self.splits):
            return
        fraction = self.cfg.val_split
        targets = np.array([t for _, t in self._train])
        try:
            stratified_split(targets, fraction)
        except ValueError:
            counts = np.bincount(targets, minlength=self.num_classes)
            fewest = int(np.argmin(counts))
            source = (
                "train/"
                if len(self._train) == len(self.splits["train"])
                else f"train/ less the official {TEST_FRACTION:g} test part"
            )
            raise FolderLayoutError(
                f"{self.root / 'train'}: data.val_split={fraction:g} holds out a stratified {fraction:g} of {source} "
                f"for model selection, which needs at least 2 images of every class and at least {self.num_classes} "
                f"images ({self.num_classes} classes) on each side; it has {len(targets)} images, class "
                f"{self.classes[fewest]!r} only {int(counts[fewest])}; add training images, give a val/ folder (it "
                f"then selects), or set data.val_split=0 (the official set then selects as well)"
            ) from None

    def load_source(self, train: bool):
        samples = self._train if train else self._official
        deep = self.facts.value_range
        if train and self.cfg.on_device:  # the uint8 array on_device.py gathers from (one size: refusal checked it)
            images = np.stack([np.asarray(open_image(p, self._mode, deep)) for p, _ in samples])
            dataset = ArrayDataset(images.reshape(*images.shape[:3], self.in_chans), [t for _, t in samples])
        else:
            dataset = FolderImages(samples, self._mode, deep)
        dataset.classes = list(self.classes)
        return dataset

    def own_val_source(self):
        """val/ when test/ is there too: it selects, test/ tests (else val/ is the official set)."""
        if "val" in self.splits and "test" in self.splits:
            dataset = FolderImages(self.splits["val"], self._mode, self.facts.value_range)
            dataset.classes = list(self.classes)
            return dataset
        return None

    def image_files(self) -> list[tuple[str, int]]:
        """Every image of every split found (with data.on_device=true the training images are read into an array)."""
        return [sample for samples in self.splits.values() for sample in samples]

    def summary_facts(self) -> dict:
        """What a run records of its data (summary.json `dataset`): classes in label order, size, channels, statistics
        (and `value_range`, what 16-bit or float images were scaled to 8 bits by, when there are any)."""
        deep = {"value_range": list(self.facts.value_range)} if self.facts.value_range else {}
        return {
            "name": self.name,
            "root": str(self.root),
            "classes": list(self.classes),
            "img_size": self.img_size,
            "in_chans": self.in_chans,
            "mean": list(self.mean),
            "std": list(self.std),
            "images": dict(self.facts.counts),
            **deep,
        }
