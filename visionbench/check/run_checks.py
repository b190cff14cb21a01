"""`visionbench check act=NAME[k=v,...]`: every check of `checks.py`, the speed figure and the smoke training,
one line each (PASS / FAIL with the reason; INFO for a figure); exit 1 when any check fails."""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..activations.base import one_thread
from .checks import MODULE_CHECKS, Subject
from .smoke import smoke_training
from .speed import speed

USAGE = "visionbench check act=NAME[k=v,...][,NAME2,...] [imports=MOD[,MOD2]] [--quick] [--max-ratio R] [--device D]"
DESCRIPTION = """Check activations, built-in or plugin, one line per check (PASS / FAIL with the reason): shape and dtype
kept, finite on large inputs and at special points, float64 gradcheck, parameter gradients, state_dict and deepcopy,
construction on the meta device, determinism, the fit to its init target; the speed and memory of forward + backward
as a ratio to GELU (a figure, unless --max-ratio); a smoke training on the digits. Exit 1 if any check fails.
act=all checks every registered activation. docs/activations.md, "Checking an activation"."""


@dataclass
class Result:
    check: str
    passed: bool | None  # None: a figure, not a pass/fail
    detail: str

    @property
    def status(self) -> str:
        return {True: "PASS", False: "FAIL", None: "INFO"}[self.passed]

    def line(self) -> str:
        return f"  {self.status}  {self.check:<14} {self.detail}"


def all_checks(quick: bool = False, max_ratio: float | None = None) -> dict[str, Callable]:
    """name -> check(subject, device) -> (passed, detail), in the order run."""
    return {
        **MODULE_CHECKS,
        "gradcheck": functools.partial(MODULE_CHECKS["gradcheck"], fast=quick),
        "speed": functools.partial(speed, quick=quick, max_ratio=max_ratio),
        "smoke train": functools.partial(smoke_training, quick=quick),
    }


def run_check(check: Callable, subject: Subject, device: torch.device, name: str) -> Result:
    """One check; an exception it raises is its failure, in one line."""
    try:
        tiny = name in MODULE_CHECKS or getattr(check, "keywords", {}).get("quick")
        with one_thread() if tiny else contextlib.nullcontext():  # tiny tensors: one thread (base.one_thread)
            passed, detail = check(subject, device)
    except Exception as e:  # noqa: BLE001 - an activation's own error is what the check reports
        text = " ".join(str(e).split())
        return Result(name, False, f"raised {type(e).__name__}: {text[:300]}")
    return Result(name, passed, detail)


def run_checks(
    subject: Subject,
    device: torch.device | str = "cpu",
    quick: bool = False,
    max_ratio: float | None = None,
    only: list[str] | None = None,
    out: Callable[[str], None] | None = None,
) -> list[Result]:
    """Every check (or those named in `only`) of one activation; each line handed to `out` as it completes."""
    device = torch.device(device)
    results = []
    for name, check in all_checks(quick, max_ratio).items():
        if only is None or name in only:
            results.append(run_check(check, subject, device, name))
            if out:
                out(results[-1].line())
    return results


def subjects(text: str) -> list[Subject]:
    """The activations of `act=...` (the sweep grammar: a,b[k=v],all); ValueError naming what is wrong."""
    from ..sweep.acts import parse_acts

    return [Subject(a.family, dict(a.options), a.label) for a in parse_acts(text)]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="visionbench check", usage=USAGE, description=DESCRIPTION)
    p.add_argument(
        "keys",
        nargs="*",
        metavar="act=...",
        help="act=NAME[k=v,...] (several, comma-separated; all = every one); imports=MOD (plugin modules: "
        "the command line loads them, visionbench/cli.py)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a small speed measurement and an MLP smoke training (the test suite's mode)",
    )
    p.add_argument(
        "--max-ratio",
        type=float,
        default=None,
        metavar="R",
        help="fail when the time or memory ratio to GELU is above R (default: report only)",
    )
    p.add_argument("--device", default="cpu", help="torch device of the checks (default cpu; meta is always checked)")
    args = p.parse_args(argv)
    keys = {}
    for item in args.keys:
        key, sep, value = item.partition("=")
        if not sep or key != "act" or key in keys:
            p.error(f"{item!r}: expected act=NAME[k=v,...] once and optionally imports=MOD")
        keys[key] = value
    if "act" not in keys:
        p.error("which activation? give act=NAME, e.g. act=rational or act=all")
    args.act = keys["act"]
    if args.max_ratio is not None and not args.max_ratio > 0:
        p.error(f"--max-ratio must be > 0, got {args.max_ratio:g}")
    return args


def main(argv: list[str]) -> int:
    """`visionbench check ARGS` less its `imports=`, which the command line has loaded (cli.py's command table)."""
    args = parse_args(argv)
    from ..bench.timing import device_name

    try:
        device = torch.device(device_name(args.device))
        todo = subjects(args.act)
    except (ValueError, argparse.ArgumentTypeError) as e:
        print(f"visionbench check: {e}", file=sys.stderr)
        return 2
    failed: list[str] = []
    for subject in todo:
        t0 = time.perf_counter()
        print(subject.label, flush=True)
        results = run_checks(subject, device, args.quick, args.max_ratio, out=functools.partial(print, flush=True))
        bad = [r.check for r in results if r.passed is False]
        passed = sum(r.passed is True for r in results)
        print(
            f"{subject.label}: {passed} passed, {len(bad)} failed{': ' + ', '.join(bad) if bad else ''} "
            f"({time.perf_counter() - t0:.1f} s)",
            flush=True,
        )
        failed += [subject.label] if bad else []
    if len(todo) > 1:
        print(
            f"\n{len(todo) - len(failed)} of {len(todo)} activations pass every check"
            + (f"; failing: {', '.join(failed)}" if failed else "")
        )
    return 1 if failed else 0
