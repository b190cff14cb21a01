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


def run(args: argparse.Namespace) -> int:
    """The checks of parsed arguments (check/arguments.py), one line each; the exit code."""
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
