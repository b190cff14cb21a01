"""The one Lightning Trainer builder, and Lightning's logging quieted in one place.

    trainer = build_trainer(cfg.trainer, epochs=cfg.epochs, callbacks=[...], logger=TensorBoardLogger(...))
    probe = build_trainer(cfg.trainer)      # the device arguments only: world size, root device, refusals

A run (train/run.py) fits the first; the sweep's preflight (what Lightning refuses: an unknown strategy, a
GPU on a CPU machine) and the estimate (the device and world size a run will have) build the second and
never fit it. Every Trainer of visionbench is made here, from the run's typed `trainer:` block
(config.TrainerConfig, or the same block of a composed DictConfig).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L

DEVICE_ARGS = ("accelerator", "devices", "num_nodes", "strategy", "precision")  # what a probe is built with


def quiet_lightning() -> None:
    """Lightning's device lines ("GPU available: ...") and the warnings a run provokes on purpose."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for message in (
        ".*does not have many workers.*",
        ".*GPU available but not used.*",
        ".*LeafSpec.*",
        ".*smaller than the logging interval.*",
        ".*exists and is not empty.*",  # resuming writes into the run's existing folders on purpose
        ".*Encountered `nan` values.*",
        # the weight-EMA copy is kept in eval mode on purpose (timm ModelEmaV3)
        ".*module\\(s\\) in eval mode at the start of training.*",
    ):
        warnings.filterwarnings("ignore", message=message)


def build_trainer(
    t: Any,
    *,
    epochs: int | None = None,
    callbacks: Sequence[L.Callback] = (),
    logger: Any = False,
    plugins: Sequence[Any] = (),
    progress: bool = False,
    root_dir: Path | None = None,
) -> L.Trainer:
    """A Trainer from the `trainer:` block `t`. With `epochs`, the Trainer a run fits (the block's
    clipping, batch limits, accumulation, sync-BN; `callbacks`, `logger`, `plugins` handed in); without,
    a probe built from the device arguments only (no logger, no checkpointing), never fitted."""
    quiet_lightning()
    args: dict[str, Any] = {k: getattr(t, k) for k in DEVICE_ARGS}
    args.update(logger=logger, enable_progress_bar=progress, enable_model_summary=False)
    if epochs is None:
        args.update(logger=False, enable_checkpointing=False)
    else:
        args.update(
            max_epochs=epochs,
            gradient_clip_val=t.gradient_clip_val,
            limit_train_batches=t.limit_train_batches,
            limit_val_batches=t.limit_val_batches,
            accumulate_grad_batches=t.accumulate_grad_batches,
            sync_batchnorm=t.sync_batchnorm,
            callbacks=list(callbacks),
            plugins=list(plugins),
            num_sanity_val_steps=0,
            default_root_dir=root_dir,
            log_every_n_steps=10,
            **determinism(t),
        )
    return L.Trainer(**args)


def trains_on_cuda(t: Any) -> bool:
    """Whether a run with the `trainer:` block `t` trains on CUDA (Lightning's `auto` picks a GPU where there is
    one)."""
    import torch

    return str(t.accelerator) in ("gpu", "cuda") or (str(t.accelerator) == "auto" and torch.cuda.is_available())


def determinism(t: Any) -> dict:
    """Lightning's `deterministic` and `benchmark` for the block `t`: "warn" (deterministic algorithms, a warning where
    an op has none; cuDNN's benchmark off) under trainer.portable (sweep/portable.py) and, with trainer.deterministic
    (the default), on CUDA: a seed then gives the same bits alone or among parallel=K others, since no kernel choice
    depends on timing (docs/running.md#parallel-many-runs-per-device). trainer.deterministic=false on CUDA: cuDNN
    benchmarks its kernels (faster convolutions, bits that may differ from run to run). On the CPU the kernels are
    chosen without timing."""
    if getattr(t, "portable", False):
        return {"deterministic": "warn"}
    if not trains_on_cuda(t):
        return {"deterministic": None}
    if getattr(t, "deterministic", True):
        return {"deterministic": "warn"}
    return {"deterministic": False, "benchmark": True}
