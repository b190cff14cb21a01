"""Whatever happens to a sweep, rerunning the same command finishes it with nothing lost, and every
failure is one line naming the file or key and the fix (docs/running.md, "When things go wrong").
The sections follow the items of the issue that asked for it (numbered as there); each test checks
the message, the exit code and the rest of the sweep. Bad keys and values on the command line (item 7)
are in test_bad_inputs.py; the random kill -9 test and the two-process race are in
test_reliability_kill.py (slow)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from visionbench.cli import main
from visionbench.sweep.locks import RunLock
from visionbench.sweep.preflight import load_config
from visionbench.sweep.sweep import run_sweep

from .fixtures import write_cifar10, write_tiny_imagenet
from .helpers import HOOK, ROOT, copy_tree, cut_at_line, seed_dir, shrunk, spawn, summary, wait_for, write_recipe


# ---- helpers -------------------------------------------------------------------------------
def run(capsys, results: Path, *args: str) -> tuple[int, str, str]:
    """`visionbench run` in this process: (exit code, stdout, stderr)."""
    code = main(["run", f"results_dir={results}", *shrunk(), *args])
    out, err = capsys.readouterr()
    return code, out, err


def sweep(results: Path, *args: str):
    return run_sweep(load_config([f"results_dir={results}", *shrunk(), *args]), progress=False)


def ckpt_epochs(path: Path) -> int:
    """Epochs completed by a checkpoint."""
    return int(torch.load(path, map_location="cpu", weights_only=False)["epoch"]) + 1


def failed_lines(err: str) -> list[str]:
    """The lines under `failed runs:` of the CLI's stderr."""
    return err.split("failed runs:\n", 1)[1].strip().splitlines() if "failed runs:" in err else []


def training(d: Path, epochs_done: int = 1) -> bool:
    """The run in `d` is training, past `epochs_done` epochs."""
    return summary(d)["status"] == "running" and len((d / "metrics.csv").read_text().splitlines()) > epochs_done


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


# ---- 1. last.ckpt every epoch ---------------------------------------------------------------
def test_last_ckpt_is_written_every_epoch_best_only_on_improvement(tmp_path):
    """optim.lr=0: val_top1 never improves after epoch 1, so best.ckpt stays at epoch 1 while
    last.ckpt must follow every epoch (it is what a resume starts from, and the final weights)."""
    (o,) = sweep(tmp_path, "act=relu", "seeds=1", "epochs=3", "optim.lr=0")
    assert o.status == "completed"
    assert ckpt_epochs(o.run_dir / "checkpoints" / "last.ckpt") == 3
    assert ckpt_epochs(o.run_dir / "checkpoints" / "best.ckpt") == 1 == o.summary["metrics"]["best_epoch"]


# ---- 2. SIGTERM, SLURM requeue ----------------------------------------------------------------
# The signal really sent to a `visionbench run` subprocess is slow (start-up, a paused epoch, then the rerun): the
# default suite sends it to this process in the middle of an epoch instead (the same handlers, `install_sigterm`).
@pytest.fixture
def signal_in_epoch_2(monkeypatch):
    """`visionbench run` in this process gets `signals` (in order) from itself at the start of epoch 2; this
    process's own handlers of SIGTERM and SIGUSR1 are put back afterwards."""
    from visionbench.train import callbacks

    original = callbacks.EpochSeeder.on_train_epoch_start
    sent: list[int] = []

    def send(self, trainer, pl_module):
        if trainer.current_epoch == 1 and not sent:
            for sig in send.signals:
                sent.append(sig)
                os.kill(os.getpid(), sig)
        original(self, trainer, pl_module)

    send.signals = [signal.SIGTERM]
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    monkeypatch.setattr(callbacks.EpochSeeder, "on_train_epoch_start", send)
    yield send
    monkeypatch.setattr(callbacks.EpochSeeder, "on_train_epoch_start", original)
    for s, h in handlers.items():
        signal.signal(s, h)


def test_sigterm_in_an_epoch_records_interrupted_exits_143_and_a_rerun_finishes(tmp_path, capsys, signal_in_epoch_2):
    """The default-suite sibling of the subprocess test below: the same handler, signal, line and resume."""
    results = tmp_path / "r"
    code, _, err = run(capsys, results, "act=relu,gelu", "seeds=1")
    relu = seed_dir(results, "relu", 0)
    assert code == 143, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "interrupted" in line]
    assert len(lines) == 1 and "SIGTERM" in lines[0] and "rerun the same command" in lines[0]
    assert summary(relu)["status"] == "interrupted" and "SIGTERM" in summary(relu)["error"]
    assert not seed_dir(results, "gelu", 0).exists()

    code, out, err = run(capsys, results, "act=relu,gelu", "seeds=1")  # epoch 2 again: no signal this time
    assert code == 0, err
    for act in ("relu", "gelu"):
        assert summary(seed_dir(results, act, 0))["status"] == "completed"
        assert ckpt_epochs(seed_dir(results, act, 0) / "checkpoints" / "last.ckpt") == 2


