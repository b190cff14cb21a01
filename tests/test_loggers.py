"""Experiment trackers (`trainer.loggers`, train/trackers.py), for real and offline: MLflow with a local SQLite
store read back through MLflow's own client, W&B in offline mode read back from the offline run's own record
file (`run-<id>.wandb`, wandb's protobuf records), Lightning's CSV and TensorBoard files. A two-seed sweep gives
two tracker runs of one group, each closed; a run that fails is closed as failed and, resumed, continues its
tracker runs. Bad input: an unknown name, a tracker whose package is missing (one line, before training).
The tracker tests skip only where the `mlflow` / `wandb` extra is not installed (`make install` adds both)."""

from __future__ import annotations

import csv
import json
import struct
from pathlib import Path

import pytest

from visionbench.cli import main
from visionbench.config import ConfigError, compose, parse
from visionbench.sweep.preflight import load_config
from visionbench.sweep.sweep import run_sweep

from .helpers import metric_rows, needs_mlflow, needs_wandb, shrunk


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """W&B offline, with its settings and caches under the test's folder; MLflow's default store."""
    for var in ("MLFLOW_TRACKING_URI", "WANDB_PROJECT", "WANDB_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb_home"))
    return tmp_path


def sweep(results: Path, *args: str):
    """A sweep of relu runs into `results`: tests/helpers.py's shrink with `args`."""
    return run_sweep(load_config([f"results_dir={results}", *shrunk("act=relu", *args)]), progress=False)


def wandb_records(run_dir: Path) -> list:
    """The records of each offline W&B run in `run_dir` (oldest first): wandb's record file is a LevelDB-style log
    (a 7-byte `:W&B` header, 32 KiB blocks of chunks with a 7-byte header each) of `wandb_internal_pb2.Record`s."""
    from wandb.proto import wandb_internal_pb2 as pb

    out = []
    for path in sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb")):
        data, records, pos, block, chunks = path.read_bytes(), [], 7, 32768, b""
        assert struct.unpack("<4sHB", data[:7])[:2] == (b":W&B", 0xBEE1)
        while pos + 7 <= len(data):
            _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
            if block - pos % block < 7 or (kind, length) == (0, 0):  # a block's padding
                pos += block - pos % block
                continue
            chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
            chunks = chunk if kind in (1, 2) else chunks + chunk  # full, first | middle, last
            if kind in (1, 4):
                record = pb.Record()
                record.ParseFromString(chunks)
                records.append(record)
        out.append(records)
    return out


def wandb_run(records: list) -> dict:
    """What one offline W&B run holds: its run record, history rows, final summary and exit code."""

    def items(entries):
        return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in entries}

    out: dict = {"history": [], "summary": {}}
    for r in records:
        kind = r.WhichOneof("record_type")
        if kind == "run":
            out["run"] = r.run
        elif kind == "history":
            out["history"].append(items(r.history.item))
        elif kind == "summary":
            out["summary"].update(items(r.summary.update))
        elif kind == "exit":
            out["exit_code"] = r.exit.exit_code
    return out


def mlflow_runs(results: Path, experiment: str = "digits_vgg4") -> dict:
    """{run name: (run, val_top1 history)} from the default store, through MLflow's own client."""
    from mlflow.tracking import MlflowClient

    from visionbench.train.trackers import mlflow_uri

    client = MlflowClient(mlflow_uri(results))
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return {
        r.info.run_name: (
            r,
            [m.value for m in sorted(client.get_metric_history(r.info.run_id, "val_top1"), key=lambda m: m.step)],
        )
        for r in runs
    }


def val_top1(run_dir: Path) -> list[float]:
    return [float(r["val_top1"]) for r in metric_rows(run_dir / "metrics.csv")]


