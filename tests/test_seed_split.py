"""The seed split (docs/running.md#where-the-noise-comes-from): `seed` sets every source of noise, `seed_init` / `seed_order` / `seed_aug` one each,
and `noise=init,order,aug` runs an arm per source plus the ordinary run (train/seeds.py, sweep/preflight.py)."""

from __future__ import annotations

import json

import pytest

from visionbench.cli import main as cli
from visionbench.results.identity import config_hash
from visionbench.sweep.preflight import load_config
from visionbench.sweep.sweep import plan
from visionbench.train import seeds
from visionbench.train.seeds import Seeds, source_seeds

from .helpers import shrunk


@pytest.mark.parametrize(
    "noise, given, expected",
    [
        ("all", {}, Seeds(3, 3, 3)),
        ("init", {}, Seeds(3, seeds.FIXED, seeds.FIXED)),
        ("order", {}, Seeds(seeds.FIXED, 3, seeds.FIXED)),
        ("aug", {}, Seeds(seeds.FIXED, seeds.FIXED, 3)),
        ("all", {"seed_init": 7}, Seeds(7, 3, 3)),
        ("order", {"seed_aug": 5}, Seeds(seeds.FIXED, 3, 5)),
    ],
)
def test_each_source_follows_the_seed_unless_held(noise, given, expected):
    assert source_seeds(3, noise, **given) == expected


def test_a_noise_design_runs_the_ordinary_arm_and_one_arm_per_source():
    cfg = load_config([*shrunk(), "act=relu,gelu", "seeds=2", "noise=order,init"])
    runs = [run for run, _ in plan(cfg)]
    arms = sorted({(r["setting"]["noise"], r["act_label"], r["seed"]) for r in runs})
    assert len(arms) == len(runs) == 3 * 2 * 2
    assert [r["setting"] for r in runs][0] == {"noise": "all"}
    by_arm = {(r["setting"]["noise"], r["act_label"], r["seed"]): seeds.of(r) for r in runs}
    assert by_arm[("init", "relu", 1)] == Seeds(1, seeds.FIXED, seeds.FIXED) and by_arm[("all", "gelu", 1)] == Seeds(
        1, 1, 1
    )
    hashes = {r["setting"]["noise"]: config_hash(r) for r in runs}
    assert len(set(hashes.values())) == 3  # each arm its own configuration


def test_the_split_keys_at_their_defaults_leave_the_config_hash_as_before():
    run = next(r for r, _ in plan(load_config([*shrunk(), "act=relu", "seeds=1"])))
    before = {k: v for k, v in run.items() if k not in ("seed_init", "seed_order", "seed_aug", "noise")}
    assert config_hash(run) == config_hash(before)
    assert config_hash({**run, "seed_init": 0}) != config_hash(run)


@pytest.mark.parametrize(
    "args, says",
    [
        (["noise=init", "seed_init=3"], "seed_init=3 holds still the source the arm noise=init varies"),
        (["noise=init,order,aug", "seeds=1"], "a source's variance needs at least 2 seeds per arm"),
        (["noise=init,order", "seeds=auto"], "not seeds=auto"),
        (
            ["seed_init=0", "seed_order=0", "seed_aug=0", "seeds=3"],
            "every seed of seeds=3 would train the same network",
        ),
        (["noise=weights"], "noise"),
    ],
)
def test_contradicting_seed_keys_are_refused_in_one_line(args, says, tmp_path, capsys):
    assert cli(["run", f"results_dir={tmp_path}", *shrunk(), "act=relu", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err
    assert not any(tmp_path.iterdir())


def test_an_arm_holds_the_other_sources_still(trained_tree):
    """digits_vgg4 draws nothing during training (no augmentation, no dropout): its aug arm's two seeds train the
    same network, bit for bit, while the init arm's differ; every run records its sources' seeds."""
    root = trained_tree("act=relu", "seeds=2", "noise=init,aug")

    def summary(arm, seed):
        return json.loads(
            (root / "digits_vgg4" / f"noise={arm}" / "relu" / f"seed_{seed}" / "summary.json").read_text()
        )

    assert summary("aug", 0)["metrics"] == {**summary("aug", 1)["metrics"]}
    assert summary("init", 0)["metrics"]["val_loss_final"] != summary("init", 1)["metrics"]["val_loss_final"]
    assert summary("init", 1)["seeds"] == {"init": 1, "order": seeds.FIXED, "aug": seeds.FIXED}
    assert summary("all", 1)["seeds"] == {"init": 1, "order": 1, "aug": 1}