def _fake_slurm(tmp_path: Path) -> tuple[dict, Path]:
    """A SLURM job's environment, with an `scontrol` on PATH that records its arguments in the returned file."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "scontrol.calls"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "scontrol").chmod(0o755)
    return {
        "SLURM_NTASKS": "1",
        "SLURM_JOB_NAME": "sweep",
        "SLURM_JOB_ID": "4242",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_NODELIST": "localhost",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }, calls


def test_slurm_requeue_signal_in_an_epoch_requeues_and_stops_with_138(tmp_path, capsys, monkeypatch, signal_in_epoch_2):
    """The default-suite sibling of the subprocess test below: SIGUSR1 then SLURM's SIGTERM, in this process."""
    env, calls = _fake_slurm(tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    signal_in_epoch_2.signals = [signal.SIGUSR1, signal.SIGTERM]
    results = tmp_path / "r"
    code, _, err = run(capsys, results, "act=relu,gelu", "seeds=1")
    d = seed_dir(results, "relu", 0)
    assert code == 138, err
    assert calls.read_text().split() == ["requeue", "4242"]
    assert "Traceback" not in err and "interrupted by SIGUSR1" in err
    assert summary(d)["status"] == "interrupted" and not seed_dir(results, "gelu", 0).exists()
    assert not list(d.rglob("hpc_ckpt_*"))  # Lightning's mid-epoch requeue checkpoint: not ours


@pytest.mark.slow
@pytest.mark.serial  # a subprocess; the sibling above sends the same signal in-process
def test_sigterm_records_interrupted_exits_143_and_a_rerun_finishes(tmp_path, capsys):
    results = tmp_path / "r"
    proc = spawn(tmp_path, results, "act=relu,gelu", "seeds=1", pause=1.0)
    relu = seed_dir(results, "relu", 0)
    wait_for(lambda: training(relu), what="relu's first epoch")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)  # generous: a loaded 2-core machine is slow to stop training
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "interrupted" in line]
    assert len(lines) == 1 and "SIGTERM" in lines[0] and "rerun the same command" in lines[0]
    assert summary(relu)["status"] == "interrupted" and "SIGTERM" in summary(relu)["error"]
    assert not seed_dir(results, "gelu", 0).exists()

    code, out, _ = run(capsys, results, "act=relu,gelu", "seeds=1")
    assert code == 0
    for act in ("relu", "gelu"):
        assert summary(seed_dir(results, act, 0))["status"] == "completed"
        assert ckpt_epochs(seed_dir(results, act, 0) / "checkpoints" / "last.ckpt") == 2


@pytest.mark.slow
@pytest.mark.serial  # a subprocess; test_slurm_requeue_signal_in_an_epoch_requeues_and_stops_with_138 is its sibling
def test_slurm_requeue_signal_requeues_the_job_and_the_run_resumes_at_an_epoch_end(tmp_path, capsys):
    """In a SLURM job (faked by its environment and an `scontrol` that records its call), SIGUSR1
    (`#SBATCH --signal=USR1@120`) runs `scontrol requeue <job>` and stops like SIGTERM (exit 138);
    SLURM's own SIGTERM right after does not disturb the recording. The requeued job resumes."""
    results, bin_dir, calls = tmp_path / "r", tmp_path / "bin", tmp_path / "scontrol.calls"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "scontrol").chmod(0o755)
    slurm = {
        "SLURM_NTASKS": "1",
        "SLURM_JOB_NAME": "sweep",
        "SLURM_JOB_ID": "4242",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_NODELIST": "localhost",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    proc = spawn(tmp_path, results, "act=relu,gelu", "seeds=1", "epochs=3", pause=1.0, env=slurm)
    d = seed_dir(results, "relu", 0)
    wait_for(lambda: training(d), what="the first epoch")
    proc.send_signal(signal.SIGUSR1)
    proc.send_signal(signal.SIGTERM)  # what SLURM does to a requeued job, at once
    _, err = proc.communicate(timeout=300)  # generous: a loaded 2-core machine is slow to stop training
    assert proc.returncode == 138, err
    assert calls.read_text().split() == ["requeue", "4242"]
    assert "Traceback" not in err and "interrupted by SIGUSR1" in err
    assert summary(d)["status"] == "interrupted" and not seed_dir(results, "gelu", 0).exists()
    assert not list(d.rglob("hpc_ckpt_*"))  # Lightning's mid-epoch requeue checkpoint: not ours

    code, _, err = run(capsys, results, "act=relu,gelu", "seeds=1", "epochs=3")  # the requeued job
    assert code == 0, err
    assert summary(d)["status"] == "completed"
    assert [int(r) for r in _column(d / "metrics.csv", "epoch")] == [1, 2, 3]


def _column(path: Path, name: str) -> list[str]:
    import csv

    with open(path, newline="") as f:
        return [r[name] for r in csv.DictReader(f)]


# the command `cmd` started with SIGINT at its default disposition, whatever ours is: under nohup, as a background
# job or in CI, the test process may ignore SIGINT, and a child inherits that (Python then installs no
# KeyboardInterrupt and a Ctrl-C a test sends is lost: the default sweep ran 25 min). A tiny exec trampoline (-S: no
# site, so no test hook runs in it) sets it in the child, before the real command starts; no preexec_fn (not safe
# with the threads a test process may hold).
SIGINT_DEFAULT = [
    sys.executable,
    "-S",
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])",
]


