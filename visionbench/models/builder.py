"""timm's builder around visionbench's own networks (the CIFAR VGGs and ResNet-32, the Fashion-MNIST
nets), so `timm.create_model("vb_vgg8", features_only=True)` works as for timm's models; and their registration,
one entrypoint each, with its pretrained cfg (no weights).

    default_cfgs = pretrained_cfgs(VGG_CFGS, first_conv="stages.0.conv1")   # in the network's module
    register(VGG, "vb_vgg8", "VGG8 of paper 004: ...", (0, 1, 2, 3), stages=...)
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from torch import nn

CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)


def build(cls: type[nn.Module], name: str, pretrained: bool, out_indices: tuple[int, ...], **kwargs: Any) -> nn.Module:
    """`cls(**kwargs)` through `build_model_with_cfg`; `features_only` returns the maps at `out_indices`
    unless the caller passes its own. None of these networks has pretrained weights: ValueError."""
    if pretrained:
        raise ValueError(f"{name} has no pretrained weights")
    out_indices = kwargs.pop("out_indices", out_indices)
    return build_model_with_cfg(
        cls, name, pretrained, feature_cfg=dict(flatten_sequential=True, out_indices=out_indices), **kwargs
    )


def pretrained_cfgs(
    names: Iterable[str],
    first_conv: str,
    input_size: tuple[int, int, int] = (3, 32, 32),
    mean: tuple[float, ...] = CIFAR_MEAN,
    std: tuple[float, ...] = CIFAR_STD,
):
    """The `default_cfgs` of a module's networks (timm's registry reads it when an entrypoint registers): ten
    classes, and url "": no weights, so timm never attempts a download."""
    cfg = dict(
        url="",
        num_classes=10,
        input_size=input_size,
        pool_size=None,
        crop_pct=1.0,
        interpolation="bilinear",
        mean=mean,
        std=std,
        first_conv=first_conv,
        classifier="head",
    )
    return generate_default_cfgs({name: dict(cfg) for name in names})


def register(cls: type[nn.Module], name: str, doc: str, out_indices: tuple[int, ...], **fixed: Any):
    """Register the timm entrypoint `name`, `build(cls, name, ...)` with the keyword arguments `fixed` beside the
    caller's, as a function of `cls`'s module (where its `default_cfgs` is and where it is set, under `name`)."""

    def entrypoint(pretrained: bool = False, **kwargs):
        return build(cls, name, pretrained, out_indices, **fixed, **kwargs)

    entrypoint.__name__ = entrypoint.__qualname__ = name
    entrypoint.__module__, entrypoint.__doc__ = cls.__module__, doc
    setattr(sys.modules[cls.__module__], name, entrypoint)
    return register_model(entrypoint)
