"""Experiment trackers: `trainer.loggers`, any subset of tensorboard, csv, mlflow, wandb, as Lightning's own
logger classes; one tracker run per seed, closed whatever ends it (docs/running.md#experiment-trackers).

    loggers = build_loggers(run, run_dir, resumed_epochs)   # for build_trainer(logger=...)
    open_runs(loggers, run, run_dir, fresh)                 # create the tracker runs, log the config, store ids
    ... trainer.fit ...
    close(loggers, "completed")                             # or diverged | failed | interrupted, always

metrics.csv (train/callbacks.py `MetricsWriter`) stays the source of truth of the report: the trackers get
what Lightning logs (the same epoch metrics, and the per-step training loss). Names: MLflow experiment and
W&B project = the recipe ($WANDB_PROJECT first); W&B group = recipe[/setting]/act; run name `act seed k`; tags
recipe, act, seed, setting. A resumed run continues its MLflow and W&B runs (their ids: trackers.json).
"""
from __future__ import annotations

import csv
import json
import logging
import os
import sys
import uuid
from pathlib import Path
from typing import Iterable, Mapping

from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from lightning_utilities.core.imports import module_available

from ..results.io import atomic_write_text
from ..results.layout import files
from ..results.settings import setting_label

EXTRAS = {"mlflow": "mlflow", "wandb": "wandb"}  # tracker -> the visionbench extra that installs it
END = {"completed": "FINISHED", "interrupted": "KILLED"}  # MLflow's run status; anything else is FAILED


def available(name: str) -> bool:
    """Whether the tracker's package is there: Lightning's own check (the one its logger class raises on); the
    default MLflow store (SQLite) needs SQLAlchemy and Alembic too (the `mlflow` extra installs them)."""
    if name == "mlflow":
        from lightning.pytorch.loggers import mlflow

        return bool(mlflow._MLFLOW_AVAILABLE) and (bool(os.environ.get("MLFLOW_TRACKING_URI"))
                                                   or module_available("sqlalchemy") and module_available("alembic"))
    if name == "wandb":
        from lightning.pytorch.loggers import wandb

        return bool(wandb._WANDB_AVAILABLE)
    return True


def missing(names: Iterable[str]) -> str | None:
    """One line for the first requested tracker that is not installed (the sweep's preflight says it)."""
    for name in names:
        if not available(name):
            return (f"trainer.loggers: {name} is not installed; install it with: "
                    f"pip install 'visionbench[{EXTRAS[name]}]'")
    return None


def mlflow_uri(results_dir: str | Path) -> str:
    """$MLFLOW_TRACKING_URI, else a SQLite store beside the recipes' results (MLflow's own local default since
    its file store went into maintenance mode): `sqlite:///<results_dir>/mlflow.db`."""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(results_dir).resolve() / 'mlflow.db'}"
    if uri.startswith("file:") or "://" not in uri:  # a file store, asked for by name: MLflow 3 refuses it unless
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # told it is wanted (its maintenance-mode opt-in)
    return uri


def _names(run: Mapping) -> tuple[str, str, dict[str, str]]:
    """(group, run name, tags) of a run: its cell (recipe, setting, act) and its seed."""
    label, setting = str(run.get("act_label") or run["act"]), setting_label(run.get("setting") or {})
    group = "/".join(p for p in (run["recipe"], setting, label) if p)
    name = f"{label} seed {run['seed']}" + (f" ({setting})" if setting else "")
    return group, name, {"recipe": run["recipe"], "act": label, "seed": str(run["seed"]), "setting": setting}


def _stored_ids(run_dir: Path) -> dict:
    try:
        return json.loads(files(run_dir).trackers.read_text())
    except (OSError, ValueError):
        return {}


