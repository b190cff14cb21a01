"""Where a sweep's runs train: `parallel=K` worker processes on the CPU, or K per visible GPU, each worker pinned
to one GPU (its CUDA_VISIBLE_DEVICES set before CUDA starts), under NVIDIA MPS where a daemon runs.

    placement = resolve(cfg, jobs=20)        # Placement(per_device=4, gpus=("0", "1"), mps=True)
    placement.slots()                        # ["0", "1", "0", "1", ...]: one entry per worker
    recorded()          # in a worker: {"parallel": 4, "workers": 8, "visible_gpu": "1", "mps": True}

`parallel=auto` is resolved by `choose_parallel` here, wherever `parallel=K` is taken (`visionbench run`, `run_sweep`
called from Python): the CPU rule on the CPU; on CUDA `choose`, a pure function of what `visionbench estimate` measures
(bench/estimate.py `choose_parallel` hands the measurements in: this floor times no run).
Nothing here starts a daemon: MPS is used when its control daemon is running (`nvidia-cuda-mps-control -d`,
started by whoever owns the machine), and `trainer.mps=true` refuses to run without one
(docs/running.md#parallel-many-runs-per-device).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import ConfigError, most_seeds, sweep_settings
from .acts import sweep_acts

MPS_PIPE_DEFAULT = "/tmp/nvidia-mps"  # the control daemon's pipe directory unless CUDA_MPS_PIPE_DIRECTORY says another
CONTEXT_BYTES = 600 * 2**20  # a CUDA process's own memory beside its tensors (context, cuBLAS/cuDNN workspaces): a
# planning figure, not a measurement (0.3-0.6 GB on recent cards; MPS clients need less)
GPU_MEMORY_SHARE = 0.9  # of the free memory planned for the workers: the allocator's fragmentation needs the rest


@dataclass(frozen=True)
class Placement:
    """K workers per device: per GPU in `gpus` (CUDA_VISIBLE_DEVICES entries), or K on the CPU (`gpus` empty)."""

    per_device: int
    gpus: tuple[str, ...] = ()
    mps: bool | None = None  # CUDA: whether an MPS daemon serves the workers; None on the CPU

    @property
    def workers(self) -> int:
        return self.per_device * max(1, len(self.gpus))

    def slots(self) -> list[str | None]:
        """The GPU of each worker, interleaved (the first N workers on N different GPUs); None on the CPU."""
        if not self.gpus:
            return [None] * self.per_device
        return [gpu for _ in range(self.per_device) for gpu in self.gpus]

    def lowered(self) -> Placement | None:
        """K halved (what the sweep retries runs that ran out of memory with); None at K = 1."""
        return None if self.per_device <= 1 else Placement(self.per_device // 2, self.gpus, self.mps)

    def describe(self) -> str:
        """`4 per GPU x 2 GPUs (MPS on)`, `2 on the CPU`."""
        if not self.gpus:
            return f"{self.per_device} on the CPU" if self.mps is None else "1 on CUDA"
        n = len(self.gpus)
        mps = {True: "MPS on", False: "MPS off"}.get(self.mps, "")
        return f"{self.per_device} per GPU x {n} GPU{'s' * (n > 1)}" + (f" ({mps})" if mps else "")


# ---- where: the devices ------------------------------------------------------------------------------------------


def visible_gpus() -> tuple[str, ...]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries (an index or a UUID); ConfigError when that
    variable names a GPU the machine does not have (CUDA then hides it and every entry after it)."""
    import torch

    count = torch.cuda.device_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return tuple(str(i) for i in range(count))
    entries = tuple(e.strip() for e in listed.split(",") if e.strip())
    if len(entries) > count:
        raise ConfigError(
            f"CUDA_VISIBLE_DEVICES={listed}: CUDA sees {count} of these {len(entries)} GPUs "
            f"({', '.join(entries[:count]) or 'none'}); an index or UUID the machine does not have "
            "hides itself and every entry after it — `nvidia-smi -L` lists this machine's GPUs"
        )
    return entries


