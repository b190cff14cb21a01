"""The divergence check of a training run, without a device sync per step.

    watch = LossWatch()
    watch.update(loss, global_step)          # every step: on the device, no sync
    if watch.due(batch_idx, num_batches):    # every `every` steps and at each epoch's last batch
        bad = watch.check()                  # one sync (and under DDP one all-reduce): None while all were finite

A check per step (`loss.item()`) makes the CPU wait for each forward pass before it queues the backward, so on a
GPU the device idles while the CPU queues every step's kernels; watched on the device, the CPU runs ahead between
checks. The first non-finite loss and its step are kept on the device, so the step a run reports is the one
where it diverged, not the one where that was read; the check at each epoch's last batch stops the run inside
the epoch it diverged in, before that epoch's checkpoint is written.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

CHECK_EVERY = 32  # steps between checks: each costs one device sync


class LossWatch:
    """The first non-finite training loss of a run, watched on the device (see the module docstring)."""

    def __init__(self, every: int = CHECK_EVERY):
        self.every = int(every)
        self.step: torch.Tensor | None = None  # global step of the first non-finite loss, -1 while none
        self.loss: torch.Tensor | None = None  # that loss

    def update(self, loss: torch.Tensor, step: int) -> None:
        loss = loss.detach().float()
        if self.step is None or self.step.device != loss.device:
            self.step = torch.full((), -1, dtype=torch.long, device=loss.device)
            self.loss = torch.zeros((), device=loss.device)
        first = ~torch.isfinite(loss) & (self.step < 0)
        self.step = torch.where(first, step, self.step)
        self.loss = torch.where(first, loss, self.loss)

    def due(self, batch_idx: int, num_batches: float) -> bool:
        """Whether this batch is a checking one: every `every`-th of an epoch, and its last."""
        return (batch_idx + 1) % self.every == 0 or batch_idx + 1 >= num_batches

    def check(self) -> tuple[int, float, bool] | None:
        """None while every loss so far was finite on every rank; else (step, loss, here): the step of the first
        non-finite loss on any rank, this rank's first non-finite loss (NaN when it had none), and whether it
        had one. Under DDP the ranks see different batches, so one rank alone can get one; all then stop
        together, or the others would wait in the next gradient all-reduce for a rank that left: one MAX
        all-reduce of (flag, −step), which gives every rank the flag and the earliest step."""
        if self.step is None:
            return None
        bad = self.step >= 0
        flag_step = torch.stack([bad.double(), torch.where(bad, -self.step.double(), -math.inf)])
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(flag_step, op=dist.ReduceOp.MAX)
        anywhere, minus_step = flag_step.tolist()
        if not anywhere:
            return None
        here = bool(bad.item())
        return int(-minus_step), float(self.loss) if here else math.nan, here