def with_default_sigint(cmd: list[str]) -> list[str]:
    return [*SIGINT_DEFAULT, *cmd]


# a sitecustomize that sends SIGINT to its own process when torch is first imported: Ctrl-C during start-up
SIGINT_AT_IMPORT = """
import os, signal, sys
class _CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, _CtrlC())
"""


def test_ctrl_c_during_the_start_up_imports_is_one_line_and_exit_130(tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SIGINT_AT_IMPORT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])}
    # trainer.portable=false: the imports of this process are the subject (a portable run imports torch in its worker)
    # SIGINT at its default in the child (with_default_sigint), and a timeout: were the signal lost, this would train
    # the whole default sweep
    done = subprocess.run(
        with_default_sigint(
            [sys.executable, "-m", "visionbench.cli", "run", f"results_dir={tmp_path / 'r'}", "trainer.portable=false"]
        ),
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "visionbench run: interrupted by Ctrl-C; rerun the same command", done.stderr
    assert not (tmp_path / "r").exists()


# ---- 3. parallel workers die with their parent ----------------------------------------------------
# a parallel=2 sweep killed while both workers train: slow (a subprocess, its workers, two paused epochs, the
# rerun); the sibling checks the mechanism that does it, PR_SET_PDEATHSIG, on a plain process tree
@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "SIGTERM"])
def test_parallel_workers_stop_with_their_parent(how, tmp_path, capsys):
    """kill -9: no handler of the parent runs, the kernel tells the workers (PDEATHSIG); SIGTERM:
    the parent stops them and exits 143. Either way they record `interrupted` and exit."""
    results = tmp_path / "r"
    proc = spawn(tmp_path, results, "act=relu,gelu", "seeds=1", "parallel=2", "epochs=3", pause=1.0)
    dirs = [seed_dir(results, a, 0) for a in ("relu", "gelu")]
    wait_for(lambda: all(training(d, 0) for d in dirs), what="both workers training")
    workers = [int((d / ".lock").read_text()) for d in dirs]
    assert proc.pid not in workers and all(alive(p) for p in workers)
    proc.send_signal(how)
    _, err = proc.communicate(timeout=300)  # generous: a loaded 2-core machine is slow to stop training
    assert proc.returncode == (-9 if how == signal.SIGKILL else 143), err
    wait_for(lambda: not any(alive(p) for p in workers), 120, "the workers to die with their parent")
    assert [summary(d)["status"] for d in dirs] == ["interrupted", "interrupted"]  # PDEATHSIG = SIGTERM

    code, _, err = run(capsys, results, "act=relu,gelu", "seeds=1", "epochs=3")
    assert code == 0, err
    assert [summary(d)["status"] for d in dirs] == ["completed", "completed"]


