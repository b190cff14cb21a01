"""The sweep's place and its ETA on a terminal: "run 3 of 12 · ETA 14:20", after each finished run's line.

    clock = SweepClock()
    clock.planned(12)          # -> the line said before the first run finishes (the first batch only); each batch
                               #    the sweep executes (a round of seeds=auto, a tuning phase) adds its runs
    clock.finished()           # -> " · run 3 of 12 · ETA 14:20 for the 12 runs" (the pace so far, projected)
    clock.finished(trained=False)   # a run found finished (resumed) or left to another process: its place only

Only where a person watches: `visionbench run` adds it when stdout is a terminal, never to a log or a pipe (which
keep today's lines byte for byte). The projection is the sweep's own measured pace, not the estimate's model (which
times each activation first: seconds to minutes before the first run could start): wall time since the sweep started
over the runs it trained, parallel workers included, times the runs left — so it corrects itself as runs finish, and
before the first one finishes there is none (the line `planned` returns says so). A run found finished or left to
another live process takes its place without time, so a resumed sweep's pace is that of the runs it trains. Later
rounds of seeds=auto are added when they are planned (the ETA then covers the runs planned so far, and says so).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta


class SweepClock:
    def __init__(self, now=time.monotonic, wall=datetime.now):
        self._now, self._wall = now, wall
        self.start = now()
        self.total = self.done = self.trained = 0
        self.batches = 0

    def planned(self, runs: int) -> str:
        """Add a batch of `runs`; for the sweep's first batch, the line to say before its first run finishes."""
        self.total += int(runs)
        self.batches += 1
        if self.batches > 1 or not runs:
            return ""
        return (
            f"  {self.total} run{'s' if self.total != 1 else ''} to go: the place and the ETA follow each finished "
            "run (the pace of the runs finished so far, projected; none before the first finishes)"
        )

    def finished(self, trained: bool = True) -> str:
        """The text after a finished run's line: its place, and when the planned runs should be done. `trained`
        False: the run took no time of this sweep (found finished, or locked by another process)."""
        self.done += 1
        self.trained += bool(trained)
        if not self.total:
            return ""
        place = f" · run {self.done} of {self.total}"
        left = max(self.total - self.done, 0)
        if not left or not self.trained:
            return place
        pace = (self._now() - self.start) / self.trained
        eta = self._wall() + timedelta(seconds=pace * left)
        so_far = " planned so far" if self.batches > 1 else ""
        return f"{place} · ETA {eta:%H:%M} for the {self.total} runs{so_far}"
