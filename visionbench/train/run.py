"""Train one run — one recipe, one activation, one seed — from its resolved config.

    from visionbench.train.run import train_run
    result = train_run(run_cfg, Path("results/digits_vgg4/relu/seed_0"))

Builds data, model and trainer; resumes from checkpoints/last.ckpt when it exists.
Raises `Diverged` on a non-finite loss; the sweep turns outcomes into summary.json.
"""
from __future__ import annotations

import logging
import resource
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from .. import models
from ..activations import is_learnable
from ..models import finetune
from ..models.lsuv import check_variant, lsuv_images
from ..data import create_datamodule
from .callbacks import ActivationSnapshots, AtomicCheckpointIO, EpochSeeder, MetricsWriter, RunCheckpoint, RunProgressBar
from ..results.checkpoint import checkpoint_epoch
from ..results.layout import files
from .module import ClassificationModule
from .predictions import PredictionsWriter


@dataclass
class RunResult:
    rows: list[dict] = field(default_factory=list)
    params: int = 0
    act_params: int = 0
    trainable_params: int = 0
    train_time_s: float = 0.0
    throughput_img_s: float = float("nan")
    peak_mem_mb: float = float("nan")


class _Throughput(L.Callback):
    """Training images per second, over train batches only (validation excluded); the counts are
    saved in the checkpoint, so a resumed run reports the throughput of all its epochs."""

    def __init__(self):
        self.images, self.seconds, self._t = 0, 0.0, None

    def state_dict(self) -> dict:
        return {"images": self.images, "seconds": self.seconds}

    def load_state_dict(self, state_dict: dict) -> None:
        self.images, self.seconds = int(state_dict["images"]), float(state_dict["seconds"])

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._t = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._t is not None:
            self.seconds += time.perf_counter() - self._t
            self.images += int(batch[0].shape[0]) * trainer.world_size


def _quiet_lightning() -> None:
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*GPU available but not used.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*smaller than the logging interval.*")
    # resuming writes into the run's existing log and checkpoint folders on purpose
    warnings.filterwarnings("ignore", message=".*exists and is not empty.*")
    warnings.filterwarnings("ignore", message=".*Encountered `nan` values.*")
    # the weight-EMA copy is kept in eval mode on purpose (timm ModelEmaV3)
    warnings.filterwarnings("ignore", message=".*module\\(s\\) in eval mode at the start of training.*")


def _create(cfg: Mapping[str, Any], act: str | None, act_kwargs: Mapping[str, Any] | None, num_classes: int | None,
            in_chans: int, img_size: int | None, pretrained: bool):
    """`models.create` with the run's `model:` block and the given activation, head size and weights."""
    m = cfg["model"]
    kwargs = dict(m["kwargs"])
    if m["dropout"]:
        kwargs["drop_rate"] = float(m["dropout"])
    if m["drop_path"]:
        kwargs["drop_path_rate"] = float(m["drop_path"])
    if m["global_pool"] is not None:  # e.g. flatten: 004 code's VGG head (models/vgg.py)
        kwargs["global_pool"] = m["global_pool"]
    return models.create(
        m["name"], act=act, act_kwargs=dict(act_kwargs or {}), num_classes=num_classes, img_size=img_size,
        in_chans=in_chans, norm=m["norm"], norm_free=bool(m["norm_free"]), pretrained=pretrained, **kwargs,
    )


def build_model(cfg: Mapping[str, Any], num_classes: int, in_chans: int, img_size: int | None):
    """The network of a run config; with `finetune.checkpoint` set, the fine-tuning surgery of
    `models.finetune.prepare` (the checkpoint decides the weights: `model.pretrained` is not used)."""
    act = cfg["act"]
    act_kwargs = dict(cfg["act_options"].get(act) or {})  # act_options holds only the acts given options
    ft = cfg["finetune"]
    if not ft["checkpoint"]:
        return _create(cfg, act, act_kwargs, num_classes, in_chans, img_size, bool(cfg["model"]["pretrained"]))
    if cfg["model"]["lsuv"]:
        raise ValueError("model.lsuv=true would re-initialise the fine-tuned checkpoint's weights; "
                         "set model.lsuv=false with finetune.checkpoint")

    def build(a, a_kwargs, n, pretrained):
        return _create(cfg, a, a_kwargs, n, in_chans, img_size, pretrained)

    return finetune.prepare(build, ft["checkpoint"], act, act_kwargs, num_classes, train=ft["train"],
                            source_act=ft["source_act"], ema=bool(ft["ema"]), model_name=cfg["model"]["name"])


def lsuv_variant(cfg: Mapping[str, Any]) -> str:
    """`model.lsuv_variant` (mishkin | paper004), or ValueError naming the key."""
    variant = cfg["model"]["lsuv_variant"]
    try:
        return check_variant(variant)
    except ValueError as e:
        raise ValueError(f"model.lsuv_variant: {e}") from None


