"""Interruptions a sweep survives: SIGTERM (what SLURM and `kill` send), Ctrl-C, a dying parent.

    install_sigterm()                    # in `visionbench run`: SIGTERM raises Interrupted("SIGTERM")
    init_worker(threads)                 # in each parallel=K worker: same, and die with the parent

The run being trained records status `interrupted` and the command exits non-zero (143 for
SIGTERM, 138 for SIGUSR1, 130 for Ctrl-C), so cluster scripts see the truth; rerunning the same command resumes.

SLURM requeue: in a SLURM job, SIGUSR1 (`#SBATCH --signal=USR1@120` + `--requeue`, the command
started with `srun`: sent 120 s before the time limit) runs `scontrol requeue <job>` and stops like
SIGTERM (status `interrupted`, exit 138); the requeued job reruns the same command and resumes
from last.ckpt. This replaces Lightning's auto-requeue handler (`SLURMEnvironment(auto_requeue=True)`,
which Lightning installs only where SIGUSR1 has no handler yet), because that one (1) saves a
mid-epoch `hpc_ckpt_N.ckpt`, from which a resume would not repeat the uninterrupted run (runs resume
at epoch ends), and (2) finalizes the loggers and lets training go on until SLURM's SIGTERM: a
TensorBoard write in that window fails the run ("'NoneType' object has no attribute '_intrans'",
seen in the tests). A second stop signal (SLURM's SIGTERM after the requeue) does not interrupt
the recording of the first.

submitit (`hydra/launcher=submitit_slurm` or `submitit_local`): submitit signals a job about to be preempted or to
reach its time limit with its own signal, SIGUSR2 unless the job's environment sets `SUBMITIT_PREEMPT_SIGNAL`
(`preempt_signal`), and its handler checkpoints the job function, requeues the job (`scontrol requeue`; the local
executor restarts it) and exits at once, from wherever training was. In a submitit job (`SUBMITIT_EXECUTOR` set)
`install_sigterm` puts ours in front of it: the signal stops training like SIGTERM (the run records `interrupted`,
its last.ckpt is the last finished epoch's; the epoch in flight is dropped and trained again on resume, from the
same seeds: the same bits), and `hand_over` then calls submitit's handler, which requeues. A parallel=K or portable
worker ignores it: its parent, which gets it too, stops the worker with SIGTERM.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

EXIT_CODES = {"SIGTERM": 143, "Ctrl-C": 130, "SIGUSR1": 138}  # 128 + the signal number, as a shell reports it
_PR_SET_PDEATHSIG = 1
PREEMPT_ENV = "SUBMITIT_PREEMPT_SIGNAL"  # submitit's: the name after SIG of the signal it preempts a job with
PREEMPT_DEFAULT = "USR2"  # submitit's default (core/job_environment.py, JobEnvironment.USR_SIG)


class Interrupted(KeyboardInterrupt):
    """The process was told to stop (`signal_name`: SIGTERM, SIGUSR1 (SLURM requeue) or Ctrl-C).
    `recorded`: how many runs in progress were recorded `interrupted` (0: none was training)."""

    def __init__(self, signal_name: str = "Ctrl-C", recorded: int = 0):
        super().__init__(signal_name)
        self.signal_name, self.recorded = signal_name, recorded

    @property
    def exit_code(self) -> int:
        if self.signal_name in EXIT_CODES:
            return EXIT_CODES[self.signal_name]
        number = getattr(signal, self.signal_name, None)  # submitit's preemption signal (SIGUSR2: 140)
        return 128 + int(number) if isinstance(number, signal.Signals) else 1


_received: list[str] = []


def _stop(name: str) -> None:
    """Raise `Interrupted` for the first stop signal; later ones (SLURM's SIGTERM after a requeue, a
    second `kill`) are noted but do not break the recording of the first."""
    first = not _received
    _received.append(name)
    if first:
        raise Interrupted(name)


def _on_sigterm(signum, frame) -> None:
    _stop("SIGTERM")


def _on_requeue(signum, frame) -> None:
    first = not _received
    _received.append("SIGUSR1")  # first: SLURM's SIGTERM during `scontrol` must not cut the requeue short
    if first:
        requeue_slurm_job()
        raise Interrupted("SIGUSR1")


def _on_requeue_worker(signum, frame) -> None:  # a parallel=K worker: its parent requeues the job
    _stop("SIGUSR1")


def submitit_job() -> bool:
    """Whether this process runs a submitit job (or a worker it started): submitit sets SUBMITIT_EXECUTOR."""
    return bool(os.environ.get("SUBMITIT_EXECUTOR"))


def preempt_signal() -> signal.Signals | None:
    """The signal submitit preempts a job with, as submitit reads it: `SIG` + $SUBMITIT_PREEMPT_SIGNAL, default
    SIGUSR2 (None: a name that is no signal here; submitit itself then refuses to start the job)."""
    number = getattr(signal, "SIG" + os.environ.get(PREEMPT_ENV, PREEMPT_DEFAULT), None)
    return number if isinstance(number, signal.Signals) else None


_handed_over: dict[int, object] = {}  # the preemption signal -> the handler ours replaced (submitit's)


def _on_preempt(signum, frame) -> None:
    _stop(signal.Signals(signum).name)


def _install_preemption(requeue: bool) -> None:
    """In a submitit job: the preemption signal stops training (the sweep's process; submitit's handler kept for
    `hand_over`), or is ignored (a worker: the parent stops it)."""
    sig = preempt_signal()
    if not submitit_job() or sig is None:
        return
    if not requeue:
        signal.signal(sig, signal.SIG_IGN)
        return
    previous = signal.signal(sig, _on_preempt)
    if callable(previous) and previous is not _on_preempt:
        _handed_over[sig] = previous


def hand_over(stop: Interrupted) -> None:
    """After the run was recorded `interrupted` by submitit's preemption signal: submitit's own handler, which
    checkpoints the job function, requeues the job and exits (SystemExit); nothing for any other stop, or where
    submitit installed no handler (the job function's process is not submitit's: submitit requeues from its own)."""
    sig = preempt_signal()
    handler = _handed_over.get(sig) if sig is not None and stop.signal_name == sig.name else None
    if handler is not None:
        handler(int(sig), None)


def slurm_job_id() -> str | None:
    """This SLURM job's id as `scontrol` wants it (`<array job>_<task>` for an array task); None outside SLURM."""
    if os.environ.get("SLURM_ARRAY_JOB_ID") and os.environ.get("SLURM_ARRAY_TASK_ID"):
        return f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


