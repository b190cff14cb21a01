"""`PredictionsWriter`: keeps the per-example predictions of the checkpoint a run reports
(`predictions.npz`, format in results/predictions.py).

Every epoch the module scores the scored set (the test loader when the datamodule has one, else val)
and returns each batch's logits per variant (`raw`, `ema`) with the labels; this callback reduces
them to four compact arrays per variant (`compact`) and, when the epoch is the variant's new
selected one, rewrites the file with both variants' selected arrays. The selection is the one
`results/layout.metrics_from_rows` and the best.ckpt `ModelCheckpoint` make: on the epoch's held-out
val top-1 (`val_top1`; `ema_val_top1` for the EMA), strictly greater wins (the first epoch reaching
the best value), a non-finite score never beats a finite one, and while nothing finite was seen the
latest epoch is kept.

The selected scores, epochs and arrays are the callback's checkpoint state (about 16 bytes per image
and variant), so a resumed run rewrites the file it had at its checkpoint and goes on as the
uninterrupted run, and a completed run's file can be rewritten from its checkpoint alone
(train/rewrite.py; also at the end of a fit that had nothing left to train, when the file is missing).
The file names its run (`run_meta` of the run's config.yaml, which the sweep writes before training:
recipe, act label, setting, seed, config hash, classes, processes), which the report checks (results/evidence.py). A run that diverges loses its file: it reports no
checkpoint (NaN).
Under DDP every rank gathers the arrays (collectives on every rank); rank 0 writes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn

from ..results.identity import config_hash
from ..results.io import RunStateError
from ..results.layout import read_config
from ..results.predictions import ARRAYS, VARIANTS, write_predictions
from .module import Diverged

SCORES = {"raw": "val_top1", "ema": "ema_val_top1"}  # the metric each variant's epoch is selected on


def compact(logits: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
    """One batch's `pred` (argmax of the logits, as the top-1 metric takes it), `p_true` (softmax
    probability of the true class), `confidence` (that of the predicted class) and `target`;
    probabilities in float32, on the logits' device."""
    pred = logits.argmax(dim=1)
    probs = torch.softmax(logits.float(), dim=1)
    return {
        "pred": pred,
        "p_true": probs.gather(1, target[:, None]).squeeze(1),
        "confidence": probs.gather(1, pred[:, None]).squeeze(1),
        "target": target,
    }


def improves(score: float, best: float | None) -> bool:
    """Whether an epoch scoring `score` replaces the selected one scoring `best` (None: none yet)."""
    if best is None:
        return True
    if math.isfinite(score):
        return not math.isfinite(best) or score > best
    return not math.isfinite(best)  # nothing finite so far: the latest epoch


def interleave(gathered: torch.Tensor, counts: torch.Tensor, total: int | None) -> torch.Tensor:
    """Undo the eval `DistributedSampler`'s sharding (no shuffle): rank r held positions r, r+W, r+2W, ...

    Args:
        gathered: (W, n) the ranks' arrays, padded to the longest.
        counts: (W,) how many entries of each row are real.
        total: the dataset's length; positions past it are the sampler's padding (repeated images).
    """
    world, n = gathered.shape
    j = torch.arange(n, device=gathered.device)
    pos = j[None, :] * world + torch.arange(world, device=gathered.device)[:, None]
    keep = j[None, :] < counts.to(gathered.device)[:, None]
    if total is not None:
        keep &= pos < total
    return gathered[keep][pos[keep].argsort()]


def run_meta(cfg: Mapping, num_classes: int | None, world_size: int = 1) -> dict:
    """The identity a run's predictions file carries (results/predictions.py `IDENTITY`), from its run config
    as the sweep wrote it (config.yaml: with `act_label` and `setting`; its hash is the summary's `config_hash`)."""
    meta = {
        "recipe": cfg["recipe"],
        "act": cfg.get("act_label") or cfg["act"],
        "setting": dict(cfg.get("setting") or {}),
        "seed": cfg["seed"],
        "config_hash": config_hash(dict(cfg)),
        "world_size": int(world_size),
    }
    return {**meta, "n_classes": int(num_classes)} if num_classes else meta


def _score(metrics: Mapping, key: str) -> float:
    value = metrics.get(key)
    return float(value) if value is not None else math.nan


