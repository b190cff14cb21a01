"""The recipe's `data:` block, merged over the schema's defaults, validated and typed.

    >>> cfg = DataConfig.from_mapping({"name": "cifar10", "augment": {"crop_pad": 4, "hflip": 0.5}})
    >>> cfg.augment.crop_pad        # 4; every other key keeps its schema default

The schema (`visionbench/schema.py`, the recipes' `_base`) is the single source of the defaults,
so a partial dict (tests, notebooks) means exactly what the same keys mean in a recipe; an
unknown key is an error, as in the runner.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..schema import defaults

DATA_ENV_VAR = "VISIONBENCH_DATA"
# epoch of the repeated-augmentation sampler: K x N samples (004 code) or N samples (DeiT/timm)
REPEATED_AUG_EPOCHS = ("expand", "deit")


def data_defaults() -> dict[str, Any]:
    """The `data:` block of the schema's defaults (visionbench/schema.py)."""
    return defaults()["data"]


def to_plain(cfg: Any) -> Any:
    """A plain dict/list tree from a Mapping or an OmegaConf container (interpolations resolved)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(cfg, (DictConfig, ListConfig)):
            return OmegaConf.to_container(cfg, resolve=True)
    except ImportError:  # omegaconf comes with hydra-core; plain dicts work without it
        pass
    if isinstance(cfg, Mapping):
        return {str(k): to_plain(v) for k, v in cfg.items()}
    if isinstance(cfg, (list, tuple)):
        return [to_plain(v) for v in cfg]
    return cfg


def merge(defaults: Mapping, overrides: Mapping, path: str = "data") -> dict[str, Any]:
    """`overrides` laid over `defaults`, recursively; ValueError on a key `defaults` lacks."""
    out = dict(defaults)
    for key, value in overrides.items():
        if key not in defaults:
            known = ", ".join(sorted(defaults))
            raise ValueError(f"unknown key {path}.{key}; known keys of {path}: {known}")
        if isinstance(defaults[key], Mapping) and isinstance(value, Mapping):
            out[key] = merge(defaults[key], value, f"{path}.{key}")
        else:
            out[key] = value
    return out


def _optional_positive_int(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name} must be null or an integer >= 1, got {value!r}")
    return int(value)


AUTO_AUGMENT_IMPLS = ("timm", "torchvision")
TV_MAGNITUDE_MAX = 30  # torchvision RandAugment: num_magnitude_bins 31 -> magnitudes 0..30


def rand_augment_ops(policy: str) -> tuple[int, int]:
    """(num_ops, magnitude) of a `rand-nN-mM` string for torchvision's RandAugment (defaults 2, 9).

    Only n and m exist there; timm's other fields (mstd, inc, mmax, ...) have no torchvision
    counterpart and are refused rather than silently dropped.
    """
    parts = policy.split("-")
    ops = {"n": 2, "m": 9}
    bad = ValueError(f"data.augment.auto_augment {policy!r} with auto_augment_impl torchvision must be "
                     f"rand[-nN][-mM] (N >= 0 ops, magnitude 0 <= M <= {TV_MAGNITUDE_MAX})")
    if parts[0] != "rand":
        raise bad
    for part in parts[1:]:
        if part[:1] not in ops or not part[1:].isdigit():
            raise bad
        ops[part[0]] = int(part[1:])
    if ops["m"] > TV_MAGNITUDE_MAX:
        raise bad
    return ops["n"], ops["m"]


def _color_jitter(value: Any) -> tuple[float, float, float, float] | None:
    """(brightness, contrast, saturation, hue) from null, one number (b = c = s, hue 0, as timm) or a list of 3/4."""
    if value is None:
        return None
    values = [value] * 3 if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    if not isinstance(values, (list, tuple)) or len(values) not in (3, 4) or \
            not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise ValueError(f"data.augment.color_jitter must be null, a number or [brightness, contrast, saturation"
                         f"(, hue)], got {value!r}")
    b, c, s, *h = (float(v) for v in values)
    return b, c, s, (h[0] if h else 0.0)


@dataclass(frozen=True)
class AugmentConfig:
    """`data.augment`: training-time augmentation (see `transforms.build_train_transform`)."""

    crop_pad: int
    scale: tuple[float, float] | None
    hflip: float
    auto_augment: str | None
    re_prob: float
    re_mode: str
    repeated_aug: float
    color_jitter: tuple[float, float, float, float] | None
    auto_augment_impl: str
    repeated_aug_epoch: str

    def __post_init__(self):
        self._check_color_and_impl()
        if self.crop_pad and self.scale is not None:
            # ConvNeXt/DeiT swap random-resized-crop for a padded crop at <= 32 px: one or the other
            raise ValueError("data.augment.crop_pad and data.augment.scale are alternatives; set only one")
        if self.scale is not None and (len(self.scale) != 2 or not 0 < self.scale[0] <= self.scale[1] <= 1):
            raise ValueError(f"data.augment.scale must be [min, max] with 0 < min <= max <= 1, got {self.scale!r}")
        if not 0.0 <= self.hflip <= 1.0 or not 0.0 <= self.re_prob <= 1.0:
            raise ValueError("data.augment.hflip and data.augment.re_prob are probabilities in [0, 1]")
        if self.re_mode not in ("const", "rand", "pixel"):
            raise ValueError(f"data.augment.re_mode must be const, rand or pixel, got {self.re_mode!r}")
        if self.repeated_aug < 1:
            raise ValueError(f"data.augment.repeated_aug must be >= 1, got {self.repeated_aug!r}")
        if self.repeated_aug_epoch not in REPEATED_AUG_EPOCHS:
            raise ValueError(f"data.augment.repeated_aug_epoch must be one of {', '.join(REPEATED_AUG_EPOCHS)}, "
                             f"got {self.repeated_aug_epoch!r}")
        if self.repeated_aug_epoch == "expand" and not float(self.repeated_aug).is_integer():
            raise ValueError(f"data.augment.repeated_aug must be an integer with repeated_aug_epoch=expand "
                             f"(each image that many times), got {self.repeated_aug!r}; fractional: deit")

    def _check_color_and_impl(self) -> None:
        if self.color_jitter is not None and (min(self.color_jitter) < 0 or self.color_jitter[3] > 0.5):
            raise ValueError(f"data.augment.color_jitter values must be >= 0 and hue <= 0.5, got {self.color_jitter!r}")
        if self.auto_augment_impl not in AUTO_AUGMENT_IMPLS:
            raise ValueError(f"data.augment.auto_augment_impl must be {' or '.join(AUTO_AUGMENT_IMPLS)}, "
                             f"got {self.auto_augment_impl!r}")
        if self.auto_augment and self.auto_augment_impl == "torchvision":
            rand_augment_ops(self.auto_augment)

    @property
    def enabled(self) -> bool:
        """True when any random transform is on (repeated_aug alone draws no randomness)."""
        jitter = self.color_jitter is not None and any(self.color_jitter)
        return bool(self.crop_pad or self.scale or self.hflip or self.auto_augment or self.re_prob or jitter)


@dataclass(frozen=True)
class SyntheticConfig:
    """`data.synthetic`: sizes of the random dataset used for speed tests."""

    num_train: int
    num_val: int
    num_classes: int
    img_size: int
    in_chans: int


@dataclass(frozen=True)
class DataConfig:
    """The whole `data:` block; build it with `DataConfig.from_mapping`."""

    name: str
    root: str | None
    download: bool
    img_size: int | None
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    val_split: float
    num_workers: int
    limit_train: int | None
    limit_val: int | None
    augment: AugmentConfig
    synthetic: SyntheticConfig

    @classmethod
    def from_mapping(cls, data_cfg: Mapping | None) -> DataConfig:
        """Merge `data_cfg` (dict or DictConfig, possibly partial) over the defaults and validate."""
        d = merge(data_defaults(), to_plain(data_cfg or {}))
        aug = dict(d["augment"])
        aug["scale"] = tuple(float(s) for s in aug["scale"]) if aug["scale"] is not None else None
        aug["hflip"], aug["re_prob"] = float(aug["hflip"]), float(aug["re_prob"])
        aug["crop_pad"] = int(aug["crop_pad"] or 0)
        aug["color_jitter"] = _color_jitter(aug["color_jitter"])
        aug["auto_augment_impl"] = str(aug["auto_augment_impl"]).lower()
        val_split = float(d["val_split"] or 0.0)
        if not 0.0 <= val_split < 1.0:
            raise ValueError(f"data.val_split must be in [0, 1), got {val_split!r}")
        if int(d["num_workers"]) < 0:
            raise ValueError(f"data.num_workers must be >= 0, got {d['num_workers']!r}")
        return cls(
            name=str(d["name"]).lower(),
            root=None if d["root"] is None else str(d["root"]),
            download=bool(d["download"]),
            img_size=_optional_positive_int("data.img_size", d["img_size"]),
            mean=None if d["mean"] is None else tuple(float(m) for m in d["mean"]),
            std=None if d["std"] is None else tuple(float(s) for s in d["std"]),
            val_split=val_split,
            num_workers=int(d["num_workers"]),
            limit_train=_optional_positive_int("data.limit_train", d["limit_train"]),
            limit_val=_optional_positive_int("data.limit_val", d["limit_val"]),
            augment=AugmentConfig(**aug),
            synthetic=SyntheticConfig(**{k: int(v) for k, v in d["synthetic"].items()}),
        )

    def root_dir(self) -> Path:
        """Where datasets live: `data.root`, else `$VISIONBENCH_DATA`, else `./data` (absolute)."""
        root = self.root or os.environ.get(DATA_ENV_VAR) or "data"
        return Path(root).expanduser().resolve()

    def root_source(self) -> str:
        """Which setting chose `root_dir()`, for error messages."""
        if self.root:
            return "data.root"
        if os.environ.get(DATA_ENV_VAR):
            return f"${DATA_ENV_VAR} (data.root is null)"
        return f"the default ./data (data.root is null and ${DATA_ENV_VAR} unset)"
