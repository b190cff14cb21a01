"""A short smoke training of an activation on the embedded 8x8 digits: the loss falls and stays finite.

A one-hidden-layer MLP (64 -> HIDDEN -> activation -> 10) trained with the `digits_vgg4` recipe's optimizer and
batch size, STEPS steps (QUICK_STEPS with `quick`), in-process, without Lightning, in well under a second: the
digits as the data module loads them (data/digits.py), one step as the tools that train outside Lightning take it
(train/step.py).
Not the recipe's VGG4: at its lr, a VGG4 sits at ln 10 for its first ~100 steps with ReLU and for 200+ with
softplus at seed 0 (docs/zoo.md: softplus loses one seed of five there), so a short run would judge the
recipe's start, not the activation.
"""

from __future__ import annotations

import functools
import math
import statistics

import numpy as np
import torch
from torch import nn

from ..activations.base import one_thread
from ..config import recipe_config as _recipe_config
from ..data.digits import load_digits_uint8
from ..train.step import classification_step

RECIPE = "digits_vgg4"
STEPS, QUICK_STEPS = 200, 80
HIDDEN = 32  # the MLP's width (the activation's channels)
WINDOW = 5  # the loss at the end: the mean over the last WINDOW steps
FALL = 0.8  # the end's loss must be below FALL x the first step's (~ln 10 = 2.3 at a fresh init)
# diverged: a non-finite loss, as a run's status says (train/module.py). Early spikes that recover are not:
# polyrelu's cubic reaches 4x the first loss at step 1 in VGG4 and trains (docs/zoo.md)


@functools.lru_cache(maxsize=1)
def recipe_config(name: str):
    return _recipe_config(name)


@functools.lru_cache(maxsize=2)
def digits(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """All 1,797 digits, (N, 1, 8, 8) float32 standardised, and int64 labels, from the digits data module's loader
    (data/digits.py `load_digits_uint8`). Its uint8 pixels are round(v x 255/16) of scikit-learn's levels
    v = 0..16; rounding back gives v exactly, so the inputs are scikit-learn's to the bit."""
    images, targets = load_digits_uint8()
    levels = np.rint(images[..., 0].astype(np.float64) * (16.0 / 255.0))
    x = torch.tensor(levels, dtype=torch.float32).unsqueeze(1) / 16.0
    x = (x - x.mean()) / x.std()
    return x.to(device), torch.tensor(targets, dtype=torch.int64, device=device)


def build(subject) -> nn.Module:
    """The MLP, its one activation on (N, HIDDEN) features."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, HIDDEN), subject.make(channels=HIDDEN), nn.Linear(HIDDEN, 10))


def losses(subject, device: torch.device, quick: bool) -> list[float]:
    """The training loss of every step (seeded: the same run every time)."""
    from ..train.optim import build_optimizer

    cfg = recipe_config(RECIPE)
    torch.manual_seed(0)
    model = build(subject).to(device).train()
    optimizer = build_optimizer(model, cfg.optim, cfg.batch_size)
    x, y = digits(str(device))
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(QUICK_STEPS if quick else STEPS):
        idx = torch.randint(len(y), (cfg.batch_size,), generator=gen).to(device)
        out.append(float(classification_step(model, optimizer, x[idx], y[idx], skip_nonfinite=True)))
        if not math.isfinite(out[-1]):
            break
    return out


def smoke_training(subject, device: torch.device, quick: bool = False) -> tuple[bool, str]:
    """PASS when every step's loss is finite (no divergence) and the mean of the last WINDOW steps is below FALL x
    the first step's (the loss falls)."""
    what = f"MLP 64-{HIDDEN}-10 on digits ({RECIPE}'s optimizer)"
    with one_thread():  # tiny tensors: one thread is fastest (base.py)
        run = losses(subject, device, quick)
    start = run[0]
    if not math.isfinite(run[-1]):
        return False, f"{what}: loss {run[-1]} at step {len(run) - 1}: diverged"
    end = statistics.fmean(run[-WINDOW:])
    figure = f"{what}, {len(run)} steps: loss {start:.3f} -> {end:.3f} (peak {max(run):.3g})"
    if not end < FALL * start:
        return False, f"{figure}: did not fall below {FALL:g}x the first step's"
    return True, figure