def requeue_slurm_job() -> bool:
    """`scontrol requeue` this job, as Lightning's auto-requeue does; False (and a note) if that fails."""
    job = slurm_job_id()
    if job is None:
        return False
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"visionbench: could not requeue SLURM job {job} ({e}); resubmit it to resume", file=sys.stderr)
        return False
    if done.returncode != 0:
        print(
            f"visionbench: scontrol requeue {job} failed ({done.stderr.strip()[:200]}); resubmit it to resume",
            file=sys.stderr,
        )
    return done.returncode == 0


def install_sigterm(requeue: bool = True) -> None:
    """SIGTERM raises `Interrupted` in the main thread (Lightning chains its own handler to it).

    In a SLURM job, SIGUSR1 requeues the job (`requeue`: the sweep's own process; its parallel
    workers only stop), then stops like SIGTERM. Being installed first, this handler replaces
    Lightning's auto-requeue one (Lightning installs its own only where SIGUSR1 has none); see the
    module docstring for why. In a submitit job, submitit's preemption signal stops like SIGTERM too
    (`requeue`; a worker ignores it), submitit's handler kept for `hand_over`.
    """
    _received.clear()
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, _on_sigterm)
    if slurm_job_id() and hasattr(signal, "SIGUSR1"):
        signal.signal(signal.SIGUSR1, _on_requeue if requeue else _on_requeue_worker)
    _install_preemption(requeue)


def received() -> str:
    """The signal that stopped training: the first stop signal that arrived, else Ctrl-C (SIGINT)."""
    return _received[0] if _received else "Ctrl-C"


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


_in_run: list[bool] = [False]


@contextlib.contextmanager
def worker_run() -> Iterator[None]:
    """Around a parallel=K worker's run: a stop signal outside it (the worker starting, or idle between runs)
    ends the worker at once and quietly (nothing to record); inside it, the run records `interrupted`."""
    _in_run[0] = True
    try:
        yield
    finally:
        _in_run[0] = False


def _on_sigterm_worker(signum, frame) -> None:
    if not _in_run[0]:
        os._exit(EXIT_CODES["SIGTERM"])  # no traceback of the pool's worker loop: the sweep says it in one line
    _stop("SIGTERM")


@contextlib.contextmanager
def starting_workers() -> Iterator[None]:
    """While the sweep starts its parallel=K workers:
    - SIGINT ignored, which they inherit and keep (Python installs its KeyboardInterrupt handler only where SIGINT
      is not ignored). A Ctrl-C to the process group then reaches the sweep alone, which stops the workers
      (SIGTERM) and says so in one line, instead of one KeyboardInterrupt traceback per worker (from wherever each
      was: importing torch, unpickling a job).
    - SIGTERM blocked (held, not lost): the sweep's own handler would otherwise raise in the middle of writing a
      new worker's start-up data to it, and that worker would print an EOFError traceback. The signal arrives when
      the workers have their data. The workers inherit the block and lift it in `init_worker`, once their quiet
      SIGTERM handler is in place: a SIGTERM sent to one while it starts is held until then."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    mask = _block_sigterm()
    try:
        yield
    finally:
        if mask is not None:  # as it was before: a SIGTERM held meanwhile arrives now
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, previous)


def _block_sigterm() -> set | None:
    """Block SIGTERM in this thread; the mask as it was before, None where there are no signal masks (Windows)."""
    if not hasattr(signal, "pthread_sigmask"):
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def init_worker(threads: int) -> None:
    """Initializer of a parallel=K worker process: its thread count, SIGTERM, death with the parent."""
    import torch

    torch.set_num_threads(threads)
    install_sigterm(requeue=False)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm_worker)
    if hasattr(signal, "pthread_sigmask"):  # blocked since `starting_workers`: a SIGTERM held till here arrives now
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    _die_with_parent()
