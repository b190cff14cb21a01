"""`visionbench estimate <the run's arguments>`: what a sweep will cost, projected from measurements
(bench/measure.py) before it is paid.

    visionbench estimate recipe=cifar10_vgg8 act=relu,rational seeds=5

The preflight before a sweep is submitted to a cluster. For each distinct (setting, activation)
of the sweep, on the trainer's device (`trainer.accelerator`/`devices`, resolved by Lightning):
the model is built as a run builds it (`train.run.build_model`), a few warm training steps and
eval batches are timed (bench/train_step.py `TrainStep`: the recipe's optimizer, precision,
channels_last, compile; bench/timing.py), and the loader lengths come from the real data module
(`data.limit_train`, `data.augment.repeated_aug`, `trainer.limit_*_batches`,
`trainer.accumulate_grad_batches`, the DDP world size). Per run:

    epochs x (train steps x step time + eval batches x eval-batch time)

and the sweep's total counts only what is left in results_dir: completed runs not at all, an
unfinished one (interrupted, killed, diverged or failed with a last.ckpt) by its remaining epochs.
Nothing is written: no run directory, no results_dir.

Without the dataset on disk (CIFAR-10, Fashion-MNIST, Tiny ImageNet, ImageNet), the estimate is taken on a
synthetic stand-in of its shape (images, side, classes, the recipe's splits and transforms: data/synthetic.py),
and its first note says so; the loader rate then leaves out decoding and reading from disk.

Errors, one line each, before anything is timed: a missing dataset of no known shape (data.name=folder) or a
config that does not match the results already on disk (`sweep.plan`, as the sweep itself), and a batch that does not
fit in memory. The training loader is timed alone (no model: measure.py `loader_rate`, images/s) beside the
model's rate (batch / s per step), and each row says which bounds the run: `loader (2.3x)` when the
loader delivers fewer images per second than the steps take in. Not in the projection: data loading
and augmentation (the steps run on a synthetic batch; with data.num_workers > 0 they overlap the
steps, with 0 they add to them), mixup, EMA updates, gradient clipping, LSUV,
checkpoint writing, and the Lightning loop's own per-step overhead (milliseconds: it matters only
for tiny models such as digits').
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig

from ..config import most_seeds, typed
from ..config.tune_space import BEST, DEFAULTS
from ..data import standing_in
from ..results import layout
from ..results.io import RunStateError
from ..results.settings import setting_label
from ..sweep import placement
from ..sweep.acts import sweep_acts
from ..sweep.placement import CONTEXT_BYTES, GPU_MEMORY_SHARE, choose, choose_cpu, visible_gpus
from ..sweep.sweep import plan, worker_threads
from ..sweep.tune_sweep import chosen_so_far, is_tuning, planned_runs, procedures, retrain_plan, trial_seed
from ..sweep.tune_sweep import trials as tune_trials
from ..train.trainer import trains_on_cuda
from .measure import DoesNotFit, loaders, measure  # noqa: F401 - DoesNotFit: what estimate raises


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
    gpu_s: float | None = None  # CUDA: the GPU's busy time in one train step (its kernels), None elsewhere

    @property
    def busy(self) -> float | None:
        """The share of a train step one run keeps the GPU busy (0-1), None off CUDA."""
        return None if self.gpu_s is None or not self.step_s > 0 else min(1.0, self.gpu_s / self.step_s)

    def shared_s(self, k: int) -> float:
        """The seconds left of this row's runs when K of them share one GPU, per run: a run's GPU work still takes
        its time; the GPU is full once K x busy >= 1 (unmeasured busy counts as full)."""
        return self.left_s * max(1.0, k * (self.busy if self.busy is not None else 1.0))

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
    parallel: int = 1  # worker processes at once: in all on the CPU, per GPU on CUDA
    threads: int = 1  # torch threads the steps were timed with (each worker's share with parallel > 1 on the CPU)
    gpus: int = 0  # CUDA: the visible GPUs the workers are placed on (sweep/placement.py)
    choice: str = ""  # what parallel=auto picks, and why

    @property
    def total_s(self) -> float:
        """Serial time: the sum of every run left."""
        return sum(r.left_s for r in self.rows)

    @property
    def wall_s(self) -> float:
        """Wall time: on the CPU, parallel=K workers run K runs at once, each on its share of the cores; on CUDA K per
        GPU on N GPUs, each run as slow as its share of a full GPU makes it (`Row.shared_s`)."""
        if not self.gpus:
            return self.total_s / self.parallel
        return sum(r.shared_s(self.parallel) for r in self.rows) / (self.parallel * self.gpus)


def estimate(cfg: DictConfig) -> Estimate:
    """Measure every distinct (setting, activation) of the sweep `cfg`; `ConfigError` (one line) on a
    results_dir holding other settings or a batch that does not fit. A dataset of known shape that is not on disk
    (CIFAR-10, Fashion-MNIST, Tiny ImageNet, ImageNet) is priced on a synthetic stand-in of its shape, the first
    note says so (data.standing_in); any other missing dataset is a `ConfigError`."""
    with standing_in(cfg.data) as stand_in:  # the dataset not on disk: a synthetic stand-in of its shape
        est = _estimate(cfg)
    if stand_in:
        est.notes.insert(0, stand_in)
    return est


def _estimate(cfg: DictConfig) -> Estimate:
    auto = str(cfg.seeds) == "auto"
    n_seeds = most_seeds(cfg)
    tuned = is_tuning(cfg)
    jobs = tuning_jobs(cfg, n_seeds) if tuned else plan(cfg, seeds=range(n_seeds))  # datasets, stored configs checked
    groups: dict[tuple[str, str], list[tuple[dict, Path]]] = {}
    for run, out in jobs:
        label = tuning_label(cfg) if tuned else setting_label(run["setting"])
        groups.setdefault((label, run["act_label"]), []).append((run, out))
    cuda = trains_on_cuda(cfg.trainer)
    cpu_k, cpu_why = choose_cpu(os.cpu_count() or 1, len(jobs))
    if cfg.parallel != "auto":
        asked = int(cfg.parallel)
    else:  # on CUDA auto's K comes from the measurements below; the steps are timed as one run alone first
        asked = 1 if cuda else cpu_k
    parallel = max(1, min(asked, len(jobs)))
    own_threads = torch.get_num_threads()
    threads = worker_threads(parallel) if parallel > 1 and not cuda else own_threads  # each worker's (sweep/sweep.py)
    torch.set_num_threads(threads)
    try:
        rows, unreadable, unfinished, first = _measure_groups(groups)
    finally:
        torch.set_num_threads(own_threads)
    device, world, batch = first or (torch.device("cpu"), 1, int(cfg.batch_size))
    notes = (
        [f"seeds=auto: up to seeds_max={n_seeds} runs per activation (rounds stop earlier once decided)"]
        if auto
        else []
    )
    if tuned:
        notes.append(
            f"tune=: per activation {tune_repeats(cfg)}{cfg.tune.trials} trials (one run each) + {n_seeds} seeds of its best"
            + (f" + {n_seeds} of the recipe's values" if cfg.tune.defaults else "")
            + "; each activation timed once, at the recipe's values (its step time does not depend on the tuned values)"
        )
    if unfinished:
        notes.append(f"{unfinished} unfinished run(s) counted by their remaining epochs (metrics.csv beside last.ckpt)")
    if unreadable:
        notes.append(f"{unreadable} run(s) with an unreadable summary.json counted as full runs")
    load = _busy()
    if load:
        notes.append(load)
    if device.type != "cuda":
        return Estimate(rows, device, world, batch, notes, parallel, threads, choice=cpu_why)
    gpus = len(visible_gpus()) if world == 1 else 0  # a DDP run takes its GPUs itself: one run at a time
    if not gpus:
        notes.append(f"trainer.devices={cfg.trainer.devices}: each run takes {world} GPUs (DDP); one run at a time")
        return Estimate(rows, device, world, batch, notes, 1, threads)
    k, why = choose_gpu(rows, device, gpus, len(jobs), int(cfg.data.num_workers))
    if cfg.parallel != "auto" and parallel > k:
        free = torch.cuda.mem_get_info(device)[0]
        notes.insert(0, over_auto(parallel, k, why, max((r.memory_bytes or 0 for r in rows), default=0), free))
    parallel = k if cfg.parallel == "auto" else parallel
    return Estimate(rows, device, world, batch, notes, parallel, threads, gpus, why)


def tune_repeats(cfg: DictConfig) -> str:
    """'R independent procedures of ' where tune_repeats=R > 1 (each prices its own trials and retrain)."""
    r = len(procedures(cfg))
    return f"{r} independent procedures of " if r > 1 else ""


def tuning_label(cfg: DictConfig) -> str:
    """The setting column of a tuning design's rows: its phases' runs per activation."""
    runs, r = planned_runs(cfg), len(procedures(cfg))
    if r == 1:
        return "tune: " + " + ".join(f"{n} {phase}" for phase, n in runs.items())
    each = f"{r} × ({runs['trials'] // r} trials + {runs['best'] // r} best)"
    return f"tune: {each}" + (f" + {runs['defaults']} defaults" if "defaults" in runs else "")


def tuning_jobs(cfg: DictConfig, n_seeds: int) -> list[tuple[dict, Path]]:
    """Every run of a tuning design (sweep/tune_sweep.py): the trials, then the retrain of each activation's best
    (planned at the recipe's values: which trial wins is known only once the trials ran) and of the recipe's values."""
    acts, jobs = sweep_acts(cfg), []
    for j in procedures(cfg):  # tune_repeats=R: R procedures, each its trials and the retrain of its selection
        trial_jobs = plan(cfg, settings=tune_trials(cfg, j), seeds=[trial_seed(j)])
        seeds = range(n_seeds) if j is None else range(j * n_seeds, (j + 1) * n_seeds)
        jobs += trial_jobs + retrain_plan(cfg, chosen_so_far(cfg, trial_jobs), BEST, acts, seeds, plan, j)
    if cfg.tune.defaults:
        jobs += retrain_plan(cfg, {}, DEFAULTS, acts, range(n_seeds), plan)
    return jobs


def over_auto(parallel: int, k: int, why: str, run_bytes: int, free_bytes: int) -> str:
    """The note for an explicit parallel=K above what parallel=auto picks: which limit it passes, and when the K runs
    will not fit in the GPU's free memory, that those which run out are run again with K halved."""
    need = parallel * (run_bytes + CONTEXT_BYTES)
    memory = (
        f"; {parallel} runs need ≈ {need / 2**30:.1f} GB of the {free_bytes / 2**30:.1f} GB free: the runs that "
        "run out of memory will be run again with K halved"
        if need > free_bytes * GPU_MEMORY_SHARE
        else ""
    )
    return f"parallel={parallel} per GPU is more than parallel=auto's {k} ({why.split('bound by ', 1)[-1]}){memory}"


def choose_gpu(rows: list[Row], device: torch.device, gpus: int, jobs: int, loader_workers: int) -> tuple[int, str]:
    """What parallel=auto picks per GPU for the measured `rows` (placement.choose): the busiest run's share and the
    largest run's memory decide."""
    busy = [r.busy for r in rows if r.busy is not None]
    memory = [r.memory_bytes for r in rows if r.memory_bytes]
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
    return choose(
        busy=max(busy) if busy else None,
        run_bytes=max(memory) if memory else None,
        free_bytes=free,
        cores=os.cpu_count() or 1,
        gpus=gpus,
        jobs=jobs,
        loader_workers=loader_workers,
    )


def choose_parallel(cfg: DictConfig) -> tuple[int, str]:
    """`parallel=auto` for `visionbench run` (sweep/placement.py `choose_parallel`, the one resolution): on the CPU the
    CPU rule, without timing anything; on CUDA from the estimate's measurements of every (setting, act)."""
    return placement.choose_parallel(cfg, measured=_measured_parallel)


def _measured_parallel(cfg: DictConfig) -> tuple[int, str]:
    est = estimate(cfg)
    return est.parallel, est.choice or "parallel=auto: 1 (each run takes several GPUs)"


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
    return (
        (
            f"load average {load:.1f} on {cores} cores: timed on a busy machine; rerun when it is idle for the "
            f"times a dedicated machine gives"
        )
        if load > cores
        else None
    )


def _measure_groups(groups: dict):
    """(rows, unreadable summaries, unfinished runs, (device, world, batch) of the first setting)."""
    rows, unreadable, unfinished = [], 0, 0
    first: tuple[torch.device, int, int] | None = None
    measured: dict[str, tuple] = {}  # per setting: its activations share data, batch and device
    for (label, act), group in groups.items():
        run = typed(group[0][0])
        if label not in measured:
            measured[label] = loaders(run)
        device, world, batch, train_steps, eval_batches, data, loader_img_s = measured[label]
        first = first or (device, world, batch)
        params, step_s, eval_s, memory, gpu_s = measure(
            run, data, device, batch, f"{run.model.name}/{act}" + (f" ({label})" if label else "")
        )
        epochs, left = run.epochs, []
        for _, out in group:
            try:
                left.append(epochs_left(out, epochs))
            except RunStateError:
                unreadable += 1
                left.append(epochs)
        unfinished += sum(0 < e < epochs for e in left)
        rows.append(
            Row(
                label,
                act,
                params,
                train_steps,
                eval_batches,
                step_s,
                eval_s,
                memory,
                epochs,
                len(group),
                sum(e > 0 for e in left),
                sum(left),
                loader_img_s,
                batch,
                gpu_s,
            )
        )
    return rows, unreadable, unfinished, first


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
        "act",
        "params",
        "steps/epoch",
        "s/step",
        "eval s/epoch",
        "per run",
        "runs left",
        "projected",
        "peak MB (CUDA)" if cuda else "saved for backward MB",
        "model img/s",
        "loader img/s",
        "bound",
        *(["GPU busy"] if cuda else []),
    ]
    rows = [
        ([r.setting] if setting else [])
        + [
            r.act,
            f"{r.params:,}",
            r.train_steps,
            r.step_s,
            r.eval_batches * r.eval_batch_s,
            duration(r.run_s),
            f"{r.runs_left}/{r.runs}",
            duration(r.left_s),
            None if r.memory_bytes is None else r.memory_bytes / 2**20,
            rate(r.model_img_s),
            rate(r.loader_img_s),
            r.bound,
            *([_percent(r.busy)] if cuda else []),
        ]
        for r in est.rows
    ]
    left, runs = sum(r.runs_left for r in est.rows), sum(r.runs for r in est.rows)
    where = torch.cuda.get_device_name(est.device) if cuda else f"{est.threads} thread{'s' * (est.threads > 1)}"
    head = (
        f"estimate{f' {recipe}' if recipe else ''}: {est.device.type} ({where}), batch {est.batch} per device "
        f"per step x {est.world_size} device(s); steps/epoch and eval per device; per run = epochs x "
        f"(steps x s/step + eval)"
    )
    total = (
        f"projected total: {duration(est.total_s)} for {left} of {runs} runs"
        + (f" ({runs - left} completed in {results})" if results and left < runs else "")
        + _wall(est, where)
    )
    notes = [
        *est.notes,
        "model img/s: the timed steps (batch / s per step); loader img/s: the training loader "
        "alone, no model; bound: loader (Kx) when the loader delivers K times fewer images/s than the model "
        "takes in, and the run is slower than projected (with data.num_workers=0 loading adds to each step)",
        "not measured in the projection: data loading/augmentation, mixup, EMA updates, checkpoints, "
        "Lightning's per-step overhead (synthetic batches); nothing was written",
    ]
    if est.choice:  # what parallel=auto picks (and picked, with parallel=auto), and why
        notes.insert(0, est.choice)
    return "\n".join([head, timing.markdown(header, rows), total, *[f"note: {n}" for n in notes]])


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def _wall(est: Estimate, where: str) -> str:
    """`; ≈ 20 min wall with parallel=4 per GPU x 1 GPU (...)`, "" for one run at a time."""
    if est.gpus and est.parallel * est.gpus > 1:
        return (
            f"; ≈ {duration(est.wall_s)} wall with parallel={est.parallel} per GPU x {est.gpus} GPU"
            f"{'s' * (est.gpus > 1)} (K runs share a GPU: each as slow as its share of a full GPU makes it, from "
            "the GPU busy column; projected, not measured)"
        )
    if not est.gpus and est.parallel > 1:
        return (
            f"; ≈ {duration(est.wall_s)} wall with parallel={est.parallel} (runs timed at {where} each, as the "
            "workers have)"
        )
    return ""
