"""Train and eval image transforms from `data.augment`, built from timm's pieces.

Two training styles, as in the papers' code:
- CIFAR style (`crop_pad`): RandomCrop(img_size, padding) + flip (paper 004 Table 6); this is
  also what ConvNeXt/DeiT's `build_transform` does at <= 32 px (random-resized-crop swapped
  for a padded crop), followed by RandAugment and random erasing (paper 001 Table 8).
- ImageNet style (`scale`): timm's `create_transform` (random-resized-crop, flip, RandAugment,
  random erasing), the DeiT/ConvNeXt recipe.

Both styles may add colour jitter and an auto-augment policy, in that order (the 004 Tiny ImageNet
code: ColorJitter, then torchvision's RandAugment; timm instead drops jitter under RandAugment).
`auto_augment_impl` picks whose RandAugment: timm's (magnitude out of 10, extra ops, mean fill)
or torchvision's (magnitude out of 30, black fill, nearest: what the 004 code ran).

Every transform takes a PIL image and returns a normalised float tensor (C, H, W).
Mixup/CutMix are batch operations and live in the LightningModule, not here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PIL import Image
from timm.data import create_transform
from timm.data.auto_augment import augment_and_mix_transform, auto_augment_transform, rand_augment_transform
from timm.data.auto_augment import posterize as _timm_posterize
from timm.data.random_erasing import RandomErasing
from timm.data.transforms import MaybeToTensor, str_to_interp_mode, str_to_pil_interp
from torchvision import transforms as T

from ..config import AugmentConfig, rand_augment_ops
from ..config.rules import is_number

INTERPOLATION = "bicubic"  # timm's default for the DeiT/ConvNeXt recipes
EVAL_CROP_PCT = 0.875  # the standard ImageNet eval: resize 256, center-crop 224


def _resize(img_size: int, native_size: int | None, interpolation: str) -> list[Callable]:
    """Resize to `img_size` only when the source is not already that size."""
    if native_size == img_size:
        return []
    tfl = [T.Resize(img_size, interpolation=str_to_interp_mode(interpolation))]
    if native_size is None:  # sizes and aspect ratios vary: crop the resized shorter side square
        tfl.append(T.CenterCrop(img_size))
    return tfl


def _normalize(mean: Sequence[float], std: Sequence[float]) -> list[Callable]:
    return [MaybeToTensor(), T.Normalize(mean=list(mean), std=list(std))]


def _posterize(img: Image.Image, bits_to_keep: int, **kwargs) -> Image.Image:
    """timm's posterize, also for 0 bits: a black image, as Pillow gave before it refused bits < 1.

    timm's 'inc1' RandAugment asks for 0 bits whenever the sampled magnitude reaches 10
    (m9 + mstd0.5 does so ~2 % of the time); Pillow 13 raises ValueError there instead.
    """
    if bits_to_keep < 1:
        return Image.new(img.mode, img.size)
    return _timm_posterize(img, bits_to_keep, **kwargs)


def _patch_posterize(transform):
    ops = list(getattr(transform, "ops", [])) + [op for sub in getattr(transform, "policy", []) for op in sub]
    for op in ops:
        if getattr(op, "aug_fn", None) is _timm_posterize:
            op.aug_fn = _posterize
    return transform


def auto_augment(policy: str, img_size: int, mean: Sequence[float], interpolation: str = INTERPOLATION):
    """timm's RandAugment / AugMix / AutoAugment from a timm policy string (`rand-m9-mstd0.5-inc1`).

    The parameters are the ones timm's `create_transform` passes: translations up to 45 % of
    the image, fill colour = the dataset mean.
    """
    params = dict(
        translate_const=int(img_size * 0.45),
        img_mean=tuple(min(255, round(255 * m)) for m in mean),
        interpolation=str_to_pil_interp(interpolation),
    )
    if policy.startswith("rand"):
        return _patch_posterize(rand_augment_transform(policy, params))
    if policy.startswith("augmix"):
        params["translate_pct"] = 0.3
        return _patch_posterize(augment_and_mix_transform(policy, params))
    return _patch_posterize(auto_augment_transform(policy, params))


def torchvision_rand_augment(policy: str) -> T.RandAugment:
    """torchvision's RandAugment from `rand-nN-mM` (004 code: `T.RandAugment(num_ops=2, magnitude=9)`).

    Everything else keeps torchvision's defaults, as the 004 code's call did: 31 magnitude bins
    (m9 = 9/30 of each op's range), nearest interpolation, fill None = black.
    """
    num_ops, magnitude = rand_augment_ops(policy)
    return T.RandAugment(num_ops=num_ops, magnitude=magnitude)


def jitter_of(aug: AugmentConfig) -> tuple[float, float, float, float] | None:
    """(brightness, contrast, saturation, hue) of `aug.color_jitter` (b: b, b, b, hue 0), None when off."""
    v = [aug.color_jitter] * 3 if is_number(aug.color_jitter) else aug.color_jitter
    return None if v is None else (*map(float, v[:3]), float(v[3]) if len(v) > 3 else 0.0)


def is_random(aug: AugmentConfig) -> bool:
    """True when any random transform is on (repeated_aug alone draws no randomness)."""
    return bool(aug.crop_pad or aug.scale or aug.hflip or aug.auto_augment or aug.re_prob or any(jitter_of(aug) or ()))


def colour_and_auto_augment(
    aug: AugmentConfig, img_size: int, mean: Sequence[float], interpolation: str = INTERPOLATION
) -> list[Callable]:
    """ColorJitter (if set), then the auto-augment policy (if set): the 004 code's order."""
    tfl: list[Callable] = []
    jitter = jitter_of(aug)
    if jitter is not None:
        brightness, contrast, saturation, hue = jitter
        tfl.append(T.ColorJitter(brightness=brightness, contrast=contrast, saturation=saturation, hue=hue))
    if aug.auto_augment and aug.auto_augment_impl == "torchvision":
        tfl.append(torchvision_rand_augment(aug.auto_augment))
    elif aug.auto_augment:
        tfl.append(auto_augment(aug.auto_augment, img_size, mean, interpolation))
    return tfl


def build_train_transform(
    aug: AugmentConfig,
    img_size: int,
    mean: Sequence[float],
    std: Sequence[float],
    native_size: int | None,
    interpolation: str = INTERPOLATION,
) -> Callable:
    """The training transform of a recipe.

    Args:
        aug: the `data.augment` block.
        img_size: output side length.
        mean: per-channel normalisation mean (also RandAugment's fill colour).
        std: per-channel normalisation std.
        native_size: side length of the (square) source images, None when sizes vary.
        interpolation: resize interpolation.

    Returns:
        A callable PIL image -> normalised tensor.
    """
    if aug.scale is not None:
        # timm's crop/flip and tensor/normalise/erasing; the middle (jitter, auto-augment) is ours
        primary, _, final = create_transform(
            img_size,
            is_training=True,
            scale=tuple(aug.scale),
            hflip=aug.hflip,
            color_jitter=None,
            auto_augment=None,
            interpolation=interpolation,
            mean=tuple(mean),
            std=tuple(std),
            re_prob=aug.re_prob,
            re_mode=aug.re_mode,
            separate=True,
        )
        middle = colour_and_auto_augment(aug, img_size, mean, interpolation)
        return T.Compose([*primary.transforms, *middle, *final.transforms])
    tfl = _resize(img_size, native_size, interpolation)
    if aug.crop_pad:
        tfl.append(T.RandomCrop(img_size, padding=aug.crop_pad))
    if aug.hflip > 0:
        tfl.append(T.RandomHorizontalFlip(p=aug.hflip))
    tfl += colour_and_auto_augment(aug, img_size, mean, interpolation)
    tfl += _normalize(mean, std)
    if aug.re_prob > 0:
        # after normalisation, as timm does: 'pixel' mode fills with N(0, 1) in normalised units
        tfl.append(RandomErasing(aug.re_prob, mode=aug.re_mode, device="cpu"))
    return T.Compose(tfl)


def build_eval_transform(
    img_size: int,
    mean: Sequence[float],
    std: Sequence[float],
    native_size: int | None,
    interpolation: str = INTERPOLATION,
    crop_pct: float = EVAL_CROP_PCT,
) -> Callable:
    """The deterministic eval transform (val and test).

    Fixed-size sources are only resized (if needed) and normalised; variable-size sources
    (ImageNet) get timm's standard resize-to-img_size/crop_pct + center crop.
    """
    if native_size is None:
        return create_transform(
            img_size,
            is_training=False,
            crop_pct=crop_pct,
            interpolation=interpolation,
            mean=tuple(mean),
            std=tuple(std),
        )
    return T.Compose(_resize(img_size, native_size, interpolation) + _normalize(mean, std))
