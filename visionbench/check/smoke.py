"""A short smoke training of an activation on the embedded 8x8 digits: the loss falls and stays finite.

The full check trains the `digits_vgg4` recipe's model (VGG4 with its norm) with the recipe's optimizer
and batch size for STEPS steps; `quick` trains a one-hidden-layer MLP (64 -> HIDDEN -> 10) for QUICK_STEPS
steps, in milliseconds. In-process, without Lightning: this is a smoke test, not a benchmark.
"""
from __future__ import annotations

import functools
import math
import statistics

import torch
from torch import nn

from ..config import recipe_config

RECIPE = "digits_vgg4"
STEPS, QUICK_STEPS = 60, 40
HIDDEN = 32  # the quick MLP's width (the activation's channels)
WINDOW = 5  # the loss at the start and at the end: the mean over this many steps
FALL = 0.8  # the end's loss must be below FALL x the start's
DIVERGE = 3.0  # a step's loss above DIVERGE x the start's is a divergence


@functools.lru_cache(maxsize=2)
def digits(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 1,797 digits, (N, 1, 8, 8) float32 standardised, and int64 labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = (x - x.mean()) / x.std()
    return x.to(device), torch.tensor(data.target, dtype=torch.int64, device=device)


def build(subject, quick: bool, cfg) -> nn.Module:
    """The recipe's VGG4 with the activation swapped in, or (quick) the MLP with one activation."""
    if quick:
        return nn.Sequential(nn.Flatten(), nn.Linear(64, HIDDEN), subject.make(channels=HIDDEN), nn.Linear(HIDDEN, 10))
    from ..models import create

    return create(cfg.model.name, act=subject.name, act_kwargs=dict(subject.options), num_classes=10,
                  img_size=cfg.data.img_size, norm=cfg.model.norm, in_chans=1)


def losses(subject, device: torch.device, quick: bool) -> list[float]:
    """The training loss of every step (seeded: the same run every time)."""
    from ..train.optim import build_optimizer

    cfg = recipe_config(RECIPE)
    torch.manual_seed(0)
    model = build(subject, quick, cfg).to(device).train()
    optimizer = build_optimizer(model, cfg.optim, cfg.batch_size)
    x, y = digits(str(device))
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(QUICK_STEPS if quick else STEPS):
        idx = torch.randint(len(y), (cfg.batch_size,), generator=gen).to(device)
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        out.append(float(loss.detach()))
        if not math.isfinite(out[-1]):
            break
    return out


def smoke_training(subject, device: torch.device, quick: bool = False) -> tuple[bool, str]:
    """PASS when every step's loss is finite, none exceeds DIVERGE x the start's, and the end's is below FALL x
    the start's (start and end: means over WINDOW steps)."""
    what = (f"MLP 64-{HIDDEN}-10" if quick else f"{RECIPE}'s {recipe_config(RECIPE).model.name}") + " on digits"
    run = losses(subject, device, quick)
    start = statistics.fmean(run[:WINDOW])
    if not math.isfinite(run[-1]):
        return False, f"{what}: loss {run[-1]} at step {len(run) - 1} (diverged)"
    worst = max(range(len(run)), key=run.__getitem__)
    if run[worst] > DIVERGE * start:
        return False, f"{what}: loss {run[worst]:.3g} at step {worst}, above {DIVERGE:g}x the start's {start:.3g} (diverged)"
    end = statistics.fmean(run[-WINDOW:])
    figure = f"{what}, {len(run)} steps: loss {start:.3f} -> {end:.3f}"
    if not end < FALL * start:
        return False, f"{figure}: did not fall below {FALL:g}x the start"
    return True, figure
