"""`trainer.portable=true`: a CPU run whose numbers are the same bits on any x86-64 CPU with AVX2.

What makes two x86 machines train different networks from the same seed, and what this setting pins
(docs/reproducing.md has the measurements):

* ATen's vectorised kernels pick AVX-512 or AVX2 code at run time (`torch.backends.cpu.get_cpu_capability`):
  pinned to AVX2 by ATEN_CPU_CAPABILITY=avx2;
* oneDNN (the convolutions) picks its kernels by the CPU's instruction set: ONEDNN_MAX_CPU_ISA=AVX2;
* MKL (the matrix products) dispatches by CPU too: its Conditional Numerical Reproducibility mode,
  MKL_CBWR=AVX2, makes it take the same code path on every CPU with AVX2;
* the thread count splits reductions differently: one thread per run (OMP_NUM_THREADS, MKL_NUM_THREADS and
  torch's), `parallel=` still runs several runs side by side;
* on GPUs: Lightning's `deterministic="warn"` (torch.use_deterministic_algorithms, cuDNN's deterministic
  kernels, CUBLAS_WORKSPACE_CONFIG) — the same numbers run to run on one GPU model, not across models.

The variables are read once, when torch loads its libraries, so a portable run trains in a fresh worker
process started with them (`variables`); the sweep's own process is left as it is. Not part of the config
hash: a portable run and an ordinary one of the same config are rows of one table, and `visionbench compare`
says whether their numbers agree.
"""

from __future__ import annotations

import contextlib
import platform

from ..results.io import environ_set

THREADS = 1  # torch threads of a portable run: a reduction split over more threads sums in another order
CPU_VARIABLES = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2"}
THREAD_VARIABLES = {"OMP_NUM_THREADS": str(THREADS), "MKL_NUM_THREADS": str(THREADS)}
# what Lightning's deterministic= sets for cuBLAS when the first Trainer is built: set from the start, so that every
# run of a worker records the same environment
GPU_VARIABLES = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def variables() -> dict[str, str]:
    """The environment variables a portable run's process starts with (the CPU ones on x86-64 only)."""
    return {**(CPU_VARIABLES if is_x86() else {}), **THREAD_VARIABLES, **GPU_VARIABLES}


def wanted(jobs) -> bool:
    """Whether the sweep's runs ask for it (`trainer.portable` of any run: a sweep-level key, all runs alike)."""
    return any(bool((run.get("trainer") or {}).get("portable")) for run, _ in jobs)


def portable_environment(on: bool) -> contextlib.AbstractContextManager:
    """`variables()` set in os.environ while the block runs (the worker processes started in it inherit
    them), the previous values restored afterwards; nothing when `on` is false."""
    return environ_set(variables()) if on else contextlib.nullcontext()
