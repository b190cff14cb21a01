"""Per-example predictions (predictions.npz, docs/layout.md): every completed run keeps, for the checkpoint
its recipe reports, the predicted class and the probability of the true class of each scored image
(visionbench/results/predictions.py, train/predictions.py). Tiny digits runs, 2 epochs."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from visionbench.data import create_datamodule
from visionbench.results import layout
from visionbench.results.predictions import read_predictions, write_predictions
from visionbench.sweep import ranks
from visionbench.sweep.preflight import load_config
from visionbench.sweep.sweep import run_sweep
from visionbench.train.module import ClassificationModule, Diverged
from visionbench.train.predictions import compact, improves, interleave

from .helpers import shrunk


def sweep(results, *args: str):
    (o,) = run_sweep(load_config([f"results_dir={results}", *shrunk(), "act=relu", "seeds=1", *args]), progress=False)
    return o


def scored_labels(run_dir) -> np.ndarray:
    """The labels of the run's scored set (test when there is one, else val), in loader order."""
    cfg = layout.read_config(run_dir)
    dm = create_datamodule(cfg["data"], batch_size=64, seed=int(cfg["seed"]))
    dm.setup("fit")
    loader = dm.test_dataloader() or dm.val_dataloader()
    return torch.cat([y for _, y in loader]).numpy()


def check_arrays(p: dict, labels: np.ndarray) -> float:
    """Shapes, ranges and consistency of one variant's arrays; returns its top-1 accuracy in %."""
    assert {len(p[a]) for a in ("pred", "p_true", "confidence", "target")} == {len(labels)}
    assert np.array_equal(p["target"], labels)
    assert p["p_true"].dtype == np.float32 and ((p["p_true"] >= 0) & (p["p_true"] <= 1)).all()
    assert (p["confidence"] >= p["p_true"]).all()
    right = p["pred"] == p["target"]
    assert np.array_equal(p["confidence"][right], p["p_true"][right])
    return float(right.mean() * 100)


# ---- end to end -------------------------------------------------------------------------------------
def test_a_completed_run_keeps_the_test_predictions_of_its_selected_epoch(tmp_path):
    o = sweep(tmp_path)
    assert o.status == "completed"
    p = read_predictions(layout.files(o.run_dir).predictions)
    m = o.summary["metrics"]
    assert set(p) == {"raw"} and p["raw"]["epoch"] == m["best_epoch"]
    labels = scored_labels(o.run_dir)
    assert len(labels) == 100  # data.limit_val=100 caps the test set too
    assert check_arrays(p["raw"], labels) == pytest.approx(m["test_top1_at_best_val"], abs=1e-4)
    assert layout.files(o.run_dir).predictions.stat().st_size < 20 * len(labels) + 4096  # compact


def test_ema_and_raw_predictions_without_a_test_set_score_val(tmp_path):
    """val_split=0: the scored set is the official test set used as val; EMA arrays at the EMA's own epoch."""
    o = sweep(tmp_path, "ema.decay=0.9", "data.val_split=0")
    assert o.status == "completed"
    p = read_predictions(layout.files(o.run_dir).predictions)
    m = o.summary["metrics"]
    labels = scored_labels(o.run_dir)
    assert set(p) == {"raw", "ema"}
    assert p["raw"]["epoch"] == m["best_epoch"] and p["ema"]["epoch"] == m["ema_best_epoch"]
    assert check_arrays(p["raw"], labels) == pytest.approx(m["val_top1_best"], abs=1e-4)
    assert check_arrays(p["ema"], labels) == pytest.approx(m["ema_val_top1_best"], abs=1e-4)


@pytest.mark.parametrize("lr", ["optim.lr=0.02", "optim.lr=0"])
def test_a_resumed_run_writes_the_predictions_of_an_uninterrupted_one(tmp_path, monkeypatch, lr):
    """Killed at the start of epoch 2, resumed. The file is deleted after the kill: the selection
    (epoch, arrays) comes from the checkpoint. With lr=0 epoch 1 stays selected in both variants."""

    def crash(self):
        if self.current_epoch == 1:
            raise RuntimeError("simulated kill")

    args = ("ema.decay=0.9", lr)
    monkeypatch.setattr(ClassificationModule, "on_train_epoch_start", crash, raising=False)
    killed = sweep(tmp_path / "a", *args)
    assert killed.status == "failed"
    assert read_predictions(layout.files(killed.run_dir).predictions)["raw"]["epoch"] == 1
    layout.files(killed.run_dir).predictions.unlink()
    monkeypatch.undo()
    resumed, straight = sweep(tmp_path / "a", *args), sweep(tmp_path / "b", *args)
    assert resumed.status == straight.status == "completed" and resumed.run_dir == killed.run_dir
    if lr == "optim.lr=0":
        assert straight.summary["metrics"]["best_epoch"] == 1
    a, b = (read_predictions(layout.files(o.run_dir).predictions) for o in (resumed, straight))
    assert set(a) == set(b) == {"raw", "ema"}
    for v in a:
        assert a[v]["epoch"] == b[v]["epoch"]
        for k in ("pred", "p_true", "confidence", "target"):
            assert np.array_equal(a[v][k], b[v][k]), (v, k)


