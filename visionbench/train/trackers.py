"""Experiment trackers: `trainer.loggers`, any subset of tensorboard, csv, mlflow, wandb, as Lightning's own
logger classes; one tracker run per seed, closed whatever ends it (docs/running.md#experiment-trackers).

    loggers = build_loggers(run, run_dir, resumed_epochs)   # for build_trainer(logger=...)
    open_runs(loggers, run, run_dir, fresh)                 # create the tracker runs, log the config, store ids
    ... trainer.fit ...
    close(loggers, "completed")                             # or diverged | failed | interrupted, always

metrics.csv (train/callbacks.py `MetricsWriter`) stays the source of truth of the report: the trackers get
what Lightning logs (the same epoch metrics, and the per-step training loss). Names: MLflow experiment and
W&B project = the recipe ($WANDB_PROJECT first); W&B group = recipe[/setting]/act; run name `act seed k`; tags
recipe, act, seed, setting. A resumed run continues its MLflow and W&B runs (their ids: trackers.json); a
continued MLflow run is not given a (metric, step) it already holds (a run killed mid-epoch logged steps past
the checkpoint it resumes from). A tracker that cannot work as configured — an MLflow server that does not
answer, a store that is no SQLite database, a WANDB_MODE that W&B refuses — is one line before the sweep
(`unusable`); each run asks again as it starts (the MLflow probe's requests bounded to seconds).
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import sys
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from lightning_utilities.core.imports import module_available

from ..results.io import atomic_write_text
from ..results.layout import files
from ..results.settings import setting_label
from .tracker_checks import (  # noqa: F401 - unusable and the problems are this module's door too
    _bounded_requests,
    mlflow_problem,
    mlflow_uri,
    unusable,
    wandb_login_problem,
    wandb_mode_problem,
)

EXTRAS = {"mlflow": "mlflow", "wandb": "wandb"}  # tracker -> the visionbench extra that installs it
END = {"completed": "FINISHED", "interrupted": "KILLED"}  # MLflow's run status; anything else is FAILED


class TrackerUnusable(ValueError):
    """A requested tracker that cannot work as configured (one line: the tracker, what, where)."""


def available(name: str) -> bool:
    """Whether the tracker's package is there: Lightning's own check (the one its logger class raises on); the
    default MLflow store (SQLite) needs SQLAlchemy and Alembic too (the `mlflow` extra installs them)."""
    if name == "mlflow":
        from lightning.pytorch.loggers import mlflow

        return bool(mlflow._MLFLOW_AVAILABLE) and (
            bool(os.environ.get("MLFLOW_TRACKING_URI"))
            or module_available("sqlalchemy")
            and module_available("alembic")
        )
    if name == "wandb":
        from lightning.pytorch.loggers import wandb

        return bool(wandb._WANDB_AVAILABLE)
    return True


def missing(names: Iterable[str]) -> str | None:
    """One line for the first requested tracker that is not installed (the sweep's preflight says it)."""
    for name in names:
        if not available(name):
            return (
                f"trainer.loggers: {name} is not installed; install it with: pip install 'visionbench[{EXTRAS[name]}]'"
            )
    return None


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
            for noisy in ("mlflow", "alembic", "lightning.pytorch.loggers.mlflow"):  # table creation; "Creating it."
                logging.getLogger(noisy).setLevel(logging.ERROR)
            uri = mlflow_uri(run["results_dir"])
            if why := mlflow_problem(uri):  # in seconds, not MLflow's minutes of silent retries per request
                raise TrackerUnusable(why)
            run_id = ids.get("mlflow") if _mlflow_run_exists(uri, ids.get("mlflow")) else None
            out.append(
                ContinuedMLFlowLogger(
                    experiment_name=run["recipe"],
                    run_name=name,
                    tracking_uri=uri,
                    tags=tags,
                    run_id=run_id,
                    continued=run_id is not None,
                )
            )
        elif tracker == "wandb":
            if why := wandb_mode_problem() or wandb_login_problem():  # one line (a Hydra job asks here only)
                raise TrackerUnusable(why)
            import wandb
            from lightning.pytorch.loggers import WandbLogger

            if wandb.run is not None:  # never log into another seed's run (lightning-hydra-template#289)
                wandb.run.finish()
            labels = [t[:64] for t in (run["recipe"], tags["act"], f"seed_{run['seed']}", tags["setting"]) if t]
            logger = WandbLogger(
                name=name,
                project=os.environ.get("WANDB_PROJECT") or run["recipe"],
                save_dir=str(run_dir),
                id=ids.get("wandb") or uuid.uuid4().hex[:12],
                group=group,
                job_type="train",
                tags=labels,
            )
            logger._wandb_init.pop("anonymous", None)  # Lightning's None: wandb warns that it has no effect
            out.append(logger)
    return out


class ContinuedMLFlowLogger(MLFlowLogger):
    """Lightning's MLFlowLogger that, continuing a resumed run's MLflow run (`continued`), does not log a metric at a
    step that run already holds. A run killed mid-epoch (kill -9) logged that epoch's steps past the checkpoint
    it resumes from; resumed, it trains and logs them again, and MLflow keeps every point it is given: each such
    step of the per-step loss would hold two. The points of the first session are kept (on the CPU the resumed
    run repeats them exactly); the resumed session logs from the first step after them."""

    def __init__(self, *args, continued: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self._continued = continued
        self._held: dict[str, int] | None = None  # metric key -> the last step the run holds

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if self._continued and step is not None:
            held = self._last_steps()
            metrics = {k: v for k, v in metrics.items() if step > held.get(_mlflow_key(k), -1)}
            if not metrics:
                return
        super().log_metrics(metrics, step)

    def _last_steps(self) -> dict[str, int]:
        """What the run held when this session first logged (read once: its own points are not skipped)."""
        if self._held is None:
            client, run_id = self.experiment, self.run_id
            self._held = {
                key: max((m.step for m in client.get_metric_history(run_id, key)), default=-1)
                for key in client.get_run(run_id).data.metrics
            }
        return self._held


def _mlflow_key(key: str) -> str:
    """The name Lightning's MLFlowLogger stores a metric under (it drops characters MLflow refuses)."""
    return re.sub("[^a-zA-Z0-9_/. -]+", "", key)


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

        with FileLock(uri[len("sqlite:///") :] + ".lock"):
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
    from lightning.pytorch.loggers import WandbLogger

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


HEADLINE = ("test_top1_at_best_val", "ema_test_top1_at_best_val", "val_top1_best", "ema_val_top1_best", "best_epoch")


def flat_params(run: Mapping, prefix: str = "") -> dict:
    """The run config flattened to `a/b` keys with scalar values (TensorBoard's HParams view takes no nesting)."""
    out: dict = {}
    for k, v in run.items():
        if k == "defaults":
            continue
        if isinstance(v, Mapping):
            out.update(flat_params(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out


def headline_metrics(run: Mapping, metrics: Mapping, epochs: int | None = None) -> dict[str, float]:
    """What the report's verdicts read of a run, as numbers: `HEADLINE`, the run's `report.metric` when it names
    another summary metric, and `epochs_trained` (the epochs its metrics.csv holds)."""
    chosen = (run.get("report") or {}).get("metric") if isinstance(run.get("report"), Mapping) else None
    keys = HEADLINE + ((chosen,) if chosen and chosen not in HEADLINE else ())
    found = {k: float(metrics[k]) for k in keys if isinstance(metrics.get(k), (int, float))}
    if epochs is not None:
        found["epochs_trained"] = float(epochs)
    return found


def headline(
    loggers: list[Logger], run: Mapping, metrics: Mapping, status: str = "completed", epochs: int | None = None
) -> None:
    """The run's headline (`headline_metrics`: the verdicts' inputs) and its status into every tracker at the end of a
    run that will not resume (completed, diverged, failed): TensorBoard's HParams view (the flattened config and the
    status as hparams, these as its metrics; hparams.yaml rewritten), MLflow metrics, W&B's run summary (their status
    is `close`'s), any other Lightning logger (csv: its metrics.csv and hparams.yaml) by `log_metrics` and
    `log_hyperparams`. Said on stderr if one fails; never fails the run."""
    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

    if rank_zero_only.rank != 0:
        return
    found = headline_metrics(run, metrics, epochs)
    params = {**flat_params(run), "status": status}
    for logger in loggers:
        try:
            if isinstance(logger, TensorBoardLogger):
                logger.log_hyperparams(params, metrics={f"hparams/{k}": v for k, v in found.items()})
                Path(logger.log_dir, logger.NAME_HPARAMS_FILE).unlink(missing_ok=True)  # save() keeps an old one
                logger.save()
            elif isinstance(logger, MLFlowLogger):
                if logger._initialized:
                    for k, v in found.items():
                        logger.experiment.log_metric(logger.run_id, k, v)
            elif isinstance(logger, WandbLogger):
                if logger._experiment is not None:
                    logger.experiment.summary.update(found)
            else:
                logger.log_hyperparams(params)
                if found:
                    logger.log_metrics(found)
                logger.save()
        except Exception as e:  # noqa: BLE001 - a tracker never fails a trained run
            print(f"warning: {type(logger).__name__} did not take the headline metrics: {e}", file=sys.stderr)


def close(loggers: list[Logger], status: str) -> None:
    """End each tracker run with the run's status (completed, diverged, failed, interrupted): MLflow's run
    terminated (FINISHED, KILLED or FAILED, tag `status`), W&B's finished (`wandb.finish`: the next seed in
    this process starts its own run). A tracker that fails to close is said on stderr, never raised."""
    from lightning.pytorch.loggers import WandbLogger

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