def build_loggers(run: Mapping, run_dir: Path, resumed_epochs: int = 0) -> list[Logger]:
    """Lightning loggers for the run config `run` (config.yaml's dict), in `trainer.loggers`' order; a run resumed
    after `resumed_epochs` epochs continues its MLflow and W&B runs and keeps csv/metrics.csv's earlier rows."""
    run_dir = Path(run_dir)
    ids = _stored_ids(run_dir) if resumed_epochs else {}
    group, name, tags = _names(run)
    out: list[Logger] = []
    for tracker in dict.fromkeys(run["trainer"]["loggers"]):
        if tracker == "tensorboard":
            out.append(TensorBoardLogger(run_dir, name="tb", version=""))
        elif tracker == "csv":
            out.append(_csv(run_dir, resumed_epochs))
        elif tracker == "mlflow":
            from lightning.pytorch.loggers import MLFlowLogger

            for noisy in ("mlflow", "alembic", "lightning.pytorch.loggers.mlflow"):  # table creation; "Creating it."
                logging.getLogger(noisy).setLevel(logging.ERROR)
            uri = mlflow_uri(run["results_dir"])
            run_id = ids.get("mlflow") if _mlflow_run_exists(uri, ids.get("mlflow")) else None
            out.append(MLFlowLogger(experiment_name=run["recipe"], run_name=name, tracking_uri=uri, tags=tags,
                                    run_id=run_id))
        elif tracker == "wandb":
            import wandb
            from lightning.pytorch.loggers import WandbLogger

            if wandb.run is not None:  # never log into another seed's run (lightning-hydra-template#289)
                wandb.run.finish()
            labels = [t[:64] for t in (run["recipe"], tags["act"], f"seed_{run['seed']}", tags["setting"]) if t]
            logger = WandbLogger(name=name, project=os.environ.get("WANDB_PROJECT") or run["recipe"],
                                 save_dir=str(run_dir), id=ids.get("wandb") or uuid.uuid4().hex[:12], group=group,
                                 job_type="train", tags=labels)
            logger._wandb_init.pop("anonymous", None)  # Lightning's None: wandb warns that it has no effect
            out.append(logger)
    return out


def _csv(run_dir: Path, resumed_epochs: int) -> CSVLogger:
    """Lightning's CSVLogger into <run>/csv/; resumed, with the rows of the epochs the checkpoint completed (its
    writer would otherwise start the file again)."""
    logger = CSVLogger(run_dir, name="csv", version="")
    path = Path(logger.log_dir) / "metrics.csv"
    if resumed_epochs and path.exists() and rank_zero_only.rank == 0:
        with path.open(newline="") as f:
            rows = [r for r in csv.DictReader(f) if r.get("epoch") and float(r["epoch"]) < resumed_epochs]
        logger.experiment.metrics.extend(rows)  # written with the next epoch's
    return logger


def _mlflow_run_exists(uri: str, run_id: str | None) -> bool:
    from mlflow.tracking import MlflowClient

    if uri.startswith("sqlite:///"):  # create the tables once, not in each of parallel=K workers at the same time
        from filelock import FileLock

        with FileLock(uri[len("sqlite:///"):] + ".lock"):
            MlflowClient(uri).search_experiments(max_results=1)
    if not run_id:
        return False
    try:
        MlflowClient(uri).get_run(run_id)
        return True
    except Exception:  # noqa: BLE001 - another store now: a new tracker run
        return False


def open_runs(loggers: list[Logger], run: Mapping, run_dir: Path, fresh: bool) -> None:
    """Create the MLflow and W&B runs now (rank 0), log the flattened run config as their parameters (a fresh
    run; MLflow's are immutable), mark a continued MLflow run running again, and store their ids."""
    from lightning.pytorch.loggers import MLFlowLogger, WandbLogger

    if rank_zero_only.rank != 0:
        return
    params = {k: v for k, v in run.items() if k != "defaults"}
    ids = {}
    for logger in loggers:
        if isinstance(logger, MLFlowLogger):
            ids["mlflow"] = logger.run_id
            if fresh:
                logger.log_hyperparams(params)
            else:
                logger.experiment.update_run(logger.run_id, "RUNNING")
        elif isinstance(logger, WandbLogger):
            ids["wandb"] = logger.experiment.id
            if fresh:
                logger.log_hyperparams(params)
    if ids:
        atomic_write_text(files(run_dir).trackers, json.dumps(ids, indent=1) + "\n")


def close(loggers: list[Logger], status: str) -> None:
    """End each tracker run with the run's status (completed, diverged, failed, interrupted): MLflow's run
    terminated (FINISHED, KILLED or FAILED, tag `status`), W&B's finished (`wandb.finish`: the next seed in
    this process starts its own run). A tracker that fails to close is said on stderr, never raised."""
    from lightning.pytorch.loggers import MLFlowLogger, WandbLogger

    if rank_zero_only.rank != 0:
        return
    for logger in loggers:
        try:
            if isinstance(logger, MLFlowLogger) and logger._initialized:
                logger.experiment.set_tag(logger.run_id, "status", status)
                logger.experiment.set_terminated(logger.run_id, END.get(status, "FAILED"))
            elif isinstance(logger, WandbLogger) and logger._experiment is not None:
                logger.experiment.summary["status"] = status
                logger.experiment.finish(exit_code=0 if status == "completed" else 1)
                logger._experiment = None
        except Exception as e:  # noqa: BLE001 - the run's own outcome is what the sweep records
            print(f"note: could not close the {type(logger).__name__} run: {type(e).__name__}: {e}", file=sys.stderr)

