"""Compile the Triton kernels a benchmark will run, in parallel, before it runs: a pool of processes, each running
learnable activations' forward + backward on the benchmark's input, so that Triton's on-disk cache holds every
kernel when `bench activations` starts (scripts/gpu_window.py's first stage; docs/bench.md, "The GPU window").

    visionbench bench warm --device cuda --shape 64,128,32,32          # shared and per-channel, one process a core
    visionbench bench warm --device cpu --shape 2,8,8,8 --jobs 2       # TRITON_INTERPRET=1: the code path, no compile

The tasks: every learnable activation of the registry (`activations.names()`, `is_learnable`), with each set of
options `bench activations` times it with (rational's versions, hermite's clamp: `act_speed.CASES`; its defaults
where that times none), for each `--coefficients` kind, in the kernels a run would pick (`fused`: Triton on CUDA,
`VISIONBENCH_KERNELS` wins). One JIT compile is seconds of one core and a benchmark compiles its kernels one after
another; here `--jobs` processes (default: one per core) compile side by side. Per task: the seconds of its first
forward + backward in its process (compiling included, beside the others) and the kernels that ran. Writes
`<out>/<name>.md`, rewritten as each task ends: a warm-up stopped part way keeps what it compiled (in the cache too)
and a `partial:` note names the tasks missing. Times nothing else; its seconds are no benchmark.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import sys
import time

import torch

from .. import activations
from . import timing
from .act_speed import CASES, add_input_options

COEFFICIENTS = ("shared", "per-channel")


def coefficient_kinds(text: str) -> list[str]:
    """An argparse type: comma-separated kinds of coefficients, of `COEFFICIENTS`."""
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in kinds if k not in COEFFICIENTS]
    if not kinds or bad:
        raise argparse.ArgumentTypeError(f"takes comma-separated kinds of {', '.join(COEFFICIENTS)}, got {text!r}")
    return list(dict.fromkeys(kinds))


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = timing.parser("warm", __doc__)
    add_input_options(p)
    p.add_argument(
        "--coefficients",
        type=coefficient_kinds,
        default="shared,per-channel",
        help="kinds of coefficients to warm (default: shared,per-channel)",
    )
    timing.add_count(
        p, "--jobs", None, "processes compiling side by side (default: one per CPU core, at most one per task)"
    )
    timing.add_report_options(p, "warm_kernels")
    return p.parse_args(argv)


def warm_cases() -> list[tuple[str, str, dict]]:
    """(label, registry name, options) of every learnable activation of the registry: the cases `bench activations`
    times of it (act_speed.CASES), else its defaults."""
    out = []
    for name in activations.names():
        if not activations.is_learnable(name):
            continue
        timed = [(label, options) for label, (n, options) in CASES.items() if n == name]
        out += [(label, name, options) for label, options in (timed or [(name, {})])]
    return out


def cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _start_worker() -> None:
    torch.set_num_threads(1)  # the processes share the cores: one thread each


def warm_one(name: str, options: dict, per_channel: bool, shape: tuple, dtype: str, device: str) -> tuple[float, str]:
    """One activation's first forward + backward on the input (compiling its kernels): (seconds, kernels that ran)."""
    from ..activations import fused

    dev, dt = torch.device(device), getattr(torch, dtype)
    gen = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(shape, generator=gen, device=dev, dtype=dt).requires_grad_(True)
    g = torch.randn(shape, generator=gen, device=dev, dtype=dt)
    channels = shape[1] if len(shape) >= 4 else shape[-1]  # LearnableActivation.channel_axis's rule, as act_speed
    extra = {"per_channel": True, "num_channels": channels} if per_channel else {}
    act = activations.create(name, **options, **extra).to(device=dev, dtype=dt).train()
    params = [p for p in act.parameters() if p.requires_grad]
    t0 = time.perf_counter()
    y = act(x)
    torch.autograd.grad(y, [x, *params], g, allow_unused=True)
    timing.synchronize(dev)
    return time.perf_counter() - t0, fused.ran_on(x)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    tasks = [(label, name, options, kind) for label, name, options in warm_cases() for kind in args.coefficients]
    jobs = min(args.jobs or cores(), len(tasks))
    rows: dict[int, list] = {}
    failed: list[str] = []
    start = time.perf_counter()
    command = ("visionbench bench warm " + " ".join(argv)).strip()

    def publish(final: bool = False) -> None:
        missing = [f"{t[0]} ({t[3]})" for i, t in enumerate(tasks) if i not in rows]
        notes = [
            *([timing.partial_note(len(rows), len(tasks), missing, "tasks")] if missing else []),
            timing.machine_line(torch.device(args.device)),
            f"input {list(args.shape)} {args.dtype}, train mode; {len(tasks)} tasks on {jobs} processes: "
            f"{time.perf_counter() - start:.1f} s wall{'' if final else ' so far'}, the first calls' "
            f"{sum(r[2] or 0.0 for r in rows.values()):.1f} s added up",
            "first fwd+bwd s: the first call in its process, compiling included (beside the other processes); "
            "the kernels then sit in Triton's on-disk cache for the benchmarks after",
            *[f"failed: {f}" for f in failed],
        ]
        timing.write_report(
            args.name,
            "Kernel warm-up: every learnable activation's first forward + backward",
            command,
            notes,
            timing.markdown(
                ["activation", "coefficients", "first fwd+bwd s", "kernels"], [rows[i] for i in sorted(rows)]
            ),
            args.out,
            announce=final,
        )

    publish()
    spawn = multiprocessing.get_context("spawn")  # CUDA cannot be forked into a child
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=spawn, initializer=_start_worker) as pool:
        futures = {
            pool.submit(warm_one, name, options, kind == "per-channel", args.shape, args.dtype, args.device): i
            for i, (label, name, options, kind) in enumerate(tasks)
        }
        for future in concurrent.futures.as_completed(futures):
            i = futures[future]
            label, _, _, kind = tasks[i]
            try:
                seconds, ran = future.result()
            except Exception as e:  # noqa: BLE001 - one task's failure is its line; the others still run
                failed.append(f"{label} ({kind}): {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                rows[i] = [label, kind, None, "failed"]
                print(f"  {label} ({kind}): failed", file=sys.stderr, flush=True)
            else:
                rows[i] = [label, kind, seconds, ran]
                print(f"  {label} ({kind}): {seconds:.1f} s, {ran}", file=sys.stderr, flush=True)
            publish()
    publish(final=True)
    return 1 if failed else 0
