"""The LightningModule that trains any classifier: loss, mixup/cutmix, EMA, metrics, optimizer groups,
and the learning-rate schedule (built here, from the run's typed `sched` block and its `epochs`).

The network is injected (built by `visionbench.models`); this file only knows how to train it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import lightning as L
import torch
import torch.nn.functional as F
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.utils.model_ema import ModelEmaV3
from torch import nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from ..config.schema import LossConfig, OptimConfig, SchedConfig
from .batch_mean import BatchMean
from .loss_watch import LossWatch
from .optim import build_optimizer, scaled_lr


class Diverged(RuntimeError):
    """A non-finite training loss: the run ends with status `diverged`."""

    def __init__(self, epoch: int, step: int, loss: float, elsewhere: bool = False):
        where = " on another DDP rank" if elsewhere else f" {loss}"
        super().__init__(f"non-finite training loss{where} at epoch {epoch}, step {step}")
        self.epoch, self.step, self.loss = epoch, step, loss


def _metrics(num_classes: int) -> MetricCollection:
    # no per-batch input checks (each one a device sync): the inputs are the model's logits and the dataset's labels
    metrics = {
        "top1": MulticlassAccuracy(num_classes, top_k=1, average="micro", validate_args=False),
        "loss": BatchMean(),
    }
    if num_classes > 5:
        metrics["top5"] = MulticlassAccuracy(num_classes, top_k=5, average="micro", validate_args=False)
    return MetricCollection(metrics)


class ClassificationModule(L.LightningModule):
    """Trains `model` for classification.

    Args:
        model: the network (any nn.Module mapping images to logits).
        num_classes: number of classes.
        optim: the run's typed `optim` block (config.OptimConfig: a run's `typed` config, or `config.block("optim")`).
        sched: the run's `sched` block (config.SchedConfig).
        loss: the run's `loss` block (config.LossConfig: label smoothing, mixup, cutmix, act_l2).
        epochs: the run's `epochs`: the schedule's length (the Trainer's max_epochs is the same value).
        ema_decay: weight-EMA decay (timm ModelEmaV3), None for no EMA.
        act_lr_mult: learning-rate multiplier of the activation coefficients.
        batch_size: global batch size, for lr scaling with `optim.lr_base_batch`.
        eval_names: names of the evaluation dataloaders, in order ("val", then "test" if any).
        channels_last: convert each image batch to channels_last memory format (`trainer.channels_last`:
            the model's weights are converted by the caller).
    """

    def __init__(
        self,
        model: nn.Module,
        num_classes: int,
        optim: OptimConfig,
        sched: SchedConfig,
        loss: LossConfig,
        epochs: int = 1,
        ema_decay: float | None = None,
        act_lr_mult: float = 1.0,
        batch_size: int = 128,
        eval_names: tuple[str, ...] = ("val",),
        channels_last: bool = False,
    ):
        super().__init__()
        self.model = model
        self.num_classes = num_classes
        self.optim_cfg, self.sched_cfg, self.epochs = optim, sched, epochs  # whole, checked, typed blocks
        self.act_lr_mult = act_lr_mult
        self.batch_size = batch_size
        self.eval_names = tuple(eval_names)
        self.channels_last = channels_last

        self.mixup = None
        if loss.mixup > 0 or loss.cutmix > 0:
            # timm's Mixup folds label smoothing into the soft targets
            self.mixup = Mixup(
                mixup_alpha=loss.mixup,
                cutmix_alpha=loss.cutmix,
                prob=loss.mixup_prob,
                switch_prob=loss.switch_prob,
                label_smoothing=loss.label_smoothing,
                num_classes=num_classes,
            )
            self.train_criterion: nn.Module = SoftTargetCrossEntropy()
        else:
            self.train_criterion = nn.CrossEntropyLoss(label_smoothing=loss.label_smoothing)
        self.act_l2 = loss.act_l2

        self.ema = ModelEmaV3(model, decay=ema_decay) if ema_decay else None
        variants = ["raw"] + (["ema"] if self.ema is not None else [])
        self.eval_metrics = nn.ModuleDict(
            {f"{v}_{n}": _metrics(num_classes) for v in variants for n in self.eval_names}
        )
        self.train_loss = BatchMean()  # finite: a non-finite loss ends the run (LossWatch)
        self.loss_watch = LossWatch()

    # ---- training --------------------------------------------------------------------
    def _images(self, x: torch.Tensor) -> torch.Tensor:
        """An image batch in channels_last when `trainer.channels_last` is on (timm --channels-last)."""
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last and x.dim() == 4 else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        x, y = batch
        x = self._images(x)
        if self.mixup is not None:
            if x.shape[0] % 2:  # timm's batch mixup pairs images with the flipped batch: needs an even size
                x, y = x[:-1], y[:-1]
            x, y = self.mixup(x, y)
        logits = self.model(x)
        loss = self.train_criterion(logits, y)
        if self.act_l2 > 0:  # L2 penalty on activation coefficients (SLAF, paper 003 Sec 4 and 5)
            loss = loss + self.act_l2 * sum(m.penalty() for m in self.model.modules() if hasattr(m, "penalty"))
        self.loss_watch.update(loss, self.global_step)
        if self.loss_watch.due(batch_idx, self._batches_per_epoch()):
            bad = self.loss_watch.check()
            if bad is not None:
                step, value, here = bad
                raise Diverged(self.current_epoch + 1, step, value, elsewhere=not here)
        self.train_loss.update(loss, weight=x.shape[0])
        self.log("train/loss_step", loss.detach(), prog_bar=True, batch_size=x.shape[0])
        return loss

    def _batches_per_epoch(self) -> float:
        """The Trainer's training batches per epoch; 0 outside a Trainer (a lone training_step: checked at once)."""
        try:
            return self.trainer.num_training_batches
        except RuntimeError:  # "not attached to a `Trainer`"
            return 0

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if self.ema is not None:
            self.ema.update(self.model, step=self.global_step)

    def on_train_epoch_end(self) -> None:
        self.log("train_loss", self.train_loss.compute(), sync_dist=True)
        self.train_loss.reset()
        self.log("lr", self.optimizers().param_groups[0]["lr"])

    # ---- evaluation ------------------------------------------------------------------
    def _eval_step(self, batch, name: str) -> dict[str, torch.Tensor]:
        """Update the `name` set's metrics of every variant; return `{variant: logits, "target": y}`
        (what a callback needs to keep per-example predictions: train/predictions.py)."""
        x, y = batch
        x = self._images(x)
        nets = [("raw", self.model)] + ([("ema", self.ema.module)] if self.ema is not None else [])
        out = {"target": y}
        for variant, net in nets:
            logits = net(x)
            m = self.eval_metrics[f"{variant}_{name}"]
            loss = F.cross_entropy(logits.float(), y)
            for key, metric in m.items():
                metric.update(loss, weight=x.shape[0]) if key == "loss" else metric.update(logits, y)
            out[variant] = logits.detach()
        return out

    def validation_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> dict[str, torch.Tensor]:
        """Scores one batch of eval set `eval_names[dataloader_idx]`; returns `{"raw", ["ema"], "target"}`:
        the batch's logits per variant (raw weights, weight EMA) and its labels."""
        return self._eval_step(batch, self.eval_names[dataloader_idx])

    def test_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> dict[str, torch.Tensor]:
        return self._eval_step(batch, self.eval_names[dataloader_idx])

    def _log_eval(self) -> None:
        for key, m in self.eval_metrics.items():
            variant, name = key.split("_", 1)
            prefix = name if variant == "raw" else f"ema_{name}"
            for metric_name, metric in m.items():
                value = metric.compute()
                if metric_name.startswith("top"):
                    value = value * 100.0  # accuracies in percent, as the papers report them
                self.log(f"{prefix}_{metric_name}", value, sync_dist=True)
                metric.reset()

    def on_validation_epoch_end(self) -> None:
        self._log_eval()

    def on_test_epoch_end(self) -> None:
        self._log_eval()

    # ---- optimisation ----------------------------------------------------------------
    def configure_optimizers(self):
        opt = build_optimizer(self.model, self.optim_cfg, self.batch_size, self.act_lr_mult)
        lr = scaled_lr(self.optim_cfg, self.batch_size)
        per_epoch = max(1, math.ceil(self.trainer.estimated_stepping_batches / self.epochs))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(self.sched_cfg, lr, per_epoch, self.epochs))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def lr_lambda(cfg: SchedConfig, base_lr: float, steps_per_epoch: int, epochs: int) -> Callable[[int], float]:
    """Multiplier of each group's base lr at optimizer step `step` (0-based), per step so that warmup is smooth
    (per-group base lrs keep the activation lr multiplier): `constant`, `step` (x gamma at each milestone
    epoch, paper 004 Table 6) and `cosine` with linear warmup and a floor (ConvNeXt / DeiT recipes, paper 001
    Table 8, 004 Table 10 and App G). `cfg` is a whole, checked, typed `sched` block (a run's `typed`
    config, or `config.block("sched", {...})`: `name` is one of config.SCHEDULES)."""
    name = cfg.name
    steps_per_epoch = max(1, steps_per_epoch)
    total = max(1, epochs * steps_per_epoch)
    warmup = round(cfg.warmup_epochs * steps_per_epoch)
    warmup_start = cfg.warmup_lr / base_lr if base_lr > 0 else 0.0
    floor = cfg.min_lr / base_lr if base_lr > 0 else 0.0
    milestones = sorted(cfg.milestones)
    gamma = cfg.gamma

    def warm(step: int) -> float | None:
        if step < warmup:
            return warmup_start + (1.0 - warmup_start) * step / warmup
        return None

    if name == "constant":
        return lambda step: warm(step) if step < warmup else 1.0
    if name == "step":

        def step_fn(step: int) -> float:
            if step < warmup:
                return warm(step)
            epoch = step // steps_per_epoch
            return gamma ** sum(epoch >= m for m in milestones)

        return step_fn

    def cosine(step: int) -> float:
        if step < warmup:
            return warm(step)
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return cosine
