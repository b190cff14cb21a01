"""The sweep's own two steps, handed to the designs that run it in rounds or phases (rounds.py: seeds=auto;
tune_sweep.py: tune=): `plan(cfg, settings=, acts=, seeds=, folder=)`, the (run config, run directory) of each run
asked for, checked as every sweep checks its runs (sweep/sweep.py `plan`), and `execute_all(jobs)`, their outcomes;
`note`, where a design's progress lines go (None: nowhere)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Steps:
    plan: Callable[..., list]
    execute_all: Callable[[list], list]
    note: Callable[[str], None] | None = None

    def say(self, line: str) -> None:
        if self.note:
            self.note(line)
