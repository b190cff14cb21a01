"""Under DDP only rank 0 prints and writes (docs/running.md, "GPUs and clusters"); every rank trains the same runs.

The real check runs a 2-process gloo DDP sweep on CPU through the CLI (Lightning's subprocess
launcher re-runs the command as rank 1 with LOCAL_RANK=1); the in-process tests pin the gating
of a rank > 0 with LOCAL_RANK=1 and a stand-in for training.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from visionbench.cli import main
from visionbench.sweep import ranks
from visionbench.sweep.preflight import load_config
from visionbench.sweep.sweep import execute, plan
from visionbench.train import run as one_run

from .helpers import shrunk

TINY = ("recipe=digits_vgg4", "act=relu", "data.limit_train=128", "data.limit_val=64")  # the deltas to the shrink
DDP = ["trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp"]
LEARNS = ("epochs=2", "optim.lr=0.002")  # tiny runs that learn: a stalled run decides nothing, has no per-example part


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def _epochs(run_dir: Path) -> list[int]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [int(r["epoch"]) for r in csv.DictReader(f)]


@pytest.mark.slow
@pytest.mark.serial  # two processes; in the default suite: the in-process tests of rank > 0 and rank 0 below
def test_ddp_on_cpu_writes_and_prints_once_and_ranks_agree_on_skips(tmp_path, fake_training):
    """seed 0 completed before (a stand-in run); the DDP sweep of seeds 0-1 must skip it in both
    ranks and train seed 1 in both: a rank training seed 0 alone would hang or fail the job."""
    ((run, out),) = plan(load_config([*shrunk(*TINY, "seeds=1", *LEARNS), *DDP, f"results_dir={tmp_path}"]))
    assert execute(run, out, progress=False).status == "completed"
    done_before = (tmp_path / "digits_vgg4/relu/seed_0/summary.json").read_text()
    env = {k: v for k, v in os.environ.items() if k not in ranks.RANK_ENV + ("NODE_RANK", "WORLD_SIZE")}
    cmd = [
        sys.executable,
        "-m",
        "visionbench.cli",
        "run",
        *shrunk(*TINY, "seeds=2", *LEARNS),
        *DDP,
        f"results_dir={tmp_path}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert log.count("recipe digits_vgg4:") == 1, log
    assert log.count("seed 0: skipped") == 1, log
    assert log.count("seed 1: completed") == 1, log
    assert log.count("### digits_vgg4 — test_top1") == 1, log  # the end-of-sweep table, printed once
    assert log.count("### digits_vgg4 — per-example") == 1, log
    assert log.count("wrote ") == len(set(line for line in log.splitlines() if line.startswith("wrote "))), log
    assert (tmp_path / "digits_vgg4/relu/seed_0/summary.json").read_text() == done_before  # skipped: untouched
    run = tmp_path / "digits_vgg4/relu/seed_1"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["metrics"]["best_epoch"] in (1, 2)
    assert _epochs(run) == [1, 2]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert not [p for p in _files(tmp_path) if ".tmp" in p.name or p.name == "error.txt"]


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("margin, seeds, training", [(None, 5, ["epochs=1"]), (1000, 3, LEARNS)])
def test_seeds_auto_under_ddp_runs_the_same_rounds_on_every_rank(tmp_path, margin, seeds, training):
    """seeds=auto under DDP: every rank must make the same decisions. Without a margin tiny runs stay
    inconclusive and both rounds run: a rank 1 that stopped after round 1 would leave rank 0's round 2
    waiting for it. A margin wider than the metric's range decides equivalence at the first look, when the
    runs learn (a stalled run decides nothing): rank 0 stops there."""
    env = {k: v for k, v in os.environ.items() if k not in ranks.RANK_ENV + ("NODE_RANK", "WORLD_SIZE")}
    args = shrunk(*TINY, "act=relu,gelu", "seeds=auto", "seeds_max=5", *training)
    args += [f"seeds_margin={margin}"] if margin else []
    cmd = [sys.executable, "-m", "visionbench.cli", "run", *args, *DDP, f"results_dir={tmp_path}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    record = json.loads((tmp_path / "digits_vgg4/sequential.json").read_text())
    assert record["baseline_seeds"] == seeds and record["acts"]["gelu"]["seeds"] == seeds
    assert record["acts"]["gelu"]["decision"] == ("equivalent" if margin else "inconclusive")
    for act in ("relu", "gelu"):
        assert sorted(p.name for p in (tmp_path / "digits_vgg4" / act).iterdir()) == [f"seed_{i}" for i in range(seeds)]
    assert log.count("seeds=auto round 1/2 (3 seeds)") == 1 and log.count("### digits_vgg4 — test_top1") == 1, (
        log
    )  # by rank 0
    assert log.count("seeds=auto round 2/2 (5 seeds)") == (0 if margin else 1), log


@pytest.fixture
def fake_training(monkeypatch):
    """`train_run` replaced by a stand-in that records its calls; `fail=True` makes it raise."""
    calls = []

    def fake(cfg, run_dir, progress=True):
        calls.append((cfg["seed"], Path(run_dir)))
        if fake.fail:
            raise RuntimeError("boom")
        return one_run.RunResult(rows=[{"epoch": 1, "val_top1": 50.0, "train_loss": 1.0}], params=10)

    fake.fail, fake.calls = False, calls
    monkeypatch.setattr(one_run, "train_run", fake)
    return fake


@pytest.mark.parametrize("fail", [False, True])
def test_rank_above_zero_trains_every_run_but_writes_and_prints_nothing(
    tmp_path, monkeypatch, capsys, fake_training, fail
):
    monkeypatch.setenv("LOCAL_RANK", "1")
    fake_training.fail = fail
    assert main(["run", *shrunk(*TINY, "seeds=2", "epochs=1"), f"results_dir={tmp_path}"]) == 0  # rank 0: the status
    assert [seed for seed, _ in fake_training.calls] == [0, 1]
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    assert _files(tmp_path) == []  # no config.yaml, summary.json, error.txt, .lock, table or plot


def test_rank_zero_writes_what_other_ranks_leave(tmp_path, monkeypatch, fake_training):
    """The control: the same stand-in run on rank 0 writes config, summary (and error.txt on failure)."""
    monkeypatch.setenv("LOCAL_RANK", "0")
    cfg = load_config([*shrunk(*TINY, "seeds=1", "epochs=1"), f"results_dir={tmp_path}"])
    ((run, out),) = plan(cfg)
    assert execute(run, out, progress=False).status == "completed"
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
    assert (out / "config.yaml").exists()
    fake_training.fail = True
    (out / "summary.json").unlink()
    assert execute(run, out, progress=False).status == "failed"
    assert "boom" in (out / "error.txt").read_text()


def test_node_rank_decides_for_launchers_that_give_local_ranks(monkeypatch):
    for key in ranks.RANK_ENV + ("NODE_RANK",):
        monkeypatch.delenv(key, raising=False)
    assert ranks.is_rank_zero()
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("NODE_RANK", "1")  # Lightning's launcher on the second node
    assert not ranks.is_rank_zero()
    monkeypatch.setenv("NODE_RANK", "0")
    assert ranks.is_rank_zero()
    monkeypatch.setenv("RANK", "2")  # torchrun's global rank
    assert not ranks.is_rank_zero()


def _training_step_on_rank(rank: int, port: int, out: str) -> None:
    """One training step in a 2-process gloo group; rank 1's batch holds a NaN, rank 0's does not."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        Path(out, f"rank{rank}.txt").write_text(_one_step_says(nan=rank == 1))
    finally:
        dist.destroy_process_group()


