"""Fashion-MNIST (Xiao et al. 2017) from its four IDX files, plain or gzipped: 60,000 train / 10,000 test
28x28 grayscale images of 10 clothing classes.

    visionbench run recipe=fashion_mnist_slaf                        # paper 003 Table 6
    make data-fashion-mnist                                          # Debian's package, unpacked into ./data
    visionbench run recipe=fashion_mnist_vgg4 data.download=true     # torchvision's download, where there is internet

The files are looked for, under the data root (`data.root`, else `$VISIONBENCH_DATA`, else `./data`), in
    FashionMNIST/raw/                   torchvision's layout (what data.download=true writes)
    fashion-mnist/
    usr/share/datasets/fashion-mnist/   Debian's dataset-fashion-mnist unpacked with `dpkg -x` (make data-fashion-mnist)
    .                                   the data root itself
and last in /usr/share/datasets/fashion-mnist/ (the Debian package installed with apt). The first folder
holding any of the four files is used; each file may be plain or `.gz`.

IDX format (LeCun's MNIST page): big-endian int32 magic (2051 images, 2049 labels), the counts (images:
N, rows, cols), then one unsigned byte per pixel / label. torchvision's reader
(`torchvision.datasets.mnist.read_sn3_pascalvincent_tensor`) checks with `assert`s and does not open
`.gz`, so the header is checked here, one error line naming the file for every way a file can be wrong.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np

from .base import VisionDataModule
from .datasets import ArrayDataset, DatasetNotFoundError, corrupt, missing_dataset, root_dir

TRAIN_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
TEST_FILES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
FILES = TRAIN_FILES + TEST_FILES
IMAGE_MAGIC, LABEL_MAGIC = 2051, 2049  # 0x00000803: ubyte, 3 dims; 0x00000801: ubyte, 1 dim
SIDE = 28
NUM_CLASSES = 10
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
# folders under the data root, in the order they are tried ("" = the root itself)
ROOT_FOLDERS = ("FashionMNIST/raw", "fashion-mnist", "usr/share/datasets/fashion-mnist", "")
SYSTEM_DIRS = (Path("/usr/share/datasets/fashion-mnist"),)  # `apt-get install dataset-fashion-mnist`
LAYOUT = (
    "    <data root>/FashionMNIST/raw/ (torchvision), <data root>/fashion-mnist/, "
    "<data root>/usr/share/datasets/fashion-mnist/ (make data-fashion-mnist) or the data root itself,\n"
    "    or /usr/share/datasets/fashion-mnist/ (apt-get install dataset-fashion-mnist), holding\n"
    f"    {', '.join(FILES)} (each plain or .gz)"
)


def file_path(folder: Path, name: str) -> Path | None:
    """`folder/name`, else `folder/name.gz`, else None."""
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def candidate_dirs(root: Path) -> list[Path]:
    """Where the files are looked for, in order (module docstring)."""
    return [root / f if f else root for f in ROOT_FOLDERS] + list(SYSTEM_DIRS)


def find_folder(root: Path) -> Path | None:
    """The first candidate folder that holds any of the four files (plain or .gz)."""
    for folder in candidate_dirs(root):
        if folder.is_dir() and any(file_path(folder, name) for name in FILES):
            return folder
    return None


def _read_bytes(path: Path) -> bytes:
    """The file's content, decompressed if it is `.gz`; a torn archive is a `CorruptDataError`."""
    if path.suffix != ".gz":
        return path.read_bytes()
    try:
        with gzip.open(path, "rb") as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError; a cut archive an EOFError
        raise corrupt(path, f"not a readable gzip file ({type(e).__name__}: {str(e)[:80] or 'truncated'})") from None


def read_idx(path: str | Path, kind: str) -> np.ndarray:
    """One IDX file as uint8: images (N, 28, 28) for `kind="images"`, labels (N,) for `kind="labels"`.

    Checked: the magic number, 28x28 images, exactly as many bytes as the header announces and labels
    in 0..9; anything else is a `CorruptDataError` naming the file (one line).
    """
    if kind not in ("images", "labels"):
        raise ValueError(f"kind must be 'images' or 'labels', got {kind!r}")
    path = Path(path)
    magic_wanted, ndim = (IMAGE_MAGIC, 3) if kind == "images" else (LABEL_MAGIC, 1)
    data = _read_bytes(path)
    header = 4 * (1 + ndim)
    if len(data) < header:
        raise corrupt(path, f"truncated: {len(data)} bytes, shorter than the {header}-byte IDX {kind} header")
    magic = int.from_bytes(data[:4], "big")
    if magic != magic_wanted:
        what = {IMAGE_MAGIC: "an IDX image file", LABEL_MAGIC: "an IDX label file"}.get(magic, "not an IDX file")
        raise corrupt(path, f"magic number {magic} ({what}), expected {magic_wanted} (IDX {kind})")
    dims = [int.from_bytes(data[4 * (i + 1) : 4 * (i + 2)], "big") for i in range(ndim)]
    if kind == "images" and dims[1:] != [SIDE, SIDE]:
        raise corrupt(path, f"images are {dims[1]}x{dims[2]}, expected {SIDE}x{SIDE}")
    expected = int(np.prod(dims))
    payload = len(data) - header
    if payload != expected:
        problem = "truncated" if payload < expected else "longer than its header says"
        raise corrupt(
            path,
            f"{problem}: header announces {dims[0]} {kind} ({expected} bytes), "
            f"the file holds {payload} bytes after the header",
        )
    array = np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)
    if kind == "labels" and len(array) and int(array.max()) >= NUM_CLASSES:
        raise corrupt(path, f"labels must be 0..{NUM_CLASSES - 1}, found {int(array.max())}")
    return array


