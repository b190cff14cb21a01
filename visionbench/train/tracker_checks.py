"""Can each requested tracker work as configured? One line before the sweep instead of a failure in every run
(train/trackers.py builds them; docs/running.md#experiment-trackers): a WANDB_MODE W&B refuses, online W&B without
a login, an MLflow server that does not answer within seconds, a store that is no SQLite database.

    why = unusable(cfg.trainer.loggers, cfg.results_dir)   # None when all can
"""

from __future__ import annotations

import contextlib
import netrc
import os
import re
import sqlite3
import typing
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlparse

from ..results.io import environ_set

PROBE_TIMEOUT_S = 10  # the MLflow probe's one request (no retries); MLflow's own default retries for minutes
WANDB_MODES = ("online", "offline", "shared", "disabled", "dryrun", "run")  # wandb 0.2x's; its own list is read first


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