def _workers(pid: int) -> list[int]:
    """The pool's worker processes of `pid` (Linux): its spawned children, not multiprocessing's resource tracker."""
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        return [c for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]
    except (FileNotFoundError, ValueError):
        return []


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the workers")
@pytest.mark.parametrize("how", ["ctrl-c to the group", "SIGTERM to the sweep"])
def test_parallel_interrupted_while_its_workers_start_is_one_line(how, tmp_path):
    """Ctrl-C reaches every process of the terminal's group: the workers, still importing torch, must not each
    print a KeyboardInterrupt traceback (they start with SIGINT ignored; the sweep stops them). SIGTERM to the sweep
    alone: it stops the workers, which exit quietly outside a run. Either way one line, the exit code of the signal,
    and no run said to be recorded when none was training."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]),
        "VB_TEST_EPOCH_PAUSE": "30",
    }  # no run gets past its first epoch's start before the signal
    results = tmp_path / "r"
    proc = subprocess.Popen(
        with_default_sigint(
            [
                sys.executable,
                "-m",
                "visionbench.cli",
                "run",
                f"results_dir={results}",
                *shrunk(),
                "act=relu,gelu",
                "seeds=1",
                "parallel=2",
            ]
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )  # its own group: ours is not hit; Ctrl-C at its default there
    wait_for(lambda: len(_workers(proc.pid)) == 2, what="both workers started")
    workers = _workers(proc.pid)
    if how == "ctrl-c to the group":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == (130 if how == "ctrl-c to the group" else 143), err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "interrupted by" in err and "rerun the same command" in err
    wait_for(lambda: not any(alive(p) for p in workers), 120, "the workers to stop")
    statuses = [summary(d)["status"] for d in results.rglob("seed_0") if (d / "summary.json").exists()]
    assert set(statuses) <= {"interrupted"}  # nothing lost: whatever started is resumable
    assert ("none recorded" in err) == (not statuses), err


def test_parallel_workers_start_with_ctrl_c_ignored_and_sigterm_held():
    """The default-suite sibling of the test above: a process started inside `starting_workers` (as the pool
    starts its workers) has SIGINT ignored, so Python installs no KeyboardInterrupt in it, and SIGTERM blocked
    (init_worker lifts it); a SIGTERM to the sweep meanwhile is held, not lost, and the sweep's own handlers are
    back afterwards."""
    from visionbench.sweep.signals import starting_workers

    before, received = signal.getsignal(signal.SIGINT), []
    previous_term = signal.signal(signal.SIGTERM, lambda *a: received.append("SIGTERM"))
    try:
        with starting_workers():
            child = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import signal; print(signal.getsignal(signal.SIGINT) == "
                    "signal.SIG_IGN, signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, []))",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            # to the main thread, the one `starting_workers` blocks it in: a signal sent to the process goes to any
            # thread that has it unblocked (here, threads earlier tests in this worker left), and Python runs the
            # handler in the main thread anyway
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
            assert received == []  # held while the workers start
        assert received == ["SIGTERM"]  # delivered once they have
    finally:
        signal.signal(signal.SIGTERM, previous_term)
    assert child.stdout.strip() == "True True", child
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize(
    "recorded, says",
    [
        (0, "while no run was training (none recorded as 'interrupted')"),
        (1, "the run in progress is recorded as 'interrupted'"),
        (2, "the 2 runs in progress are recorded as 'interrupted'"),
    ],
)
def test_the_interrupt_line_says_how_many_runs_were_recorded(recorded, says, tmp_path, capsys, monkeypatch):
    from visionbench.sweep import sweep as sweep_module
    from visionbench.sweep.signals import Interrupted

    def interrupted(*args, **kwargs):
        stop = Interrupted("SIGTERM")
        stop.recorded = recorded
        raise stop

    monkeypatch.setattr(sweep_module, "run_sweep", interrupted)
    code = main(["run", f"results_dir={tmp_path / 'r'}", "act=relu", "seeds=1"])
    err = capsys.readouterr().err
    assert code == 143 and err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "r").exists()


# a middle process starts a child that calls `_die_with_parent` (as every parallel worker does, signals.init_worker)
# and prints the child's pid; the test kills the middle process with kill -9
ORPHAN = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; from visionbench.sweep import signals; "
                          "signals._die_with_parent(); print(flush=True); time.sleep(300)"], stdout=subprocess.PIPE)
child.stdout.readline()  # the child's line: its death is tied to this process now
print(child.pid, flush=True)
child.wait()
"""


def test_a_worker_gets_sigterm_when_its_parent_is_killed_9():
    """The default-suite sibling of test_parallel_workers_stop_with_their_parent: no handler of a kill -9'ed parent
    runs, the kernel sends its worker SIGTERM (PR_SET_PDEATHSIG) and the worker dies with it (that a training worker
    records `interrupted` on that SIGTERM: the slow test; the SIGTERM handler itself: the in-process sibling above)."""
    middle = subprocess.Popen([sys.executable, "-c", ORPHAN], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    child = int(middle.stdout.readline())
    assert alive(child)
    middle.kill()
    middle.wait(timeout=60)
    wait_for(lambda: not alive(child), 60, "the child to die with its parent")


# ---- 4. one process per run directory -----------------------------------------------------------
def test_a_run_held_by_another_process_is_skipped_and_said_so(tmp_path, capsys):
    results = tmp_path / "r"
    held = seed_dir(results, "relu", 0)
    with RunLock(held):  # as a live `visionbench run` training it would
        code, out, err = run(capsys, results, "act=relu", "seeds=2")
    assert code == 0, err
    line = next(line for line in out.splitlines() if "seed 0" in line)
    assert "locked" in line and str(held) in line and f"pid {os.getpid()}" in line
    assert "1 run(s) left to another live visionbench process" in err
    assert summary(seed_dir(results, "relu", 1))["status"] == "completed"
    assert not (held / "summary.json").exists()  # nothing of the holder's directory touched

    code, out, _ = run(capsys, results, "act=relu", "seeds=2")
    assert code == 0 and "seed 0: completed" in out and "seed 1: skipped" in out


def test_temp_files_are_per_process_and_stale_ones_are_removed(tmp_path, capsys):
    from visionbench.results.io import atomic_write_text

    d = seed_dir(tmp_path, "relu", 0)
    atomic_write_text(d / "x.txt", "a")
    assert [p.name for p in d.iterdir()] == ["x.txt"]
    (d / "checkpoints").mkdir()
    stale = [d / ".summary.json.tmp99999", d / "checkpoints" / ".last.ckpt.tmp99999"]  # a killed process's
    for p in stale:
        p.write_text("partial")
    code, _, err = run(capsys, tmp_path, "act=relu", "seeds=1")
    assert code == 0, err
    assert not any(p.exists() for p in stale)


# ---- 5. corrupt or inconsistent run state ----------------------------------------------------------
@pytest.fixture
def finished_sweep(relu_pair) -> Path:
    """relu seeds 0, 1, completed (2 epochs; tests/conftest.py's `relu_pair`, trained once per session): copied,
    then damaged, by each case below."""
    return relu_pair


def _unfinished(d: Path) -> None:
    s = summary(d)
    (d / "summary.json").write_text(json.dumps({**s, "status": "running"}))


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _cut_inside_row(path: Path, row: int = 1, into: int = 12) -> None:
    """`head -c` to `into` bytes inside row `row` (1 = the first epoch's): a shortened value, fields missing."""
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:row]) + lines[row][:into])