def read_split(folder: Path, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 28, 28, 1), labels int64 (N,)) of the train or test split in `folder`;
    DatasetNotFoundError for a missing file, CorruptDataError for a bad one or a count mismatch."""
    image_name, label_name = TRAIN_FILES if train else TEST_FILES
    paths = [file_path(folder, image_name), file_path(folder, label_name)]
    for name, path in zip((image_name, label_name), paths):
        if path is None:
            raise DatasetNotFoundError(
                f"{folder / name}: missing (neither {name} nor {name}.gz is there); "
                "copy all four Fashion-MNIST files there (make data-fashion-mnist)"
            )
    images, labels = read_idx(paths[0], "images"), read_idx(paths[1], "labels")
    if len(images) != len(labels):
        raise corrupt(paths[1], f"{len(labels)} labels for the {len(images)} images of {paths[0]}")
    return np.ascontiguousarray(images[..., None]), labels.astype(np.int64)


class FashionMNISTDataModule(VisionDataModule):
    """Fashion-MNIST: 60,000 train / 10,000 test grayscale images, 28 px, 10 classes. The files are read
    and checked at construction (`check`), so a missing or torn file stops a sweep before its first run;
    they are held in memory and deterministic transforms are applied once and cached."""

    name = "fashion_mnist"
    native_size = SIDE
    default_img_size = SIDE
    # of the 60,000 training images scaled to [0, 1] (checked on the real files: tests/test_fashion_mnist.py)
    default_mean = (0.2860,)
    default_std = (0.3530,)
    in_memory = True
    num_classes = NUM_CLASSES
    in_chans = 1

    def _folder(self) -> Path | None:
        return find_folder(self.root)

    def _missing(self) -> DatasetNotFoundError:
        return missing_dataset("Fashion-MNIST", self.cfg, self.root / "fashion-mnist", LAYOUT, download=True)

    def check(self) -> None:
        self._splits: dict[bool, tuple[np.ndarray, np.ndarray]] = {}
        if self.cfg.download and self._folder() is None:
            return  # prepare_data() fetches it
        folder = self._folder()
        if folder is None:
            raise self._missing()
        self._splits = {train: read_split(folder, train) for train in (True, False)}  # checked before training

    def data_files(self) -> list[Path]:
        """The four IDX files (plain or .gz) in the folder the data is read from."""
        folder = self._folder()
        return [] if folder is None else [p for p in (file_path(folder, name) for name in FILES) if p is not None]

    def prepare_data(self) -> None:
        """Download with torchvision (into <root>/FashionMNIST/raw) when `data.download` is set and no files are found."""
        if self.cfg.download and self._folder() is None:
            from torchvision.datasets import FashionMNIST

            for train in (True, False):
                FashionMNIST(str(self.root), train=train, download=True)

    def load_source(self, train: bool) -> ArrayDataset:
        split = getattr(self, "_splits", {}).pop(train, None)
        if split is None:
            folder = self._folder()
            if folder is None:
                raise self._missing()
            split = read_split(folder, train)
        dataset = ArrayDataset(*split)
        dataset.classes = list(CLASSES)
        return dataset


def main(argv: list[str] | None = None) -> int:
    """`python -m visionbench.data.fashion_mnist [ROOT]`: where the files are found and how many images each split has."""
    import sys

    from ..config import block

    args = sys.argv[1:] if argv is None else argv
    cfg = block("data", {"name": "fashion_mnist", "root": args[0] if args else None})
    folder = find_folder(root_dir(cfg))
    if folder is None:
        print(f"Fashion-MNIST not found under {root_dir(cfg)} (nor in {', '.join(map(str, SYSTEM_DIRS))})")
        return 1
    for train in (True, False):
        images, labels = read_split(folder, train)
        print(
            f"{'train' if train else 'test'}: {len(images):,} images {images.shape[1]}x{images.shape[2]}, "
            f"{len(labels):,} labels, {len(np.unique(labels))} classes  ({folder})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
