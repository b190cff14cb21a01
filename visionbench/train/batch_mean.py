"""The mean of per-batch values weighted by batch size, kept on the device: a run's epoch loss.

    mean = BatchMean()
    mean.update(loss, weight=x.shape[0])     # every batch: two device additions, no sync, no input check
    mean.compute()                           # Σ loss_b · n_b / Σ n_b (under DDP summed over ranks first)

An epoch's mean loss is the mean over its images: a last, partial batch of 8 images weighs 8, not as much as a
full batch of 64. torchmetrics' `MeanMetric(nan_strategy="disable")` — the setting that skips the per-batch NaN
check, a device sync — replaces any `weight=` by ones (torchmetrics 1.9 `BaseAggregator._cast_and_nan_check_input`),
which made every loss an unweighted mean of batch means; `MeanMetric()` weighs but checks (and syncs) each batch.
This metric does what the first is documented to do. Its inputs are finite by construction: a non-finite training
loss ends the run (loss_watch.py), and an evaluation loss that is not finite is the value to report.
"""

from __future__ import annotations

import torch
from torchmetrics import Metric


class BatchMean(Metric):
    """Σ value_b · weight_b / Σ weight_b over the batches since the last reset (module docstring)."""

    full_state_update = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # float32 sums in MeanMetric's order: the losses of the runs recorded before its weight was lost, to the bit
        self.add_state("total", default=torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("weight", default=torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, value: torch.Tensor, weight: float = 1.0) -> None:
        """Add one batch's mean loss `value` (a 0-dim tensor) with `weight`, the batch's images: a Python number,
        which the device takes as a kernel argument (a tensor weight would be one more copy per step)."""
        self.total += value.detach().to(self.total.dtype) * float(weight)
        self.weight += float(weight)

    def compute(self) -> torch.Tensor:
        return self.total / self.weight