def mps_pipe() -> Path:
    return Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or MPS_PIPE_DEFAULT)


def mps_running() -> bool:
    """Whether an MPS control daemon listens (its `control` pipe exists): CUDA processes then run as its clients."""
    return (mps_pipe() / "control").exists()


def resolve(cfg: Any, jobs: int) -> Placement:
    """The placement of a sweep of `jobs` runs with `cfg.parallel` (an int: `auto` is resolved first, by
    `choose_parallel`) and `cfg.trainer.mps`; ConfigError (one line) for what cannot be placed."""
    k, t = cfg.parallel, cfg.trainer
    if k == "auto":
        k, _ = choose_parallel(cfg)
    k = int(k)
    import torch

    from ..train.trainer import trains_on_cuda  # Lightning: imported when a sweep starts, not with this module

    listed = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if (
        listed not in ("", "-1")
        and str(t.accelerator) == "auto"
        and torch.backends.cuda.is_built()
        and not torch.cuda.is_available()
    ):
        raise ConfigError(
            f"CUDA_VISIBLE_DEVICES={listed}: CUDA sees none of these GPUs, and the runs would train on "
            "the CPU; name GPUs this machine has (`nvidia-smi -L`), or set trainer.accelerator=cpu "
            "(or CUDA_VISIBLE_DEVICES=) to train on the CPU"
        )
    if not trains_on_cuda(t):
        if t.mps:
            raise ConfigError(
                "trainer.mps=true needs CUDA (NVIDIA's Multi-Process Service); this run trains on "
                f"{t.accelerator if str(t.accelerator) != 'auto' else 'the CPU'}: drop trainer.mps"
            )
        return Placement(min(k, max(jobs, 1)))
    mps = mps_running()
    if t.mps and not mps:
        raise ConfigError(
            f"trainer.mps=true: no MPS control daemon is running (no {mps_pipe() / 'control'}); "
            "start one with `nvidia-cuda-mps-control -d` (visionbench starts no system daemon) or "
            "drop trainer.mps to share the GPU by time-slicing"
        )
    gpus = visible_gpus()
    if not gpus:
        raise ConfigError("CUDA is available but no GPU is visible (CUDA_VISIBLE_DEVICES is empty)")
    one_gpu_runs = str(t.devices) in ("1", "[0]") and int(t.num_nodes) == 1
    if k == 1 and (len(gpus) == 1 or not one_gpu_runs):
        return Placement(1, (), mps)  # in this process, as Lightning places it (DDP where trainer.devices asks)
    if not one_gpu_runs:
        raise ConfigError(
            f"parallel={k} on CUDA places single-GPU runs, one per worker, K per GPU; this run "
            f"asks for trainer.devices={t.devices} trainer.num_nodes={t.num_nodes}: set "
            "trainer.devices=1 (choose the GPUs with CUDA_VISIBLE_DEVICES=0,1,...) or parallel=1"
        )
    per_device = max(1, min(k, math.ceil(max(jobs, 1) / len(gpus))))
    return Placement(per_device, gpus, mps)


# ---- how many: parallel=auto -------------------------------------------------------------------------------------


def choose_parallel(cfg: Any, measured: Callable[[Any], tuple[int, str]] | None = None) -> tuple[int, str]:
    """`parallel=auto`: K (per GPU on CUDA) and the line saying why. On the CPU the CPU rule (one run per core) for the
    sweep's runs, without timing anything; on CUDA `measured(cfg)`, the rule `choose` applied to what `visionbench
    estimate` measures of every (setting, act) (bench/estimate.py `choose_parallel`, which `visionbench run` and
    `visionbench estimate` use); without measurements (`run_sweep` called from Python), one run per GPU, said so."""
    import torch

    from ..train.trainer import trains_on_cuda  # Lightning: imported when a sweep starts, not with this module

    if not trains_on_cuda(cfg.trainer):
        runs = (
            len(sweep_settings(cfg)) * len(sweep_acts(cfg)) * most_seeds(cfg)
        )  # counted, not planned: the sweep plans them next
        k, why = choose_cpu(os.cpu_count() or 1, runs)
        return k, why + (
            f" (trainer.accelerator={cfg.trainer.accelerator})"
            if torch.cuda.is_available()
            else " (no GPU here: the CPU rule)"
        )
    if measured is not None:
        return measured(cfg)
    return 1, (
        "parallel=auto on CUDA, unmeasured: 1 run per GPU (`visionbench run` and `visionbench estimate` time a run "
        "first and may place more; parallel=K places K)"
    )


