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

import os
import platform

import torch

from ..results.provenance import git_commit, package_versions
# set before torch is imported, they choose the CPU kernels (ATen, oneDNN), the BLAS code path, the threads and
# cuBLAS's deterministic workspace
ENV_VARS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "CUBLAS_WORKSPACE_CONFIG", "VISIONBENCH_KERNELS", "TRITON_INTERPRET")


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
        "cpu": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine(),
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "cuda": torch.version.cuda if cuda else None,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
    }


def kernels() -> dict:
    """The learnable activations' kernel backend (`fused.BACKEND`, VISIONBENCH_KERNELS: on CUDA "auto" means the
    Triton kernels) and the Triton version (None: not installed)."""
    from ..activations import fused, triton_ops
    return {"backend": fused.BACKEND, "triton": _triton_version() if triton_ops.HAVE_TRITON else None}


def _triton_version() -> str:
    import triton
    return triton.__version__


def switches() -> dict:
    """What building the Trainer may change, taken again when the run ends (sweep.py): torch's thread count (DDP
    shares out the cores) and the determinism switches (Lightning's `deterministic=`, cuDNN's)."""
    return {"threads": torch.get_num_threads(),
            "determinism": {"deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
                            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
                            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark)}}


def environment() -> dict:
    """This process's environment: python, package versions (None: not installed), git commit ('+dirty' with local
    edits), device, torch threads, determinism switches and the environment variables of `ENV_VARS` (None: unset)."""
    return {
        "python": platform.python_version(),
        "packages": package_versions(),
        "git_commit": git_commit(),
        "device": device(),
        **switches(),
        "kernels": kernels(),
        "env": {name: os.environ.get(name) for name in ENV_VARS},
    }
