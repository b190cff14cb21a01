"""The sweep's place and ETA on a terminal (visionbench/sweep/eta.py): what the line says, and that a pipe or a log
gets none of it."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from datetime import datetime

import pytest

from visionbench.sweep.eta import SweepClock

from .helpers import shrunk


def test_the_eta_is_the_measured_pace_projected_over_the_runs_left():
    t = [0.0]
    clock = SweepClock(now=lambda: t[0], wall=lambda: datetime(2026, 11, 28, 14, 0))
    clock.planned(12)
    t[0] = 120.0  # two runs in two minutes: 10 left at a minute each
    clock.finished()
    assert clock.finished() == " · run 2 of 12 · ETA 14:10 for the 12 runs"
    clock.planned(4)  # seeds=auto's next round
    assert clock.finished().endswith("for the 16 runs planned so far")
    for _ in range(13):
        last = clock.finished()
    assert last == " · run 16 of 16"


def test_nothing_is_said_before_the_sweep_planned_its_runs():
    assert SweepClock().finished() == ""


@pytest.mark.slow
def test_a_terminal_sees_the_eta_and_a_pipe_does_not(tmp_path):
    def argv(folder: str) -> list[str]:  # the suite's tiny run (tests/helpers.py), two seeds in one process
        tiny = shrunk("act=relu", "seeds=2", "epochs=1", "parallel=1", f"results_dir={tmp_path / folder}")
        return [sys.executable, "-m", "visionbench", "run", *tiny]

    piped = subprocess.run(argv("piped"), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert piped.returncode == 0 and "ETA" not in piped.stdout and " · run " not in piped.stdout
    leader, follower = pty.openpty()
    with subprocess.Popen(argv("terminal"), stdout=follower, stderr=subprocess.DEVNULL, cwd=tmp_path) as proc:
        os.close(follower)
        out = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        assert proc.wait(timeout=600) == 0
    text = out.decode(errors="replace")
    assert " · run 1 of 2 · ETA " in text and " · run 2 of 2" in text
