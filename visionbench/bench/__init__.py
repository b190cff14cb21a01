"""`visionbench bench`: speed and memory benchmarks, printed as Markdown and written to results/bench/.

Usage:
    visionbench bench activations [--shape 64,128,32,32] [--dtype float32] [--device cpu] [--repeats N] [--families ...]
                                  [--event-rounds N]   # CUDA: GPU time by CUDA events, L2 flushed, and kernel counts
    visionbench bench train recipe=cifar10_vgg8 act=rational [--compare-to relu] [--steps N]
    visionbench bench fit [--families rational,hermite] [--repeats N]
    visionbench bench data recipe=digits_vgg4_aug [--rounds N] [--device cpu]   # loader path vs data.on_device
    visionbench bench fill recipe=cifar10_vgg8 act=relu,rational [--k 1,4,8,16] [--seconds 4] [--device cuda]
                           [--mps] [--capture] [--bits 8]   # K training processes at once: img/s, GPU busy %
    visionbench bench sweep recipe=digits_vgg4 epochs=1 [--k 1,8] [--seeds 8] [--project 20x60] [--device cuda]
                                                            # a real sweep at parallel=K vs alone: img/s, same bits
    visionbench bench warm [--shape 64,128,32,32] [--device cuda] [--jobs N]   # compile the Triton kernels of
                                                            # `bench activations` in parallel first (Triton's cache)
    visionbench bench kernels [--families rational,kaf] [--arch 90,80] [--also-triton DIR]
                                                            # no GPU: registers, spills, launches, bytes per kernel
    python -m visionbench.bench ...   # the same without installing (no plugins): scripts/gpu_window.py
"""

from __future__ import annotations

import logging
import sys

USAGE = __doc__


def main(argv: list[str]) -> int:
    """Dispatch `visionbench bench <what> ...`; returns the process exit code."""
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    what, rest = argv[0], argv[1:]
    # inductor's C++ builds log "No CUDA runtime is found" on CPU-only machines: noise in a table
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    if what == "activations":
        from .act_speed import main as run
    elif what == "train":
        from .train_step import main as run
    elif what == "fit":
        from .fit_speed import main as run
    elif what == "data":
        from .data_speed import main as run
    elif what == "fill":
        from .fill_gpu import main as run
    elif what == "sweep":
        from .sweep_speed import main as run
    elif what == "warm":
        from .warm_kernels import main as run
    elif what == "kernels":
        from .kernel_card import main as run
    else:
        print(
            f"visionbench bench: unknown benchmark {what!r}; known: activations, train, fit, data, fill, sweep, warm, "
            f"kernels\n{USAGE}",
            file=sys.stderr,
        )
        return 2
    return run(rest)
