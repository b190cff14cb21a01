"""`visionbench estimate <the run's arguments>`: what a sweep will cost, measured before it is paid.

    visionbench estimate recipe=cifar10_vgg8 act=relu,rational seeds=5

The preflight before a sweep is submitted to a cluster. For each distinct (setting, activation)
of the sweep, on the trainer's device (`trainer.accelerator`/`devices`, resolved by Lightning):
the model is built as a run builds it (`train.run.build_model`), a few warm training steps and
eval batches are timed (`bench.train.TrainStep`: the recipe's optimizer, precision,
channels_last, compile; `bench.timing`), and the loader lengths come from the real data module
(`data.limit_train`, `data.augment.repeated_aug`, `trainer.limit_*_batches`,
`trainer.accumulate_grad_batches`, the DDP world size). Per run:

    epochs x (train steps x step time + eval batches x eval-batch time)

and the sweep's total counts only what is left in results_dir: completed runs not at all, an
unfinished one (interrupted, killed, diverged or failed with a last.ckpt) by its remaining epochs.
Nothing is written: no run directory, no results_dir.

Errors, one line each, before anything is timed: a missing dataset or a config that does not
match the results already on disk (`sweep.plan`, as the sweep itself), and a batch that does not
fit in memory. The training loader is timed alone (no model: `loader_rate`, images/s) beside the
model's rate (batch / s per step), and each row says which bounds the run: `loader (2.3x)` when the
loader delivers fewer images per second than the steps take in. Not in the projection: data loading
and augmentation (the steps run on a synthetic batch; with data.num_workers > 0 they overlap the
steps, with 0 they add to them), mixup, EMA updates, gradient clipping, LSUV,
checkpoint writing, and the Lightning loop's own per-step overhead (milliseconds: it matters only
for tiny models such as digits').
"""
from __future__ import annotations

import gc
import logging
import math
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import DictConfig

from ..results import layout
from ..results.io import RunStateError
from ..config import ConfigError
from ..results.settings import setting_label
from ..sweep.sweep import plan, worker_threads

WARMUP_STEPS = 2  # untimed: the first steps allocate, autotune and compile the fused kernels
WARMUP_MIN_S = 0.5  # ... and warm-up goes on (up to 50 steps) until this long: a process's first steps are slow
MAX_TIMED = 10  # timed steps (and eval batches) per model, fewer once TIME_BUDGET_S is spent
TIME_BUDGET_S = 1.0
PROBE_BATCHES = (2, 4)  # CPU memory check: saved-for-backward at these batches, extrapolated linearly


class DoesNotFit(ConfigError):
    """The per-device batch of a run does not fit in the device's memory."""


@dataclass
class Row:
    """The measurements and projection of one (setting, activation)."""

    setting: str  # the setting's label ('' without factors)
    act: str
    params: int
    train_steps: int  # loader batches per device per epoch (what Lightning runs)
    eval_batches: int  # per device per epoch, all eval loaders (val, test) and variants (raw, EMA)
    step_s: float
    eval_batch_s: float
    memory_bytes: int | None
    epochs: int
    runs: int
    runs_left: int
    epochs_left: int  # summed over the runs left
    loader_img_s: float = float("nan")  # the training loader alone (no model), images per second per device
    batch: int = 0  # per device per step, for the model rate

    @property
    def model_img_s(self) -> float:
        """Images per second per device the training steps take in (batch / s per step)."""
        return self.batch / self.step_s if self.step_s > 0 else float("inf")

    @property
    def bound(self) -> str:
        """`loader (2.3x)` when the loader delivers fewer images per second than the model takes in, else `model`."""
        if not self.loader_img_s < self.model_img_s:
            return "model"
        return f"loader ({self.model_img_s / self.loader_img_s:.1f}x)"

    @property
    def epoch_s(self) -> float:
        return self.train_steps * self.step_s + self.eval_batches * self.eval_batch_s

    @property
    def run_s(self) -> float:
        return self.epochs * self.epoch_s

    @property
    def left_s(self) -> float:
        return self.epochs_left * self.epoch_s


@dataclass
class Estimate:
    """The rows of a sweep and what they were measured with."""

    rows: list[Row]
    device: torch.device
    world_size: int
    batch: int  # per device per step (the first setting's)
    notes: list[str] = field(default_factory=list)
    parallel: int = 1  # CPU worker processes the sweep will run at once (1 on CUDA: they share the device)
    threads: int = 1  # torch threads the steps were timed with (each worker's share with parallel > 1)

    @property
    def total_s(self) -> float:
        """Serial time: the sum of every run left."""
        return sum(r.left_s for r in self.rows)

    @property
    def wall_s(self) -> float:
        """Wall time: on CPU, parallel=K workers run K runs at once, each on its share of the cores."""
        return self.total_s / self.parallel


