"""The hostile-user checks that take minutes: random kill -9 during a sweep, then a
rerun, must give results identical to an uninterrupted sweep; two `visionbench run` on one
results directory must share the runs, training each exactly once."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
import torch

from .helpers import metric_rows, seed_dir, spawn, summary, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.serial]

ACTS, SEEDS, EPOCHS = ("relu", "rational"), (0, 1), 3
ARGS = (f"act={','.join(ACTS)}", f"seeds={len(SEEDS)}", f"epochs={EPOCHS}")


def run_dirs(results: Path) -> list[Path]:
    return [seed_dir(results, a, s) for a in ACTS for s in SEEDS]


def started(results: Path) -> bool:
    return any((d / "summary.json").exists() for d in run_dirs(results))


def test_random_kill_9_then_rerun_gives_the_uninterrupted_results(tmp_path):
    rng = random.Random(int(os.environ.get("VB_KILL_SEED", "10")))
    reference = tmp_path / "reference"
    proc = spawn(tmp_path, reference, *ARGS)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err

    results, kills = tmp_path / "killed", 0
    for _ in range(4):  # K = 4 kill -9 at random moments of training (some land in a write, some between runs)
        proc = spawn(tmp_path, results, *ARGS, pause=0.3)
        wait_for(lambda: started(results) or proc.poll() is not None, 120, "training to start")
        time.sleep(rng.uniform(0.0, 3.0))
        if proc.poll() is None:
            proc.kill()
            kills += 1
        proc.communicate(timeout=60)
    assert kills >= 2, "the sweep finished before it could be killed: lengthen the pause"
    proc = spawn(tmp_path, results, *ARGS)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err

    for ref, got in zip(run_dirs(reference), run_dirs(results)):
        assert summary(got)["status"] == "completed"
        assert metric_rows(got / "metrics.csv") == metric_rows(ref / "metrics.csv"), got
        assert summary(got)["metrics"] == summary(ref)["metrics"], got
        last = torch.load(got / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
        assert last["epoch"] + 1 == EPOCHS
    assert not [p for p in results.rglob("*") if ".tmp" in p.name]


def test_two_processes_on_one_results_dir_share_the_runs(tmp_path):
    results = tmp_path / "r"
    args = ("act=relu,gelu", "seeds=2", "epochs=2")
    procs = [spawn(tmp_path, results, *args, pause=0.5) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    trained = [
        {
            line.split(":")[0].split()[0] + line.split(":")[0].split()[-1]
            for line in out.splitlines()
            if ": completed" in line
        }
        for out, _ in outs
    ]
    assert trained[0].isdisjoint(trained[1]) and len(trained[0] | trained[1]) == 4, trained
    assert any("locked" in out for out, _ in outs)
    for d in [seed_dir(results, a, s) for a in ("relu", "gelu") for s in (0, 1)]:
        assert summary(d)["status"] == "completed" and not (d / "error.txt").exists()
