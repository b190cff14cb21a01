"""Learning-rate schedules as per-step multipliers of each group's base lr.

`constant`, `step` (x gamma at each milestone epoch, paper 004 Table 6) and `cosine`
with linear warmup and a floor (ConvNeXt / DeiT recipes, paper 001 Table 8, 004 Table 10 and App G).
Per-step so that warmup is smooth; per-group base lrs keep the activation lr multiplier.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping


def lr_lambda(cfg: Mapping, base_lr: float, steps_per_epoch: int, epochs: int) -> Callable[[int], float]:
    """Multiplier of the base lr at optimizer step `step` (0-based); `cfg` is a whole, checked `sched`
    block (a run's config, or `config.block("sched", {...})`: `name` is one of config.SCHEDULES)."""
    name = cfg["name"]
    steps_per_epoch = max(1, int(steps_per_epoch))
    total = max(1, epochs * steps_per_epoch)
    warmup = int(round(float(cfg["warmup_epochs"]) * steps_per_epoch))
    warmup_start = float(cfg["warmup_lr"]) / base_lr if base_lr > 0 else 0.0
    floor = float(cfg["min_lr"]) / base_lr if base_lr > 0 else 0.0
    milestones = sorted(int(m) for m in cfg["milestones"])
    gamma = float(cfg["gamma"])

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
