"""CIFAR-10 from torchvision's on-disk format (the python pickle batches).

    <data.root>/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}

    visionbench run recipe=cifar10_vgg8 data.root=/datasets      # or VISIONBENCH_DATA=/datasets
    visionbench run recipe=cifar10_vgg8 data.download=true       # where there is internet

The batches are read directly (not through `torchvision.datasets.CIFAR10`, whose md5 check
refuses anything but the exact official files); torchvision is used only to download.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from .base import VisionDataModule
from .datasets import ArrayDataset, DatasetNotFoundError, corrupt, find_dataset_dir, missing_dataset, root_source

FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
ALL_BATCHES = (*TRAIN_BATCHES, TEST_BATCH)
NUM_CLASSES = 10
LAYOUT = f"    {FOLDER}/data_batch_1 .. data_batch_5, {TEST_BATCH}, batches.meta (python pickles)"


# what the CIFAR-10 python pickles hold: dicts of bytes, lists and numpy arrays; anything else a received file pickles
# (a call such as os.system) is refused before it runs
NUMPY_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}  # how protocol 2 written by Python 3 spells bytes


class _DataOnly(pickle.Unpickler):
    """An unpickler that builds only plain containers and numpy arrays (docs/reproducing.md, files from someone
    else): a global outside NUMPY_GLOBALS is refused, never imported or called."""

    def find_class(self, module: str, name: str):
        if (module, name) not in NUMPY_GLOBALS:
            raise pickle.UnpicklingError(f"it pickles {module}.{name}, code rather than data; refused, not run")
        return super().find_class(module, name)


def _unpickle(path: Path) -> dict:
    """A batch file's dict; `CorruptDataError` naming the file for a truncated or foreign file, or one that pickles
    anything but containers and numpy arrays (never run)."""
    try:
        with open(path, "rb") as f:
            # latin1 decodes the python-2 pickles' numpy payload correctly (as torchvision does)
            entry = _DataOnly(f, encoding="latin1").load()
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        ImportError,
        IndexError,
        KeyError,
        MemoryError,
    ) as e:  # pickle reports a torn file in many ways ("Ran out of input", ...)
        raise corrupt(path, f"not a readable CIFAR-10 pickle ({type(e).__name__}: {str(e)[:80]})") from None
    if not isinstance(entry, dict):
        raise corrupt(path, f"holds a {type(entry).__name__}, not a CIFAR-10 batch dict")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in entry.items()}


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One pickle batch as (images uint8 (N, 32, 32, 3), labels int64), checked: 3072 bytes per
    image, one label per image, labels in 0..9 and pixels in 0..255 (never silently wrapped)."""
    entry = _unpickle(path)
    if "data" not in entry or "labels" not in entry:
        raise corrupt(path, f"has no 'data'/'labels' (keys: {', '.join(map(str, entry))})")
    raw, labels = np.asarray(entry["data"]), np.asarray(entry["labels"])
    if raw.dtype != np.uint8:
        if raw.dtype.kind not in "iu" or (raw.size and (raw.min() < 0 or raw.max() > 255)):
            span = f"{raw.min()}..{raw.max()}" if raw.size and raw.dtype.kind in "iuf" else raw.dtype
            raise corrupt(path, f"pixel values must be 0..255 bytes, found {raw.dtype} values {span}")
    if raw.ndim != 2 or raw.shape[1] != 3 * 32 * 32:
        raise corrupt(path, f"'data' has shape {raw.shape}, expected (N, 3072): 32x32 RGB rows")
    if labels.ndim != 1 or len(labels) != len(raw) or labels.dtype.kind not in "iu":
        raise corrupt(path, f"has {len(raw)} images but labels of shape {labels.shape} ({labels.dtype})")
    if len(labels) and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise corrupt(path, f"labels must be 0..{NUM_CLASSES - 1}, found {labels.min()}..{labels.max()}")
    data = raw.astype(np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(data), labels.astype(np.int64)


def read_class_names(folder: Path) -> list[str] | None:
    """`label_names` from batches.meta, when present."""
    meta = folder / "batches.meta"
    if not meta.exists():
        return None
    names = _unpickle(meta).get("label_names")
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names] if names else None


class CIFAR10DataModule(VisionDataModule):
    """CIFAR-10: 50,000 train / 10,000 test images, 32 px, 10 classes. The batches are read and
    checked at construction (`check`), so a corrupt file stops a sweep before its first run."""

    name = "cifar10"
    native_size = 32
    default_img_size = 32
    # paper 004 App E (torchvision interface); recipes may override (paper 001 Table 8 uses others)
    default_mean = (0.4914, 0.4822, 0.4465)
    default_std = (0.2023, 0.1994, 0.2010)
    num_classes = NUM_CLASSES
    in_chans = 3

    def _folder(self) -> Path | None:
        return find_dataset_dir(self.root, FOLDER, TEST_BATCH)

    def check(self) -> None:
        if self.cfg.download:
            return  # prepare_data() fetches it
        folder = self._folder()
        missing = [] if folder is None else [b for b in TRAIN_BATCHES if not (folder / b).exists()]
        if folder is None or missing:
            self._check_partial()
            raise missing_dataset("CIFAR-10", self.cfg, self.root / FOLDER, LAYOUT, download=True)
        self._batches = {b: read_batch(folder / b) for b in (*TRAIN_BATCHES, TEST_BATCH)}  # checked before training

    def _check_partial(self) -> None:
        """A CIFAR-10 folder that holds some of the batches: name the missing ones (DatasetNotFoundError)."""
        for folder in (self.root / FOLDER, self.root):
            present = [b for b in ALL_BATCHES if (folder / b).is_file()]
            if present:
                missing = [b for b in ALL_BATCHES if b not in present]
                raise DatasetNotFoundError(
                    f"CIFAR-10 at {folder} (from {root_source(self.cfg)}) lacks {', '.join(missing)} (it needs {TRAIN_BATCHES[0]} .. "
                    f"{TRAIN_BATCHES[-1]} and {TEST_BATCH}); copy the missing file(s) from an intact copy of the "
                    f"dataset, or set data.download=true on a machine with internet access"
                )

    def data_files(self) -> list[Path]:
        """The six pickle batches and batches.meta (the class names), those present."""
        folder = self._folder()
        names = (*ALL_BATCHES, "batches.meta")
        return [] if folder is None else [folder / b for b in names if (folder / b).is_file()]

    def prepare_data(self) -> None:
        """Download with torchvision when `data.download` is set and the files are missing."""
        if self.cfg.download and self._folder() is None:
            from torchvision.datasets import CIFAR10

            CIFAR10(str(self.root), train=True, download=True)

    def load_source(self, train: bool) -> ArrayDataset:
        folder = self._folder()
        if folder is None:
            raise missing_dataset("CIFAR-10", self.cfg, self.root / FOLDER, LAYOUT, download=True)
        cached = getattr(self, "_batches", None) or {}
        parts = [cached.pop(b, None) or read_batch(folder / b) for b in (TRAIN_BATCHES if train else (TEST_BATCH,))]
        dataset = ArrayDataset(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        dataset.classes = read_class_names(folder)
        return dataset
