"""Train one run — one recipe, one activation, one seed — from its resolved config.

    from visionbench.train.run import train_run
    result = train_run(run_cfg, Path("runs/digits_vgg4/relu/seed_0"))

Takes the typed run config (`config.typed` of config.yaml's dict: the one conversion); builds data,
model and trainer (train/trainer.py); resumes from checkpoints/last.ckpt when it exists, read as data only
(`weights_only=True`, results/checkpoint.py: one that pickles code is refused before Lightning opens it).
Raises `Diverged` on a non-finite loss; the sweep turns outcomes into summary.json.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from omegaconf import OmegaConf

from .. import models
from ..activations import fused, is_learnable
from ..config import RunConfig, typed
from ..data import create_datamodule
from ..models import finetune
from ..models.lsuv import lsuv_images
from ..results import checkpoint
from ..results.checkpoint import checkpoint_epoch
from ..results.layout import COMPLETED, DIVERGED, FAILED, INTERRUPTED, files, metrics_from_rows
from . import seeds, trackers
from .callbacks import (
    ActivationSnapshots,
    AtomicCheckpointIO,
    EpochSeeder,
    GpuBusy,
    MetricsWriter,
    RunCheckpoint,
    RunProgressBar,
)
from .environment import kernels_key
from .module import ClassificationModule, Diverged
from .predictions import PredictionsWriter
from .trainer import build_trainer


@dataclass
class RunResult:
    rows: list[dict] = field(default_factory=list)
    params: int = 0
    act_params: int = 0
    trainable_params: int = 0
    train_time_s: float = 0.0
    throughput_img_s: float = float("nan")
    peak_mem_mb: float = float("nan")
    gpu_busy_pct: float | None = None  # CUDA only (callbacks.GpuBusy)
    dataset: dict = field(default_factory=dict)  # the data module's `summary_facts()` (data.name=folder: its classes)
    data: dict = field(default_factory=dict)  # the digest of the data read (`data_digest()`: environment.data)


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


def _create(
    cfg: RunConfig,
    act: str | None,
    act_kwargs: Mapping[str, Any] | None,
    num_classes: int | None,
    in_chans: int,
    img_size: int | None,
    pretrained: bool,
):
    """`models.create` with the run's `model:` block and the given activation, head size and weights."""
    m = cfg.model
    kwargs = dict(m.kwargs)
    if m.dropout:
        kwargs["drop_rate"] = m.dropout
    if m.drop_path:
        kwargs["drop_path_rate"] = m.drop_path
    if m.global_pool is not None:  # e.g. flatten: 004 code's VGG head (models/vgg.py)
        kwargs["global_pool"] = m.global_pool
    return models.create(
        m.name,
        act=act,
        act_kwargs=dict(act_kwargs or {}),
        num_classes=num_classes,
        img_size=img_size,
        in_chans=in_chans,
        norm=m.norm,
        norm_free=m.norm_free,
        pretrained=pretrained,
        **kwargs,
    )


def build_model(cfg: RunConfig | Mapping[str, Any], num_classes: int, in_chans: int, img_size: int | None):
    """The network of a run config (typed, or config.yaml's dict: `config.typed`); with `finetune.checkpoint`
    set, the fine-tuning surgery of `models.finetune.prepare` (the checkpoint decides the weights:
    `model.pretrained` is not used)."""
    cfg = typed(cfg)
    ft = cfg.finetune
    if not ft.checkpoint:
        return _create(cfg, cfg.act, cfg.act_kwargs, num_classes, in_chans, img_size, cfg.model.pretrained)
    if cfg.model.lsuv:
        raise ValueError(
            "model.lsuv=true would re-initialise the fine-tuned checkpoint's weights; "
            "set model.lsuv=false with finetune.checkpoint"
        )

    def build(a, a_kwargs, n, pretrained):
        return _create(cfg, a, a_kwargs, n, in_chans, img_size, pretrained)

    return finetune.prepare(
        build,
        ft.checkpoint,
        cfg.act,
        cfg.act_kwargs,
        num_classes,
        train=ft.train,
        source_act=ft.source_act,
        ema=ft.ema,
        model_name=cfg.model.name,
    )


