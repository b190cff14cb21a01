"""The environment a run trains in (summary.json `environment`), taken inside the training process: what, besides
the configuration, decides a run's numbers.

    >>> from visionbench.train.environment import environment
    >>> environment()["device"]["cpu_capability"]          # "AVX2", "AVX512", ...: the kernels ATen dispatches to

On a CPU a float difference grows into another network: the vectorised kernels ATen, oneDNN and the BLAS pick at
run time (the CPU, or ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA / MKL_CBWR), the thread count and the package
versions all change the numbers. The report names the environment under every table and flags a table whose runs
come from more than one (visionbench/report/environment.py). The digest of the data the run read (`data`,
visionbench/data/digest.py) is added when the run completes.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Mapping

import torch

from ..results.provenance import git_commit, package_versions

# set before torch is imported, they choose the CPU kernels (ATen, oneDNN), the BLAS code path, the threads and
# cuBLAS's deterministic workspace
ENV_VARS = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "MKL_CBWR",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CUBLAS_WORKSPACE_CONFIG",
    "VISIONBENCH_KERNELS",
    "TRITON_INTERPRET",
)


def cpu_model() -> str:
    """The CPU's name: /proc/cpuinfo's "model name" (Linux), else `platform.processor()`."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def device() -> dict:
    """CPU model, the vector instruction set ATen's kernels use, the architecture; GPU, CUDA and cuDNN (None without
    CUDA)."""
    cuda = torch.cuda.is_available()
    return {
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.machine(),
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "cuda": torch.version.cuda if cuda else None,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
    }


def kernels(run: Mapping | None = None) -> dict:
    """The learnable activations' kernels: the backend (`fused.backend()`: on CUDA "auto" means the Triton kernels),
    where it came from ("trainer.kernels", "VISIONBENCH_KERNELS" or an older variable, "default"), the size under
    which compiled kernels run eagerly, and the Triton version (None: not installed). With `run` (a run's plain or
    typed config), what that run trains with (`fused.configured`, as train/run.py applies it: the variable wins over
    its trainer.kernels); without, this process's now."""
    from ..activations import fused, triton_ops

    with fused.configured(kernels_key(run)) if run is not None else contextlib.nullcontext():
        record = fused.record()
    return {**record, "triton": _triton_version() if triton_ops.HAVE_TRITON else None}


def kernels_key(run: Mapping | object) -> str:
    """A run's `trainer.kernels` (a plain, OmegaConf or typed config; auto where a config.yaml from before the key
    has none)."""
    block = run["trainer"] if isinstance(run, Mapping) else run.trainer
    return (block.get("kernels") if isinstance(block, Mapping) else getattr(block, "kernels", None)) or "auto"


def _triton_version() -> str:
    import triton

    return triton.__version__


def switches() -> dict:
    """What building the Trainer may change, taken again when the run ends (sweep.py): torch's thread count (DDP
    shares out the cores) and the determinism switches (Lightning's `deterministic=`, cuDNN's)."""
    return {
        "threads": torch.get_num_threads(),
        "determinism": {
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        },
    }


def environment(run: Mapping | None = None) -> dict:
    """This process's environment: python, package versions (None: not installed), git commit ('+dirty' with local
    edits), device, torch threads, determinism switches, the kernels (`kernels(run)`: with `run`, those that run
    trains with) and the environment variables of `ENV_VARS` (None: unset)."""
    return {
        "python": platform.python_version(),
        "packages": package_versions(),
        "git_commit": git_commit(),
        "device": device(),
        **switches(),
        "kernels": kernels(run),
        "env": {name: os.environ.get(name) for name in ENV_VARS},
    }
