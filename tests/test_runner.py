"""The multi-seed sweep end to end on the embedded digits data: results schema, resume,
divergence, failures, determinism, config mismatch. The CLI's errors on bad input: test_bad_inputs.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from visionbench.cli import main
from visionbench.results import layout
from visionbench.results.identity import config_hash
from visionbench.sweep.preflight import load_config
from visionbench.sweep.sweep import ConfigMismatch, run_sweep

from .helpers import copy_tree, metric_rows, shrunk


def sweep(tmp_path: Path, *args: str):
    cfg = load_config([f"results_dir={tmp_path}", *shrunk(), *args])
    return run_sweep(cfg, progress=False)


def test_digits_run_writes_the_full_schema(tmp_path):
    (o,) = sweep(tmp_path, "act=hermite", "seeds=1")
    assert o.status == "completed"
    d = tmp_path / "digits_vgg4" / "hermite" / "seed_0"
    s = json.loads((d / "summary.json").read_text())
    assert s["schema"] == 1 and (s["recipe"], s["act"], s["seed"], s["status"]) == (
        "digits_vgg4",
        "hermite",
        0,
        "completed",
    )
    for key in ("val_top1_best", "val_top1_final", "test_top1_at_best_val", "best_epoch"):
        assert key in s["metrics"]
    for key in ("train_time_s", "params", "act_params", "throughput_img_s", "peak_mem_mb", "versions"):
        assert s[key], key
    assert s["act_params"] == 4 * 4  # 4 swapped activations in VGG4, 4 Hermite coefficients each
    cfg = yaml.safe_load((d / "config.yaml").read_text())
    assert cfg["act"] == "hermite" and cfg["seed"] == 0 and cfg["epochs"] == 2
    r = metric_rows(d / "metrics.csv")
    assert [int(x["epoch"]) for x in r] == [1, 2]
    for col in ("train_loss", "val_loss", "val_top1", "val_top5", "test_top1", "lr"):
        assert all(x[col] not in ("", "nan") for x in r), col
    assert (d / "checkpoints" / "last.ckpt").exists()
    assert sorted(p.name for p in (d / "act_snapshots").iterdir()) == ["epoch_000.json", "epoch_002.json"]
    assert list((d / "tb").glob("events.out.tfevents.*"))


def test_resume_skips_completed_seeds_and_matches_uninterrupted(relu_pair, tmp_path):
    """A seeds=1 sweep (relu_pair's seed 0), extended to seeds=2, equals the straight seeds=2 sweep (relu_pair)."""
    copy_tree(relu_pair, tmp_path / "a")
    shutil.rmtree(tmp_path / "a" / "digits_vgg4" / "relu" / "seed_1")
    again = sweep(tmp_path / "a", "act=relu", "seeds=2")
    assert [o.status for o in again] == ["skipped", "completed"]
    for seed in (0, 1):
        a = metric_rows(tmp_path / "a" / "digits_vgg4" / "relu" / f"seed_{seed}" / "metrics.csv")
        b = metric_rows(relu_pair / "digits_vgg4" / "relu" / f"seed_{seed}" / "metrics.csv")
        assert a == b
    straight = json.loads((relu_pair / "digits_vgg4" / "relu" / "seed_1" / "summary.json").read_text())
    assert straight["metrics"] == again[1].summary["metrics"]


def test_interrupted_seed_resumes_from_last_checkpoint(tmp_path, crash_in_epoch_3):
    (o,) = sweep(tmp_path / "a", "act=rational", "seeds=1", "epochs=3")
    assert o.status == "failed" and "simulated kill" in o.summary["error"]
    assert len(metric_rows(o.run_dir / "metrics.csv")) == 2
    crash_in_epoch_3()  # stop crashing
    (resumed,) = sweep(tmp_path / "a", "act=rational", "seeds=1", "epochs=3")
    (straight,) = sweep(tmp_path / "b", "act=rational", "seeds=1", "epochs=3")
    assert resumed.status == "completed"
    assert metric_rows(resumed.run_dir / "metrics.csv") == metric_rows(straight.run_dir / "metrics.csv")


def test_divergence_is_recorded_the_sweep_goes_on_and_the_command_exits_nonzero(tmp_path, capsys):
    """A sweep whose every run diverged exits 1 (a cluster's job status tells) and lists the runs."""
    code = main(
        ["run", f"results_dir={tmp_path}", *shrunk(), "act=relu,gelu", "seeds=1", "optim.lr=1e6", "act_lr_mult.gelu=1"]
    )
    err = capsys.readouterr().err
    assert code == 1, err
    listed = err.split("diverged runs:\n", 1)[1].splitlines()[:2]
    for act, line in zip(("relu", "gelu"), listed):
        assert line.startswith(f"  {tmp_path / 'digits_vgg4' / act / 'seed_0'}: ") and "non-finite" in line, line
    assert "failed runs:" not in err
    for act in ("relu",):
        s = json.loads((tmp_path / "digits_vgg4" / act / "seed_0" / "summary.json").read_text())
        assert s["status"] == "diverged" and s["diverged_epoch"] == 1 and "non-finite" in s["error"]


def test_failure_is_recorded_and_the_command_exits_nonzero(tmp_path, monkeypatch, capsys):
    from visionbench.train import run as one_run

    real = one_run.build_model

    def broken(cfg, *a, **k):
        if cfg.act == "gelu":  # the typed run config (config.typed)
            raise RuntimeError("boom")
        return real(cfg, *a, **k)

    monkeypatch.setattr(one_run, "build_model", broken)
    code = main(["run", f"results_dir={tmp_path}", *shrunk(), "act=gelu,relu", "seeds=1"])
    err = capsys.readouterr().err
    assert code == 1 and "boom" in err
    s = json.loads((tmp_path / "digits_vgg4" / "gelu" / "seed_0" / "summary.json").read_text())
    assert s["status"] == "failed" and "boom" in s["error"]
    assert (tmp_path / "digits_vgg4" / "gelu" / "seed_0" / "error.txt").exists()
    assert (
        json.loads((tmp_path / "digits_vgg4" / "relu" / "seed_0" / "summary.json").read_text())["status"] == "completed"
    )


def test_same_config_and_seed_give_identical_metrics(tmp_path):
    sweep(tmp_path / "a", "act=polynorm", "seeds=1")
    sweep(tmp_path / "b", "act=polynorm", "seeds=1")
    a = metric_rows(tmp_path / "a" / "digits_vgg4" / "polynorm" / "seed_0" / "metrics.csv")
    assert a == metric_rows(tmp_path / "b" / "digits_vgg4" / "polynorm" / "seed_0" / "metrics.csv")


def test_changed_config_is_an_error_not_a_silent_mix(relu_pair, tmp_path):
    copy_tree(relu_pair, tmp_path)
    with pytest.raises(ConfigMismatch, match="optim.lr"):
        sweep(tmp_path, "act=relu", "seeds=1", "optim.lr=0.5")


# keys _base.yaml gained after schema 1's first results (docs/recipes.md, notes 8-14): a run directory written without them
NEWER_KEYS = {"model": ["global_pool", "lsuv_variant"], "optim": ["decay_rule"]}
NEWER_AUGMENT_KEYS = ["color_jitter", "auto_augment_impl", "repeated_aug_epoch"]


def _as_older_version(config_path: Path, **augment) -> None:
    stored = yaml.safe_load(config_path.read_text())
    for block, keys in NEWER_KEYS.items():
        for key in keys:
            stored[block].pop(key, None)
    for key in NEWER_AUGMENT_KEYS:
        stored["data"]["augment"].pop(key, None)
    stored["data"]["augment"].update(augment)
    config_path.write_text(yaml.safe_dump(stored))
    run_dir = config_path.parent  # the summary an older version wrote records that config's hash
    summary = layout.read_summary(run_dir)
    layout.write_summary(run_dir, {**summary, "config_hash": config_hash(stored)})


def test_results_of_an_older_version_resume_without_a_false_mismatch(relu_pair, tmp_path):
    from visionbench.config import run_config
    from visionbench.sweep.sweep import check_resumable

    copy_tree(relu_pair, tmp_path)
    (o,) = sweep(tmp_path, "act=relu", "seeds=1")  # completed before: skipped
    assert o.status == "skipped"
    _as_older_version(o.run_dir / "config.yaml")
    cfg = load_config([f"results_dir={tmp_path}", *shrunk(), "act=relu", "seeds=1"])
    check_resumable(run_config(cfg, "relu", 0), o.run_dir)  # the keys it lacks hold their old behaviour

    # with repeats, the old epoch rule (DeiT's length) is not today's: resuming would mix the two
    _as_older_version(o.run_dir / "config.yaml", repeated_aug=3)
    again = load_config([f"results_dir={tmp_path}", *shrunk(), "act=relu", "seeds=1", "data.augment.repeated_aug=3"])
    with pytest.raises(ConfigMismatch, match="repeated_aug_epoch"):
        check_resumable(run_config(again, "relu", 0), o.run_dir)


def test_list_shows_recipes_activations_models(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for word in ("digits_vgg4", "cifar10_vgg8", "rational", "hermite", "resnet50", "swin_t"):
        assert word in out


@pytest.mark.parametrize("cmd", ["run", "estimate", "list", "report", "bench", "papers", "plot"])
def test_every_subcommand_answers_help_with_usage(cmd, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([cmd, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"visionbench {cmd}" in out and "Traceback" not in out  # the usage lines, on stdout
    assert not any(tmp_path.iterdir())  # nothing run, nothing written


@pytest.mark.slow  # a Hydra subprocess with portable workers (32 s)
def test_hydra_multirun_entry_point_writes_the_same_tree_and_fails_with_a_failed_job(tmp_path):
    """The cluster path (Hydra multirun; SLURM swaps only the launcher) writes one run per job; a job whose run
    fails (here the last: its run directory holds a garbage summary.json) makes the command exit non-zero with the
    sweep's line. (One subprocess for both: the single-job version, test_reliability.py, and submitit's, are slow.)"""
    import subprocess
    import sys

    from visionbench.sweep import portable

    bad = tmp_path / "digits_vgg4" / "silu" / "seed_1"
    bad.mkdir(parents=True)
    (bad / "summary.json").write_text("[]")
    cmd = [
        sys.executable,
        "-m",
        "visionbench.sweep.hydra_app",
        "-m",
        "act=relu,silu",
        "seed=1",
        f"results_dir={tmp_path}",
        "epochs=1",
        "data.limit_train=100",
        "data.limit_val=50",
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0, done.stderr[-2000:]
    assert f"{bad / 'summary.json'} holds list, not the summary mapping; delete it" in done.stderr, done.stderr[-2000:]
    s = json.loads((tmp_path / "digits_vgg4" / "relu" / "seed_1" / "summary.json").read_text())
    assert s["status"] == "completed" and s["seed"] == 1
    # the default recipe is portable: each job trained in a pinned worker, as `visionbench run` trains it
    assert s["environment"]["threads"] == 1 and s["environment"]["env"]["OMP_NUM_THREADS"] == "1"
    if portable.is_x86():
        assert s["environment"]["env"]["ATEN_CPU_CAPABILITY"] == "avx2"
