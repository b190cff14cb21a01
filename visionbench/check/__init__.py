"""`visionbench check act=NAME[k=v,...]`: does an activation, built-in or plugin, keep the contracts every
activation here keeps? One line per check, PASS / FAIL with the reason; docs/activations.md, "Checking an
activation".

    visionbench check act=rational                  # every check of one activation
    visionbench check act=all --quick               # every registered one, small speed and smoke sizes
    visionbench check imports=my_acts act=my_act --max-ratio 3

    >>> from visionbench.check import Subject, run_checks
    >>> results = run_checks(Subject("rational", {"version": "B"}), quick=True)

checks.py holds the module checks, speed.py the ratio to GELU, smoke.py the smoke training, run_checks.py the command
(and `run_checks`, its Python door).
"""

from .checks import CHANNELS, MODULE_CHECKS, Subject
from .run_checks import Result, all_checks, main, run_checks

__all__ = ["CHANNELS", "MODULE_CHECKS", "Result", "Subject", "all_checks", "main", "run_checks"]
