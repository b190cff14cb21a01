"""Tiny ImageNet (200 classes, 64 px) in the layout of the official zip.

    <data.root>/tiny-imagenet-200/
        wnids.txt                          one WordNet id per line (the 200 classes)
        train/<wnid>/images/*.JPEG         500 per class
        val/images/*.JPEG                  10,000 images
        val/val_annotations.txt            filename <TAB> wnid <TAB> x0 y0 x1 y1 (bounding box)

    visionbench run recipe=tinyimagenet_vit_s8 data.root=/datasets

Class indices follow the sorted wnids (what an ImageFolder over train/ gives), so the val
annotations map to the same index as the train folders. The unlabeled test/ set is unused:
val is the official evaluation split (paper 004 Table 9).
"""

from __future__ import annotations

from pathlib import Path

from .base import VisionDataModule
from .datasets import FileDataset, corrupt, find_dataset_dir, missing_dataset

FOLDER = "tiny-imagenet-200"
IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")
LAYOUT = (
    f"    {FOLDER}/wnids.txt\n"
    f"    {FOLDER}/train/<wnid>/images/*.JPEG\n"
    f"    {FOLDER}/val/images/*.JPEG + {FOLDER}/val/val_annotations.txt"
)


def read_wnids(folder: Path) -> list[str]:
    """The class ids, sorted (class index = position)."""
    lines = (folder / "wnids.txt").read_text().split()
    return sorted(set(lines))


def read_val_annotations(folder: Path) -> list[tuple[str, str]]:
    """(filename, wnid) pairs of `val/val_annotations.txt` (tab separated; the bbox is ignored)."""
    path = folder / "val" / "val_annotations.txt"
    pairs = []
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if line.strip():
            fields = line.split("\t")
            if len(fields) < 2:
                raise corrupt(path, f"line {n} is not 'filename<TAB>wnid<TAB>...': {line[:60]!r}")
            pairs.append((fields[0].strip(), fields[1].strip()))
    return pairs


def _images(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


class TinyImageNetDataModule(VisionDataModule):
    """Tiny ImageNet: 100,000 train / 10,000 val images, 64 px, 200 classes."""

    name = "tiny_imagenet"
    native_size = 64
    default_img_size = 64
    # paper 004 App. G: "normalized using ImageNet mean and standard deviation"
    default_mean = (0.485, 0.456, 0.406)
    default_std = (0.229, 0.224, 0.225)
    num_classes = 200
    in_chans = 3

    def check(self) -> None:
        folder = find_dataset_dir(self.root, FOLDER, "wnids.txt")
        ok = folder is not None and (folder / "train").is_dir() and (folder / "val" / "val_annotations.txt").exists()
        if not ok:
            raise missing_dataset("Tiny ImageNet", self.cfg, self.root / FOLDER, LAYOUT)
        self.folder = folder
        self.classes = read_wnids(folder)
        self.num_classes = len(self.classes)

    def load_source(self, train: bool) -> FileDataset:
        index = {wnid: i for i, wnid in enumerate(self.classes)}
        if train:
            samples = [
                (path, index[wnid])
                for wnid in self.classes
                if (self.folder / "train" / wnid / "images").is_dir()
                for path in _images(self.folder / "train" / wnid / "images")
            ]
        else:
            pairs = read_val_annotations(self.folder)
            unknown = sorted({wnid for _, wnid in pairs if wnid not in index})
            if unknown:
                raise corrupt(
                    self.folder / "val" / "val_annotations.txt", f"names wnids missing from wnids.txt: {unknown[:5]}"
                )
            images = self.folder / "val" / "images"
            samples = [(images / name, index[wnid]) for name, wnid in pairs]
        if not samples:
            raise missing_dataset("Tiny ImageNet images", self.cfg, self.folder, LAYOUT)
        dataset = FileDataset(samples)
        dataset.classes = self.classes
        return dataset
