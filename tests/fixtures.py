"""Tiny datasets in the exact on-disk formats of the real ones (no download, no network)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch
from PIL import Image

CIFAR_TRAIN_PER_CLASS = 2  # per batch file, so 10 per class over the 5 batches
CIFAR_TEST_PER_CLASS = 3
TINY_WNIDS = ["n04000000", "n01000000", "n03000000", "n02000000"]  # unsorted on purpose


def cifar_pixel(label: int, k: int) -> int:
    """A fixture image is constant; its value encodes the label (and a per-image offset)."""
    return 20 * label + k


def colour(label: int) -> tuple[int, int, int]:
    """Flat, well-separated colours so JPEG images are recognisable after compression."""
    return (40 + 50 * label, 200 - 40 * label, 30 + 60 * (label % 2))


def write_cifar10(root: Path) -> Path:
    """CIFAR-10 as torchvision stores it: cifar-10-batches-py/data_batch_1..5, test_batch, batches.meta."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir()

    def batch(per_class: int, offset: int, name: str) -> None:
        labels = [c for c in range(10) for _ in range(per_class)]
        pixels = [cifar_pixel(c, offset + k) for c in range(10) for k in range(per_class)]
        # rows of 3072 uint8: 1024 R, 1024 G, 1024 B (row-major 32x32), as the real files
        rows = np.stack([np.full(3072, v, dtype=np.uint8) for v in pixels])
        entry = {
            b"batch_label": name.encode(),
            b"labels": labels,
            b"data": rows,
            b"filenames": [f"{i}.png".encode() for i in range(len(labels))],
        }
        with open(folder / name, "wb") as f:
            pickle.dump(entry, f)

    for i in range(1, 6):
        batch(CIFAR_TRAIN_PER_CLASS, 2 * (i - 1), f"data_batch_{i}")
    batch(CIFAR_TEST_PER_CLASS, 15, "test_batch")
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": names, b"num_cases_per_batch": 20, b"num_vis": 3072}, f)
    return root


def write_tiny_imagenet(root: Path) -> Path:
    """tiny-imagenet-200/: wnids.txt, train/<wnid>/images/*.JPEG, val/images + val_annotations.txt."""
    folder = root / "tiny-imagenet-200"
    (folder / "val" / "images").mkdir(parents=True)
    (folder / "wnids.txt").write_text("\n".join(TINY_WNIDS) + "\n")
    by_sorted = sorted(TINY_WNIDS)
    for wnid in TINY_WNIDS:
        images = folder / "train" / wnid / "images"
        images.mkdir(parents=True)
        for k in range(5):
            Image.new("RGB", (64, 64), colour(by_sorted.index(wnid))).save(images / f"{wnid}_{k}.JPEG")
        (folder / "train" / wnid / f"{wnid}_boxes.txt").write_text("")
    lines = []
    for k in range(8):
        wnid = TINY_WNIDS[k % 4]
        name = f"val_{k}.JPEG"
        img = Image.new("RGB", (64, 64), colour(by_sorted.index(wnid)))
        if k == 0:  # Tiny ImageNet holds grayscale JPEGs too; they must come out RGB
            img = img.convert("L")
        img.save(folder / "val" / "images" / name)
        lines.append(f"{name}\t{wnid}\t0\t0\t63\t63")
    (folder / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return root


def write_imagenet(root: Path) -> Path:
    """imagenet/train/<class>/*.JPEG and imagenet/val/<class>/*.JPEG (ImageFolder)."""
    classes = ["n01440764", "n01443537", "n01484850"]
    for split, n in (("train", 3), ("val", 2)):
        for c, name in enumerate(classes):
            if split == "val" and c == 1:
                continue  # a val folder missing a class must not shift the other labels
            folder = root / "imagenet" / split / name
            folder.mkdir(parents=True)
            for k in range(n):
                Image.new("RGB", (80 + 10 * k, 60), colour(c)).save(folder / f"{name}_{k}.JPEG")
    return root


def gradcheck_module(act: torch.nn.Module, x: torch.Tensor, **kwargs) -> bool:
    """float64 `gradcheck` of `act` with respect to its input and every learnable coefficient."""
    names = [n for n, p in act.named_parameters() if p.requires_grad]
    assert names, f"{type(act).__name__} has no learnable coefficients"
    coefficients = [act.get_parameter(n).detach().clone().requires_grad_(True) for n in names]

    def f(x, *cs):
        return torch.func.functional_call(act, dict(zip(names, cs)), (x,))

    return torch.autograd.gradcheck(f, (x.detach().clone().requires_grad_(True), *coefficients), **kwargs)


def derivative(module: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """F(x) and F'(x) of an elementwise module, by autograd."""
    x = x.clone().requires_grad_(True)
    y = module(x)
    (dy,) = torch.autograd.grad(y.sum(), x)
    return y.detach(), dy


def check_fit(act: torch.nn.Module, target: str, tolerance: tuple[float, float]) -> list:
    """Fit `act` to `target` three times; every fit within `tolerance` (sup errors of F and F' on
    [-3, 3]) and the module's dtype and train/eval mode restored. Returns the three FitResults.

    How long a fit takes is measured by `visionbench bench fit` (docs/bench.md), not asserted here:
    a time bound fails on a loaded CI machine for nothing."""
    dtype, training = next(act.parameters()).dtype, act.training
    results = [act.fit(target) for _ in range(3)]
    for r in results:
        assert r.max_abs_error <= tolerance[0] and r.max_abs_deriv_error <= tolerance[1], r
    assert next(act.parameters()).dtype == dtype and act.training == training
    return results
