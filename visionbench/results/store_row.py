"""A run as one row of a store (results/store.py): its columns (`COLUMNS`, `metric.<name>`, `env.*`, `placement.*`,
`cfg.<key>`), the hashes that say what it is (`content_sha256`: everything collected, times included, checked on
read) and what it computed (`result_sha256`: status, metrics, curves without their timings, predictions), and the
run itself as the row carries it (`run_json`, `predictions_npz`). The store writes, reads and selects these rows;
this module makes one from a run folder and knows nothing of parts on disk."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from pathlib import Path

import numpy as np

from . import layout
from .predictions import ARRAYS, VARIANTS

# the curves' columns that time the run rather than say what it computed: left out of a run's result
TIMING = re.compile(r".*(_time_s|_seconds|_timestamp)$")
CONFIG = "cfg."

# the columns every part has (type: "s" string, "i" integer, "f" float, "b" boolean, "y" bytes), in this order;
# then metric.<name> (float), and the env.* and placement.* columns
COLUMNS = {
    "recipe": "s",
    "setting": "s",
    "setting_label": "s",
    "act": "s",
    "act_family": "s",
    "act_options": "s",
    "plugins": "s",
    "seed": "i",
    "seed_init": "i",
    "seed_order": "i",
    "seed_aug": "i",
    "status": "s",
    "config_hash": "s",
    "train_time_s": "f",
    "throughput_img_s": "f",
    "peak_mem_mb": "f",
    "gpu_busy_pct": "f",
    "params": "i",
    "act_params": "i",
    "error": "s",
    "git_commit": "s",
    "started": "s",
    "finished": "s",
    "env.python": "s",
    "env.torch": "s",
    "env.visionbench": "s",
    "env.device": "s",
    "env.cpu": "s",
    "env.cpu_capability": "s",
    "env.gpu": "s",
    "env.cuda": "s",
    "env.threads": "i",
    "env.kernels_backend": "s",
    "env.kernels_from": "s",
    "env.data_sha256": "s",
    "environment": "s",
    "placement.parallel": "i",
    "placement.workers": "i",
    "placement.visible_gpu": "s",
    "placement.mps": "s",
    "source": "s",
    "source_path": "s",
    "collected_at": "s",
    "run_path": "s",
    "content_sha256": "s",
    "result_sha256": "s",
    "run_json": "s",
    "predictions_npz": "y",
}
METRIC = "metric."


def _canonical(x, nan: bool = False) -> str:
    if nan:  # NaN is not JSON: as text, so that equal curves hash equal
        x = json.loads(json.dumps(x, default=str), parse_constant=lambda c: c)
    return json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _arrays(predictions) -> dict[str, np.ndarray]:
    """A run's (variants, meta) as the arrays of its npz: each variant's, in fixed dtypes, and meta as JSON."""
    variants, meta = predictions
    out = {}
    for v in VARIANTS:
        if v not in variants:
            continue
        arrays = variants[v]
        for a in ARRAYS:
            out[f"{v}_{a}"] = np.asarray(arrays[a], np.float32 if a in ("p_true", "confidence") else np.int64)
        out[f"{v}_epoch"] = np.int64(arrays["epoch"])
    if meta is not None:
        out["meta"] = np.array(_canonical({k: v for k, v in meta.items() if k != "n_images"}))
    return out


def _with_arrays(h, arrays: dict[str, np.ndarray] | None) -> str:
    """`h`'s hex digest once a run's predictions' arrays (name, dtype, shape, bytes, in name order) are added."""
    for key in sorted(arrays or {}):
        value = np.ascontiguousarray(arrays[key])
        h.update(f"{key}:{value.dtype.str}:{value.shape}".encode())
        h.update(value.tobytes() if value.dtype.kind != "U" else str(value).encode())
    return h.hexdigest()


def content_sha256(run: dict, arrays: dict[str, np.ndarray] | None) -> str:
    """The SHA-256 of what a run says: its summary, config and curves (canonical JSON) and its predictions' arrays."""
    h = hashlib.sha256(_canonical([run.get("summary"), run.get("config"), run.get("metrics_csv")]).encode())
    return _with_arrays(h, arrays)


def curve_rows(metrics_csv) -> list[dict]:
    """A run's per-epoch curves (metrics.csv's text) as rows {column: value}; values as numbers where they are."""
    if not isinstance(metrics_csv, str) or not metrics_csv.strip():
        return []

    def value(v):
        number = layout.finite(v)
        return v if math.isnan(number) else number

    return [
        {k: value(v) for k, v in line.items() if k is not None} for line in csv.DictReader(io.StringIO(metrics_csv))
    ]


def result_sha256(run: dict, arrays: dict[str, np.ndarray] | None) -> str:
    """The SHA-256 of what a run computed: its status, metrics, the curves' values but their timings, and its
    predictions. Two runs with the same result are one observation, whenever, wherever and how fast they ran."""
    summary = run.get("summary") or {}
    curves = [{k: v for k, v in row.items() if not TIMING.fullmatch(k)} for row in curve_rows(run.get("metrics_csv"))]
    h = hashlib.sha256(_canonical([summary.get("status"), summary.get("metrics"), curves], nan=True).encode())
    return _with_arrays(h, arrays)


