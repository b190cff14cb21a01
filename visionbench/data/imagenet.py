"""ImageNet-1k in the torchvision ImageFolder layout.

    <data.root>/imagenet/train/<class>/*.JPEG    (or data.root itself holding train/ and val/)
    <data.root>/imagenet/val/<class>/*.JPEG      the 50,000 validation images, sorted into class folders

    visionbench run recipe=imagenet_convnext_t data.root=/datasets

Files are indexed with torchvision's ImageFolder scanning; the val set reuses the train
class-to-index map, so a val folder missing a class cannot shift the labels.
Default eval: resize to 224 / 0.875 = 256, center crop 224 (timm's `create_transform`).
"""

from __future__ import annotations

from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

from .base import VisionDataModule
from .datasets import FileDataset, find_dataset_dir, missing_dataset

FOLDER = "imagenet"
LAYOUT = f"    {FOLDER}/train/<class>/*.JPEG\n    {FOLDER}/val/<class>/*.JPEG  (val images sorted into class folders)"


class ImageNetDataModule(VisionDataModule):
    """ImageNet-1k: 1.28 M train / 50,000 val images, 1000 classes, default 224 px."""

    name = "imagenet"
    native_size = None  # sizes vary: random-resized-crop / resize + center crop
    default_img_size = 224
    default_mean = (0.485, 0.456, 0.406)  # timm IMAGENET_DEFAULT_MEAN / _STD
    default_std = (0.229, 0.224, 0.225)
    num_classes = 1000
    in_chans = 3

    def check(self) -> None:
        folder = find_dataset_dir(self.root, FOLDER, "train")
        if folder is None or not (folder / "val").is_dir():
            raise missing_dataset("ImageNet", self.cfg, self.root / FOLDER, LAYOUT)
        self.folder = folder
        # class folders are listed (not scanned for files) here: cheap enough at construction
        self.classes, self.class_to_idx = find_classes(folder / "train")
        self.num_classes = len(self.classes)

    def load_source(self, train: bool) -> FileDataset:
        split = "train" if train else "val"
        samples = make_dataset(
            str(self.folder / split), self.class_to_idx, extensions=IMG_EXTENSIONS, allow_empty=not train
        )
        if not samples:
            raise missing_dataset(f"ImageNet {split} images", self.cfg, self.folder / split, LAYOUT)
        dataset = FileDataset(samples)
        dataset.classes = self.classes
        return dataset
