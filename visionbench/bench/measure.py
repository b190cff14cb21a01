"""What `visionbench estimate` measures (bench/estimate.py projects a sweep's cost from it): the device
and world size of a run (its probe Trainer, train/trainer.py), the loader lengths and the training
loader's own rate (the real data module), and a model's step and eval-batch times and memory on a
synthetic batch (`TrainStep`: the recipe's optimizer, precision, channels_last, compile; bench/timing.py),
with a batch that does not fit refused before it is run (`DoesNotFit`).

    device, world, batch, train_steps, eval_batches, data, loader_img_s = loaders(run)
    params, step_s, eval_s, memory = measure(run, data, device, batch, "vgg8/relu")

`run` is a run's typed config (`config.typed`).
"""

from __future__ import annotations

import gc
import math
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..config import ConfigError, RunConfig
from . import gpu_timing, timing

WARMUP_STEPS = 2  # untimed: the first steps allocate, autotune and compile the fused kernels
WARMUP_MIN_S = 0.5  # ... and warm-up goes on (up to 50 steps) until this long: a process's first steps are slow
MAX_TIMED = 10  # timed steps (and eval batches) per model, fewer once TIME_BUDGET_S is spent
TIME_BUDGET_S = 1.0
PROBE_BATCHES = (2, 4)  # CPU memory check: saved-for-backward at these batches, extrapolated linearly


class DoesNotFit(ConfigError):
    """The per-device batch of a run does not fit in the device's memory."""


def loader_rate(loader, device: torch.device) -> float:
    """Images per second the training loader delivers alone (no model): its first batch untimed (workers
    start, an on-device set is moved), then up to MAX_TIMED batches or TIME_BUDGET_S, over as many passes
    as that takes. `data.on_device` batches are synchronised on CUDA, so their device work is counted."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    batches = iter(loader)
    if next(batches, None) is None:
        return float("nan")  # an empty epoch
    sync()
    images, seconds, timed = 0, 0.0, 0
    t = time.perf_counter()
    while timed < MAX_TIMED and seconds < TIME_BUDGET_S:
        batch = next(batches, None)
        if batch is None:  # a short epoch: another pass (its start is timed: a run pays it each epoch)
            batches = iter(loader)
            continue
        sync()
        now = time.perf_counter()
        images, seconds, timed, t = images + int(batch[0].shape[0]), seconds + now - t, timed + 1, now
    return images / seconds if seconds > 0 else float("nan")


def limited(batches: int, limit: int | float | None) -> int:
    """Lightning's `limit_*_batches` on a loader of `batches`: an int caps, a float takes a fraction."""
    if limit is None:
        return batches
    if isinstance(limit, int) and not isinstance(limit, bool):
        return min(batches, limit)
    return int(batches * float(limit))


def _median_time(fn: Callable[[], object], device: torch.device) -> float:
    """Median seconds of up to MAX_TIMED calls of fn, fewer once TIME_BUDGET_S is spent (at least one)."""
    times: list[float] = []
    while len(times) < MAX_TIMED and (not times or sum(times) < TIME_BUDGET_S):
        times.append(timing.timed(fn, device))
    return statistics.median(times)


def _check_cpu_fits(model: torch.nn.Module, shape: tuple[int, ...], input_bytes: int) -> None:
    """Refuse, before the step runs, a CPU batch whose step needs more than the available RAM: the
    CPU allocator refuses only what exceeds RAM + swap, anything less is granted and then swaps or
    is OOM-killed. Needed: the input, the bytes saved for backward (measured in fp32 forwards at
    PROBE_BATCHES, extrapolated linearly: an upper bound for mixed precision) and the weights with
    their gradients and two optimizer moments."""
    avail = available_bytes()
    if avail is None or shape[0] <= PROBE_BATCHES[-1]:
        return
    saved = [timing.saved_bytes(lambda b=b: model(torch.randn((b, *shape[1:])))) for b in PROBE_BATCHES]
    per_image = (saved[1] - saved[0]) / (PROBE_BATCHES[1] - PROBE_BATCHES[0])
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    need = input_bytes + saved[0] + per_image * (shape[0] - PROBE_BATCHES[0]) + 4 * weights
    if need > avail:
        raise RuntimeError(f"not enough memory: a step needs about {gb(need)}, {gb(avail)} available")


def available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (Linux: free RAM plus what the kernel can reclaim); None elsewhere."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def out_of_memory(e: BaseException) -> str | None:
    """What an out-of-memory error says was asked for ("tried to allocate 256.0 GB"), None if `e` is
    not one: torch.OutOfMemoryError (CUDA) or the CPU allocator's RuntimeError."""
    text = str(e)
    if not isinstance(e, torch.OutOfMemoryError) and not re.search(r"not enough memory|can't allocate", text):
        return None
    m = re.search(r"allocate (\d+) bytes", text)  # the CPU allocator
    if m:
        return f"tried to allocate {gb(int(m.group(1)))}"
    m = re.search(r"allocate ([\d.]+ ?[KMGT]i?B)", text)  # CUDA's "Tried to allocate 2.00 GiB"
    if m:
        return f"tried to allocate {m.group(1)}"
    m = re.search(r"not enough memory[^\n]*", text)
    return m.group(0) if m else text.strip().splitlines()[0][:160]


