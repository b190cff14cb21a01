"""One plain-torch classification step, for the tools that train outside the Lightning run.

    >>> loss = classification_step(model, opt, x, y, label_smoothing=0.1)

`visionbench bench train` times it on a recipe's model and optimizer; `visionbench plot
boundaries` (paper 001 Sec 4.2, App M) trains its toy MLPs with it, and `visionbench check`'s smoke
training its digits VGG. It is the one step of train/
that imports no Lightning: the rooms above (bench/, experiments/, check/) train with it without the
LightningModule's hooks, logging and callbacks, which they neither need nor time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def classification_step(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    label_smoothing: float = 0.0,
    skip_nonfinite: bool = False,
    autocast_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """zero_grad, cross-entropy of `model(x)` against `y`, backward, `opt.step()`; returns the loss.

    With `skip_nonfinite`, a NaN/inf loss is returned without backward or step (one host sync per
    step), so a caller can stop a diverging model where it got to instead of raising. With
    `autocast_dtype` (bf16/fp16: `trainer.precision=*-mixed`), the forward and the loss run under
    `torch.autocast` on x's device and the backward outside it, as Lightning's mixed precision does."""
    opt.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        loss = F.cross_entropy(model(x), y, label_smoothing=label_smoothing)
    if skip_nonfinite and not torch.isfinite(loss):
        return loss.detach()
    loss.backward()
    opt.step()
    return loss.detach()
