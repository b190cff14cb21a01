"""A submitit job preempted or at its time limit (docs/running.md, "GPUs and clusters"): submitit's signal
(SIGUSR2, or $SUBMITIT_PREEMPT_SIGNAL) records the run `interrupted` at its last finished epoch, submitit's own
handler then requeues the job, and the requeued job resumes to the same bits as an uninterrupted run.

The default suite sends the signal to this process at the start of epoch 2 (the handlers `install_sigterm` puts
in place, a stand-in for submitit's handler); the slow test runs the documented Hydra entry point with the
`submitit_local` launcher, sends the job process the signal submitit uses, and lets submitit requeue it.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from visionbench.cli import main
from visionbench.sweep import signals
from visionbench.sweep.signals import Interrupted, hand_over, install_sigterm, preempt_signal

from .helpers import HOOK, ROOT, seed_dir, shrunk, summary, wait_for

LAUNCHER = "hydra_plugins.hydra_submitit_launcher"
HANDLED = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


@pytest.fixture
def submitit_job(monkeypatch):
    """This process as a submitit job (SUBMITIT_EXECUTOR set, submitit's default signal) whose submitit handler of
    SIGUSR2 only records its calls (`calls`); every handler of this process is put back afterwards."""
    saved = {s: signal.getsignal(s) for s in HANDLED}
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    monkeypatch.delenv("SUBMITIT_PREEMPT_SIGNAL", raising=False)
    calls: list[int] = []
    signal.signal(signal.SIGUSR2, lambda signum, frame: calls.append(signum))
    yield calls
    for s, h in saved.items():
        signal.signal(s, h)
    signals._handed_over.clear()


def test_the_preemption_signal_is_the_one_submitit_reads(monkeypatch):
    monkeypatch.delenv("SUBMITIT_PREEMPT_SIGNAL", raising=False)
    assert preempt_signal() == signal.SIGUSR2
    monkeypatch.setenv("SUBMITIT_PREEMPT_SIGNAL", "USR1")
    assert preempt_signal() == signal.SIGUSR1
    monkeypatch.setenv("SUBMITIT_PREEMPT_SIGNAL", "NOSUCH")
    assert preempt_signal() is None
    if importlib.util.find_spec("submitit") is not None:  # the same variable and default as submitit's own
        from submitit.core import job_environment

        assert job_environment._PREEMPT_SIG_ENV == signals.PREEMPT_ENV
        assert signals.PREEMPT_DEFAULT == "USR2"


def test_the_preemption_signal_stops_then_hands_over_to_submitits_handler(submitit_job):
    install_sigterm()
    with pytest.raises(Interrupted) as stop:
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(5)  # the handler raises in this thread before the sleep ends
    assert stop.value.signal_name == "SIGUSR2" and stop.value.exit_code == 128 + signal.SIGUSR2
    assert submitit_job == []  # not yet: the run is recorded first
    hand_over(Interrupted("SIGTERM"))
    assert submitit_job == []  # another stop is no preemption
    hand_over(stop.value)
    assert submitit_job == [signal.SIGUSR2]


def test_a_worker_ignores_the_preemption_signal_and_outside_submitit_nothing_changes(submitit_job, monkeypatch):
    install_sigterm(requeue=False)  # a parallel=K / portable worker: its parent stops it with SIGTERM
    assert signal.getsignal(signal.SIGUSR2) is signal.SIG_IGN
    monkeypatch.delenv("SUBMITIT_EXECUTOR")
    mine = signal.signal(signal.SIGUSR2, signal.SIG_DFL)
    install_sigterm()
    assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL
    signal.signal(signal.SIGUSR2, mine)


def test_a_run_preempted_in_an_epoch_resumes_to_the_same_bits(tmp_path, capsys, submitit_job, monkeypatch):
    """SIGUSR2 at the start of epoch 2 of 3: the run records `interrupted` with last.ckpt at epoch 1 (the epoch in
    flight is dropped), exits 140; the rerun (the requeued job) finishes with the weights and metrics of a run
    that was never interrupted."""
    from visionbench.train import callbacks

    original = callbacks.EpochSeeder.on_train_epoch_start
    sent: list[int] = []

    def send(self, trainer, pl_module):
        if trainer.current_epoch == 1 and not sent:
            sent.append(signal.SIGUSR2)
            os.kill(os.getpid(), signal.SIGUSR2)
        original(self, trainer, pl_module)

    args = [*shrunk("epochs=3"), "act=relu", "seeds=1"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main(["run", f"results_dir={whole}", *args]) == 0
    monkeypatch.setattr(callbacks.EpochSeeder, "on_train_epoch_start", send)
    code = main(["run", f"results_dir={cut}", *args])
    err = capsys.readouterr().err
    d = seed_dir(cut, "relu", 0)
    assert code == 128 + signal.SIGUSR2, err
    assert "Traceback" not in err and "interrupted by SIGUSR2" in err
    assert summary(d)["status"] == "interrupted" and "SIGUSR2" in summary(d)["error"]
    assert epochs_in(d / "checkpoints" / "last.ckpt") == 1
    assert submitit_job == [signal.SIGUSR2]  # then submitit's handler, once: it requeues the job
    assert main(["run", f"results_dir={cut}", *args]) == 0  # the requeued job: no signal this time
    assert summary(d)["status"] == "completed"
    assert_same_bits(seed_dir(whole, "relu", 0), d)


def epochs_in(path: Path) -> int:
    return int(torch.load(path, map_location="cpu", weights_only=False)["epoch"]) + 1


def metric_rows(d: Path) -> list[dict]:
    """metrics.csv's rows without the columns that time the run (seconds, throughput)."""
    with open(d / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    timed = ("time", "_s", "img_s", "throughput", "mem")
    return [{k: v for k, v in r.items() if not any(t in k for t in timed)} for r in rows]


def assert_same_bits(whole: Path, resumed: Path) -> None:
    """The final weights (last.ckpt) equal bit for bit, and every epoch's metrics."""
    a, b = (
        torch.load(d / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False) for d in (whole, resumed)
    )
    assert a["epoch"] == b["epoch"]
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for key, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][key]), key
    assert metric_rows(whole) == metric_rows(resumed)