# ---- every tracker, a two-seed sweep: two runs, one group, each closed -----------------------------------------
@pytest.mark.slow  # two trained runs into both trackers (5 s)
@needs_mlflow
@needs_wandb
def test_two_seeds_are_two_tracker_runs_of_one_group_read_back_offline(offline):
    results = offline / "r"
    outcomes = sweep(results, "seeds=2", "epochs=1", "trainer.loggers=tensorboard,csv,mlflow,wandb")
    assert [o.status for o in outcomes] == ["completed"] * 2
    runs = mlflow_runs(results)
    assert sorted(runs) == ["relu seed 0", "relu seed 1"]
    ids = {}
    for seed in (0, 1):
        d = results / "digits_vgg4" / "relu" / f"seed_{seed}"
        ids[seed] = json.loads((d / "trackers.json").read_text())
        # MLflow: the run, its tags, the flattened run config as parameters, the epoch metrics
        run, history = runs[f"relu seed {seed}"]
        assert run.info.status == "FINISHED" and run.info.run_id == ids[seed]["mlflow"]
        assert {k: run.data.tags[k] for k in ("recipe", "act", "seed", "status")} == {
            "recipe": "digits_vgg4",
            "act": "relu",
            "seed": str(seed),
            "status": "completed",
        }
        assert run.data.params["seed"] == str(seed) and run.data.params["epochs"] == "1"
        assert run.data.params["trainer/loggers"] == "['tensorboard', 'csv', 'mlflow', 'wandb']"
        assert history == pytest.approx(val_top1(d))  # the same numbers as metrics.csv, the report's source
        # W&B offline: one run directory per seed, its own id, the group of the cell, the metrics, finished
        (records,) = wandb_records(d)
        w = wandb_run(records)
        assert (w["run"].run_id, w["run"].run_group, w["run"].display_name, w["run"].project) == (
            ids[seed]["wandb"],
            "digits_vgg4/relu",
            f"relu seed {seed}",
            "digits_vgg4",
        )
        assert [h["val_top1"] for h in w["history"] if "val_top1" in h] == pytest.approx(val_top1(d))
        assert w["summary"]["status"] == "completed" and w["exit_code"] == 0
        # Lightning's own files
        assert [float(r["val_top1"]) for r in metric_rows(d / "csv" / "metrics.csv") if r["val_top1"]] == pytest.approx(
            val_top1(d)
        )
        assert list((d / "tb").glob("events.out.tfevents.*"))
        # the headline metric (what the verdicts read) reaches every tracker; TensorBoard's HParams view is filled
        summary = json.loads((d / "summary.json").read_text())
        value = summary["metrics"]["test_top1_at_best_val"]
        assert run.data.metrics["test_top1_at_best_val"] == pytest.approx(value)
        assert w["summary"]["test_top1_at_best_val"] == pytest.approx(value)
        hparams = (d / "tb" / "hparams.yaml").read_text()
        assert hparams.strip() not in ("", "{}") and "optim/lr" in hparams and "seed" in hparams
    assert ids[0]["wandb"] != ids[1]["wandb"] and ids[0]["mlflow"] != ids[1]["mlflow"]


# ---- a failed run is closed as failed; resumed, it continues its tracker runs --------------------------------
@needs_mlflow
@needs_wandb
def test_failed_run_closes_its_tracker_runs_and_resume_continues_them(offline, monkeypatch):
    from visionbench.train import callbacks

    original = callbacks.EpochSeeder.on_train_epoch_start

    def crash(self, trainer, pl_module):
        if trainer.current_epoch == 1:
            raise RuntimeError("simulated crash")
        original(self, trainer, pl_module)

    results, args = offline / "r", ("seeds=1", "epochs=2", "trainer.loggers=[mlflow,wandb,csv]")
    monkeypatch.setattr(callbacks.EpochSeeder, "on_train_epoch_start", crash)
    assert [o.status for o in sweep(results, *args)] == ["failed"]
    d = results / "digits_vgg4" / "relu" / "seed_0"
    ids = json.loads((d / "trackers.json").read_text())
    run, history = mlflow_runs(results)["relu seed 0"]
    assert (run.info.status, run.data.tags["status"], len(history)) == ("FAILED", "failed", 1)
    (first,) = wandb_records(d)
    assert wandb_run(first)["exit_code"] == 1 and wandb_run(first)["summary"]["status"] == "failed"

    monkeypatch.setattr(callbacks.EpochSeeder, "on_train_epoch_start", original)
    assert [o.status for o in sweep(results, *args)] == ["completed"]
    assert json.loads((d / "trackers.json").read_text()) == ids  # the same tracker runs, continued
    runs = mlflow_runs(results)
    assert list(runs) == ["relu seed 0"]
    run, history = runs["relu seed 0"]
    assert (run.info.status, run.data.tags["status"]) == ("FINISHED", "completed")
    assert history == pytest.approx(val_top1(d))  # epoch 1 from the first session, epoch 2 from the resumed one
    first, second = wandb_records(d)
    assert wandb_run(second)["run"].run_id == ids["wandb"] and wandb_run(second)["exit_code"] == 0
    assert [float(r["val_top1"]) for r in metric_rows(d / "csv" / "metrics.csv") if r["val_top1"]] == pytest.approx(
        val_top1(d)
    )  # Lightning's CSV keeps the first session's rows


# ---- the value's grammar, and bad input ---------------------------------------------------------------------
def test_loggers_is_one_list_value_not_a_factor():
    for arg in ("trainer.loggers=tensorboard,mlflow", "trainer.loggers=[tensorboard,mlflow]"):
        cfg = compose(parse([arg]))
        assert list(cfg.trainer.loggers) == ["tensorboard", "mlflow"] and not cfg.factors, arg
    assert list(compose(parse(["trainer.loggers=csv"])).trainer.loggers) == ["csv"]
    assert list(compose(parse([])).trainer.loggers) == ["tensorboard"]  # the default: what runs always wrote


