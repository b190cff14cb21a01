"""Augmentation randomness is a function of (seed, epoch, position), not of the process that loads
(docs/data.md#determinism): a run resumed with loader workers repeats the
uninterrupted run, and `num_workers`, the worker a sample lands on and the DDP rank do not matter."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from visionbench import data
from visionbench.data.keyed_samplers import KeyedDistributedSampler, KeyedExpandedRepeatAugSampler
from visionbench.data.seeding import SampleKey, sample_seed, sample_seeds, seeded_rngs

from .helpers import epoch_batches, metric_rows, sweep_small

# every RNG an augmentation draws from: crop/flip/erasing noise (torch), RandAugment (numpy + random)
AUGMENT = {"crop_pad": 1, "hflip": 0.5, "auto_augment": "rand-m9-mstd0.5-inc1", "re_prob": 0.5}


def digits(num_workers: int = 0, seed: int = 0) -> data.VisionDataModule:
    cfg = {"name": "digits", "val_split": 0.2, "limit_train": 256, "num_workers": num_workers, "augment": AUGMENT}
    return data.create_datamodule(cfg, batch_size=64, seed=seed)


# ---- the seed ------------------------------------------------------------------------------------
def test_sample_seed_differs_across_seeds_epochs_and_positions():
    triples = list(itertools.product(range(3), range(4), range(50)))
    seeds = [sample_seed(*t) for t in triples]
    assert len(set(seeds)) == len(triples) and all(0 <= s < 2**64 for s in seeds)
    assert sample_seed(0, 1, 7) != sample_seed(1, 0, 7)  # not a `seed + epoch` rule
    np.testing.assert_array_equal(sample_seeds(2, 3, range(50)), [sample_seed(2, 3, p) for p in range(50)])
    assert sample_seed(0, 0, 0) == 2558736989570252433  # pinned: changing the hash changes every augmented run


def test_seeded_rngs_repeat_draws_and_restore_the_callers_stream():
    def draws():
        return torch.rand(2).tolist(), float(np.random.rand()), __import__("random").random()

    with seeded_rngs(42):
        first = draws()
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    with seeded_rngs(42):
        assert draws() == first
    assert torch.equal(torch.rand(3), expected)


# ---- the loader ------------------------------------------------------------------------------------
def test_batches_do_not_depend_on_workers_and_persistent_workers_follow_the_epoch():
    torch.manual_seed(7)
    after = torch.rand(3)
    torch.manual_seed(7)
    x0, y0 = epoch_batches(digits(0).train_dataloader(), 1)
    assert torch.equal(torch.rand(3), after)  # loading in the main process leaves its RNG stream alone
    for workers in (1, 2):  # a sample lands on another worker with each count
        x, y = epoch_batches(digits(workers).train_dataloader(), 1)
        assert torch.equal(x, x0) and torch.equal(y, y0), workers
    # persistent workers started at epoch 0 give epoch 1 what a fresh process (a resume) gives it
    loader = digits(2).train_dataloader()
    assert loader.persistent_workers
    x_first, _ = epoch_batches(loader, 0)
    x, y = epoch_batches(loader, 1)
    assert torch.equal(x, x0) and torch.equal(y, y0) and not torch.equal(x_first, x0)
    assert not torch.equal(epoch_batches(digits(0, seed=1).train_dataloader(), 1)[0], x0)


def test_a_restored_data_module_builds_its_loader_at_the_resumed_epoch():
    """Lightning builds a resumed run's loader, and workers prefetch, before it calls `set_epoch`:
    the epoch saved in the checkpoint (the data module's state) must already be in the sampler."""
    saved = digits().state_dict()
    assert saved == {"train_epoch": 0}
    dm = digits()
    dm.load_state_dict({"train_epoch": 2})
    assert dm.state_dict() == {"train_epoch": 2}
    keys = list(dm.train_dataloader().sampler)
    assert {k.epoch for k in keys} == {2}
    fresh = digits().train_dataloader().sampler
    fresh.set_epoch(2)
    assert keys == list(fresh)


def test_each_position_is_augmented_the_same_on_any_number_of_ranks():
    dm = digits()
    dm.setup()
    ds = dm.train_set

    def by_position(world: int) -> dict[int, tuple[int, torch.Tensor]]:
        out = {}
        for rank in range(world):
            sampler = KeyedDistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=0)
            sampler.set_epoch(2)
            out.update({k.position: (k.index, ds[k][0]) for k in sampler})
        return out

    one, three = by_position(1), by_position(3)
    assert len(one) == len(ds)
    for p, (index, x) in one.items():
        assert three[p][0] == index and torch.equal(three[p][1], x)


def test_copies_of_an_image_in_an_epoch_are_augmented_differently():
    dm = digits()
    dm.setup()
    sampler = KeyedExpandedRepeatAugSampler(dm.train_set, num_replicas=1, rank=0, num_repeats=3, seed=0)
    copies: dict[int, list[torch.Tensor]] = {}
    for key in sampler:
        assert isinstance(key, SampleKey) and key.epoch == 0
        copies.setdefault(key.index, []).append(dm.train_set[key][0])
    pairs = [(a, b) for xs in copies.values() for a, b in itertools.combinations(xs, 2)]
    assert len(pairs) == 3 * len(dm.train_set)  # every image 3 times: 3 pairs each
    assert sum(torch.equal(a, b) for a, b in pairs) < 0.1 * len(pairs)


# ---- whole runs: resume with workers, and workers 0 vs 2 ------------------------------------------------
@pytest.mark.parametrize("recipe", ["digits_vgg4_aug", pytest.param("digits_vgg4", marks=pytest.mark.slow)])  # the
# augmented recipe (random draws in the workers) is the harder case; the plain one, slow
def test_resume_with_workers_repeats_the_uninterrupted_run_for_any_num_workers(recipe, tmp_path, crash_in_epoch_3):
    args = (f"recipe={recipe}",)
    crashed = sweep_small(tmp_path / "resumed", *args, "data.num_workers=2")
    assert crashed.status == "failed" and len(metric_rows(crashed.run_dir / "metrics.csv")) == 2  # killed after epoch 2
    crash_in_epoch_3()  # stop crashing
    resumed = sweep_small(tmp_path / "resumed", *args, "data.num_workers=2")
    straight = sweep_small(tmp_path / "straight", *args, "data.num_workers=2")
    in_main = sweep_small(tmp_path / "main", *args, "data.num_workers=0")
    assert resumed.status == straight.status == in_main.status == "completed"
    expected = metric_rows(straight.run_dir / "metrics.csv")
    assert len(expected) == 3
    assert metric_rows(resumed.run_dir / "metrics.csv") == expected == metric_rows(in_main.run_dir / "metrics.csv")
