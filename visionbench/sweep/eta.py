"""The sweep's place and its ETA on a terminal: "run 3 of 12 · ETA 14:20", after each finished run's line.

    clock = SweepClock()
    clock.planned(12)          # each batch the sweep executes (a round of seeds=auto, a tuning phase) adds its runs
    clock.finished()           # -> " · run 3 of 12 · ETA 14:20" (the wall time per finished run so far, projected)

Only where a person watches: `visionbench run` adds it when stdout is a terminal, never to a log or a pipe (which
keep today's lines byte for byte). The projection is the sweep's own measured pace — wall time since the sweep
started over the runs finished, parallel workers included — so it corrects itself as runs finish; a run resumed
from a finished summary counts as finished at once, and later rounds of seeds=auto are added when they are planned
(the ETA then covers the runs planned so far, and says so).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta


class SweepClock:
    def __init__(self, now=time.monotonic, wall=datetime.now):
        self._now, self._wall = now, wall
        self.start = now()
        self.total = self.done = 0
        self.batches = 0

    def planned(self, runs: int) -> None:
        self.total += int(runs)
        self.batches += 1

    def finished(self) -> str:
        """The text after a finished run's line: its place, and when the planned runs should be done."""
        self.done += 1
        if not self.total:
            return ""
        place = f" · run {self.done} of {self.total}"
        left = max(self.total - self.done, 0)
        if not left:
            return place
        pace = (self._now() - self.start) / self.done
        eta = self._wall() + timedelta(seconds=pace * left)
        so_far = " planned so far" if self.batches > 1 else ""
        return f"{place} · ETA {eta:%H:%M} for the {self.total} runs{so_far}"
