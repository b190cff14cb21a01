"""Callbacks: the per-epoch metrics.csv, activation snapshots, checkpoints (atomic, movable), RNG state,
per-epoch reseeding (so a resumed run repeats the uninterrupted one), the GPU's busy share, and the progress bar."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

from ..activations import LearnableActivation
from ..results.io import RunStateError, atomic_path, atomic_write_text, read_csv_rows, write_csv_rows

SNAPSHOT_POINTS = 201
HIST_BINS = 60


class EpochSeeder(L.Callback):
    """Reseeds the main process's global RNGs at the start of each epoch from (seed, epoch): a run
    resumed at an epoch boundary draws the same dropout masks and Mixup/CutMix as one never stopped.

    Loader-side augmentation does not depend on these: each training sample is seeded from
    (seed, epoch, position) wherever it is loaded (`data/seeding.py`), and the shuffle order from
    (seed, epoch) by the sampler, so neither depends on `num_workers` or on a resume."""

    def __init__(self, seed: int):
        self.seed = seed  # the typed config's

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        s = (self.seed * 1_000_003 + trainer.current_epoch) % (2**32)
        random.seed(s)
        np.random.seed(s)
        torch.manual_seed(s)


class MetricsWriter(L.Callback):
    """Appends one row per epoch to metrics.csv (rewritten atomically), times epochs.

    Each row starts with `epoch, step, samples`: `step` is the optimizer steps so far
    (`trainer.global_step` at the epoch's end), `samples` the training samples of that epoch,
    counted from the batches trained and summed over DDP ranks. They show how long an epoch
    really is (e.g. 3 x N samples under repeated augmentation, 004 App G).

    When the row is written (Lightning's public hooks only): `on_train_epoch_end` closes the epoch
    (time, sample count); a plain callback's runs before the LightningModule's, which logs the
    epoch's `train_loss`, so the row is written in `on_save_checkpoint`, which Lightning calls
    while building each checkpoint, before the file is written. Every checkpoint -- the
    `last.ckpt` a resume starts from included -- thus has its epoch's complete row on disk
    first, whatever the order of the callbacks. An epoch that saved no checkpoint gets its row
    at the next epoch's start, at the end of training, or on an exception.

    Columns: every metric the epoch logged, by its name ("/" included: `val/acc` is a column),
    except Lightning's per-step values (`<name>_step`, e.g. `train/loss_step`): they are not
    epoch metrics.
    """

    LEAD = ("epoch", "step", "samples")  # the first columns, in this order
    STEP_SUFFIX = "_step"  # Lightning's name for a metric's per-step value (self.log(on_step=True))

    def __init__(self, path: Path):
        self.path = Path(path)
        self.rows: list[dict] = []
        self._t0 = None
        self._samples = 0
        self._pending: dict | None = None  # the finished epoch whose row is not written yet

    def load_existing(self, upto_epoch: int) -> None:
        """On resume: keep rows of the epochs the checkpoint has completed, drop later ones.

        Rows written before `step`/`samples` existed keep their values, with those two empty. A file
        lacking a row the checkpoint has completed (cut short) is a `RunStateError`: the resumed run
        would have a gap in its curves (results/layout.py `check_unfinished` refuses torn rows first)."""
        rows = [r for r in read_csv_rows(self.path) if int(r["epoch"]) <= upto_epoch]
        epochs = [int(r["epoch"]) for r in rows]
        if epochs != list(range(1, upto_epoch + 1)):
            raise RunStateError(
                f"{self.path} has rows for epochs {epochs[:5]}{'...' if len(epochs) > 5 else ''}, "
                f"its checkpoint completed epochs 1..{upto_epoch}: cut short? delete the run "
                f"directory {self.path.parent} to restart this run"
            )
        self.rows = [{**{k: r.get(k, "") for k in self.LEAD}, **r} for r in rows]

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._write_pending(trainer)
        self._t0 = time.perf_counter()
        self._samples = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self._samples += int(batch[0].shape[0])

    def _epoch_samples(self, trainer, pl_module) -> int:
        """This epoch's training samples over all ranks (a collective: every rank calls it)."""
        count = torch.tensor(self._samples, dtype=torch.long, device=pl_module.device)
        return int(trainer.strategy.reduce(count, reduce_op="sum"))

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self._t0 is None:
            return
        self._pending = {
            "epoch": trainer.current_epoch + 1,
            "step": int(trainer.global_step),
            "samples": self._epoch_samples(trainer, pl_module),
            "epoch_time_s": round(time.perf_counter() - self._t0, 4),
        }

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        self._write_pending(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self._write_pending(trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._write_pending(trainer)

    def epoch_metrics(self, logged: dict) -> dict[str, float]:
        """The logged values that are epoch metrics (see the class docstring), as floats."""
        return {k: float(v) for k, v in logged.items() if not k.endswith(self.STEP_SUFFIX)}

    def _write_pending(self, trainer) -> None:
        if self._pending is None:
            return
        pending, self._pending = self._pending, None
        m = self.epoch_metrics(trainer.callback_metrics)
        row = {k: pending[k] for k in self.LEAD}
        row.update({k: m[k] for k in sorted(m) if k not in ("lr", "train_loss")})
        row["train_loss"] = m.get("train_loss", float("nan"))
        row["lr"] = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else float("nan")
        row["epoch_time_s"] = pending["epoch_time_s"]
        self.rows = [r for r in self.rows if int(r["epoch"]) < row["epoch"]] + [row]
        if trainer.is_global_zero:
            write_csv_rows(self.path, self.rows)


class GpuBusy(L.Callback):
    """The share of training time the GPU was busy, in percent: NVML's utilization (the share of its last
    sample period, 1/6 to 1 s, in which a kernel ran: what nvidia-smi prints as GPU-Util), read at most once
    per `period_s` at the end of a training batch, from `period_s` after each training epoch starts (the
    period before it holds validation and loader start-up). `percent` is the mean of the readings, None on a
    CPU or where NVML cannot be read (the nvidia-ml-py package, torch.cuda.utilization). The sums are saved
    in the checkpoint, so a resumed run reports all its epochs. A failed read is not retried in that process."""

    def __init__(self, period_s: float = 1.0):
        self.period_s, self.total, self.readings, self._next = period_s, 0.0, 0, None
        self._unreadable = False  # NVML failed once: no further reads (each would fail again, at a cost)

    @property
    def percent(self) -> float | None:
        return round(self.total / self.readings, 1) if self.readings else None

    def state_dict(self) -> dict:
        return {"total": self.total, "readings": self.readings}

    def load_state_dict(self, state_dict: dict) -> None:
        self.total, self.readings = float(state_dict["total"]), int(state_dict["readings"])

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        cuda = pl_module.device.type == "cuda" and not self._unreadable
        self._next = time.perf_counter() + self.period_s if cuda else None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        now = time.perf_counter()
        if self._next is None or now < self._next:
            return
        try:
            value = torch.cuda.utilization(pl_module.device)
        except (ImportError, RuntimeError, OSError):  # no NVML here: nothing is measured, the run goes on
            self._next, self._unreadable = None, True
            return
        self.total, self.readings, self._next = self.total + value, self.readings + 1, now + self.period_s


class ActivationSnapshots(L.Callback):
    """Stores, at chosen epochs, each learnable activation's shape over the histogram of its inputs
    (report plots: paper 004 Fig 2/7). Epoch 0 is the init, -1 the last epoch."""

    def __init__(self, out_dir: Path, epochs: list[int], max_epochs: int, act: str):
        self.out_dir = Path(out_dir)
        self.epochs = {max_epochs if e == -1 else e for e in epochs}  # the typed config's snapshot_epochs
        self.act = act
        self._batch = None

    def _layers(self, model):
        return [(n, m) for n, m in model.named_modules() if isinstance(m, LearnableActivation)]

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if trainer.global_step == 0 and batch_idx == 0 and 0 in self.epochs:
            self._snapshot(trainer, pl_module, batch[0], 0)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        if batch_idx == 0 and dataloader_idx == 0:
            self._batch = batch[0]

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        epoch = trainer.current_epoch + 1
        if not trainer.sanity_checking and epoch in self.epochs and self._batch is not None:
            self._snapshot(trainer, pl_module, self._batch, epoch)

    @torch.no_grad()
    def _snapshot(self, trainer, pl_module, x: torch.Tensor, epoch: int) -> None:
        layers = self._layers(pl_module.model)
        if not layers or not trainer.is_global_zero:
            return
        inputs: dict[str, torch.Tensor] = {}
        hooks = [
            m.register_forward_hook(lambda mod, inp, out, n=n: inputs.__setitem__(n, inp[0].detach().float()))
            for n, m in layers
        ]
        was_training = pl_module.model.training
        pl_module.model.eval()
        try:
            pl_module.model(x)
        finally:
            for h in hooks:
                h.remove()
            pl_module.model.train(was_training)
        records = []
        for name, module in layers:
            v = inputs.get(name)
            if v is None:
                continue
            v = v.flatten()
            v = v[torch.isfinite(v)].cpu().numpy()
            lo, hi = np.percentile(v, [0.1, 99.9]) if v.size else (-3.0, 3.0)
            lo, hi = float(min(lo, -1.0)), float(max(hi, 1.0))
            counts, edges = np.histogram(v, bins=HIST_BINS, range=(lo, hi))
            grid = torch.linspace(lo, hi, SNAPSHOT_POINTS, dtype=torch.float64)
            p = next(module.parameters(), None)
            dev = p.device if p is not None else torch.device("cpu")
            was = module.training
            module.eval()
            y = module.fit_forward(grid.to(dev, dtype=p.dtype if p is not None else torch.float32))
            module.train(was)
            records.append(
                {
                    "name": name,
                    "x": grid.tolist(),
                    "y": y.double().cpu().tolist(),
                    "hist_edges": edges.tolist(),
                    "hist_counts": counts.tolist(),
                }
            )
        self.out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(
            self.out_dir / f"epoch_{epoch:03d}.json", json.dumps({"epoch": epoch, "act": self.act, "layers": records})
        )


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch checkpoint writer, saving to a per-process temporary file renamed over the
    target: a kill never leaves a torn checkpoint, a full disk no stray file (`results.io.atomic_path`)."""

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        with atomic_path(Path(path)) as tmp:
            super().save_checkpoint(checkpoint, tmp, storage_options)


class RunCheckpoint(ModelCheckpoint):
    """`ModelCheckpoint` whose remembered paths follow the run directory when it is moved.

    Lightning drops the best score on resume when the checkpoint's `dirpath` differs from the
    callback's (a moved or renamed results directory); `best.ckpt` would then be overwritten by
    the next, possibly worse, epoch. The stored paths are rebased onto the current directory first.
    """

    def load_state_dict(self, state_dict: dict) -> None:
        old, new = state_dict.get("dirpath"), self.dirpath
        if old and new and old != new:

            def rebase(value):
                if isinstance(value, str) and value.startswith(old):
                    return new + value[len(old) :]
                if isinstance(value, dict):
                    return {rebase(k): v for k, v in value.items()}
                return value

            state_dict = {k: rebase(v) for k, v in state_dict.items()}
        super().load_state_dict(state_dict)


class RunProgressBar(TQDMProgressBar):
    """Lightning's tqdm bar (on stdout, drawn by `visionbench run` only when stdout is a terminal), described with the
    activation, seed and epoch of the run: one line per run, cleared when it ends so the run's own line takes its
    place. The evaluation after each epoch draws no second bar (its metrics show in the bar's postfix)."""

    def __init__(self, label: str, **kwargs):
        super().__init__(**kwargs)
        self.label = label

    def on_train_epoch_start(self, trainer, *args) -> None:
        super().on_train_epoch_start(trainer, *args)
        self.train_progress_bar.set_description(f"{self.label} epoch {trainer.current_epoch + 1}/{trainer.max_epochs}")

    def init_train_tqdm(self):
        bar = super().init_train_tqdm()
        bar.leave = False  # closed at the run's end, the line is cleared for the run's own line
        return bar

    def init_validation_tqdm(self):
        return Tqdm(disable=True)
