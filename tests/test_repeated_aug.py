"""Repeated augmentation makes the epoch longer (004 App G, Table 10; 004 code's sampler), and
metrics.csv's `step`/`samples` columns show it."""

from __future__ import annotations

import csv
from collections import Counter

import pytest
import torch

from visionbench.config import block
from visionbench.data import create_datamodule
from visionbench.data.keyed_samplers import KeyedExpandedRepeatAugSampler, KeyedRepeatAugSampler
from visionbench.data.loading import ExpandedRepeatAugSampler, RepeatAugSampler
from visionbench.sweep.preflight import load_config
from visionbench.sweep.sweep import run_sweep
from visionbench.train.callbacks import MetricsWriter


def expanded(n: int, world: int = 1, rank: int = 0, repeats: int = 3, seed: int = 0, epoch: int = 0) -> list[int]:
    sampler = ExpandedRepeatAugSampler(list(range(n)), num_replicas=world, rank=rank, num_repeats=repeats, seed=seed)
    sampler.set_epoch(epoch)
    assert len(sampler) == len(list(sampler))
    return list(sampler)


# ---- the sampler -------------------------------------------------------------------------
def test_expand_epoch_is_every_index_exactly_k_times():
    sampler = ExpandedRepeatAugSampler(list(range(50)), num_replicas=1, rank=0, num_repeats=3, seed=0)
    assert len(sampler) == 150
    order = list(sampler)
    assert len(order) == 150 and Counter(order) == Counter({i: 3 for i in range(50)})
    assert order != sorted(order)  # shuffled as a whole (004 code), not [0, 0, 0, 1, 1, 1, ...]


def test_expand_shuffle_follows_seed_and_epoch():
    first = expanded(50, seed=1, epoch=0)
    assert expanded(50, seed=1, epoch=0) == first  # same (seed, epoch): same order (resume)
    assert expanded(50, seed=1, epoch=1) != first
    assert expanded(50, seed=2, epoch=0) != first