def test_a_diverged_run_leaves_no_predictions_file(tmp_path, monkeypatch):
    """Epoch 1 writes the file; the run diverges in epoch 2 and reports NaN: the file is deleted."""
    real = ClassificationModule.training_step

    def diverge(self, batch, batch_idx):
        if self.current_epoch == 1:
            raise Diverged(2, self.global_step, math.nan)
        return real(self, batch, batch_idx)

    monkeypatch.setattr(ClassificationModule, "training_step", diverge)
    o = sweep(tmp_path)
    assert o.status == "diverged" and o.summary["diverged_epoch"] == 2
    assert not layout.files(o.run_dir).predictions.exists()


# ---- the pieces ---------------------------------------------------------------------------------
def test_selection_is_metrics_from_rows_rule():
    """Strictly greater wins (first epoch of the max), non-finite never beats finite, and with
    nothing finite the latest epoch: the epoch results/layout.metrics_from_rows reports."""
    cases = [
        [50, 60, 60, 55],
        [math.nan, 40, math.nan, 40],
        [math.nan, math.nan],
        [30, math.inf, 20],
        [70],
        [10, 20, 30],
        [math.nan, 5, 6, 6, math.nan],
    ]
    for values in cases:
        best, epoch = None, None
        for e, v in enumerate(values, 1):
            if improves(v, best):
                best, epoch = v, e
        rows = [{"epoch": str(e), "val_top1": str(v)} for e, v in enumerate(values, 1)]
        assert epoch == layout.metrics_from_rows(rows)["best_epoch"], values


@pytest.mark.parametrize("n,world", [(10, 3), (9, 3), (7, 4), (5, 1)])
def test_interleave_undoes_the_eval_distributed_sampler(n, world):
    data = torch.arange(100, 100 + n)
    sampler = [
        list(torch.utils.data.DistributedSampler(data, num_replicas=world, rank=r, shuffle=False)) for r in range(world)
    ]
    shards = torch.stack([data[idx] for idx in sampler])  # what each rank scored, padded by repetition
    counts = torch.tensor([len(s) for s in sampler])
    assert torch.equal(interleave(shards, counts, n), data)


def test_compact_probabilities_in_float32():
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 5.0]], dtype=torch.bfloat16)
    c = compact(logits, torch.tensor([1, 2]))
    assert c["pred"].tolist() == [0, 2] and c["p_true"].dtype == torch.float32
    probs = torch.softmax(logits.float(), 1)
    assert torch.equal(c["p_true"], probs[[0, 1], [1, 2]]) and torch.equal(c["confidence"], probs.amax(1))


def test_file_round_trip_is_compact(tmp_path):
    n = 10_000
    rng = np.random.default_rng(0)
    arrays = {
        "pred": rng.integers(0, 10, n),
        "target": rng.integers(0, 10, n),
        "p_true": rng.random(n),
        "confidence": rng.random(n),
        "epoch": 7,
    }
    path = tmp_path / "predictions.npz"
    write_predictions(path, {"raw": arrays})
    back = read_predictions(path)["raw"]
    assert back["epoch"] == 7 and np.array_equal(back["pred"], arrays["pred"])
    assert np.allclose(back["p_true"], arrays["p_true"], atol=1e-7)
    assert path.stat().st_size < 200_000 and not list(tmp_path.glob(".*tmp*"))


@pytest.mark.slow  # a minute on a busy 2-core CPU; the fast check is test_interleave_undoes_the_eval_distributed_sampler
def test_ddp_gathers_every_rank_in_loader_order(tmp_path):
    """2-process gloo DDP on CPU, 63 test images: rank 1 scores a padded copy of image 0, which the
    file must not hold; the arrays come back in loader order (rank r scored images r, r+2, ...)."""
    env = {k: v for k, v in os.environ.items() if k not in ranks.RANK_ENV + ("NODE_RANK", "WORLD_SIZE")}
    cmd = [
        sys.executable,
        "-m",
        "visionbench.cli",
        "run",
        "recipe=digits_vgg4",
        "act=relu",
        "seeds=1",
        "epochs=2",
        "batch_size=64",
        "data.limit_train=128",
        "data.limit_val=63",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "trainer.strategy=ddp",
        f"results_dir={tmp_path}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = tmp_path / "digits_vgg4" / "relu" / "seed_0"
    p = read_predictions(layout.files(run_dir).predictions)["raw"]
    labels = scored_labels(run_dir)
    assert len(labels) == 63
    m = layout.read_summary(run_dir)["metrics"]
    assert p["epoch"] == m["best_epoch"]
    # the logged metric counted the padded copy too (64 images): one image apart at most
    assert abs(check_arrays(p, labels) - m["test_top1_at_best_val"]) <= 100 / 63