def test_unknown_logger_is_one_line_with_the_choices_before_training(tmp_path, capsys):
    assert main(["run", f"results_dir={tmp_path}/r", "trainer.loggers=tensorboard,mlfow"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "trainer.loggers must be a list, each one of tensorboard, csv, mlflow, wandb" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("tracker,flag", [("mlflow", "_MLFLOW_AVAILABLE"), ("wandb", "_WANDB_AVAILABLE")])
def test_tracker_not_installed_says_which_extra_before_training(tracker, flag, tmp_path, capsys, monkeypatch):
    import importlib

    monkeypatch.setattr(importlib.import_module(f"lightning.pytorch.loggers.{tracker}"), flag, False)
    with pytest.raises(ConfigError, match=rf"pip install 'visionbench\[{tracker}\]'"):
        load_config([f"trainer.loggers=tensorboard,{tracker}"])
    assert main(["run", f"results_dir={tmp_path}/r", f"trainer.loggers=[csv,{tracker}]"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{tracker} is not installed" in err, err
    assert not (tmp_path / "r").exists()


def test_a_file_store_asked_for_by_name_is_used(tmp_path, monkeypatch):
    """MLflow 3 refuses its file store unless opted in: MLFLOW_TRACKING_URI=file:... is the opt-in."""
    from visionbench.train import trackers

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path}/mlruns")
    assert trackers.mlflow_uri(tmp_path) == f"file:{tmp_path}/mlruns"
    assert trackers.os.environ["MLFLOW_ALLOW_FILE_STORE"] == "true"
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert (
        trackers.mlflow_uri(tmp_path).startswith("sqlite:///") and "MLFLOW_ALLOW_FILE_STORE" not in trackers.os.environ
    )


# ---- the headline: what the verdicts read, into every configured tracker (no training; issue 57 item 4) ----------
class RecordingLogger:
    """A stand-in for any other Lightning logger: what `headline` hands it through Lightning's logger API."""

    name, version = "recording", "0"

    def __init__(self):
        self.metrics, self.params, self.saved = [], [], 0

    def log_metrics(self, metrics, step=None):
        self.metrics.append(dict(metrics))

    def log_hyperparams(self, params, *args, **kwargs):
        self.params.append(dict(params))

    def save(self):
        self.saved += 1


def test_the_headline_reaches_tensorboards_hparams_view_the_csv_and_any_logger(tmp_path):
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from visionbench.train.trackers import headline

    run = {"seed": 3, "optim": {"lr": 0.05, "name": "sgd"}, "report": {"metric": "val_top1_final"}, "defaults": []}
    metrics = {"test_top1_at_best_val": 91.5, "val_top1_best": 92.0, "val_top1_final": 91.0, "best_epoch": 4}
    tb = TensorBoardLogger(tmp_path, name="tb", version="", default_hp_metric=False)
    csv_logger, other = CSVLogger(tmp_path, name="csv", version=""), RecordingLogger()
    headline([tb, csv_logger, other], run, metrics, "diverged", epochs=6)

    expected = {"test_top1_at_best_val": 91.5, "val_top1_best": 92.0, "best_epoch": 4.0, "val_top1_final": 91.0}
    expected["epochs_trained"] = 6.0  # the report's metric rides along; the epochs trained too
    assert other.metrics == [expected] and other.saved == 1
    assert other.params[0]["optim/lr"] == 0.05 and other.params[0]["status"] == "diverged"
    hparams = (tmp_path / "tb" / "hparams.yaml").read_text()
    assert "optim/lr: 0.05" in hparams and "status: diverged" in hparams and "seed: 3" in hparams
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert events.Scalars("hparams/test_top1_at_best_val")[0].value == pytest.approx(91.5)
    assert "_hparams_/session_start_info" in events.summary_metadata  # TensorBoard's HParams view has a session
    rows = list(csv.DictReader((tmp_path / "csv" / "metrics.csv").open()))
    assert float(rows[-1]["test_top1_at_best_val"]) == 91.5 and float(rows[-1]["epochs_trained"]) == 6.0
    assert "status: diverged" in (tmp_path / "csv" / "hparams.yaml").read_text()


def test_a_tracker_that_fails_the_headline_is_one_warning_not_a_failed_run(tmp_path, capsys):
    from visionbench.train.trackers import headline

    class Broken(RecordingLogger):
        def log_metrics(self, metrics, step=None):
            raise OSError("disk gone")

    headline([Broken()], {"seed": 0}, {"test_top1_at_best_val": 50.0}, "completed", epochs=1)
    assert capsys.readouterr().err == "warning: Broken did not take the headline metrics: disk gone\n"