def step_batch(batch_size: int, world_size: int, accumulate: int) -> int:
    """The images each process loads per step: recipes give the global batch (the papers' numbers),
    shared by the DDP processes and, with gradient accumulation, by the `accumulate` steps of one
    optimizer update (so a recipe's batch stays its batch: timm --grad-accum-steps)."""
    per_device = max(1, batch_size // max(1, world_size))
    if per_device % accumulate:
        raise ValueError(
            f"trainer.accumulate_grad_batches={accumulate} must divide the per-device batch "
            f"{per_device} (batch_size={batch_size} over {world_size} processes)"
        )
    return per_device // accumulate


def compile_model(model: torch.nn.Module, t) -> None:
    """`trainer.compile`: true compiles `model` in place (nn.Module.compile: state-dict keys and checkpoints
    unchanged); reduce-overhead also captures its forward and backward in CUDA graphs on CUDA (the captured step,
    docs/running.md#the-captured-step; on the CPU the same as true). Lightning's loop keeps the optimizer step and its
    own per-step work outside the graphs."""
    if t.compile:
        model.compile(**({"mode": "reduce-overhead"} if t.compile == "reduce-overhead" else {}))


def train_run(cfg: RunConfig | Mapping[str, Any], run_dir: Path, progress: bool = True) -> RunResult:
    """Train (or resume) the run described by `cfg` (typed, or config.yaml's dict: `config.typed`) into `run_dir`.
    Its `trainer.kernels` chooses the learnable activations' kernels from before the model is built to the end
    (VISIONBENCH_KERNELS wins over it: `fused.configured`, what `environment.kernels(run)` records); the process's
    backend is restored after, so the next run of a worker starts from its own key."""
    with fused.configured(kernels_key(cfg)):
        return _train(cfg, run_dir, progress)


def _train(cfg: RunConfig | Mapping[str, Any], run_dir: Path, progress: bool) -> RunResult:
    extra = {k: cfg[k] for k in ("act_label", "setting") if k in cfg} if isinstance(cfg, Mapping) else {}
    cfg = typed(cfg)
    plain = {**OmegaConf.to_container(OmegaConf.structured(cfg)), **extra}  # the trackers' names and parameters
    run_dir = Path(run_dir)
    seed, act, t = cfg.seed, cfg.act, cfg.trainer
    source = seeds.of(cfg)  # init, order, aug: each `seed` unless split (train/seeds.py)
    L.seed_everything(source.init, workers=True, verbose=False)

    dm = create_datamodule(
        cfg.data, batch_size=cfg.batch_size, seed=source.order, aug_seed=source.aug, test_in_val=True
    )
    model = build_model(cfg, dm.num_classes, dm.in_chans, dm.img_size)
    if cfg.model.lsuv:  # model.lsuv_variant: checked by the sweep's preflight (a registry name)
        dm.setup("fit")
        models.lsuv_init(
            model, lsuv_images(dm.train_dataloader(), cfg.model.lsuv_variant), variant=cfg.model.lsuv_variant
        )
    counts = models.count_parameters(model)
    counts["trainable_params"] = finetune.count_trainable(model)
    if t.channels_last:  # NHWC weights; the module converts each image batch too (timm --channels-last)
        model = model.to(memory_format=torch.channels_last)

    eval_names = ("val", "test") if dm.has_test else ("val",)
    module = ClassificationModule(
        model,
        num_classes=dm.num_classes,
        optim=cfg.optim,
        sched=cfg.sched,
        loss=cfg.loss,
        epochs=cfg.epochs,
        ema_decay=cfg.ema.decay,
        act_lr_mult=cfg.lr_mult,
        batch_size=cfg.batch_size,
        eval_names=eval_names,
        channels_last=t.channels_last,
    )
    compile_model(model, t)  # EMA copy stays eager

    paths = files(run_dir)
    ckpt_dir, last = paths.checkpoints, paths.last
    writer = MetricsWriter(paths.metrics)
    resume_from, done = None, 0
    if last.exists():
        done = checkpoint_epoch(last)
        writer.load_existing(upto_epoch=done)
        resume_from = str(last)
    throughput, busy = _Throughput(), GpuBusy()
    callbacks = [  # MetricsWriter writes each epoch's row as its checkpoints are built (train/callbacks.py)
        EpochSeeder(source.aug),
        writer,
        throughput,
        busy,
        RunCheckpoint(
            dirpath=ckpt_dir,
            filename=paths.best.stem,
            monitor="val_top1",
            mode="max",
            save_top_k=1,
            enable_version_counter=False,
            save_on_train_epoch_end=True,
        ),
        # every epoch, whatever val_top1 did: the final weights, and what a resume starts from
        RunCheckpoint(
            dirpath=ckpt_dir,
            filename=paths.last.stem,
            save_top_k=1,
            enable_version_counter=False,
            save_on_train_epoch_end=True,
        ),
        # per-example predictions at the selected epoch, on the test set when there is one (predictions.npz)
        PredictionsWriter(paths.predictions, scored_index=eval_names.index("test") if "test" in eval_names else 0),
    ]
    if is_learnable(act):
        callbacks.append(ActivationSnapshots(paths.snapshots, cfg.snapshot_epochs, cfg.epochs, act))
    if progress:
        callbacks.append(RunProgressBar(f"{act} seed {seed}", leave=False))
    loggers = trackers.build_loggers(plain, run_dir, resumed_epochs=done)
    trainer = build_trainer(
        t,
        epochs=cfg.epochs,
        callbacks=callbacks,
        plugins=[AtomicCheckpointIO()],
        logger=loggers,  # trainer.loggers (train/trackers.py); metrics.csv is MetricsWriter's
        progress=progress,
        root_dir=run_dir,
    )
    dm.batch_size = step_batch(cfg.batch_size, trainer.world_size, t.accumulate_grad_batches)
    t0 = time.perf_counter()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    status = FAILED
    try:  # each seed its own tracker run, closed however the run ends
        trackers.open_runs(loggers, plain, run_dir, fresh=resume_from is None)
        with checkpoint.allowed():  # Lightning's own resume load: data only too (checkpoint_epoch read it first)
            trainer.fit(module, datamodule=dm, ckpt_path=resume_from, weights_only=True)
        status = COMPLETED
    except Diverged:
        status = DIVERGED
        raise
    except (KeyboardInterrupt, SystemExit):
        status = INTERRUPTED
        raise
    finally:
        if status != INTERRUPTED and run_dir.is_dir():  # the verdicts' inputs, as the summary holds them, into
            # every tracker (not where the results were moved or deleted under the run: that run stops in one line)
            trackers.headline(loggers, plain, metrics_from_rows(writer.rows), status, epochs=len(writer.rows))
        trackers.close(loggers, status)
    elapsed = time.perf_counter() - t0
    if torch.cuda.is_available() and next(model.parameters()).is_cuda:
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:  # CPU: the process's peak resident set (Linux reports KiB)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return RunResult(  # times of all sessions of a resumed run: its epochs' times, its saved image counts
        rows=writer.rows,
        params=counts["params"],
        act_params=counts["act_params"],
        trainable_params=counts["trainable_params"],
        train_time_s=sum(float(r.get("epoch_time_s") or 0.0) for r in writer.rows) or elapsed,
        throughput_img_s=throughput.images / throughput.seconds if throughput.seconds else float("nan"),
        peak_mem_mb=peak,
        gpu_busy_pct=busy.percent,
        dataset=getattr(dm, "summary_facts", dict)(),
        data=_data_digest(dm),
    )


def _data_digest(dm) -> dict:
    """The data module's `data_digest()`; a file that cannot be read now is recorded, it does not fail a trained run."""
    try:
        return dm.data_digest()
    except (OSError, ValueError) as e:
        return {"of": "unknown", "error": f"{type(e).__name__}: {e}"}
