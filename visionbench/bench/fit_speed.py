"""How long fitting an activation's coefficients to a classical target takes (paper 001 Sec 3.5:
"Hermite interpolation" of F and F' on [-3, 3]), against one GELU forward + backward timed in the
same run.

    visionbench bench fit                          # every learnable family x its documented targets
    visionbench bench fit --families rational,hermite --repeats 5

A fit runs at every model build (`init=gelu`), so it must stay cheap: the table gives each fit's
CPU time (the minimum of `--repeats` after a warm-up fit; CPU time, not wall time, since a fit runs
on one thread and its wall time grows with the machine's load) and that time in units of one
GELU forward + backward on a [64, 128, 32, 32] float32 tensor, plus the sup errors of F and F'.
This replaces the time bound the tests once asserted: a timed assertion fails on a loaded machine
for nothing. Writes `results/bench/<name>.md`.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch import nn

from .. import activations
from ..activations.base import one_thread
from . import timing


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = timing.parser("fit", __doc__)
    p.add_argument("--families", default="all", help="comma-separated learnable names (default: all)")
    p.add_argument("--repeats", type=int, default=3, help="timed fits per (family, target) (default 3)")
    timing.add_report_options(p, "fit")
    return p.parse_args(argv)


def cpu_seconds(fn, repeats: int) -> tuple[float, object]:
    """(the minimum CPU time of `repeats` calls of fn after one warm-up call (one-off LAPACK costs),
    what the last call returned)."""
    result = fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        result = fn()
        best = min(best, time.process_time() - start)
    return best, result


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    learnable = [n for n in activations.names() if activations.is_learnable(n)]
    names = learnable if args.families == "all" else [n.strip() for n in args.families.split(",")]
    unknown = [n for n in names if n not in learnable]
    if unknown or args.repeats < 1:
        wrong = (
            f"unknown learnable activation(s) {', '.join(unknown)}; known: {', '.join(learnable)}"
            if unknown
            else f"--repeats must be >= 1, got {args.repeats}"
        )
        print(f"visionbench bench fit: {wrong}", file=sys.stderr)
        return 2
    with one_thread():
        x = torch.randn(64, 128, 32, 32, requires_grad=True)
        gelu = nn.GELU()
        step_s, _ = cpu_seconds(lambda: gelu(x).sum().backward(), args.repeats)
        rows = []
        for name in names:
            act = activations.create(name)
            for target in getattr(type(act), "fit_tolerance", {"gelu": None}):
                seconds, r = cpu_seconds(lambda act=act, target=target: act.fit(target), args.repeats)
                rows.append([name, target, 1e3 * seconds, seconds / step_s, r.max_abs_error, r.max_abs_deriv_error])
                print(f"  {name} -> {target}: {1e3 * seconds:.1f} ms", file=sys.stderr, flush=True)
    header = ["activation", "target", "fit CPU ms", "× GELU fwd+bwd", "sup error of F", "sup error of F'"]
    notes = [
        timing.machine_line(torch.device("cpu")) + " (fits run on one thread)",
        f"fit: minimum CPU time of {args.repeats} after a warm-up fit; × GELU: that time over one GELU "
        f"forward + backward on [64, 128, 32, 32] float32 ({1e3 * step_s:.1f} ms CPU, same run)",
        "errors: sup norms on [-3, 3] (the tests assert them against each family's fit_tolerance)",
    ]
    command = "visionbench bench fit " + " ".join(argv)
    timing.write_report(
        args.name, "Fitting coefficients to a target", command.strip(), notes, timing.markdown(header, rows), args.out
    )
    return 0