def _drop_last_row(path: Path) -> None:
    """Cut at a row's end: no row is torn, but the checkpoint's last epoch has no row."""
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:-1]))


CORRUPTIONS = {  # name: (damage, words of the one-line message, what the message tells the user to delete)
    "summary_not_utf8": (
        lambda d: (d / "summary.json").write_bytes(b"\xff\xfe{\x00garbage"),
        ["summary.json is corrupt", "delete it"],
        "summary.json",
    ),
    "summary_not_a_dict": (
        lambda d: (d / "summary.json").write_text("[1, 2]"),
        ["summary.json holds list", "delete it"],
        "summary.json",
    ),
    "config_garbage": (
        lambda d: (d / "config.yaml").write_text("recipe: [unclosed\n  : :\n"),
        ["config.yaml is corrupt", "delete the run directory"],
        ".",
    ),
    "config_truncated": (lambda d: _truncate(d / "config.yaml"), ["config.yaml is", "delete the run directory"], "."),
    # the half-way cut above lands on a line boundary or inside a line by the temporary path's length: both, always
    "config_cut_at_a_line": (
        lambda d: cut_at_line(d / "config.yaml"),
        ["config.yaml is damaged", "delete the run directory"],
        ".",
    ),
    "config_cut_in_a_line": (
        lambda d: cut_at_line(d / "config.yaml", into=3),
        ["config.yaml is", "delete the run directory"],
        ".",
    ),
    "metrics_garbage_unfinished": (
        lambda d: (_unfinished(d), (d / "metrics.csv").write_bytes(b"\x00\x01\xff,,\n;;\n")),
        ["metrics.csv", "delete the run directory"],
        ".",
    ),
    "metrics_torn_row_unfinished": (
        lambda d: (_unfinished(d), _cut_inside_row(d / "metrics.csv")),
        ["metrics.csv is torn (no final newline", "delete the run directory"],
        ".",
    ),
    "metrics_torn_row_with_newline": (
        lambda d: (_unfinished(d), _cut_inside_row(d / "metrics.csv"), (d / "metrics.csv").open("a").write("\n")),
        ["metrics.csv is torn (the row of epoch 1 has fewer fields than the header)", "delete the run directory"],
        ".",
    ),
    "metrics_last_row_missing": (
        lambda d: (_unfinished(d), _drop_last_row(d / "metrics.csv")),
        ["metrics.csv has rows for epochs [1], its checkpoint completed epochs 1..2", "delete the run directory"],
        ".",
    ),
    "metrics_deleted_unfinished": (
        lambda d: (_unfinished(d), (d / "metrics.csv").unlink()),
        ["has no metrics.csv beside it", "delete the run directory"],
        ".",
    ),
    "config_deleted_unfinished": (
        lambda d: (_unfinished(d), (d / "config.yaml").unlink()),
        ["has no config.yaml beside it", "delete the run directory"],
        ".",
    ),
    "last_ckpt_truncated": (
        lambda d: (_unfinished(d), _truncate(d / "checkpoints" / "last.ckpt")),
        ["last.ckpt is unreadable", "delete it"],
        "checkpoints/last.ckpt",
    ),
}


# the rest of the sweep goes on after the failed run: in these cases seed 1 is deleted and must train to the end
# regardless; in the others it is left completed and the sweep must still reach it (and skip it)
TRAIN_THE_REST = {"config_garbage", "metrics_torn_row_unfinished", "last_ckpt_truncated"}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_corrupt_run_state_fails_that_run_in_one_line_and_the_sweep_goes_on(case, finished_sweep, tmp_path, capsys):
    damage, words, fix = CORRUPTIONS[case]
    results = copy_tree(finished_sweep, tmp_path / "r")
    d = seed_dir(results, "relu", 0)
    damage(d)
    if case in TRAIN_THE_REST:
        shutil.rmtree(seed_dir(results, "relu", 1))
    metrics = (d / "metrics.csv").read_bytes() if (d / "metrics.csv").exists() else None
    code, out, err = run(capsys, results, "act=relu", "seeds=2")
    assert code == 1, err
    assert "Traceback" not in err
    (line,) = failed_lines(err)
    assert str(d) in line and all(w in line for w in words), line
    assert metrics is None or (d / "metrics.csv").read_bytes() == metrics  # kept as found: never "repaired"
    assert summary(seed_dir(results, "relu", 1))["status"] == "completed"
    assert ("seed 1: completed" if case in TRAIN_THE_REST else "seed 1: skipped") in out

    # the fix the line names works: the rerun finishes the sweep
    target = d / fix
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    code, out, err = run(capsys, results, "act=relu", "seeds=2")
    assert code == 0, err
    assert summary(d)["status"] == "completed"