def choose_cpu(cores: int, jobs: int) -> tuple[int, str]:
    """The CPU rule: one run per core, each worker one torch thread (small networks use more threads poorly)."""
    k = max(1, min(cores, jobs))
    return k, (
        f"parallel=auto on the CPU: {k} worker{'s' * (k > 1)}, one run per core ({cores} cores, {jobs} "
        f"run{'s' * (jobs != 1)}), each with {max(1, cores // k)} thread{'s' * (cores // k > 1)}"
    )


def choose(
    *,
    busy: float | None,
    run_bytes: int | None,
    free_bytes: int | None,
    cores: int,
    gpus: int,
    jobs: int,
    loader_workers: int = 0,
) -> tuple[int, str]:
    """K per GPU for `parallel=auto` and why, from a run's measured GPU busy share (its kernels' time over a
    training step's wall time, 0-1), its peak GPU memory, the GPU's free memory, the CPU cores and the runs to place.
    K is the least of: the runs that fill the GPU (ceil(1 / busy)), the runs that fit in memory, a core per worker
    (and per loader worker of each), and the runs per GPU; at least 1."""
    limits: list[tuple[int, str]] = []
    if busy and busy > 0:
        limits.append((math.ceil(1 / min(busy, 1.0)), f"one run keeps the GPU {busy:.0%} busy"))
    if run_bytes and free_bytes:
        per_run = run_bytes + CONTEXT_BYTES
        fit = int(free_bytes * GPU_MEMORY_SHARE // per_run)
        limits.append(
            (fit, f"{fit} runs fit in memory ({per_run / 2**30:.1f} GB each of {free_bytes / 2**30:.0f} GB free)")
        )
    per_worker = 1 + max(0, loader_workers)
    loaders = f" at {per_worker} processes a run (data.num_workers={loader_workers})" if loader_workers else ""
    limits.append((cores // (per_worker * gpus), f"{cores} CPU cores for {gpus} GPU{'s' * (gpus > 1)}{loaders}"))
    limits.append((math.ceil(jobs / gpus), f"{jobs} run{'s' * (jobs != 1)} on {gpus} GPU{'s' * (gpus > 1)}"))
    k, why = min(limits, key=lambda item: item[0])
    k = max(1, k)
    others = "; ".join(f"{text} -> {n}" for n, text in limits if text != why)
    return k, f"parallel=auto: {k} per GPU, bound by {why}" + (f" (other limits: {others})" if others else "")


# ---- in a worker ---------------------------------------------------------------------------------------------------

_CURRENT: dict = {}  # this process's placement as each run records it (environment `placement`)


def take_slot(slots: Any, per_device: int, workers: int, mps: bool | None) -> None:
    """In a new worker process, before CUDA starts: take a GPU from the queue `slots` (None on the CPU) and see only
    it (CUDA_VISIBLE_DEVICES), with cuBLAS's deterministic workspace."""
    gpu = slots.get() if slots is not None else None
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    set_current(per_device, workers, gpu, mps)


def set_current(per_device: int, workers: int, gpu: str | None = None, mps: bool | None = None) -> None:
    _CURRENT.clear()
    _CURRENT.update(parallel=per_device, workers=workers, visible_gpu=gpu, mps=mps)


def recorded() -> dict:
    """What a run records of where it trained (summary.json environment `placement`): K per device, the workers in
    all, the worker's GPU (a CUDA_VISIBLE_DEVICES entry) and whether MPS served it. A run outside a sweep: K = 1."""
    return dict(_CURRENT) or {"parallel": 1, "workers": 1, "visible_gpu": None, "mps": None}
