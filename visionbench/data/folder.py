"""Your own images (`data.name=folder`): torchvision's ImageFolder layout under `data.root`.

    DIR/train/<class>/*.png|jpg|...     required; class index = position of <class> in sorted order
    DIR/val/<class>/...                 optional: the model-selection set (then data.val_split is unused)
    DIR/test/<class>/...                optional: the official test set

    visionbench run data.name=folder data.root=DIR act=relu,gelu seeds=2 epochs=2

The splits follow the built-ins' rule (docs/data.md#validation-and-test-dataval_split): the "official" eval
set is test/, else val/, else a fixed stratified 20 % of train/ (random_state 0, as digits); `data.val_split > 0`
carves the model-selection set from train (stratified, fixed) and tests on the official set; with both val/
and test/, val/ selects and test/ tests.

Scanned at construction (`scan`), before any training, with torchvision's `find_classes`/`make_dataset`; a bad
layout is one line naming the path and the fix (`FolderLayoutError`). Every image is decoded once; the facts
found (image size, grayscale or RGB, per-channel mean/std of the training images) are cached in
DIR/.visionbench_stats.json (else, DIR not writable, in $XDG_CACHE_HOME/visionbench/folder_stats/), keyed by
a digest of every image file's path, size and mtime: a changed folder is scanned again.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError
from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

from ..config import DataConfig
from ..results.io import atomic_write_text
from .base import VisionDataModule
from .datasets import ArrayDataset, CorruptDataError, DatasetNotFoundError, FileDataset, root_dir, root_source
from .splits import stratified_split

SPLITS = ("train", "val", "test")
STATS_FILE = ".visionbench_stats.json"
STATS_VERSION = 1
TEST_FRACTION = 0.2  # train/ alone: the fixed stratified part that is the official test set (as digits)
GRAY_MODES = ("1", "L", "LA", "I", "I;16", "F")
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


def _samples(split_dir: Path, class_to_idx: dict[str, int]) -> list[tuple[str, int]]:
    return make_dataset(str(split_dir), class_to_idx, extensions=IMG_EXTENSIONS, allow_empty=True)


def layout(root: Path, source: str) -> tuple[list[str], dict[str, list[tuple[str, int]]]]:
    """(classes, {split: [(path, class index)]}) of the splits present; `FolderLayoutError` (one line) when
    root or train/ is missing, a class folder holds no image, or val/ or test/ has other classes than train/."""
    if not root.is_dir():
        raise DatasetNotFoundError(f"{root} (data.name=folder, root from {source}) is not a folder; point data.root "
                                   f"at the folder holding train/<class>/<images> ({DOC})")
    if not (root / "train").is_dir():
        raise FolderLayoutError(f"{root} has no train/ folder; put the training images in {root}/train/<class>/ "
                                f"(and optionally {root}/val/<class>/, {root}/test/<class>/; {DOC})")
    splits: dict[str, list[tuple[str, int]]] = {}
    classes: list[str] = []
    for split in SPLITS:
        folder = root / split
        if not folder.is_dir():
            continue
        try:
            found = find_classes(str(folder))[0]
        except FileNotFoundError:
            found = []
        if split == "train":
            classes = found
            if len(classes) < 2:
                raise FolderLayoutError(f"{folder} holds {len(classes)} class folder(s) {classes}; classification "
                                        f"needs at least 2: put each class's images in its own {folder}/<class>/")
        elif found != classes:
            missing, extra = sorted(set(classes) - set(found)), sorted(set(found) - set(classes))
            what = "; ".join(f"{k} {', '.join(v)}" for k, v in (("missing", missing), ("extra", extra)) if v)
            raise FolderLayoutError(f"{folder}: its classes differ from {root}/train's ({what}); give {split}/ "
                                    f"the same class folders as train/")
        samples = _samples(folder, {c: i for i, c in enumerate(classes)})
        counts = Counter(t for _, t in samples)
        empty = [c for i, c in enumerate(classes) if not counts[i]]
        if empty:
            raise FolderLayoutError(f"{folder / empty[0]}: a class folder with no image ({', '.join(IMG_EXTENSIONS)}); "
                                    f"add its images or delete the folder from every split")
        splits[split] = samples
    return classes, splits


def digest(splits: dict[str, list[tuple[str, int]]], root: Path) -> str:
    """sha256 of every image's split-relative path, size and mtime: what the cached facts were computed from."""
    h = hashlib.sha256(f"v{STATS_VERSION}".encode())
    for split, samples in splits.items():
        for path, target in samples:
            st = os.stat(path)
            h.update(f"{os.path.relpath(path, root)}\t{target}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _unreadable(path: str, e: Exception) -> FolderLayoutError:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, UnidentifiedImageError):  # its message repeats the path (or a file object)
        first = "not an image format PIL can identify"
    return FolderLayoutError(f"{path}: unreadable image ({first}); replace or delete the file")


def open_image(path: str, mode: str | None = None) -> Image.Image:
    """The decoded image (converted to `mode` if given); `FolderLayoutError` naming the file when it cannot be read."""
    try:
        with open(path, "rb") as f:
            img = Image.open(f)
            img.load()
            return img.convert(mode) if mode else img
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:  # UnidentifiedImageError: OSError
        raise _unreadable(path, e) from None


def train_test_parts(splits: dict[str, list[tuple[str, int]]]) -> tuple[list, list]:
    """(training source, official test source) as sample lists: test/, else val/, else the fixed 20 % of train/."""
    train = splits["train"]
    for split in ("test", "val"):
        if split in splits:
            return train, splits[split]
    try:
        kept, held = stratified_split(np.array([t for _, t in train]), TEST_FRACTION)
    except ValueError as e:
        raise FolderLayoutError(f"{train[0][0].rsplit(os.sep, 2)[0]}: without test/ or val/ the test set is a "
                                f"stratified {TEST_FRACTION:g} of train/, and {e}; add images or a test/ folder") from None
    return [train[i] for i in kept], [train[i] for i in held]


def compute_facts(classes: list[str], splits: dict[str, list[tuple[str, int]]], key: str) -> FolderFacts:
    """Decode every image once: channels, sizes and per-channel mean/std of the training source; every other
    image is decoded too, so an unreadable one fails here, before training."""
    train, _ = train_test_parts(splits)
    modes, sizes = set(), Counter()
    for path, _ in train:  # headers only: the mode decides the channels the statistics are taken in
        try:
            with Image.open(path) as img:
                modes.add(img.mode)
                sizes[img.size] += 1
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
            raise _unreadable(path, e) from None
    mode = "L" if modes <= set(GRAY_MODES) else "RGB"
    in_chans = 1 if mode == "L" else 3
    total, total_sq, n = np.zeros(in_chans), np.zeros(in_chans), 0
    train_paths = {p for p, _ in train}
    for samples in splits.values():
        for path, _ in samples:
            img = open_image(path, mode)
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
    return FolderFacts(digest=key, classes=list(classes), counts={s: len(v) for s, v in splits.items()},
                       sizes={f"{w}x{h}": k for (w, h), k in sizes.most_common()}, in_chans=in_chans,
                       native_size=native, img_size=img_size, mean=[round(float(m), 6) for m in mean],
                       std=[round(float(s), 6) if s > 1e-6 else 1.0 for s in std])


def stats_paths(root: Path) -> list[Path]:
    """Where the cached facts are read and written: DIR/.visionbench_stats.json, then the user's cache."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "visionbench" / "folder_stats"
    return [root / STATS_FILE, cache / f"{hashlib.sha256(str(root).encode()).hexdigest()[:16]}.json"]


def load_facts(root: Path, key: str) -> FolderFacts | None:
    """The cached facts for this digest, if any file holds them."""
    for path in stats_paths(root):
        try:
            cached = json.loads(path.read_text())
            if cached.get("version") == STATS_VERSION and cached.get("digest") == key:
                return FolderFacts(**{k: v for k, v in cached.items() if k != "version"})
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return None


def save_facts(root: Path, facts: FolderFacts) -> Path | None:
    """Write the facts to the first place that takes them (None: none did; the next run scans again)."""
    text = json.dumps({"version": STATS_VERSION, **asdict(facts)}, indent=1)
    for path in stats_paths(root):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text)
            return path
        except OSError:
            continue
    return None


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

    def __init__(self, cfg: DataConfig, batch_size: int, seed: int = 0, test_in_val: bool = False,
                 aug_seed: int | None = None):
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

    def load_source(self, train: bool):
        samples = self._train if train else self._official
        if train and self.cfg.on_device:  # the uint8 array on_device.py gathers from (one size: refusal checked it)
            images = np.stack([np.asarray(open_image(p, self._mode)) for p, _ in samples])
            dataset = ArrayDataset(images.reshape(*images.shape[:3], self.in_chans), [t for _, t in samples])
        else:
            dataset = FileDataset(samples, mode=self._mode)
        dataset.classes = list(self.classes)
        return dataset

    def own_val_source(self):
        """val/ when test/ is there too: it selects, test/ tests (else val/ is the official set)."""
        if "val" in self.splits and "test" in self.splits:
            dataset = FileDataset(self.splits["val"], mode=self._mode)
            dataset.classes = list(self.classes)
            return dataset
        return None

    def image_files(self) -> list[tuple[str, int]]:
        """Every image of every split found (with data.on_device=true the training images are read into an array)."""
        return [sample for samples in self.splits.values() for sample in samples]

    def summary_facts(self) -> dict:
        """What a run records of its data (summary.json `dataset`): classes in label order, size, channels, statistics."""
        return {"name": self.name, "root": str(self.root), "classes": list(self.classes), "img_size": self.img_size,
                "in_chans": self.in_chans, "mean": list(self.mean), "std": list(self.std),
                "images": dict(self.facts.counts)}
