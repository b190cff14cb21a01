"""Interruptions a sweep survives: SIGTERM (what SLURM and `kill` send), Ctrl-C, a dying parent.

    install_sigterm()                    # in `visionbench run`: SIGTERM raises Interrupted("SIGTERM")
    init_worker(threads)                 # in each parallel=K worker: same, and die with the parent

The run being trained records status `interrupted` and the command exits non-zero (143 for
SIGTERM, 130 for Ctrl-C), so cluster scripts see the truth; rerunning the same command resumes.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

EXIT_CODES = {"SIGTERM": 143, "Ctrl-C": 130}
_PR_SET_PDEATHSIG = 1


class Interrupted(KeyboardInterrupt):
    """The process was told to stop (`signal_name`: SIGTERM or Ctrl-C)."""

    def __init__(self, signal_name: str = "Ctrl-C"):
        super().__init__(signal_name)
        self.signal_name = signal_name

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.signal_name, 1)


_received: list[str] = []


def _on_sigterm(signum, frame) -> None:
    _received.append("SIGTERM")
    raise Interrupted("SIGTERM")


def install_sigterm() -> None:
    """SIGTERM raises `Interrupted` in the main thread (Lightning chains its own handler to it)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


def received() -> str:
    """The signal that stopped training: SIGTERM if one arrived, else Ctrl-C (SIGINT)."""
    return _received[-1] if _received else "Ctrl-C"


def _die_with_parent() -> None:
    """SIGTERM when the parent dies, even by kill -9: prctl(PR_SET_PDEATHSIG) on Linux, a watchdog elsewhere."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() == parent:  # the parent may have died before prctl took effect
                return
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="visionbench-parent-watch").start()


def init_worker(threads: int) -> None:
    """Initializer of a parallel=K worker process: its thread count, SIGTERM, death with the parent."""
    import torch

    torch.set_num_threads(threads)
    install_sigterm()
    _die_with_parent()
