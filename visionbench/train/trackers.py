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

import contextlib
import csv
import json
import logging
import netrc
import os
import re
import sqlite3
import sys
import typing
import urllib.request
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import urlparse

from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from lightning_utilities.core.imports import module_available

from ..results.io import atomic_write_text, environ_set
from ..results.layout import files
from ..results.settings import setting_label

EXTRAS = {"mlflow": "mlflow", "wandb": "wandb"}  # tracker -> the visionbench extra that installs it
END = {"completed": "FINISHED", "interrupted": "KILLED"}  # MLflow's run status; anything else is FAILED
PROBE_TIMEOUT_S = 10  # the MLflow probe's one request (no retries); MLflow's own default retries for minutes
WANDB_MODES = ("online", "offline", "shared", "disabled", "dryrun", "run")  # wandb 0.2x's; its own list is read first


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


def mlflow_uri(results_dir: str | Path) -> str:
    """$MLFLOW_TRACKING_URI, else a SQLite store beside the recipes' results (MLflow's own local default since
    its file store went into maintenance mode): `sqlite:///<results_dir>/mlflow.db`."""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(results_dir).resolve() / 'mlflow.db'}"
    if uri.startswith("file:") or "://" not in uri:  # a file store, asked for by name: MLflow 3 refuses it unless
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # told it is wanted (its maintenance-mode opt-in)
    return uri


def unusable(names: Iterable[str], results_dir: str | Path) -> str | None:
    """One line for the first requested tracker that is installed but cannot work as configured, None when all
    can (`visionbench run` asks before its first run): `WANDB_MODE` not one of W&B's modes; the MLflow store
    (`mlflow_uri`) a tracking server that does not answer within seconds, or a SQLite file that is no database."""
    names = list(dict.fromkeys(names))
    if "wandb" in names and (why := wandb_mode_problem() or wandb_login_problem()):
        return why
    if "mlflow" in names and (why := mlflow_problem(mlflow_uri(results_dir))):
        return why
    return None


def wandb_modes() -> tuple[str, ...]:
    """The values W&B accepts for its `mode` setting ($WANDB_MODE): its settings model's own list where it has one."""
    try:
        from wandb.sdk.wandb_settings import Settings

        modes = typing.get_args(Settings.model_fields["mode"].annotation)
        return tuple(m for m in modes if isinstance(m, str)) or WANDB_MODES
    except Exception:  # noqa: BLE001 - another wandb: the list it has had for years
        return WANDB_MODES


def wandb_mode_problem() -> str | None:
    """`WANDB_MODE` that W&B would refuse in every run (a pydantic error each time): one line naming it."""
    mode = os.environ.get("WANDB_MODE")
    if mode is None or mode in (accepted := wandb_modes()):
        return None
    return (
        f"trainer.loggers: wandb: WANDB_MODE={mode!r} is not a W&B mode; accepted: {', '.join(accepted)} "
        "(offline needs no account; unset WANDB_MODE for W&B's default, online)"
    )


OFFLINE_MODES = ("offline", "disabled", "dryrun")  # W&B modes that log without an account


def wandb_login_problem() -> str | None:
    """Online W&B without a login (no WANDB_API_KEY, no entry for its host in ~/.netrc, where `wandb login` puts
    it) would fail every run at its first step: one line before the sweep instead. No network is asked."""
    if os.environ.get("WANDB_MODE", "online") in OFFLINE_MODES or os.environ.get("WANDB_API_KEY"):
        return None
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    try:
        if netrc.netrc(os.environ.get("NETRC")).authenticators(host):
            return None
    except (OSError, netrc.NetrcParseError):  # no ~/.netrc, or one W&B could not read either
        pass
    return (
        f"trainer.loggers: wandb: no W&B login for {host} (no WANDB_API_KEY, no {host} entry in ~/.netrc): run "
        "`wandb login`, or set WANDB_MODE=offline to log into each run's folder (`wandb sync` later); nothing trained"
    )


def _shown(uri: str) -> str:
    """A URI as said on stderr: a password in it is not."""
    return re.sub(r"(://[^/@:]*):[^/@]*@", r"\1:***@", uri)


