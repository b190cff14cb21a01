"""The Triton kernels' cost card, made on a machine without a GPU: every family's forward and backward compiled for
sm_90 (H100/H200) and sm_80 (A100) at the shapes and layouts a run gives them, and what the compiled code and the
launches say.

    visionbench bench kernels                                   # [64, 128, 32, 32] fp32 -> results/bench/kernels_sm90.md
    visionbench bench kernels --families rational,kaf --arch 90
    visionbench bench kernels --also-triton .cache/triton-3.6.0  # the same kernels compiled by another Triton too
    make kernel-card                                            # the committed card, Triton 3.6 fetched first

Per family and layout (shared coefficients; per channel NCHW; per channel channels_last): the launches of one forward
+ backward, Triton's and ATen's (`kernel_capture`: recorded on the Triton path, nothing computed), the bytes they
move per element against GELU's (x in and y out, then x and grad_y in and grad_x out: 20 fp32 bytes), and per kernel
its registers per thread and bytes spilled on each architecture (ptxas' report, `kernel_compile`), its launch
configuration, and whether the copy of its source that torch.compile's Inductor emits compiles too. These are
properties of the compiled code and predictions from them, not timings: no GPU ran anything.

Targets (issue 53): no spills anywhere; every backward <= 128 registers; <= 3 launches per forward + backward for the
template families, <= 6 for SLAF and PolyNorm; <= 1.25x GELU's bytes per element.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from .. import activations
from . import timing
from .act_speed import CASES, input_shape, select

LAYOUTS = {  # label -> (per channel, memory format)
    "shared": (False, torch.contiguous_format),
    "per channel, NCHW": (True, torch.contiguous_format),
    "per channel, channels_last": (True, torch.channels_last),
}
ARCHS = (90, 80)
GELU_BYTES = 20  # per fp32 element: forward x in, y out; backward x, grad_y in, grad_x out
MAX_REGISTERS = 128
MAX_LAUNCHES = {"slaf": 6, "polynorm": 6}  # by registry name; the template families: 3
DEFAULT_MAX_LAUNCHES = 3
MAX_BYTES = 1.25  # x GELU's
# SLAF's statistics span the batch: its forward reads x twice (moments, then y) and its backward reads x and grad_y
# twice (the sums, then grad_x): 32 bytes per fp32 element, BatchNorm's two-pass floor, 1.6x GELU's. Its row says so.
FLOOR = {"slaf": "the two-pass floor of batch statistics is 32 B (1.6x)"}


@dataclasses.dataclass
class Kernel:
    """One launched kernel of a (case, layout): its name, launch configuration and, per architecture, its
    resources (`kernel_compile.Resources`) or the error that stopped its compilation."""

    name: str
    warps: int
    grid: int
    compiled: dict = dataclasses.field(default_factory=dict)  # capability -> Resources | str
    emitted: str = "—"  # Inductor's copy compiles for sm_90: "yes" or "no: ..."
    other_triton: str = "—"  # with --also-triton: "N regs, S B spilled" or the error


@dataclasses.dataclass
class Row:
    case: str
    layout: str
    launches: int
    triton: int
    aten: list
    bytes_per_element: float
    kernels: list


@functools.cache
def captured(case: str, layout: str, shape: tuple, dtype: str = "float32") -> tuple:
    """(launches, elements) of one forward + backward of the case in the layout (cached per process: the workers
    that compile capture again rather than receive kernels, which do not pickle)."""
    from .kernel_capture import launches_of

    name, kwargs = CASES[case]
    per_channel, memory_format = LAYOUTS[layout]
    extra = {"per_channel": True, "num_channels": shape[1]} if per_channel else {}
    act = activations.create(name, **kwargs, **extra).train()
    x = torch.empty(shape, dtype=getattr(torch, dtype)).contiguous(memory_format=memory_format)
    launches_of(act, x)  # a first call sizes what a module sizes once (SLAF's running statistics), not every step
    return launches_of(act, x), x.numel()


def compile_one(job: tuple) -> tuple:
    """A worker's job: (case, layout, shape, launch index, capability, emitted[, dtype]) -> (job, Resources | error
    text, emitted text)."""
    from .kernel_compile import compile_launch, emitted_source_compiles

    case, layout, shape, index, capability, emitted, *dtype = job
    launch = captured(case, layout, shape, *dtype)[0].triton[index]
    try:
        result = compile_launch(launch, capability)
    except Exception as e:  # noqa: BLE001 - a kernel that does not compile is a finding of the card
        result = f"does not compile: {type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}"
    return job, result, emitted_source_compiles(launch, capability) if emitted else "—"


def build(cases: list[str], shape: tuple, archs: tuple, jobs: int) -> list[Row]:
    rows, work = [], []
    for case in cases:
        for layout in LAYOUTS:
            launches, numel = captured(case, layout, shape)
            kernels = [Kernel(t.name, int(t.options.get("num_warps", 4)), int(t.grid[0])) for t in launches.triton]
            rows.append(
                Row(
                    case,
                    layout,
                    launches.count,
                    len(launches.triton),
                    [o.name for o in launches.aten],
                    launches.bytes / numel,
                    kernels,
                )
            )
            for index in range(len(kernels)):
                for capability in archs:
                    work.append((case, layout, shape, index, capability, capability == 90))
    by_key = {(r.case, r.layout): r for r in rows}
    with _pool(jobs) as pool:
        for (case, layout, _, index, capability, _), result, emitted in pool.map(compile_one, work):
            kernel = by_key[(case, layout)].kernels[index]
            kernel.compiled[capability] = result
            if emitted != "—":
                kernel.emitted = emitted
    return rows


def _pool(jobs: int):
    if jobs <= 1:
        return _Serial()
    return concurrent.futures.ProcessPoolExecutor(jobs, mp_context=__import__("multiprocessing").get_context("spawn"))


class _Serial:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def map(self, fn, items):
        return map(fn, items)


def other_triton(site: str, cases: list[str], shape: tuple) -> tuple[str, dict]:
    """(that Triton's version, {(case, layout, index): "N regs, S B spilled" or the error}): every kernel compiled for
    sm_90 in a child Python with `site` first on its path."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(site).resolve()), str(root)]))
    env.pop("TRITON_INTERPRET", None)
    code = (
        "import json, sys; from visionbench.bench.kernel_card import compile_all; "
        f"json.dump(compile_all({cases!r}, {tuple(shape)!r}), sys.stdout)"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode:
        raise RuntimeError(f"--also-triton {site}: the child failed: {done.stderr.strip().splitlines()[-1:]}")
    answer = json.loads(done.stdout)
    return answer["version"], {
        tuple(k.split("|")[:2]) + (int(k.split("|")[2]),): v for k, v in answer["kernels"].items()
    }


def compile_all(cases: list[str], shape: tuple) -> dict:
    """Every kernel of the cases compiled for sm_90 with this process's Triton (what `other_triton` runs)."""
    import triton

    out = {}
    for case in cases:
        for layout in LAYOUTS:
            for index in range(len(captured(case, layout, shape)[0].triton)):
                _, result, _ = compile_one((case, layout, shape, index, 90, False))
                out[f"{case}|{layout}|{index}"] = result if isinstance(result, str) else _regs(result)
    return {"version": triton.__version__, "kernels": out}


def _regs(r) -> str:
    return f"{r.registers} regs, {r.spilled} B spilled"


def verdicts(row: Row) -> list[str]:
    """The targets this row misses (empty: all met)."""
    name = CASES[row.case][0]
    misses = []
    limit = MAX_LAUNCHES.get(name, DEFAULT_MAX_LAUNCHES)
    if row.launches > limit:
        misses.append(f"{row.launches} launches > {limit}")
    if row.bytes_per_element > MAX_BYTES * GELU_BYTES:
        floor = f" ({FLOOR[name]})" if name in FLOOR else ""
        misses.append(f"{row.bytes_per_element / GELU_BYTES:.2f}x GELU's bytes{floor}")
    for k in row.kernels:
        for capability, r in k.compiled.items():
            if isinstance(r, str):
                misses.append(f"{k.name} sm_{capability}: {r}")
                continue
            if r.spilled:
                misses.append(f"{k.name} sm_{capability}: {r.spilled} B spilled")
            if "backward" in k.name or "sums" in k.name or "moments" in k.name:
                if r.registers > MAX_REGISTERS:
                    misses.append(f"{k.name} sm_{capability}: {r.registers} registers")
        if k.emitted not in ("yes", "—"):
            misses.append(f"{k.name}: Inductor's copy {k.emitted}")
    return misses


def render(rows: list[Row], archs: tuple, other: tuple | None) -> str:
    summary = [
        [
            r.case,
            r.layout,
            f"{r.launches} ({r.triton} Triton{', ' + ', '.join(r.aten) if r.aten else ''})",
            f"{r.bytes_per_element:.2f} ({r.bytes_per_element / GELU_BYTES:.3f}×)",
            max(
                (k.compiled[90].registers for k in r.kernels if not isinstance(k.compiled.get(90, ""), str)),
                default=None,
            ),
            "met" if not verdicts(r) else "missed: " + "; ".join(verdicts(r)),
        ]
        for r in rows
    ]
    table1 = timing.markdown(
        ["activation", "layout", "launches fwd+bwd", "bytes / element (× GELU's 20)", "max registers sm_90", "targets"],
        [["gelu (baseline)", "—", "2 (0 Triton, gelu, gelu_backward)", "20.00 (1.000×)", None, "—"]] + summary,
    )
    header = ["activation", "layout", "kernel", "grid", "warps"]
    header += [f"sm_{a} registers, spilled" for a in archs] + ["Inductor's copy (sm_90)"]
    if other:
        header.append(f"Triton {other[0]} (sm_90)")
    detail = []
    for r in rows:
        for i, k in enumerate(r.kernels):
            cells = [r.case, r.layout, k.name, k.grid, k.warps]
            for a in archs:
                c = k.compiled.get(a)
                cells.append(c if isinstance(c, str) else f"{c.registers}, {c.spilled} B")
            cells.append(k.emitted)
            if other:
                cells.append(other[1].get((r.case, r.layout, i), "—"))
            detail.append(cells)
    return table1 + "\n\n" + timing.markdown(header, detail)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = timing.parser("kernels", __doc__)
    p.add_argument("--shape", type=input_shape, default="64,128,32,32", help="input shape, NCHW (default 64,128,32,32)")
    p.add_argument("--families", default="all", help="comma-separated family names or case labels (default all)")
    p.add_argument("--arch", default="90,80", help="compute capabilities to compile for (default 90,80)")
    p.add_argument("--also-triton", default=None, help="a folder holding another Triton (pip --target): compiled too")
    timing.add_count(p, "--jobs", os.cpu_count() or 1, "compiling processes")
    timing.add_report_options(p, "kernels_sm90")
    args = p.parse_args(argv)
    try:
        args.arch = tuple(int(a) for a in args.arch.split(","))
    except ValueError:
        p.error(f"--arch takes comma-separated compute capabilities (90,80), got {args.arch!r}")
    if args.also_triton and not (Path(args.also_triton) / "triton" / "__init__.py").is_file():
        p.error(f"--also-triton {args.also_triton}: no triton package there (pip install --target DIR triton==3.6.0)")
    return args


def main(argv: list[str]) -> int:
    import triton

    args = parse_args(argv)
    try:
        cases = [c for c in select(args.families) if activations.get_class(CASES[c][0]).triton_kernels]
    except ValueError as e:
        print(f"visionbench bench kernels: {e}", file=sys.stderr)
        return 2
    os.environ.pop("TRITON_INTERPRET", None)  # compiling needs Triton's real JIT functions
    rows = build(cases, tuple(args.shape), args.arch, args.jobs)
    other = other_triton(args.also_triton, cases, tuple(args.shape)) if args.also_triton else None
    missed = sum(bool(verdicts(r)) for r in rows)
    notes = [
        f"torch {torch.__version__}, Triton {triton.__version__}"
        + (f" (and Triton {other[0]}: last column)" if other else ""),
        f"input {list(args.shape)} float32, train mode; per channel: {args.shape[1]} coefficient sets",
        "nothing ran on a GPU: launches recorded on the Triton path (visionbench/bench/kernel_capture.py), kernels "
        "compiled with Triton's JIT specialisation and read by ptxas -v (visionbench/bench/kernel_compile.py)",
        "bytes / element: every tensor each launch reads or writes, once, over the input's elements",
        f"targets: no spills, backward kernels <= {MAX_REGISTERS} registers, <= {DEFAULT_MAX_LAUNCHES} launches "
        f"(SLAF, PolyNorm: <= 6), <= {MAX_BYTES}x GELU's bytes; {len(rows) - missed} of {len(rows)} rows meet all",
    ]
    command = "visionbench bench kernels " + " ".join(argv)
    timing.write_report(
        args.name, "The Triton kernels' cost card", command.strip(), notes, render(rows, args.arch, other), args.out
    )
    return 0 if not missed else 1
