"""The determinism a benchmark times under: what a training run sets, so that a table times what a run does.

    visionbench bench activations --deterministic on     # the default: as a run with trainer.deterministic=true
    visionbench bench train recipe=cifar10_vgg8 act=rational --deterministic both   # each setting, one table each

`on` is Lightning's `deterministic="warn"`, which a run sets on CUDA by default (trainer.deterministic=true) and on
any device under trainer.portable (train/trainer.py `determinism`): torch.use_deterministic_algorithms(True,
warn_only=True), which also fills every new buffer of torch.empty with NaN
(torch.utils.deterministic.fill_uninitialized_memory), cuDNN's benchmark off, and cuBLAS's deterministic workspace
(CUBLAS_WORKSPACE_CONFIG, read when CUDA starts). `off` is trainer.deterministic=false on CUDA: no deterministic
algorithms, cuDNN's benchmark on. A benchmark sets one for all its contenders alike (GELU and the family, a model
and its baseline), so a ratio compares like with like.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator

import torch

CHOICES = ("on", "off", "both")
# what Lightning's deterministic= puts in the environment (lightning/pytorch/trainer/connectors/accelerator_connector.py)
CUBLAS_WORKSPACE = ":4096:8"


def settings(text: str) -> list[bool]:
    """An argparse type: `on`, `off` or `both` -> the settings to time, in that order ([True], [False], [True, False])."""
    if text not in CHOICES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(CHOICES)}, got {text!r}")
    return {"on": [True], "off": [False], "both": [True, False]}[text]


def prepare(chosen: list[bool], device: torch.device) -> None:
    """Before CUDA starts: cuBLAS's deterministic workspace where a setting is on and the device is a GPU (a value
    already set is kept; on the CPU nothing is set, so the process's environment, which runs record, stays as is)."""
    if any(chosen) and device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)


def apply(on: bool) -> None:
    """Deterministic algorithms `on` (warn only; new buffers NaN-filled) and cuDNN's benchmark `not on`, as a run sets
    them (Lightning's deterministic="warn", or deterministic=False with benchmark=True)."""
    torch.use_deterministic_algorithms(on, warn_only=True)
    torch.backends.cudnn.benchmark = not on


@contextlib.contextmanager
def algorithms(on: bool) -> Iterator[None]:
    """The block runs under `apply(on)`; the previous switches are restored afterwards."""
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
    )
    apply(on)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.benchmark = before[2]


def describe(on: bool) -> str:
    """The report's line for a setting (`--deterministic on|off|both` chooses)."""
    if on:
        return (
            "deterministic algorithms on (torch.use_deterministic_algorithms(True, warn_only=True): new buffers "
            "NaN-filled; cuDNN's benchmark off), as a run trains on CUDA by default (trainer.deterministic=true) "
            "and under trainer.portable"
        )
    return (
        "deterministic algorithms off (cuDNN's benchmark on), as a run trains on CUDA with trainer.deterministic=false "
        "and on the CPU without trainer.portable"
    )