def mlflow_problem(uri: str) -> str | None:
    """Why MLflow cannot log to `uri` (one line naming the tracker and the URI or file), None when it can as far as
    a probe tells: an http(s) server is asked once (`PROBE_TIMEOUT_S`, no retries: MLflow's own retries would hold
    each run for minutes, silently); a SQLite store's file, when it exists, must be a database. Other stores
    (file:, databricks, ...) are left to MLflow."""
    source = "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "the default store"
    scheme = uri.split(":", 1)[0].lower()
    if scheme == "sqlite" and uri.startswith("sqlite:///"):
        return _sqlite_problem(Path(uri[len("sqlite:///") :]), source)
    if scheme not in ("http", "https"):
        return None
    from mlflow.tracking import MlflowClient

    try:
        with _bounded_requests():
            MlflowClient(uri).search_experiments(max_results=1)
    except Exception as e:  # noqa: BLE001 - refused, timed out, a proxy's 404, no MLflow there: all one line
        return (
            f"trainer.loggers: mlflow: the tracking server {_shown(uri)} ({source}) cannot be reached: "
            f"{_reason(e)}; start it, or fix or unset MLFLOW_TRACKING_URI "
            "(unset: a SQLite store beside the results)"
        )
    return None


def _sqlite_problem(path: Path, source: str) -> str | None:
    if not path.exists():
        if source == "MLFLOW_TRACKING_URI" and not path.parent.is_dir():
            return (
                f"trainer.loggers: mlflow: the SQLite store {path} (MLFLOW_TRACKING_URI) cannot be created: "
                f"its folder {path.parent} does not exist"
            )
        return None  # created by the first run
    why = None
    if not path.is_file():
        why = "it is not a file"
    else:
        try:
            con = sqlite3.connect(
                f"file:{urllib.request.pathname2url(str(path.resolve()))}?mode=ro", uri=True, timeout=5
            )
            try:
                con.execute("SELECT count(*) FROM sqlite_master").fetchone()
            finally:
                con.close()
        except sqlite3.Error as e:
            if "locked" not in str(e).lower():  # another run writing now: a database, and in use
                why = str(e)
    if why is None:
        return None
    return (
        f"trainer.loggers: mlflow: {path} ({source}) is not a usable SQLite store ({why}); move it away (a new "
        "store is created in its place) or name another with MLFLOW_TRACKING_URI"
    )


def _bounded_requests() -> contextlib.AbstractContextManager:
    """MLflow's HTTP requests in this block: one try, `PROBE_TIMEOUT_S` each (its variables, read per request)."""
    return environ_set(
        {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(PROBE_TIMEOUT_S))}
    )


def _reason(e: BaseException) -> str:
    """The cause in MLflow's long request error: `[Errno 111] Connection refused`, `no answer in 10 s`, `HTTP 404`."""
    text = str(e)
    if found := re.search(r"\[Errno -?\d+\][^'\")\]]*", text):
        return found.group(0).strip()
    if re.search(r"timed? ?out", text, re.I):
        return f"no answer in {PROBE_TIMEOUT_S} s"
    if found := re.search(r"error code (\d+)", text):
        return f"HTTP {found.group(1)}, not an MLflow tracking server's answer"
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    return f"{type(e).__name__}: {first[:160]}"


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


def headline(loggers: list[Logger], run: Mapping, metrics: Mapping) -> None:
    """The run's headline metrics (`HEADLINE`: what the report's verdicts read, from the summary's rows) into every
    tracker at the end of a completed run: MLflow metrics, W&B's run summary, TensorBoard's HParams view (the
    flattened config as hparams, these as its metrics; hparams.yaml rewritten). Said on stderr if one fails."""
    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

    if rank_zero_only.rank != 0:
        return
    found = {k: float(metrics[k]) for k in HEADLINE if isinstance(metrics.get(k), (int, float))}
    if not found:
        return
    for logger in loggers:
        try:
            if isinstance(logger, TensorBoardLogger):
                logger.log_hyperparams(flat_params(run), metrics={f"hparams/{k}": v for k, v in found.items()})
                Path(logger.log_dir, logger.NAME_HPARAMS_FILE).unlink(missing_ok=True)  # save() keeps an old one
                logger.save()
            elif isinstance(logger, MLFlowLogger) and logger._initialized:
                for k, v in found.items():
                    logger.experiment.log_metric(logger.run_id, k, v)
            elif isinstance(logger, WandbLogger) and logger._experiment is not None:
                logger.experiment.summary.update(found)
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