def estimate(cfg: DictConfig) -> Estimate:
    """Measure every distinct (setting, activation) of the sweep `cfg`; `ConfigError` (one line) on a
    missing dataset, a results_dir holding other settings, or a batch that does not fit."""
    _quiet()
    auto = str(cfg.seeds) == "auto"
    n_seeds = int(getattr(cfg, "seeds_max", 10) if auto else cfg.seeds)
    jobs = plan(cfg, seeds=range(n_seeds))  # every dataset checked and every stored config compared first
    groups: dict[tuple[str, str], list[tuple[dict, Path]]] = {}
    for run, out in jobs:
        groups.setdefault((setting_label(run["setting"]), run["act_label"]), []).append((run, out))
    parallel = max(1, min(int(cfg.parallel), len(jobs)))
    own_threads = torch.get_num_threads()
    threads = worker_threads(parallel) if parallel > 1 else own_threads  # each worker's (sweep/sweep.py)
    torch.set_num_threads(threads)
    try:
        rows, unreadable, unfinished, first = _measure_groups(groups)
    finally:
        torch.set_num_threads(own_threads)
    device, world, batch = first or (torch.device("cpu"), 1, int(cfg.batch_size))
    notes = [f"seeds=auto: up to seeds_max={n_seeds} runs per activation (rounds stop earlier once decided)"] \
        if auto else []
    if unfinished:
        notes.append(f"{unfinished} unfinished run(s) counted by their remaining epochs (metrics.csv beside last.ckpt)")
    if unreadable:
        notes.append(f"{unreadable} run(s) with an unreadable summary.json counted as full runs")
    load = _busy()
    if load:
        notes.append(load)
    if parallel > 1 and device.type == "cuda":
        notes.append(f"parallel={parallel}: the runs share the GPU; the total is serial time")
        parallel = 1
    return Estimate(rows, device, world, batch, notes, parallel, threads)


def _measure_groups(groups: dict):
    """(rows, unreadable summaries, unfinished runs, (device, world, batch) of the first setting)."""
    rows, unreadable, unfinished = [], 0, 0
    first: tuple[torch.device, int, int] | None = None
    loaders: dict[str, tuple] = {}  # per setting: its activations share data, batch and device
    for (label, act), group in groups.items():
        run = group[0][0]
        if label not in loaders:
            loaders[label] = _loaders(run)
        device, world, batch, train_steps, eval_batches, data, loader_img_s = loaders[label]
        first = first or (device, world, batch)
        params, step_s, eval_s, memory = _measure(run, data, device, batch, f"{run['model']['name']}/{act}"
                                                  + (f" ({label})" if label else ""))
        epochs, left = int(run["epochs"]), []
        for _, out in group:
            try:
                left.append(epochs_left(out, epochs))
            except RunStateError:
                unreadable += 1
                left.append(epochs)
        unfinished += sum(0 < e < epochs for e in left)
        rows.append(Row(label, act, params, train_steps, eval_batches, step_s, eval_s, memory, epochs,
                        len(group), sum(e > 0 for e in left), sum(left), loader_img_s, batch))
    return rows, unreadable, unfinished, first


def epochs_left(out: Path, epochs: int) -> int:
    """Epochs the sweep will still train in run directory `out`: 0 if completed, the epochs after its
    last finished one if it can resume (last.ckpt and metrics.csv), else all. `RunStateError` if
    its summary.json is unreadable."""
    summary = layout.read_summary(out)
    if summary and summary.get("status") == layout.COMPLETED:
        return 0
    if not layout.files(out).last.exists():
        return epochs
    try:
        done = len(layout.read_metrics(out))
    except (OSError, ValueError, UnicodeDecodeError):
        done = 0
    return max(0, epochs - done)


def _busy() -> str | None:
    """A note when other processes share the CPU (load average above the cores): the times are then
    those of a busy machine, as a run started now would see them."""
    try:
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
    except (OSError, AttributeError):
        return None
    return (f"load average {load:.1f} on {cores} cores: timed on a busy machine; rerun when it is idle for the "
            f"times a dedicated machine gives") if load > cores else None


