"""Speed and memory of an activation's forward + backward as a ratio to GELU, measured in the same process
on the same input (paired rounds, bench/timing.py): a figure, a pass/fail only against `--max-ratio`."""

from __future__ import annotations

import torch
from torch import nn

from ..activations import fused
from ..bench import timing
from ..bench.act_speed import Step
from .checks import randn

SHAPE, QUICK_SHAPE = (16, 32, 32, 32), (2, 8, 4, 4)  # NCHW float32; below fused.compile_min_numel(): eager kernels
ROUNDS, QUICK_ROUNDS = 10, 4


def speed(
    subject, device: torch.device, quick: bool = False, max_ratio: float | None = None
) -> tuple[bool | None, str]:
    """(None, the figures), or with `max_ratio` (whether both ratios are within it, the figures). Memory is the
    CUDA peak above the inputs on a GPU; on a CPU, which keeps no peak statistic, the bytes autograd saves
    for backward (what a layer holds until its backward runs)."""
    shape, repeats = (QUICK_SHAPE, QUICK_ROUNDS) if quick else (SHAPE, ROUNDS)
    x = randn(shape, device).requires_grad_(True)
    g = randn(shape, device, seed=1)
    gelu = Step(nn.GELU(), x, g)
    act = Step(subject.make(channels=shape[1]).to(device).train(), x, g, allow_unused=True)
    for _ in range(2):  # warm-up: allocator, caches
        gelu(), act()
    # half the rounds run GELU first, half the activation: on a busy CPU the first call of a round can pay for
    # waking the thread pool, which would otherwise always land on the same contender
    first = timing.rounds({"gelu": gelu, "act": act}, (repeats + 1) // 2, device)
    second = timing.rounds({"act": act, "gelu": gelu}, repeats // 2, device)
    ratio = timing.median_ratio(first["act"] + second["act"], first["gelu"] + second["gelu"])
    if device.type == "cuda":
        memory, kind = timing.peak_bytes(act, device) / max(timing.peak_bytes(gelu, device), 1), "peak memory"
    else:
        memory, kind = timing.saved_bytes(act) / max(timing.saved_bytes(gelu), 1), "memory saved for backward"
    figure = (
        f"{ratio:.2f}x GELU time, {memory:.2f}x GELU {kind} (forward + backward, "
        f"{'x'.join(map(str, shape))} float32 on {device}, {fused.ran_on(x)} kernels, median of {repeats} rounds)"
    )
    if max_ratio is None:
        return None, figure
    if max(ratio, memory) > max_ratio:
        return False, f"{figure}: above --max-ratio {max_ratio:g}"
    return True, f"{figure}: within --max-ratio {max_ratio:g}"
