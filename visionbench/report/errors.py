"""The report's one error: bad input to `visionbench report` or `visionbench compare`, said in one line (exit 2).

Its own module, below every other of the report's: main.py, compare.py and html.py raise it, and main.py (which
catches it) imports html.py, so none of them may be where it lives."""


class UsageError(Exception):
    """Bad input to `visionbench report` or `visionbench compare` (a bad argument, an empty results tree, trees that
    cannot be compared): reported as one line on stderr, exit code 2, nothing written."""
