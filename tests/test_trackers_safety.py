"""Trackers and resume with settings or files from someone else (docs/reproducing.md): a tracker that cannot work is one line
before the sweep, naming it (an MLflow server that does not answer: in seconds, not MLflow's minutes of silent
retries; a store that is no SQLite database; a WANDB_MODE W&B refuses); a continued MLflow run is not given a step it
already holds (kill -9 mid-epoch, then resume); a resume that would flip `trainer.portable` is refused; `seeds_max`
without `seeds=auto` is refused; `visionbench predictions` of a run it cannot rewrite is bad input (exit 2).
Skips only where the `mlflow` / `wandb` extra is not installed."""

from __future__ import annotations

import json
import socket
import time

import pytest

from visionbench.cli import main
from visionbench.results import layout

from .helpers import copy_tree, needs_mlflow, needs_wandb, shrunk

# the runs these tests start are refused before any training: tests/helpers.py's shrink, one relu run of one epoch
TINY = shrunk("act=relu", "seeds=1", "epochs=1")


@pytest.fixture
def env(monkeypatch):
    for var in ("MLFLOW_TRACKING_URI", "WANDB_MODE", "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")  # the probe must reach this host, not a proxy
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    return monkeypatch


def refused(args: list[str], capsys) -> str:
    """`visionbench run ARGS`: exit 2 and exactly one line on stderr, which is returned."""
    assert main(["run", *args]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("visionbench run: "), lines
    return lines[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- MLflow: a server that does not answer, a store that is no database --------------------------------------
@needs_mlflow
def test_an_unreachable_mlflow_server_is_one_line_in_seconds(tmp_path, env, capsys):
    uri = f"http://127.0.0.1:{closed_port()}"
    env.setenv("MLFLOW_TRACKING_URI", uri)
    t0 = time.monotonic()
    line = refused([f"results_dir={tmp_path}/r", *TINY, "trainer.loggers=tensorboard,mlflow"], capsys)
    assert f"mlflow: the tracking server {uri} (MLFLOW_TRACKING_URI) cannot be reached" in line, line
    assert "Connection refused" in line and time.monotonic() - t0 < 60  # was: 240 s of silence, then killed
    assert not (tmp_path / "r").exists()


@needs_mlflow
def test_a_silent_mlflow_server_times_out_after_the_probe_timeout(env, monkeypatch):
    from visionbench.train import tracker_checks as trackers

    monkeypatch.setattr(trackers, "PROBE_TIMEOUT_S", 1)
    with socket.socket() as server:  # accepts connections (the kernel's backlog), never answers
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        uri = f"http://user:secret@127.0.0.1:{server.getsockname()[1]}"
        t0 = time.monotonic()
        why = trackers.mlflow_problem(uri)
    assert why and "no answer in 1 s" in why and "secret" not in why and "user:***@127.0.0.1" in why, why
    assert time.monotonic() - t0 < 15


@needs_mlflow
def test_a_corrupt_mlflow_db_is_one_line_naming_it_before_the_sweep(tmp_path, env, capsys):
    results = tmp_path / "r"
    results.mkdir()
    db = results / "mlflow.db"
    db.write_bytes(b"not a database, " * 200)
    line = refused([f"results_dir={results}", *TINY, "trainer.loggers=mlflow"], capsys)
    assert f"mlflow: {db} (the default store) is not a usable SQLite store (file is not a database)" in line, line
    assert db.read_bytes() == b"not a database, " * 200 and not (results / "digits_vgg4").exists()
    env.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/nowhere/m.db")
    line = refused([f"results_dir={results}", *TINY, "trainer.loggers=mlflow"], capsys)
    assert f"{tmp_path}/nowhere/m.db (MLFLOW_TRACKING_URI) cannot be created" in line, line


@needs_mlflow
@needs_wandb
def test_each_run_asks_again_as_it_starts(tmp_path, env):
    """A server gone since the sweep began, a Hydra job (which has no sweep-level check): the run fails in one line."""
    from visionbench.train import trackers

    run = {"recipe": "e", "act": "relu", "seed": 0, "results_dir": str(tmp_path), "trainer": {"loggers": ["mlflow"]}}
    env.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(trackers.TrackerUnusable, match="mlflow: the tracking server .* cannot be reached"):
        trackers.build_loggers(run, tmp_path)
    env.setenv("WANDB_MODE", "bogus")
    with pytest.raises(trackers.TrackerUnusable, match="WANDB_MODE='bogus' is not a W&B mode"):
        trackers.build_loggers({**run, "trainer": {"loggers": ["wandb"]}}, tmp_path)


# ---- W&B: a mode it refuses --------------------------------------------------------------------------------
@needs_wandb
def test_a_bogus_wandb_mode_is_one_line_with_the_accepted_values(tmp_path, env, capsys):
    env.setenv("WANDB_MODE", "bogus")
    line = refused([f"results_dir={tmp_path}/r", *TINY, "trainer.loggers=wandb"], capsys)
    assert "wandb: WANDB_MODE='bogus' is not a W&B mode; accepted: online, offline" in line, line
    assert not (tmp_path / "r").exists()
    from visionbench.train.trackers import wandb_mode_problem

    for ok in ("offline", "disabled", "online"):
        env.setenv("WANDB_MODE", ok)
        assert wandb_mode_problem() is None


# ---- a continued MLflow run holds each step once ------------------------------------------------------------
@needs_mlflow
def test_a_continued_mlflow_run_does_not_log_a_step_it_holds(tmp_path, env):
    """A run killed mid-epoch logged steps 0..9; its checkpoint is at step 6, so the resumed session logs 7, 8, 9
    again: they are not given to MLflow twice; later steps, and keys the run did not have, are logged."""
    from mlflow.tracking import MlflowClient

    from visionbench.train import trackers

    env.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/m.db")
    uri = trackers.mlflow_uri(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = trackers.ContinuedMLFlowLogger(experiment_name="e", tracking_uri=uri)
    for step in range(10):
        first.log_metrics({"train/loss_step": float(step)}, step=step)
    first.log_metrics({"val_top1": 50.0}, step=4)
    layout.files(run_dir).trackers.write_text(json.dumps({"mlflow": first.run_id}))

    run = {"recipe": "e", "act": "relu", "seed": 0, "results_dir": str(tmp_path), "trainer": {"loggers": ["mlflow"]}}
    (logger,) = trackers.build_loggers(run, run_dir, resumed_epochs=1)
    assert isinstance(logger, trackers.ContinuedMLFlowLogger) and logger.run_id == first.run_id
    for step in range(7, 13):
        logger.log_metrics({"train/loss_step": 100.0 + step, "epoch": 1.0}, step=step)
    logger.log_metrics({"val_top1": 60.0}, step=12)

    client = MlflowClient(uri)
    loss = sorted((m.step, m.value) for m in client.get_metric_history(first.run_id, "train/loss_step"))
    assert [s for s, _ in loss] == list(range(13))  # each step once
    assert loss[9] == (9, 9.0) and loss[10] == (10, 110.0)  # the first session's points kept, then the new ones
    assert sorted(m.step for m in client.get_metric_history(first.run_id, "epoch")) == list(range(7, 13))
    assert sorted(m.step for m in client.get_metric_history(first.run_id, "val_top1")) == [4, 12]
    (fresh,) = trackers.build_loggers(run, tmp_path / "other", resumed_epochs=0)
    assert not fresh._continued


@pytest.mark.slow  # a crashed and resumed trained run (6 s)
@needs_mlflow
def test_a_run_crashed_mid_epoch_and_resumed_holds_each_mlflow_step_once(tmp_path, env, monkeypatch):
    """The sweep for real: 25 steps an epoch, the loss logged every 10; a crash at step 40 (as kill -9 would) after
    steps 29 and 39 were logged, a resume from the checkpoint at step 25 that trains and logs them again."""
    from mlflow.tracking import MlflowClient

    from visionbench.sweep.preflight import load_config
    from visionbench.sweep.sweep import run_sweep
    from visionbench.train import run as train_run
    from visionbench.train.trackers import mlflow_uri

    original = train_run._Throughput.on_train_batch_end

    def crash(self, trainer, *args):
        original(self, trainer, *args)
        if trainer.global_step == 40:
            raise RuntimeError("simulated crash mid-epoch")

    results = tmp_path / "r"
    args = [f"results_dir={results}", *shrunk("act=relu", "seeds=1", "batch_size=8", "trainer.loggers=mlflow")]
    monkeypatch.setattr(train_run._Throughput, "on_train_batch_end", crash)
    assert [o.status for o in run_sweep(load_config(args), progress=False)] == ["failed"]
    monkeypatch.setattr(train_run._Throughput, "on_train_batch_end", original)
    assert [o.status for o in run_sweep(load_config(args), progress=False)] == ["completed"]
    run_id = json.loads(layout.files(results / "digits_vgg4" / "relu" / "seed_0").trackers.read_text())["mlflow"]
    steps = [m.step for m in MlflowClient(mlflow_uri(results)).get_metric_history(run_id, "train/loss_step")]
    assert sorted(steps) == [9, 19, 29, 39, 49], steps  # 29 and 39 once each


# ---- resume: trainer.portable flipped ------------------------------------------------------------------------
def test_flipping_portable_across_a_resume_is_refused(relu_pair, tmp_path, capsys):
    results = copy_tree(relu_pair, tmp_path / "r")
    run_dir = results / "digits_vgg4" / "relu" / "seed_0"
    args = [f"results_dir={results}", *shrunk("act=relu", "seeds=2", "trainer.portable=true")]  # the shrink's: false
    from visionbench.sweep.preflight import load_config
    from visionbench.sweep.sweep import plan

    assert len(plan(load_config(args))) == 2  # completed runs (skipped by the sweep): nothing mixed, nothing refused
    summary = layout.files(run_dir).summary
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "status": layout.INTERRUPTED}))
    line = refused(args, capsys)
    assert line == (
        f"visionbench run: {run_dir} was trained so far with trainer.portable=false; resuming it with "
        "trainer.portable=true would mix both in one run: rerun with trainer.portable=false, or delete "
        "that directory to retrain it"
    )
    assert layout.read_summary(run_dir)["status"] == layout.INTERRUPTED  # nothing touched


