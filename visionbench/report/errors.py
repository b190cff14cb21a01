"""The report's one error: bad input to `visionbench report` or `visionbench compare`, said in one line (exit 2);
and that one line, as every command of the report's (report, compare, export, collect) says it.

Its own module, below every other of the report's: command.py, sections.py, compare.py and html.py raise it, and
command.py (which catches it) imports sections.py, which imports html.py, so none of them may be where it lives."""

from __future__ import annotations

import sys


class UsageError(Exception):
    """Bad input to `visionbench report` or `visionbench compare` (a bad argument, an empty results tree, trees that
    cannot be compared): reported as one line on stderr, exit code 2, nothing written."""


def fail(command: str, message) -> int:
    """`visionbench COMMAND: error: MESSAGE`, one line on stderr; 2, the command's exit status."""
    print(f"visionbench {command}: error: {message}", file=sys.stderr)
    return 2


def os_reason(exc: OSError, where) -> str:
    """An OSError in a command's words: the file it names (else `where`), then why."""
    return f"{exc.filename or where}: {exc.strerror or exc}"