def _one_step_says(nan: bool) -> str:
    """One training step of a tiny module on a batch (with a NaN when `nan`): what the Diverged says, or
    "no divergence"."""
    import torch

    from visionbench.config import block
    from visionbench.train.module import ClassificationModule, Diverged

    module = ClassificationModule(torch.nn.Linear(4, 3), 3, block("optim"), block("sched"), block("loss"))
    x = torch.randn(8, 4)
    if nan:
        x[0, 0] = float("nan")
    try:
        module.training_step((x, torch.randint(0, 3, (8,))), 0)
    except Diverged as e:
        return str(e)
    return "no divergence"


@pytest.mark.filterwarnings("ignore::UserWarning")  # self.log outside a Trainer
@pytest.mark.parametrize(
    "nan_here, nan_there, said",
    [
        (True, False, "non-finite training loss nan at epoch 1, step 0"),
        (False, True, "non-finite training loss on another DDP rank at epoch 1, step 0"),
        (False, False, "no divergence"),
    ],
)
def test_a_non_finite_loss_on_another_rank_stops_this_one(monkeypatch, nan_here, nan_there, said):
    """The default-suite sibling of the 2-process test below: the check's non-finite flag goes through one MAX
    all-reduce (a stand-in here for the other rank's flag), so either rank's NaN stops this one at the same step
    (a lone training_step, outside a Trainer, is checked at once; in a run, every 32 steps and at each epoch's end)."""
    import torch
    import torch.distributed as dist

    reduced = []

    def all_reduce(tensor, op=None):
        reduced.append(op)
        there = [1.0, -0.0] if nan_there else [0.0, -math.inf]  # the other rank's (flag, -step)
        tensor.copy_(torch.maximum(tensor, torch.tensor(there, dtype=tensor.dtype)))

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: 2)
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    assert _one_step_says(nan=nan_here) == said and reduced == [dist.ReduceOp.MAX]


@pytest.mark.slow
@pytest.mark.serial  # two spawned processes; the sibling above checks the same rule in-process
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_non_finite_loss_on_one_rank_stops_every_rank(tmp_path):
    """Under DDP a NaN on one rank's batch must end the run on all ranks at the same step: a rank that
    carried on would wait for the other in the next gradient all-reduce (until the 30-min timeout)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_training_step_on_rank, args=(port, str(tmp_path)), nprocs=2, join=True)
    assert (tmp_path / "rank1.txt").read_text() == "non-finite training loss nan at epoch 1, step 0"
    assert (tmp_path / "rank0.txt").read_text() == "non-finite training loss on another DDP rank at epoch 1, step 0"