# ---- seeds_max without seeds=auto ----------------------------------------------------------------------------
def test_seeds_max_without_seeds_auto_is_refused(tmp_path, capsys):
    line = refused([f"results_dir={tmp_path}/r", "seeds=4", "seeds_max=5"], capsys)
    assert "seeds_max applies only with seeds=auto" in line and "seeds=4 with seeds_max=5" in line, line
    from visionbench.sweep.preflight import load_config

    assert load_config(["seeds=auto", "seeds_max=5"]).seeds_max == 5
    assert load_config(["seeds=4", "seeds_max=10"]).seeds == 4  # the default: nothing to ignore
    assert not (tmp_path / "r").exists()


# ---- W&B: online without a login ------------------------------------------------------------------------------
def test_online_wandb_without_a_login_is_refused_in_one_line_before_the_sweep(tmp_path, env, monkeypatch):
    """W&B without a login failed every run (exit 1); docs/running.md promises one line before the sweep."""
    from visionbench.train.trackers import unusable, wandb_login_problem

    for var in ("WANDB_API_KEY", "WANDB_BASE_URL", "NETRC"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    why = unusable(["wandb"], tmp_path)
    assert why and "no W&B login for api.wandb.ai" in why and "WANDB_MODE=offline" in why
    env.setenv("WANDB_MODE", "offline")
    assert wandb_login_problem() is None
    env.delenv("WANDB_MODE", raising=False)
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password abc\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert wandb_login_problem() is None  # `wandb login` wrote it
    (tmp_path / ".netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_login_problem() is None


@needs_wandb
def test_visionbench_run_with_wandb_and_no_login_trains_nothing(tmp_path, env, monkeypatch, capsys):
    for var in ("WANDB_API_KEY", "WANDB_BASE_URL", "NETRC", "WANDB_MODE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    line = refused([f"results_dir={tmp_path}/r", *TINY, "trainer.loggers=wandb"], capsys)
    assert "wandb: no W&B login for api.wandb.ai" in line, line
    assert not (tmp_path / "r").exists()