def config_columns(config) -> dict[str, str | None]:
    """A run's configuration flattened: {"cfg.optim.lr": "0.02", "cfg.data.name": "digits", ...}. Every value is
    text (a number as Python writes it, a list or mapping as JSON, null as a missing value), so that every part of a
    store agrees on the columns' type: `pd.to_numeric(runs["cfg.optim.lr"])` gives numbers back."""
    out: dict[str, str | None] = {}

    def walk(d: dict, prefix: str) -> None:
        for k, v in d.items():
            if isinstance(v, dict) and v:
                walk(v, f"{prefix}{k}.")
            else:
                out[f"{CONFIG}{prefix}{k}"] = None if v is None else v if isinstance(v, str) else _canonical(v)

    if isinstance(config, dict):
        walk({k: v for k, v in config.items() if k != "defaults"}, "")
    return out


def _integer(x) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def as_text(x) -> str | None:
    return None if x is None else x if isinstance(x, str) else _canonical(x)


def of(run_dir: Path, recipe_root: Path, source: str, run: dict) -> dict:
    """The row of the run at `run_dir` (below `recipe_root`, collected from `source`), from its `read_run` dict."""
    summary = run.get("summary") or {}
    arrays = _arrays(run["predictions"]) if run.get("predictions") is not None else None
    env = summary.get("environment") if isinstance(summary.get("environment"), dict) else {}

    def part(d, *keys):
        for key in keys:
            d = d.get(key) if isinstance(d, dict) else None
        return d

    device = part(env, "device") or {}
    seeds = summary.get("seeds") if isinstance(summary.get("seeds"), dict) else {}
    setting = summary.get("setting") if isinstance(summary.get("setting"), dict) else {}
    rel = run_dir.relative_to(recipe_root)
    row = {
        "recipe": recipe_root.name,
        "setting": _canonical(setting),
        "setting_label": rel.parts[0] if len(rel.parts) > 2 else "",
        "act": run_dir.parent.name,
        "act_family": as_text(summary.get("act")),
        "act_options": as_text(summary.get("act_options")),
        "plugins": as_text(summary.get("plugins")),
        "seed": layout.seed_of(run_dir),
        "seed_init": _integer(seeds.get("init")),
        "seed_order": _integer(seeds.get("order")),
        "seed_aug": _integer(seeds.get("aug")),
        "status": as_text(summary.get("status")),
        "config_hash": as_text(summary.get("config_hash")),
        **{
            k: layout.finite(summary.get(k))
            for k in ("train_time_s", "throughput_img_s", "peak_mem_mb", "gpu_busy_pct")
        },
        "params": _integer(summary.get("params")),
        "act_params": _integer(summary.get("act_params")),
        "error": as_text(summary.get("error")),
        "git_commit": as_text(summary.get("git_commit")),
        "started": as_text(summary.get("started")),
        "finished": as_text(summary.get("finished")),
        "env.python": as_text(env.get("python")),
        "env.torch": as_text(part(env, "packages", "torch")),
        "env.visionbench": as_text(part(env, "packages", "visionbench")),
        "env.device": as_text(device.get("gpu") or device.get("cpu")),
        "env.cpu": as_text(device.get("cpu")),
        "env.cpu_capability": as_text(device.get("cpu_capability")),
        "env.gpu": as_text(device.get("gpu")),
        "env.cuda": as_text(device.get("cuda")),
        "env.threads": _integer(env.get("threads", summary.get("threads"))),
        "env.kernels_backend": as_text(part(env, "kernels", "backend")),
        "env.kernels_from": as_text(part(env, "kernels", "from")),
        "env.data_sha256": as_text(part(env, "data", "sha256")),
        "environment": _canonical(env) if env else None,
        "placement.parallel": _integer(part(env, "placement", "parallel")),
        "placement.workers": _integer(part(env, "placement", "workers")),
        "placement.visible_gpu": as_text(part(env, "placement", "visible_gpu")),
        "placement.mps": as_text(part(env, "placement", "mps")),
        "source": source,
        "source_path": rel.as_posix(),
        "collected_at": None,
        "run_path": f"{recipe_root.name}/{rel.as_posix()}",
        "content_sha256": content_sha256(run, arrays),
        "result_sha256": result_sha256(run, arrays),
        "run_json": json.dumps(
            {k: run.get(k) for k in ("summary", "config", "metrics_csv", "snapshots")}, sort_keys=True
        ),
        "predictions_npz": _npz(arrays) if arrays is not None else None,
    }
    row.update({f"{METRIC}{k}": v for k, v in sorted(layout.metric_values(summary).items())})
    row.update(config_columns(run.get("config")))
    return row


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


# --- the parts -------------------------------------------------------------------------------------