def _quiet() -> None:
    """Lightning's device lines ("GPU available: ...") when the Trainer below is built: noise here."""
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _loaders(run: dict[str, Any]):
    """(device, world size, per-step batch, train batches and eval batches per device per epoch, data
    module) of a run: a Lightning Trainer built with the run's device arguments (never fitted) gives
    the device and world size; the data module's loaders give the lengths."""
    import lightning as L

    from ..data import create_datamodule
    from ..train.run import step_batch

    t = run["trainer"]
    trainer = L.Trainer(accelerator=t["accelerator"], devices=t["devices"], num_nodes=t["num_nodes"],
                        strategy=t["strategy"], precision=t["precision"], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    world = int(trainer.world_size)
    try:
        batch = step_batch(int(run["batch_size"]), world, int(t["accumulate_grad_batches"]))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    data = create_datamodule(run["data"], batch_size=batch, seed=0, test_in_val=True)
    data.trainer = trainer  # the loaders shard by the Trainer's world size and rank (data/base.py `_world`)
    train_steps = limited(len(data.train_dataloader()), t["limit_train_batches"])
    eval_sets = [s for s in (data.val_set, data.test_set) if s is not None]
    # under DDP Lightning gives each rank ceil(N / world) eval samples (DistributedSampler, no shuffle)
    eval_batches = sum(limited(math.ceil(math.ceil(len(s) / world) / batch), t["limit_val_batches"]) for s in eval_sets)
    variants = 2 if (run.get("ema") or {}).get("decay") else 1  # the EMA copy is evaluated too (train/module.py)
    loader_img_s = loader_rate(data.train_dataloader(), trainer.strategy.root_device)
    return trainer.strategy.root_device, world, batch, train_steps, eval_batches * variants, data, loader_img_s


def loader_rate(loader, device: torch.device) -> float:
    """Images per second the training loader delivers alone (no model): its first batch untimed (workers
    start, an on-device set is moved), then up to MAX_TIMED batches or TIME_BUDGET_S, over as many passes
    as that takes. `data.on_device` batches are synchronised on CUDA, so their device work is counted."""
    import time

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


def _measure(run: dict[str, Any], data, device: torch.device, batch: int, what: str
             ) -> tuple[int, float, float, int | None]:
    """(parameters, seconds per train step, seconds per eval batch, memory bytes) of the run's model
    on a synthetic batch of `batch` images; `DoesNotFit` when that batch does not fit on `device`.
    Memory: CUDA peak allocated in one step; elsewhere the bytes autograd saves for backward."""
    from .. import models
    from ..bench import timing
    from .train_step import TrainStep
    from ..train.run import build_model

    torch.manual_seed(0)
    try:
        model = build_model(run, data.num_classes, data.in_chans, data.img_size).to(device)
    except ValueError as e:
        raise ConfigError(f"{what}: {e}") from None
    params = int(models.count_parameters(model)["params"])
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
    except (torch.OutOfMemoryError, RuntimeError) as e:
        why = out_of_memory(e)
        if why is None:
            raise
        step = x = None
        raise DoesNotFit(f"batch {batch} (per device) does not fit in memory on {device.type} for {what}: "
                         f"{why}; lower batch_size or set trainer.accumulate_grad_batches=K") from None
    finally:
        del step, model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return params, step_s, eval_s, memory


def _median_time(fn: Callable[[], object], device: torch.device) -> float:
    """Median seconds of up to MAX_TIMED calls of fn, fewer once TIME_BUDGET_S is spent (at least one)."""
    from ..bench import timing

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
    from ..bench import timing

    avail = available_bytes()
    if avail is None or shape[0] <= PROBE_BATCHES[-1]:
        return
    saved = [timing.saved_bytes(lambda: model(torch.randn((b, *shape[1:])))) for b in PROBE_BATCHES]
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


def rate(images_s: float) -> str:
    """Images per second as `12,345` (`-` when not measured)."""
    return "-" if not math.isfinite(images_s) else f"{images_s:,.0f}"


def duration(seconds: float) -> str:
    """`42 s`, `3.5 min`, `2.1 h`, `1.3 d`."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"


def format_estimate(est: Estimate, recipe: str = "", results: str = "") -> str:
    """The table and the projected total, as printed by `visionbench estimate ...`."""
    from ..bench import timing

    setting = any(r.setting for r in est.rows)
    cuda = est.device.type == "cuda"
    header = (["setting"] if setting else []) + [
        "act", "params", "steps/epoch", "s/step", "eval s/epoch", "per run", "runs left", "projected",
        "peak MB (CUDA)" if cuda else "saved for backward MB", "model img/s", "loader img/s", "bound"]
    rows = [([r.setting] if setting else []) + [
        r.act, f"{r.params:,}", r.train_steps, r.step_s, r.eval_batches * r.eval_batch_s, duration(r.run_s),
        f"{r.runs_left}/{r.runs}", duration(r.left_s), None if r.memory_bytes is None else r.memory_bytes / 2**20,
        rate(r.model_img_s), rate(r.loader_img_s), r.bound]
        for r in est.rows]
    left, runs = sum(r.runs_left for r in est.rows), sum(r.runs for r in est.rows)
    where = torch.cuda.get_device_name(est.device) if cuda else f"{est.threads} thread{'s' * (est.threads > 1)}"
    head = (f"estimate{f' {recipe}' if recipe else ''}: {est.device.type} ({where}), batch {est.batch} per device "
            f"per step x {est.world_size} device(s); steps/epoch and eval per device; per run = epochs x "
            f"(steps x s/step + eval)")
    total = (f"projected total: {duration(est.total_s)} for {left} of {runs} runs"
             + (f" ({runs - left} completed in {results})" if results and left < runs else "")
             + (f"; ≈ {duration(est.wall_s)} wall with parallel={est.parallel} (runs timed at {where} each, "
                "as the workers have)" if est.parallel > 1 else ""))
    notes = [*est.notes, "model img/s: the timed steps (batch / s per step); loader img/s: the training loader "
             "alone, no model; bound: loader (Kx) when the loader delivers K times fewer images/s than the model "
             "takes in, and the run is slower than projected (with data.num_workers=0 loading adds to each step)",
             "not measured in the projection: data loading/augmentation, mixup, EMA updates, checkpoints, "
             "Lightning's per-step overhead (synthetic batches); nothing was written"]
    return "\n".join([head, timing.markdown(header, rows), total, *[f"note: {n}" for n in notes]])