def step_batch(batch_size: int, world_size: int, accumulate: int) -> int:
    """The images each process loads per step: recipes give the global batch (the papers' numbers),
    shared by the DDP processes and, with gradient accumulation, by the `accumulate` steps of one
    optimizer update (so a recipe's batch stays its batch: timm --grad-accum-steps)."""
    per_device = max(1, batch_size // max(1, world_size))
    if per_device % accumulate:
        raise ValueError(f"trainer.accumulate_grad_batches={accumulate} must divide the per-device batch "
                         f"{per_device} (batch_size={batch_size} over {world_size} processes)")
    return per_device // accumulate


def train_run(cfg: Mapping[str, Any], run_dir: Path, progress: bool = True) -> RunResult:
    """Train (or resume) the run described by `cfg` (a plain dict) into `run_dir`."""
    _quiet_lightning()
    run_dir = Path(run_dir)
    seed, act, epochs = int(cfg["seed"]), str(cfg["act"]), int(cfg["epochs"])
    L.seed_everything(seed, workers=True, verbose=False)

    dm = create_datamodule(cfg["data"], batch_size=int(cfg["batch_size"]), seed=seed, test_in_val=True)
    model = build_model(cfg, dm.num_classes, dm.in_chans, dm.img_size)
    if cfg["model"]["lsuv"]:
        variant = lsuv_variant(cfg)
        dm.setup("fit")
        models.lsuv_init(model, lsuv_images(dm.train_dataloader(), variant), variant=variant)
    counts = models.count_parameters(model)
    counts["trainable_params"] = finetune.count_trainable(model)
    t = cfg["trainer"]
    if t["channels_last"]:  # NHWC weights; the module converts each image batch too (timm --channels-last)
        model = model.to(memory_format=torch.channels_last)

    eval_names = ("val", "test") if dm.has_test else ("val",)
    module = ClassificationModule(
        model, num_classes=dm.num_classes, optim=cfg["optim"], sched=cfg["sched"], loss=cfg["loss"],
        ema_decay=cfg["ema"]["decay"], act_lr_mult=float(cfg["act_lr_mult"].get(act, 1.0)),  # 1.0: no multiplier given
        batch_size=int(cfg["batch_size"]), eval_names=eval_names, channels_last=bool(t["channels_last"]),
    )
    if t["compile"]:  # in place (nn.Module.compile): state-dict keys and checkpoints unchanged; EMA copy stays eager
        model.compile()

    paths = files(run_dir)
    ckpt_dir, last = paths.checkpoints, paths.last
    writer = MetricsWriter(paths.metrics)
    resume_from = None
    if last.exists():
        writer.load_existing(upto_epoch=checkpoint_epoch(last))
        resume_from = str(last)
    throughput = _Throughput()
    callbacks = [  # MetricsWriter writes each epoch's row as its checkpoints are built (train/callbacks.py)
        EpochSeeder(seed), writer, throughput,
        RunCheckpoint(dirpath=ckpt_dir, filename=paths.best.stem, monitor="val_top1", mode="max", save_top_k=1,
                      enable_version_counter=False, save_on_train_epoch_end=True),
        # every epoch, whatever val_top1 did: the final weights, and what a resume starts from
        RunCheckpoint(dirpath=ckpt_dir, filename=paths.last.stem, save_top_k=1, enable_version_counter=False,
                      save_on_train_epoch_end=True),
        # per-example predictions at the selected epoch, on the test set when there is one (predictions.npz)
        PredictionsWriter(paths.predictions, scored_index=eval_names.index("test") if "test" in eval_names else 0),
    ]
    if is_learnable(act):
        callbacks.append(ActivationSnapshots(paths.snapshots, cfg["snapshot_epochs"], epochs, act))
    if progress:
        callbacks.append(RunProgressBar(f"{act} seed {seed}", leave=False))
    trainer = L.Trainer(
        max_epochs=epochs, accelerator=t["accelerator"], devices=t["devices"], num_nodes=t["num_nodes"],
        strategy=t["strategy"], precision=t["precision"], gradient_clip_val=t["gradient_clip_val"],
        limit_train_batches=t["limit_train_batches"], limit_val_batches=t["limit_val_batches"],
        accumulate_grad_batches=int(t["accumulate_grad_batches"]), sync_batchnorm=bool(t["sync_batchnorm"]),
        logger=TensorBoardLogger(run_dir, name="tb", version=""),  # metrics.csv is MetricsWriter's
        callbacks=callbacks, plugins=[AtomicCheckpointIO()], enable_progress_bar=progress, enable_model_summary=False,
        num_sanity_val_steps=0, default_root_dir=run_dir, log_every_n_steps=10,
    )
    dm.batch_size = step_batch(int(cfg["batch_size"]), trainer.world_size, int(t["accumulate_grad_batches"]))
    t0 = time.perf_counter()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    trainer.fit(module, datamodule=dm, ckpt_path=resume_from)
    elapsed = time.perf_counter() - t0
    if torch.cuda.is_available() and next(model.parameters()).is_cuda:
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:  # CPU: the process's peak resident set (Linux reports KiB)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return RunResult(  # times of all sessions of a resumed run: its epochs' times, its saved image counts
        rows=writer.rows, params=counts["params"], act_params=counts["act_params"],
        trainable_params=counts["trainable_params"],
        train_time_s=sum(float(r.get("epoch_time_s") or 0.0) for r in writer.rows) or elapsed,
        throughput_img_s=throughput.images / throughput.seconds if throughput.seconds else float("nan"),
        peak_mem_mb=peak,
    )
