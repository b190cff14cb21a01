"""`visionbench check act=NAME[k=v,...]`: does an activation, built-in or plugin, keep the contracts every
activation here keeps? One line per check, PASS / FAIL with the reason; docs/activations.md, "Checking an
activation".

    visionbench check act=rational                  # every check of one activation
    visionbench check act=all --quick               # every registered one, small speed and smoke sizes
    visionbench check imports=my_acts act=my_act --max-ratio 3

    >>> from visionbench.check import Subject, run_checks
    >>> results = run_checks(Subject("rational", {"version": "B"}), quick=True)

checks.py holds the module checks, speed.py the ratio to GELU, smoke.py the smoke training, arguments.py the command's
arguments (parsed before torch is imported), runner.py the command (and `run_checks`, its Python door).
"""

import importlib

__all__ = ["CHANNELS", "MODULE_CHECKS", "Result", "Subject", "all_checks", "main", "run_checks"]
_HOMES = {"CHANNELS": "checks", "MODULE_CHECKS": "checks", "Subject": "checks", "main": "arguments"}


def __getattr__(name: str):
    """The package's names, imported on first use (PEP 562): `visionbench check -h` loads check/arguments.py only."""
    if name not in __all__:
        raise AttributeError(f"module 'visionbench.check' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES.get(name, 'runner')}", __name__), name)
