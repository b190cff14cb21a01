"""The arguments of the report's commands (`visionbench report`, command.py; compare, export, collect, papers): their
parser, numbers refused in one line that names the flag and what it takes, the significance level, a switch."""

from __future__ import annotations

import argparse

from ..stats import power


def parser(command: str, description: str, epilog: str | None = None) -> argparse.ArgumentParser:
    """The parser of `visionbench COMMAND`, one of the report's commands (report, compare, export, collect, papers)."""
    return argparse.ArgumentParser(
        prog=f"visionbench {command}",
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter if epilog else argparse.HelpFormatter,
    )


def number(flag: str, ok, wanted: str):
    """An argparse type: a float for which `ok` holds, else one line naming the flag and what it takes."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{flag} takes {wanted}, got {text!r}")
        return value

    return parse


def positive_arg(flag: str):
    return number(flag, lambda v: 0 < v < float("inf"), "a positive number in the metric's units")


def level_arg(flag: str):
    return number(flag, lambda v: 0 < v < 1, "a number in (0, 1)")


def integer(flag: str, lo: int, hi: int | None = None):
    """An argparse type: an integer in [lo, hi], else one line naming the flag and what it takes."""
    wanted = f"an integer >= {lo}" if hi is None else f"an integer from {lo} to {hi}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{flag} takes {wanted}, got {text!r}")
        return value

    return parse


def add_alpha(parser: argparse.ArgumentParser, decided: str) -> None:
    """`--alpha`: the significance level of what the command `decided` (default `power.ALPHA`)."""
    parser.add_argument(
        "--alpha",
        type=level_arg("--alpha"),
        default=power.ALPHA,
        help=f"significance level of {decided} (default {power.ALPHA:g})",
    )


def switch(parser: argparse.ArgumentParser, flag: str, help: str) -> None:
    """A flag that is off unless given."""
    parser.add_argument(flag, action="store_true", help=help)