def test_missing_config_of_a_completed_run_with_other_settings_is_refused(finished_sweep, tmp_path, capsys):
    """Without config.yaml, the summary's config hash tells a run of other settings from this one."""
    results = copy_tree(finished_sweep, tmp_path / "r")
    d = seed_dir(results, "relu", 0)
    (d / "config.yaml").unlink()
    shutil.rmtree(seed_dir(results, "relu", 1))
    code, _, err = run(capsys, results, "act=relu", "seeds=2", "optim.lr=0.05")
    assert code == 1
    (line,) = failed_lines(err)
    assert "config.yaml is missing" in line and "other settings" in line and f"delete the run directory {d}" in line
    assert summary(seed_dir(results, "relu", 1))["status"] == "completed"
    shutil.rmtree(d)
    code, out, _ = run(capsys, results, "act=relu", "seeds=2", "optim.lr=0.05")
    assert code == 0 and "seed 0: completed" in out


# ---- 6. disk full -------------------------------------------------------------------------------------
def test_disk_full_is_one_line_leaves_no_temp_files_and_resumes(tmp_path, capsys, monkeypatch):
    from lightning.fabric.plugins import TorchCheckpointIO

    real = TorchCheckpointIO.save_checkpoint

    def full_disk(self, checkpoint, path, storage_options=None):
        if "/gelu/" in str(path) and checkpoint["epoch"] >= 1:  # epoch 1 saved, epoch 2 hits a full disk
            Path(path).write_bytes(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(self, checkpoint, path, storage_options)

    monkeypatch.setattr(TorchCheckpointIO, "save_checkpoint", full_disk)
    results = tmp_path / "r"
    code, out, err = run(capsys, results, "act=gelu,relu", "seeds=1")
    assert code == 1 and "Traceback" not in err
    (line,) = failed_lines(err)
    gelu = seed_dir(results, "gelu", 0)
    assert "no space left on device writing" in line and str(gelu / "checkpoints") in line
    assert "free space and rerun the same command to resume" in line
    assert not [p for p in results.rglob("*") if ".tmp" in p.name]
    assert summary(seed_dir(results, "relu", 0))["status"] == "completed"
    assert ckpt_epochs(gelu / "checkpoints" / "last.ckpt") == 1  # the previous version, intact

    monkeypatch.setattr(TorchCheckpointIO, "save_checkpoint", real)
    code, out, err = run(capsys, results, "act=gelu,relu", "seeds=1")
    assert code == 0, err
    assert summary(gelu)["status"] == "completed" and ckpt_epochs(gelu / "checkpoints" / "last.ckpt") == 2


def test_atomic_write_on_a_full_disk_keeps_the_old_file_and_no_temp(tmp_path, monkeypatch):
    from visionbench.results import io

    target = tmp_path / "summary.json"
    io.atomic_write_text(target, "old")

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(io.os, "fsync", no_space)
    with pytest.raises(io.DiskFullError, match=f"^no space left on device writing {target}$"):
        io.atomic_write_text(target, "new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["summary.json"]


# ---- 7. every key checked before any training (the bad values: test_bad_inputs.py) --------------------
def test_every_recipe_passes_the_checks():
    """A key added to the schema is checked by its annotation (tests/test_schema.py): no table to extend.
    Every packaged recipe passes the sweep's checks as it is, and composes to itself."""
    from visionbench.config import recipe_names

    names = recipe_names()
    assert len(names) >= 10 and "digits_vgg4" in names
    for name in names:
        cfg = load_config([f"recipe={name}"])
        assert cfg.recipe == name and cfg.epochs >= 1 and cfg.act, name


# ---- 8. corrupt data: validated at load, the file named -----------------------------------------------
def _cifar_batch(path: Path, changes: dict) -> None:
    import pickle

    with open(path, "rb") as f:
        entry = pickle.load(f)
    entry.update(changes)
    with open(path, "wb") as f:
        pickle.dump(entry, f)


CIFAR_DAMAGE = {
    "truncated": (lambda p: _truncate(p, 0.3), "not a readable CIFAR-10 pickle"),
    "empty": (lambda p: p.write_bytes(b""), "not a readable CIFAR-10 pickle (EOFError"),
    "label_out_of_range": (lambda p: _cifar_batch(p, {b"labels": [10] + [0] * 19}), "labels must be 0..9, found 0..10"),
    "pixels_above_255": (
        lambda p: _cifar_batch(p, {b"data": np.full((20, 3072), 300, dtype=np.int16)}),
        "pixel values must be 0..255 bytes, found int16 values 300..300",
    ),
}


@pytest.mark.parametrize("case", list(CIFAR_DAMAGE))
def test_corrupt_cifar_batches_stop_the_sweep_before_training_naming_the_file(case, tmp_path, capsys):
    damage, words = CIFAR_DAMAGE[case]
    (tmp_path / "data").mkdir()
    root = write_cifar10(tmp_path / "data")
    bad = root / "cifar-10-batches-py" / "data_batch_3"
    damage(bad)
    code, _, err = run(
        capsys,
        tmp_path / "r",
        "recipe=cifar10_vgg4",
        f"data.root={root}",
        "act=relu",
        "seeds=1",
        "epochs=1",
        "data.limit_train=20",
    )
    assert code == 2
    (line,) = err.strip().splitlines()
    assert f"{bad}: {words}" in line and "replace the file" in line, line
    assert not (tmp_path / "r").exists()


def test_truncated_jpeg_fails_the_run_naming_the_path(tmp_path, capsys):
    (tmp_path / "data").mkdir()
    root = write_tiny_imagenet(tmp_path / "data")
    bad = sorted((root / "tiny-imagenet-200" / "train").rglob("*.JPEG"))[3]
    _truncate(bad, 0.4)
    code, out, err = run(
        capsys, tmp_path / "r", "data.name=tiny_imagenet", f"data.root={root}", "act=relu,gelu", "seeds=1", "epochs=1"
    )
    assert code == 1
    lines = failed_lines(err)
    assert len(lines) == 2 and all(f"{bad}: unreadable image" in line for line in lines), lines


# ---- 9, 10. report: all-diverged recipes, mixed configurations ---------------------------------------
def test_report_of_an_all_diverged_recipe_prints_nan_rows(tmp_path, capsys):
    sweep(tmp_path, "act=relu,gelu", "seeds=2", "epochs=1", "optim.lr=1e6", "act_lr_mult.gelu=1")
    assert main(["report", str(tmp_path / "digits_vgg4")]) == 0
    out = capsys.readouterr().out
    assert "| relu | 0 | NaN (2/2 diverged)" in out and "| gelu | 0 | NaN (2/2 diverged)" in out


@pytest.mark.plots
def test_report_skips_a_garbage_act_snapshot_naming_it(tmp_path, capsys):
    from visionbench.report.collect import read_snapshots

    recipe = write_recipe(
        tmp_path, "toy", {"relu": [90.0, 90.5], "rational": [91.0, 91.2]}, epochs=3, snapshot_epochs=(0, 3)
    )
    run = recipe / "rational" / "seed_0"
    garbage = {
        "epoch_007.json": "not json at all",
        "epoch_008.json": json.dumps([1, 2]),
        "epoch_009.json": json.dumps({"epoch": 9, "layers": [{"name": "a", "x": [0, 1], "y": [0]}]}),
        "epoch_010.json": json.dumps(
            {
                "epoch": 10,
                "layers": [{"name": "a", "x": [0, 1], "y": [0, 1], "hist_edges": [0, 1], "hist_counts": [1, 2]}],
            }
        ),
    }
    for name, text in garbage.items():
        (run / "act_snapshots" / name).write_text(text)
    assert [s["epoch"] for s in read_snapshots(run)] == [0, 3]
    notes = [line for line in capsys.readouterr().err.splitlines() if "act_snapshots" in line]
    assert len(notes) == 4 and all(
        line.startswith(f"note: {run / 'act_snapshots'}/epoch_0")
        and line.endswith("; not plotted (delete it, or rerun the run to rewrite it)")
        for line in notes
    ), notes
    assert "x and y are not two lists of as many numbers" in notes[2]
    assert "hist_counts is not one number per bin of hist_edges" in notes[3]
    assert main(["report", str(recipe)]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"note: {run / 'act_snapshots' / 'epoch_007.json'}: unreadable" in err
    assert (recipe / "act_shapes_rational_seed0.png").exists()


def test_report_marks_runs_of_different_configurations(relu_pair, tmp_path, capsys):
    copy_tree(relu_pair, tmp_path)  # relu trained for 2 epochs
    sweep(tmp_path, "act=gelu", "seeds=2", "epochs=1")
    assert main(["report", str(tmp_path / "digits_vgg4")]) == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if "NOT COMPARABLE" in line]
    assert "keys epochs" in line and "relu" in line and "gelu" in line


# ---- 11, 13. resume after a move; time, throughput and threads of a resumed run -------------------------
def test_moved_results_dir_resumes_with_its_best_checkpoint(tmp_path, crash_in_epoch_3):
    """lr=0: epoch 1 stays the best. Lightning drops the best score when the checkpoint's dirpath
    changed; best.ckpt would then be overwritten by epoch 3."""
    args = ("act=relu", "seeds=1", "epochs=3", "optim.lr=0")
    (o,) = sweep(tmp_path / "a", *args)
    assert o.status == "failed"
    shutil.move(tmp_path / "a", tmp_path / "b")
    crash_in_epoch_3()
    (o,) = sweep(tmp_path / "b", *args)
    assert o.status == "completed" and o.run_dir.is_relative_to(tmp_path / "b")
    ckpt = o.run_dir / "checkpoints"
    assert ckpt_epochs(ckpt / "best.ckpt") == 1 == o.summary["metrics"]["best_epoch"]
    assert ckpt_epochs(ckpt / "last.ckpt") == 3
    states = torch.load(ckpt / "last.ckpt", map_location="cpu", weights_only=False)["callbacks"]
    (best,) = [s for k, s in states.items() if k.startswith("RunCheckpoint") and "'val_top1'" in k]
    assert best["best_model_path"] == str(ckpt / "best.ckpt") and best["dirpath"] == str(ckpt)


def test_resumed_run_time_throughput_and_threads_cover_all_sessions(tmp_path, crash_in_epoch_3, capsys):
    args = ("act=relu", "seeds=1", "epochs=3")
    (o,) = sweep(tmp_path, *args)
    assert o.status == "failed"
    assert yaml.safe_load((o.run_dir / "config.yaml").read_text())["threads"] == torch.get_num_threads()
    crash_in_epoch_3()
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if threads > 1 else 2)
    try:
        (o,) = sweep(tmp_path, *args)
    finally:
        torch.set_num_threads(threads)
    assert o.status == "completed"
    err = capsys.readouterr().err
    assert f"was trained with {threads} threads so far, resumes with" in err
    times = [float(t) for t in _column(o.run_dir / "metrics.csv", "epoch_time_s")]
    assert len(times) == 3 and o.summary["train_time_s"] == pytest.approx(sum(times), abs=2e-3)
    states = torch.load(o.run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["callbacks"]
    samples = sum(int(n) for n in _column(o.run_dir / "metrics.csv", "samples"))
    assert states["_Throughput"]["images"] == samples == 3 * 192  # all three epochs (3 full batches of 64 each)


# ---- a results tree this process cannot write; one moved away during the sweep ----------------
def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root` with its size and modification time."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _deny_writes_under(monkeypatch, root: Path) -> None:
    """os.access refuses writing under `root`, as it does after chmod a-w or on a read-only mount (a chmod'ed
    directory would not stop root, who runs some CI jobs: test_bad_inputs.py has those rows)."""
    real = os.access

    def access(path, mode, *args, **kwargs):
        if mode & os.W_OK and Path(path).absolute().is_relative_to(root):
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


@pytest.mark.parametrize("tree", ["empty", "with results"])
def test_an_unwritable_results_dir_fails_in_one_line_before_any_training(
    tree, finished_sweep, tmp_path, capsys, monkeypatch
):
    results = tmp_path / "r"
    results.mkdir() if tree == "empty" else copy_tree(finished_sweep, results)
    before = _tree(results)
    _deny_writes_under(monkeypatch, results)
    code, out, err = run(capsys, results, "act=relu", "seeds=3")
    where = results if tree == "empty" else results / "digits_vgg4"
    assert code == 2 and err.strip() == (
        f"visionbench run: results_dir {results}: {where} is not writable (permission "
        f"denied); make it writable (chmod -R u+w {where}) or pass "
        "results_dir=<a writable directory>"
    ), err
    if tree == "with results":
        assert main(["report", str(results)]) == 2
        err = capsys.readouterr().err
        assert err.strip().splitlines()[-1] == (
            f"visionbench report: error: argument RESULTS_DIR: {results} is not writable (permission denied); the "
            f"report writes its tables and plots there: make it writable (chmod -R u+w {results}) or copy the "
            "results to a writable directory and report that"
        ), err
    assert _tree(results) == before


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")  # no writer thread's traceback
def test_results_dir_moved_during_the_sweep_stops_it_in_one_line(tmp_path, capsys, monkeypatch):
    """Moved while seed 0 trains: seed 0 stops with the line, seed 1 never starts, the old path is not recreated."""
    from visionbench.train import callbacks

    results, moved = tmp_path / "r", tmp_path / "moved"
    original = callbacks.EpochSeeder.on_train_epoch_start

    def move_away(self, trainer, pl_module):
        if trainer.current_epoch == 1 and results.exists():
            shutil.move(results, moved)
        original(self, trainer, pl_module)

    monkeypatch.setattr(callbacks.EpochSeeder, "on_train_epoch_start", move_away)
    code, out, err = run(capsys, results, "act=relu", "seeds=2")
    assert code == 1 and "Traceback" not in err, err
    assert err.strip().splitlines() == [
        f"visionbench run: the results directory {results / 'digits_vgg4'} was deleted or moved during the sweep; "
        "stopped so that results are not split across two trees — put it back (or rerun the command with "
        "results_dir=<its new place>) to resume"
    ], err
    assert not results.exists() and not seed_dir(moved, "relu", 1).exists()
    assert summary(seed_dir(moved, "relu", 0))["status"] == "running"  # resumable where it went


# ---- 12. the Hydra entry point fails when its run failed -------------------------------------------------
@pytest.mark.slow
@pytest.mark.serial  # a Hydra subprocess; tests/test_runner.py's multirun test has a failed job too (its sibling)
def test_hydra_entry_point_exits_nonzero_with_the_line_when_the_run_failed(tmp_path):
    d = seed_dir(tmp_path, "relu", 0)
    d.mkdir(parents=True)
    (d / "summary.json").write_text("[]")
    cmd = [
        sys.executable,
        "-m",
        "visionbench.sweep.hydra_app",
        "act=relu",
        "seed=0",
        f"results_dir={tmp_path}",
        "epochs=1",
        "data.limit_train=100",
        "data.limit_val=50",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode != 0
    assert f"{d / 'summary.json'} holds list, not the summary mapping; delete it" in done.stderr, done.stderr[-2000:]
