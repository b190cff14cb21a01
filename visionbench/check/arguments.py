"""The arguments of `visionbench check`, parsed before anything heavy is imported: `visionbench check -h` answers
without torch (the checks, check/runner.py, are imported once the arguments are good)."""

from __future__ import annotations

import argparse

USAGE = "visionbench check act=NAME[k=v,...][,NAME2,...] [imports=MOD[,MOD2]] [--quick] [--max-ratio R] [--device D]"
DESCRIPTION = """Check activations, built-in or plugin, one line per check (PASS / FAIL with the reason): shape and dtype
kept, finite on large inputs and at special points, float64 gradcheck, parameter gradients, state_dict and deepcopy,
construction on the meta device, determinism, the fit to its init target; the speed and memory of forward + backward
as a ratio to GELU (a figure, unless --max-ratio); a smoke training on the digits. Exit 1 if any check fails.
act=all checks every registered activation. docs/activations.md, "Checking an activation"."""


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
    """`visionbench check ARGS` (cli.py's command table): parse, then import and run the checks."""
    args = parse_args(argv)
    from .runner import run

    return run(args)
