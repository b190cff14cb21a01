"""The recipe's `data:` block, merged over `_base.yaml` defaults, validated and typed.

    >>> cfg = DataConfig.from_mapping({"name": "cifar10", "augment": {"crop_pad": 4, "hflip": 0.5}})
    >>> cfg.augment.crop_pad        # 4; every other key keeps its _base.yaml default

`_base.yaml` is the single source of the defaults, so a partial dict (tests, notebooks) means
exactly what the same keys mean in a recipe; an unknown key is an error, as in the runner.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

BASE_RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "_base.yaml"
DATA_ENV_VAR = "VISIONBENCH_DATA"


@functools.lru_cache(maxsize=1)
def data_defaults() -> dict[str, Any]:
    """The `data:` block of `_base.yaml` (a fresh copy is made by `merge`)."""
    with open(BASE_RECIPE) as f:
        return yaml.safe_load(f)["data"]


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

    def __post_init__(self):
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

    @property
    def enabled(self) -> bool:
        """True when any random transform is on (repeated_aug alone draws no randomness)."""
        return bool(self.crop_pad or self.scale or self.hflip or self.auto_augment or self.re_prob)


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