class PredictionsWriter(L.Callback):
    """Writes `path` (predictions.npz) for the selected epoch of each variant.

    Args:
        path: the run's predictions file (`results.layout.files(run).predictions`).
        scored_index: index of the scored loader among the validation dataloaders.
        scores: the metric that selects each variant's epoch (`SCORES`).
    The file's `meta` (`run_meta`) is built at fit start from the config.yaml beside it; without one (a
    run trained outside the sweep) the file names no run.
    """

    def __init__(self, path: Path, scored_index: int = 0, scores: Mapping[str, str] = SCORES):
        self.path = Path(path)
        self.meta: dict | None = None
        self.scored_index = int(scored_index)
        self.scores = dict(scores)
        self.selected: dict[str, dict] = {}  # variant -> {"score", "epoch", "arrays": {name: CPU tensor}}
        self._batches: dict[str, list[dict[str, torch.Tensor]]] = {}
        self._restored = False

    # ---- checkpoint state --------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "selected": {
                v: {"score": s["score"], "epoch": s["epoch"], "arrays": dict(s["arrays"])}
                for v, s in self.selected.items()
            },
            "meta": self.meta,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        self.selected = {
            v: {"score": float(s["score"]), "epoch": int(s["epoch"]), "arrays": dict(s["arrays"])}
            for v, s in state_dict.get("selected", {}).items()
        }
        self._restored = True

    def setup(self, trainer, pl_module, stage: str) -> None:
        try:
            cfg = read_config(self.path.parent)
        except RunStateError:
            cfg = None
        if cfg is not None:
            self.meta = run_meta(cfg, getattr(pl_module, "num_classes", None), trainer.world_size)

    def on_train_start(self, trainer, pl_module) -> None:
        """A resumed run: the file as it was at the checkpoint (a later killed epoch may have rewritten it)."""
        if self._restored and self.selected and trainer.is_global_zero:
            self._write()

    def on_fit_end(self, trainer, pl_module) -> None:
        """A completed run resumed from its last checkpoint trains nothing (no on_train_start): its file,
        when missing, from the checkpoint's selection."""
        if self.selected and trainer.is_global_zero and not self.path.exists():
            self._write()

    # ---- collecting --------------------------------------------------------------------------
    def _fitting(self, trainer) -> bool:
        return trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        self._batches = {}

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if dataloader_idx != self.scored_index or not self._fitting(trainer) or not isinstance(outputs, Mapping):
            return
        for v in VARIANTS:
            if v in outputs:
                self._batches.setdefault(v, []).append(compact(outputs[v], outputs["target"]))

    def _total(self, trainer) -> int | None:
        loaders = trainer.val_dataloaders
        loader = loaders[self.scored_index] if isinstance(loaders, (list, tuple)) else loaders
        try:
            return len(loader.dataset)
        except (AttributeError, TypeError):
            return None

    def _gather(self, trainer, pl_module, batches: list[dict]) -> dict[str, torch.Tensor]:
        """The epoch's arrays of one variant over all ranks, in loader order, on the CPU (a collective)."""
        local = {a: torch.cat([b[a] for b in batches]) for a in ARRAYS}
        if trainer.world_size > 1:
            n = local["target"].new_tensor(len(local["target"]))
            counts = pl_module.all_gather(n).reshape(-1)
            longest, total = int(counts.max()), self._total(trainer)
            for a, t in local.items():
                padded = torch.cat([t, t.new_zeros(longest - len(t))])
                local[a] = interleave(pl_module.all_gather(padded).reshape(len(counts), longest), counts, total)
        ints = {"pred", "target"}
        return {a: t.detach().to("cpu", torch.int32 if a in ints else torch.float32) for a, t in local.items()}

    # ---- selecting and writing ---------------------------------------------------------------
    def on_validation_end(self, trainer, pl_module) -> None:
        """The epoch's metrics are in `trainer.callback_metrics` now: select and write."""
        if not self._fitting(trainer):
            return
        batches, self._batches = self._batches, {}
        epoch = trainer.current_epoch + 1
        improved = False
        for v in sorted(batches):  # same variants, same order on every rank: the gathers pair up
            arrays = self._gather(trainer, pl_module, batches[v])
            score = _score(trainer.callback_metrics, self.scores[v])
            best = self.selected.get(v)
            if improves(score, best["score"] if best else None):
                self.selected[v] = {"score": score, "epoch": epoch, "arrays": arrays}
                improved = True
        if improved and trainer.is_global_zero:
            self._write()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, Diverged) and trainer.is_global_zero:
            self.path.unlink(missing_ok=True)

    def _write(self) -> None:
        write_predictions(
            self.path,
            {
                v: {**{a: t.numpy() for a, t in s["arrays"].items()}, "epoch": s["epoch"]}
                for v, s in self.selected.items()
            },
            meta=self.meta,
        )
