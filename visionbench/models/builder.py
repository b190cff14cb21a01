"""timm's builder around visionbench's own networks (the CIFAR VGGs and ResNet-32, the Fashion-MNIST
nets), so `timm.create_model("vb_vgg8", features_only=True)` works as for timm's models.

    return build(VGG, "vb_vgg8", pretrained, out_indices=(0, 1, 2, 3), stages=...)
"""

from __future__ import annotations

from typing import Any

from timm.models import build_model_with_cfg
from torch import nn


def build(cls: type[nn.Module], name: str, pretrained: bool, out_indices: tuple[int, ...], **kwargs: Any) -> nn.Module:
    """`cls(**kwargs)` through `build_model_with_cfg`; `features_only` returns the maps at `out_indices`
    unless the caller passes its own. None of these networks has pretrained weights: ValueError."""
    if pretrained:
        raise ValueError(f"{name} has no pretrained weights")
    out_indices = kwargs.pop("out_indices", out_indices)
    return build_model_with_cfg(
        cls, name, pretrained, feature_cfg=dict(flatten_sequential=True, out_indices=out_indices), **kwargs
    )