def task_pids(marker: str) -> list[int]:
    """The submitit job processes (`python -m submitit.core._submit <folder>`) whose folder contains `marker`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"submitit.core._submit" in cmd and any(marker.encode() in part for part in cmd):
            pids.append(int(proc.name))
    return pids


@pytest.mark.slow
@pytest.mark.serial  # times a signal against its subprocesses; the in-process sibling above is in the default suite
@pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins") is None or importlib.util.find_spec(LAUNCHER) is None,
    reason=f"{LAUNCHER} is not installed (pip install -e '.[slurm]')",
)
def test_submitit_requeues_a_preempted_job_which_resumes_to_the_same_bits(tmp_path, capsys):
    """The Hydra entry point under `hydra/launcher=submitit_local`, a portable run (trained in a worker process):
    SIGUSR2 sent to the submitit job process in epoch 2 records the run `interrupted`, submitit's handler requeues
    the job (the local executor restarts it), and the restarted job resumes and equals an uninterrupted
    `visionbench run` bit for bit."""
    results, sweep_dir = tmp_path / "results", tmp_path / "multirun"
    args = [*shrunk("epochs=3", "trainer.portable=true"), "act=relu"]
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hook), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "VB_TEST_EPOCH_PAUSE": "1.0",  # every epoch start: the signal lands in training
    }
    env.pop("SUBMITIT_PREEMPT_SIGNAL", None)
    cmd = [
        sys.executable,
        "-m",
        "visionbench.sweep.hydra_app",
        "-m",
        "hydra/launcher=submitit_local",
        *args,
        "seed=0",
        f"results_dir={results}",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    try:
        d = seed_dir(results, "relu", 0)
        wait_for(
            lambda: summary(d)["status"] == "running" and len((d / "metrics.csv").read_text().splitlines()) > 1,
            timeout=300,
            what="the job's first epoch",
        )
        (pid,) = task_pids(str(sweep_dir))
        os.kill(pid, signal.SIGUSR2)  # what submitit's executor sends (LocalJob._interrupt, SLURM's --signal)
        out, _ = proc.communicate(timeout=500)
    finally:
        if proc.poll() is None:
            proc.kill()
    logs = "".join(p.read_text(errors="replace") for p in (sweep_dir / ".submitit").rglob("*_log.*"))
    assert proc.returncode == 0, (out + logs)[-4000:]
    assert "interrupted by SIGUSR2" in logs and "Requeued job" in logs, logs[-4000:]
    assert "Traceback" not in logs, logs[-4000:]
    assert summary(d)["status"] == "completed"
    with open(d / "metrics.csv", newline="") as f:
        assert [int(r["epoch"]) for r in csv.DictReader(f)] == [1, 2, 3]

    whole = tmp_path / "whole"
    assert main(["run", f"results_dir={whole}", *args, "seeds=1"]) == 0, capsys.readouterr().err
    assert_same_bits(seed_dir(whole, "relu", 0), d)
