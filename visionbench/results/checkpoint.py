"""The format of a run's checkpoints (`checkpoints/last.ckpt`, `best.ckpt`): Lightning checkpoints of
`train.module.ClassificationModule`, with the run's config.yaml one folder up.

The one place that knows Lightning's checkpoint markers and the module's attribute names, so that
`models/` reads a run's weights without knowing either (models/pretrained.py asks `run_weights`).
Depends on nothing of visionbench (torch is imported only to read an epoch).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .io import RunStateError
from .layout import files, run_for_checkpoint, trained_with

LIGHTNING_MARKER = "pytorch-lightning_version"  # a key of every checkpoint Lightning saves
# ClassificationModule's attributes: `model` (the network) and `ema` (timm ModelEmaV3, the copy in `.module`)
MODEL_PREFIX, EMA_PREFIX = "model.", "ema.module."


@dataclass
class RunWeights:
    """The network (or its EMA copy) of a run checkpoint and what its run's config.yaml says trained it."""

    state_dict: dict[str, Any]
    act: str | None = None
    act_kwargs: dict[str, Any] = field(default_factory=dict)
    model_name: str | None = None
    missing_config: str | None = None  # why `act` is unknown: where config.yaml was looked for


def is_run_checkpoint(obj: Any) -> bool:
    return isinstance(obj, dict) and LIGHTNING_MARKER in obj and isinstance(obj.get("state_dict"), dict)


def _config_of(path: Path) -> tuple[dict | None, tuple[Path, Path]]:
    # runs/<recipe>/<act>/seed_<k>/checkpoints/last.ckpt -> seed_<k>/config.yaml (or a copy beside the file)
    where = (run_for_checkpoint(path), path.parent)
    for folder in where:
        if files(folder).config.is_file():
            return yaml.safe_load(files(folder).config.read_text()), where
    return None, where


def run_weights(obj: Any, path: Path, ema: bool = False) -> RunWeights | None:
    """The weights in a loaded run checkpoint `obj` (None if `obj` is no run checkpoint); ValueError
    naming the file when it holds no network (or no EMA copy, with `ema`)."""
    if not is_run_checkpoint(obj):
        return None
    full = obj["state_dict"]
    prefix = EMA_PREFIX if ema else MODEL_PREFIX
    state = {k[len(prefix):]: v for k, v in full.items() if k.startswith(prefix)}
    if not state:
        what = "EMA weights (ema.module.*; the run had ema.decay unset)" if ema else "network weights (model.*)"
        raise ValueError(f"{path} holds no {what}; its keys start with "
                         f"{', '.join(sorted({k.split('.')[0] for k in full}))}")
    config, where = _config_of(Path(path))
    if config is None:
        return RunWeights(state, missing_config=f"a visionbench checkpoint without its run's config.yaml (looked in "
                                                f"{where[0]} and {where[1]})")
    act, act_kwargs, model_name = trained_with(config)
    return RunWeights(state, act, act_kwargs, model_name)


def checkpoint_epoch(path: Path) -> int:
    """The number of epochs a checkpoint has completed; `RunStateError` naming the file if it is unreadable."""
    import torch

    try:  # mmap: only the header and the epoch are read
        return int(torch.load(path, map_location="cpu", weights_only=False, mmap=True)["epoch"]) + 1
    except Exception as e:  # noqa: BLE001 - torch reports a torn file in many ways
        raise RunStateError(f"{path} is unreadable ({type(e).__name__}: {str(e).splitlines()[0][:120]}); "
                            "delete it to retrain this run from its first epoch") from None
