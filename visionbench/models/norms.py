"""Normalisation toggles: GroupNorm sized by paper 004's rule, and norm-free transformer blocks.

>>> norms.group_norm(48)              # GroupNorm(16 groups, 48 channels)
>>> norms.make_norm_free(vit)         # ['blocks.0.norm1', 'blocks.0.norm2', ...]
"""

from __future__ import annotations

from torch import nn

MAX_GROUPS = 16  # paper 004 App E / Table 6: "16, adjusted to divide channels"


def num_groups(channels: int, max_groups: int = MAX_GROUPS) -> int:
    """The largest divisor of `channels` that is <= `max_groups` (paper 004 App E)."""
    channels = int(channels)
    if channels < 1:
        raise ValueError(f"channels must be >= 1, got {channels}")
    return max(g for g in range(1, min(max_groups, channels) + 1) if channels % g == 0)


def group_norm(channels: int, max_groups: int = MAX_GROUPS) -> nn.GroupNorm:
    """GroupNorm over `channels` with `num_groups(channels)` groups, affine, PyTorch's eps."""
    return nn.GroupNorm(num_groups(channels, max_groups), channels)


def batch_norm(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels)


NORMS = {"group": group_norm, "batch": batch_norm}


def norm_factory(norm: str | None):
    """The per-channel norm constructor for `norm` (None = no norm layer); ValueError on unknown names."""
    if norm is None:
        return None
    if norm not in NORMS:
        raise ValueError(f"unknown norm {norm!r}; accepted: {', '.join(sorted(NORMS))} or None")
    return NORMS[norm]


def make_norm_free(model: nn.Module) -> list[str]:
    """Replace `norm1` and `norm2` of every transformer block by Identity (paper 004 App G).

    A block is any module holding both a `norm1` and a `norm2` submodule (timm's ViT `Block`,
    CaiT's `LayerScaleBlock` and `LayerScaleBlockClassAttn`, Swin's `SwinTransformerBlock`).
    Norms outside the blocks (patch embedding, patch merging, the final `norm`) are kept, as in
    the paper, which bypasses only `block.norm1` and `block.norm2`.

    Returns:
        The paths of the replaced norm modules; ValueError if there were none.
    """
    replaced: list[str] = []
    for path, module in list(model.named_modules()):
        norm1, norm2 = getattr(module, "norm1", None), getattr(module, "norm2", None)
        if not (isinstance(norm1, nn.Module) and isinstance(norm2, nn.Module)):
            continue
        for attr in ("norm1", "norm2"):
            if not isinstance(getattr(module, attr), nn.Identity):
                setattr(module, attr, nn.Identity())
                replaced.append(f"{path}.{attr}" if path else attr)
    if not replaced:
        raise ValueError(f"{type(model).__name__} has no blocks with norm1/norm2 to bypass")
    return replaced
