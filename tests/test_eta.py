"""The sweep's place and ETA on a terminal (visionbench/sweep/eta.py): what the line says, and that a pipe or a log
gets none of it."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from datetime import datetime
from pathlib import Path

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


def test_the_first_batch_is_announced_before_its_first_run_finishes_and_found_runs_take_no_time():
    t = [0.0]
    clock = SweepClock(now=lambda: t[0], wall=lambda: datetime(2026, 11, 28, 14, 0))
    line = clock.planned(4)
    assert line.startswith("  4 runs to go: ") and "none before the first finishes" in line
    assert clock.finished(trained=False) == " · run 1 of 4"  # resumed: found finished, no pace yet
    t[0] = 600.0  # one trained run in ten minutes: two left at ten minutes each
    assert clock.finished() == " · run 2 of 4 · ETA 14:20 for the 4 runs"
    assert clock.planned(2) == ""  # a later round is added, not announced


def _run_on_terminals(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """Run `argv` with stdout and stderr each on its own pseudo-terminal: (exit code, stdout, stderr), newlines as a
    pipe gives them."""
    (out_leader, out_follower), (err_leader, err_follower) = pty.openpty(), pty.openpty()
    for follower in (out_follower, err_follower):  # a terminal 100 columns wide (a new one is 0 wide: tqdm draws none)
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    with subprocess.Popen(argv, stdout=out_follower, stderr=err_follower, stdin=subprocess.DEVNULL, cwd=cwd) as proc:
        os.close(out_follower)
        os.close(err_follower)
        got = {out_leader: b"", err_leader: b""}
        open_ = set(got)
        while open_:
            for fd in select.select(list(open_), [], [], 600)[0]:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # the follower closed: the process ended
                    chunk = b""
                if chunk:
                    got[fd] += chunk
                else:
                    open_.discard(fd)
        code = proc.wait(timeout=600)
    for fd in got:
        os.close(fd)
    return tuple([code] + [got[fd].decode(errors="replace").replace("\r\n", "\n") for fd in (out_leader, err_leader)])


ADDED = re.compile(r" · run \d+ of \d+( · ETA \d\d:\d\d for the \d+ runs( planned so far)?)?$", re.M)


@pytest.mark.slow
def test_a_terminal_sees_the_bar_and_the_eta_and_a_pipe_gets_todays_bytes(tmp_path):
    """One process (parallel=1): Lightning's bar per run, then the place and ETA after each finished run, on the
    terminal (stdout); piped, stdout is what the terminal keeps without them, byte for byte.
    parallel=2 on a terminal: the workers draw no bars (no interleaving), the sweep's line stays."""

    def argv(folder: str, parallel: int = 1) -> list[str]:  # the suite's tiny run (tests/helpers.py), two seeds
        tiny = shrunk("act=relu", "seeds=2", "epochs=1", f"parallel={parallel}", f"results_dir={tmp_path / folder}")
        return [sys.executable, "-m", "visionbench", "run", *tiny]

    piped = subprocess.run(argv("r"), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert piped.returncode == 0, piped.stderr
    assert "ETA" not in piped.stdout and " · run " not in piped.stdout and "epoch 1/1" not in piped.stderr
    code, out, err = _run_on_terminals(argv("t"), tmp_path)
    assert code == 0, err
    assert " · run 1 of 2 · ETA " in out and out.count(" · run 2 of 2\n") == 1
    assert "  2 runs to go: the place and the ETA follow each finished run" in out
    assert "\rrelu seed 0 epoch 1/1" in out and "\rrelu seed 1 epoch 1/1" in out  # RunProgressBar, one per run
    assert "epoch 1/1" not in err
    shown = "\n".join(line.rsplit("\r", 1)[-1] for line in out.split("\n"))  # what the terminal keeps of a line
    today = ADDED.sub("", shown.replace(str(tmp_path / "t"), str(tmp_path / "r")))
    today = "".join(line for line in today.splitlines(keepends=True) if " runs to go: " not in line)
    assert today == piped.stdout

    code, out, err = _run_on_terminals(argv("p", parallel=2), tmp_path)
    assert code == 0, err
    assert " · run 1 of 2 · ETA " in out and " · run 2 of 2\n" in out
    assert "epoch 1/1" not in out + err and "it/s" not in out + err  # the workers draw no bar