@pytest.mark.parametrize("n, repeats", [(50, 3), (51, 2)])
def test_expand_splits_the_epoch_across_ranks_without_loss(n, repeats):
    ranks = [expanded(n, world=2, rank=r, repeats=repeats, seed=3, epoch=4) for r in range(2)]
    assert [len(r) for r in ranks] == [n * repeats // 2] * 2
    assert Counter(ranks[0] + ranks[1]) == Counter({i: repeats for i in range(n)})


def test_expand_pads_an_odd_total_like_distributed_sampler():
    n = 51  # 3 * 51 = 153 samples over 2 ranks: one padded
    ranks = [expanded(n, world=2, rank=r, seed=3) for r in range(2)]
    assert [len(r) for r in ranks] == [77, 77]
    copies = Counter(ranks[0] + ranks[1])
    assert set(copies) == set(range(n)) and sum(copies.values()) == 154
    assert sorted(copies.values()) == [3] * (n - 1) + [4]


def test_deit_option_keeps_the_usual_epoch_length():
    assert len(RepeatAugSampler(list(range(50)), num_replicas=1, rank=0, num_repeats=3)) == 50
    dataset = list(range(1000))  # timm/DeiT: N // 256 * 256 / world per rank
    assert len(RepeatAugSampler(dataset, num_replicas=2, rank=0, num_repeats=3)) == 384


@pytest.mark.parametrize(
    "mode, cls, length", [("expand", KeyedExpandedRepeatAugSampler, 150), ("deit", KeyedRepeatAugSampler, 50)]
)
def test_datamodule_picks_the_sampler_of_repeated_aug_epoch(mode, cls, length):
    dm = create_datamodule(
        {"name": "digits", "limit_train": 50, "augment": {"repeated_aug": 3, "repeated_aug_epoch": mode}},
        batch_size=10,
        seed=0,
    )
    loader = dm.train_dataloader()
    assert type(loader.sampler) is cls and len(loader.sampler) == length and len(loader) == length // 10


def test_config_rejects_bad_repeated_aug_epoch():
    with pytest.raises(ValueError, match="data.augment.repeated_aug_epoch must be one of expand, deit"):
        block("data", {"augment": {"repeated_aug_epoch": "long"}})
    with pytest.raises(ValueError, match="data.augment.repeated_aug must be an integer"):
        block("data", {"augment": {"repeated_aug": 2.5}})
    assert block("data", {"augment": {"repeated_aug": 2.5, "repeated_aug_epoch": "deit"}}).augment.repeated_aug == 2.5
    assert block("data", {}).augment.repeated_aug_epoch == "expand"


# ---- metrics.csv step/samples and the schedule, end to end -----------------------------
def read_rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize(
    "mode, epoch_factor", [("expand", 3), pytest.param("deit", 1, marks=pytest.mark.slow)]
)  # one trained run each (11 s): the DeiT length in make test-slow
def test_one_digits_run_shows_the_epoch_length_in_metrics_csv(tmp_path, mode, epoch_factor):
    batch, limit, lr = 32, 64, 0.01
    args = [
        f"results_dir={tmp_path}",
        "act=relu",
        "seeds=1",
        "epochs=2",
        f"batch_size={batch}",
        f"data.limit_train={limit}",
        "data.limit_val=64",
        "snapshot_epochs=[]",
        "data.augment.repeated_aug=3",
        f"data.augment.repeated_aug_epoch={mode}",
        f"optim.lr={lr}",
        "sched.name=cosine",
        "sched.warmup_epochs=1",
        "sched.warmup_lr=0.0",
        "sched.min_lr=0.0",
    ]
    cfg = load_config(args)
    dm = create_datamodule(cfg.data, batch_size=batch, seed=0)
    dm.setup()
    n = len(dm.train_set)
    assert n == limit
    (outcome,) = run_sweep(cfg, progress=False)
    assert outcome.status == "completed"
    rows = read_rows(outcome.run_dir / "metrics.csv")
    assert list(rows[0])[:3] == ["epoch", "step", "samples"]
    samples = epoch_factor * n  # 3 x 64 = 192 = 6 batches of 32: no incomplete batch is dropped
    steps = samples // batch  # training loaders drop the last incomplete batch (make_loader)
    assert [int(r["samples"]) for r in rows] == [samples, samples]
    assert [int(r["step"]) for r in rows] == [steps, 2 * steps]
    # warmup_epochs=1 is one epoch of *these* steps: the peak lr right at its end, the floor at the last step
    assert float(rows[0]["lr"]) == pytest.approx(lr)
    assert float(rows[1]["lr"]) == pytest.approx(0.0, abs=1e-12)
    # step/samples are bookkeeping, not metrics of the summary
    assert not any(k.startswith(("step", "samples")) for k in outcome.summary["metrics"])


def test_resume_keeps_rows_written_before_step_and_samples(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("epoch,train_loss,val_top1,lr\n1,2.0,10.0,0.1\n2,1.5,20.0,0.1\n3,1.0,30.0,0.1\n")
    writer = MetricsWriter(path)
    writer.load_existing(upto_epoch=2)
    assert [list(r) for r in writer.rows] == [["epoch", "step", "samples", "train_loss", "val_top1", "lr"]] * 2
    assert [(r["epoch"], r["step"], r["samples"], r["val_top1"]) for r in writer.rows] == [
        ("1", "", "", "10.0"),
        ("2", "", "", "20.0"),
    ]


def test_samples_count_the_batches_trained():
    writer = MetricsWriter("unused.csv")
    writer.on_train_epoch_start(None, None)
    for size in (32, 32, 7):
        writer.on_train_batch_end(None, None, None, (torch.zeros(size, 1), torch.zeros(size)), 0)
    assert writer._samples == 71
    writer.on_train_epoch_start(None, None)
    assert writer._samples == 0  # reset each epoch