def gb(n: float) -> str:
    """Bytes as `256.0 GB` (or `50 MB` below a gigabyte)."""
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def loaders(run: RunConfig):
    """(device, world size, per-step batch, train batches and eval batches per device per epoch, data
    module, loader images/s) of a run: the run's probe Trainer (train/trainer.py, never fitted) gives
    the device and world size; the data module's loaders give the lengths."""
    from ..data import create_datamodule
    from ..train.run import step_batch
    from ..train.trainer import build_trainer

    t = run.trainer
    trainer = build_trainer(t)
    world = trainer.world_size
    try:
        batch = step_batch(run.batch_size, world, t.accumulate_grad_batches)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    data = create_datamodule(run.data, batch_size=batch, seed=0, test_in_val=True)
    data.trainer = trainer  # the loaders shard by the Trainer's world size and rank (data/base.py `_world`)
    train_steps = limited(len(data.train_dataloader()), t.limit_train_batches)
    eval_sets = [s for s in (data.val_set, data.test_set) if s is not None]
    # under DDP Lightning gives each rank ceil(N / world) eval samples (DistributedSampler, no shuffle)
    eval_batches = sum(limited(math.ceil(math.ceil(len(s) / world) / batch), t.limit_val_batches) for s in eval_sets)
    variants = 2 if run.ema.decay else 1  # the EMA copy is evaluated too (train/module.py)
    loader_img_s = loader_rate(data.train_dataloader(), trainer.strategy.root_device)
    return trainer.strategy.root_device, world, batch, train_steps, eval_batches * variants, data, loader_img_s


def measure(
    run: RunConfig, data, device: torch.device, batch: int, what: str
) -> tuple[int, float, float, int | None, float | None]:
    """(parameters, seconds per train step, seconds per eval batch, memory bytes, GPU seconds per train step) of the
    run's model on a synthetic batch of `batch` images; `DoesNotFit` when that batch does not fit on `device`.
    Memory: CUDA peak allocated in one step; elsewhere the bytes autograd saves for backward. GPU seconds: the
    step's kernels, copies and memsets by torch.profiler (gpu_timing.kernel_stats; None off CUDA): over the step's
    time, the share of it one run keeps the GPU busy (what `parallel=auto` fills). Timed on the kernels the run
    trains with (its trainer.kernels, or the variable that overrides it: activations/fused.py)."""
    from ..activations import fused
    from ..train.environment import kernels_key

    with fused.configured(kernels_key(run)):
        return _measure(run, data, device, batch, what)


def _measure(
    run: RunConfig, data, device: torch.device, batch: int, what: str
) -> tuple[int, float, float, int | None, float | None]:
    from .. import models
    from ..train.run import build_model
    from .train_step import TrainStep

    torch.manual_seed(0)
    try:
        model = build_model(run, data.num_classes, data.in_chans, data.img_size).to(device)
    except ValueError as e:
        raise ConfigError(f"{what}: {e}") from None
    params = models.count_parameters(model)["params"]
    shape = (batch, data.in_chans, data.img_size, data.img_size)
    step = None
    try:
        x = torch.empty(shape, device=device)  # the allocator refuses a batch above RAM + swap at once
        if device.type == "cpu":
            _check_cpu_fits(model, shape, x.nbytes)
        gen = torch.Generator(device=device).manual_seed(0)
        x.normal_(generator=gen)
        y = torch.randint(0, data.num_classes, (batch,), device=device, generator=gen)
        step = TrainStep(model, run, x, y)
        warm = [timing.timed(step, device) for _ in range(WARMUP_STEPS)]
        while sum(warm) < WARMUP_MIN_S and len(warm) < 50:
            warm.append(timing.timed(step, device))
        step_s = _median_time(step, device)
        step.evaluate()  # warm: eval mode runs other kernels
        eval_s = _median_time(step.evaluate, device)
        memory = timing.peak_bytes(step, device, total=True) if device.type == "cuda" else timing.saved_bytes(step)
        kernels = gpu_timing.kernel_stats(step, device)
    except (torch.OutOfMemoryError, RuntimeError) as e:
        why = out_of_memory(e)
        if why is None:
            raise
        step = x = None
        raise DoesNotFit(
            f"batch {batch} (per device) does not fit in memory on {device.type} for {what}: "
            f"{why}; lower batch_size or set trainer.accumulate_grad_batches=K"
        ) from None
    finally:
        del step, model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return params, step_s, eval_s, memory, None if kernels is None else kernels[1]
