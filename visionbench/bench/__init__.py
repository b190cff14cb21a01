"""`visionbench bench`: speed and memory benchmarks, printed as Markdown and written to results/bench/.

`BENCHMARKS` is their one table: the usage (`visionbench bench -h`), the dispatch, the unknown-benchmark line and the
`bench` entry of `visionbench --help` (cli.py's command table) all come from it. Each benchmark is a module here whose
`main(argv)` returns the exit code and answers `-h` itself (`visionbench bench NAME -h`). The one door is the
`visionbench` command (cli.py, which loads `imports=` and installed plugins first); `python -m visionbench bench ...`
(a checkout on PYTHONPATH, nothing installed: scripts/gpu_window.py) goes through the same door.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    """One `visionbench bench NAME ...` benchmark."""

    module: str  # the module below visionbench.bench whose `main(argv)` runs it (imported when it runs)
    arguments: str  # its arguments, as the usage shows them after `visionbench bench NAME`
    summary: str  # what it measures, in one line


BENCHMARKS: dict[str, Benchmark] = {
    "activations": Benchmark(
        "act_speed",
        "[--shape 64,128,32,32] [--dtype float32] [--device cpu] [--repeats N] [--families ...] [--event-rounds N]",
        "forward + backward time and memory of every learnable activation vs GELU (CUDA: GPU time by CUDA events, "
        "L2 flushed, and kernel counts)",
    ),
    "train": Benchmark(
        "train_step",
        "recipe=cifar10_vgg8 act=rational [--compare-to relu] [--steps N]",
        "training-step throughput and memory of a recipe's model with an activation vs another",
    ),
    "fit": Benchmark(
        "fit_speed",
        "[--families rational,hermite] [--repeats N]",
        "the time of fitting each activation's coefficients to its target vs one GELU forward + backward",
    ),
    "data": Benchmark(
        "data_speed",
        "recipe=digits_vgg4_aug [--rounds N] [--device cpu]",
        "images/s of the training data alone: the loader path vs data.on_device",
    ),
    "fill": Benchmark(
        "fill_gpu",
        "recipe=cifar10_vgg8 act=relu,rational [--k 1,4,8,16] [--seconds 4] [--device cuda] [--mps] [--capture] "
        "[--bits 8]",
        "K training processes at once on one device: img/s, GPU busy %",
    ),
    "sweep": Benchmark(
        "sweep_speed",
        "recipe=digits_vgg4 epochs=1 [--k 1,8] [--seeds 8] [--project 20x60] [--device cuda]",
        "a real sweep at parallel=K vs alone: img/s, same bits",
    ),
    "warm": Benchmark(
        "warm_kernels",
        "[--shape 64,128,32,32] [--device cuda] [--jobs N]",
        "compile the Triton kernels of `bench activations` in parallel first (Triton's cache)",
    ),
    "kernels": Benchmark(
        "kernel_card",
        "[--families rational,kaf] [--arch 90,80] [--also-triton DIR]",
        "no GPU: registers, spills, launches, bytes per kernel of the compiled Triton kernels",
    ),
}
USAGE = "\n".join(
    [
        "usage: visionbench bench BENCHMARK [...]",
        "",
        "Speed and memory benchmarks, printed as Markdown and written to results/bench/ (docs/bench.md).",
        "",
        *(f"    visionbench bench {name} {b.arguments}\n        {b.summary}" for name, b in BENCHMARKS.items()),
        "",
        "`visionbench bench BENCHMARK -h`: a benchmark's own arguments.",
    ]
)


def main(argv: list[str]) -> int:
    """`visionbench bench <what> ...` (cli.py's command table hands it argv after `bench`); returns the exit code."""
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    what, rest = argv[0], argv[1:]
    benchmark = BENCHMARKS.get(what)
    if benchmark is None:
        close = difflib.get_close_matches(str(what), list(BENCHMARKS), n=2)
        suggestion = f" (did you mean {' or '.join(close)}?)" if close else ""
        print(
            f"visionbench bench: unknown benchmark {what!r}{suggestion}; benchmarks: {', '.join(BENCHMARKS)} "
            "(`visionbench bench -h`, docs/bench.md)",
            file=sys.stderr,
        )
        return 2
    # inductor's C++ builds log "No CUDA runtime is found" on CPU-only machines: noise in a table
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    return importlib.import_module(f".{benchmark.module}", __name__).main(rest)
