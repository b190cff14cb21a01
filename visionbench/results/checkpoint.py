"""The format of a run's checkpoints (`checkpoints/last.ckpt`, `best.ckpt`): Lightning checkpoints of
`train.module.ClassificationModule`, with the run's config.yaml one folder up.

The one place that knows Lightning's checkpoint markers and the module's attribute names, so that
`models/` reads a run's weights without knowing either (models/pretrained.py asks `run_weights`), and the
one way a run's checkpoint is read: `load`, tensors and plain values only (`weights_only=True`). A checkpoint
is data from wherever the run directory came from; one that pickles anything else (a class, a call such as
`os.system`) is refused in one line naming the file, and nothing in it is run. Depends on nothing of
visionbench but results/ (torch is imported only to read a file).
"""

from __future__ import annotations

import contextlib
import pickle
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .io import RunStateError
from .layout import files, run_for_checkpoint, trained_with

LIGHTNING_MARKER = "pytorch-lightning_version"  # a key of every checkpoint Lightning saves
# ClassificationModule's attributes: `model` (the network) and `ema` (timm ModelEmaV3, the copy in `.module`)
MODEL_PREFIX, EMA_PREFIX = "model.", "ema.module."
# What a weights_only load of our own checkpoints needs beyond torch's own allow-list (tensors, dicts, lists,
# tuples, numbers, strings, OrderedDict, dtypes): nothing. Lightning's checkpoint of ClassificationModule — the
# state dict, loops, each callback's state (ModelCheckpoint, PredictionsWriter's arrays, ...), the optimizer's
# and LambdaLR's states, the data module's epoch — holds only those (tests/test_safe_checkpoints.py reads a real
# run's checkpoints with torch's scanner). A global added here is one more thing a planted checkpoint may build.
SAFE_GLOBALS: tuple = ()


class UnsafeCheckpoint(RunStateError):
    """A checkpoint that pickles more than tensors and plain values: refused before anything in it is built."""


@contextlib.contextmanager
def allowed() -> Iterator[None]:
    """`SAFE_GLOBALS` allowed to a weights_only load in this block (Lightning's own resume load runs in one)."""
    import torch

    with torch.serialization.safe_globals(list(SAFE_GLOBALS)):
        yield


def load(path: Path, fix: str = "delete it if it is not yours") -> Any:
    """A run checkpoint's content, read with `weights_only=True` (mmap: tensors are read when used).

    Raises:
        UnsafeCheckpoint: it pickles a global torch does not allow, e.g. `posix.system` (one line: the file, the
            global, `fix`); the unpickler refuses at the global, so nothing is called.
        RunStateError: it is no readable torch file (torn, truncated, another format), naming it and `fix`.
    """
    import torch

    try:
        with allowed():
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:
        text = str(e)
        if "weights only" in text.lower() or "weights_only" in text:
            found = re.search(r"GLOBAL ([\w.]+)", text)  # "Trying to load unsupported GLOBAL posix.system ..."
            what = f"pickles {found.group(1)}" if found else f"pickles more than tensors ({_why_refused(text)})"
            raise UnsafeCheckpoint(
                f"{path} is refused, not loaded: it {what}, code rather than data (a visionbench "
                f"checkpoint holds tensors and plain values only); {fix}"
            ) from None
        raise RunStateError(f"{path} is unreadable ({type(e).__name__}: {_first_line(text)}); {fix}") from None
    except Exception as e:  # noqa: BLE001 - torch reports a torn file in many ways
        raise RunStateError(f"{path} is unreadable ({type(e).__name__}: {_first_line(str(e))}); {fix}") from None


def _why_refused(text: str) -> str:
    """torch's reason among its weights_only message's boilerplate (the PyTorch 2.6 note, the docs link)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    why = [
        ln
        for ln in lines
        if not ln.startswith(("Weights only load failed", "Check the documentation", "Please file an issue"))
    ]
    return _first_line(why[0] if why else text)


def _first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0][:120] if text else "no message"


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
    state = {k[len(prefix) :]: v for k, v in full.items() if k.startswith(prefix)}
    if not state:
        what = "EMA weights (ema.module.*; the run had ema.decay unset)" if ema else "network weights (model.*)"
        raise ValueError(
            f"{path} holds no {what}; its keys start with {', '.join(sorted({k.split('.')[0] for k in full}))}"
        )
    config, where = _config_of(Path(path))
    if config is None:
        return RunWeights(
            state,
            missing_config=f"a visionbench checkpoint without its run's config.yaml (looked in "
            f"{where[0]} and {where[1]})",
        )
    act, act_kwargs, model_name = trained_with(config)
    return RunWeights(state, act, act_kwargs, model_name)


def checkpoint_epoch(path: Path) -> int:
    """The number of epochs a checkpoint has completed, read as data only (`load`): before Lightning resumes from
    it, so that a checkpoint pickling code is refused here; `RunStateError` naming the file if it is unreadable,
    `UnsafeCheckpoint` if it pickles more than data."""
    fix = "delete it to retrain this run from its first epoch"
    obj = load(path, fix)
    try:
        return int(obj["epoch"]) + 1
    except (TypeError, KeyError, ValueError, IndexError) as e:
        raise RunStateError(f"{path} is unreadable (no epoch in it: {type(e).__name__}); {fix}") from None
