"""The multi-seed sweep: every (activation, seed) of a recipe, skipping completed runs,
resuming unfinished ones, recording divergence and failures without stopping.

    visionbench run recipe=cifar10_vgg8 act=relu,rational seeds=5 parallel=2
"""
from __future__ import annotations

import os
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig

from ..train.io import read_csv_rows
from . import results
from .config import ConfigError, apply_setting, diff_configs, fingerprint, run_config, sweep_acts, sweep_settings


class ConfigMismatch(ConfigError):
    """A run directory holds a run of a different configuration."""


@dataclass
class Outcome:
    act: str  # the sweep's label: `rational[init=gelu]`
    seed: int
    status: str  # completed | diverged | failed | skipped
    summary: dict
    run_dir: Path


def check_resumable(run: dict, out: Path) -> None:
    stored = results.read_config(out)
    if stored is None:
        return
    diffs = diff_configs(fingerprint(stored), fingerprint(run))
    if diffs:
        raise ConfigMismatch(
            f"{out} holds a run with a different configuration:\n  " + "\n  ".join(diffs)
            + "\nUse another results_dir=..., restore the stored settings, or delete that directory to start over."
        )


def execute(run: dict, out: Path, progress: bool = True) -> Outcome:
    """Train one run unless its summary says completed; always leave a summary behind."""
    from ..train.fit import train_run  # the heavy import only where training happens
    from ..train.module import Diverged

    out = Path(out)
    act, label, seed = run["act"], run.get("act_label", run["act"]), run["seed"]
    check_resumable(run, out)
    previous = results.read_summary(out)
    if previous and previous.get("status") == "completed":
        return Outcome(label, seed, "skipped", previous, out)
    results.write_config(out, run)
    report = run.get("report") or {}
    summary = {
        "schema": results.SCHEMA, "recipe": run["recipe"], "act": act, "act_label": label, "seed": seed,
        "status": "running", "setting": run.get("setting") or {}, "baseline": report.get("baseline"),
        "report": report, "val_split": run["data"]["val_split"],
        "act_options": (run.get("act_options") or {}).get(act, {}),
        "metrics": {}, "versions": results.versions(), "git_commit": results.git_commit(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    results.write_summary(out, summary)
    try:
        r = train_run(run, out, progress=progress)
        summary.update(status="completed", params=r.params, act_params=r.act_params,
                       trainable_params=r.trainable_params,  # < params when fine-tuning (docs/finetune.md)
                       train_time_s=round(r.train_time_s, 3), throughput_img_s=r.throughput_img_s,
                       peak_mem_mb=r.peak_mem_mb, metrics=results.metrics_from_rows(r.rows))
    except Diverged as e:
        summary.update(status="diverged", diverged_epoch=e.epoch, error=str(e),
                       metrics=results.metrics_from_rows(read_csv_rows(out / "metrics.csv")))
    except KeyboardInterrupt:
        raise  # leave status "running": the next run resumes from last.ckpt
    except Exception as e:  # noqa: BLE001 - one seed's failure must not end the sweep
        (out / "error.txt").write_text(traceback.format_exc())
        summary.update(status="failed", error=f"{type(e).__name__}: {e}",
                       metrics=results.metrics_from_rows(read_csv_rows(out / "metrics.csv")))
    summary["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    results.write_summary(out, summary)
    return Outcome(label, seed, summary["status"], summary, out)


def _execute_in_subprocess(run: dict, out: str, threads: int) -> Outcome:
    import torch

    torch.set_num_threads(threads)
    return execute(run, Path(out), progress=False)


def check_data(cfg: DictConfig) -> None:
    """Fail before any training when the dataset is not where the config says."""
    from ..data import DatasetNotFoundError, create_datamodule

    try:
        create_datamodule(cfg.data, batch_size=int(cfg.batch_size), seed=0)
    except DatasetNotFoundError as e:
        raise ConfigError(str(e)) from None


def plan(cfg: DictConfig) -> list[tuple[dict, Path]]:
    """(run config, run directory) of every run of the sweep — setting by setting, act by act,
    seed by seed; fails early on a config mismatch or a missing dataset."""
    jobs = []
    for setting in sweep_settings(cfg):
        check_data(apply_setting(cfg, setting))
        for act in sweep_acts(cfg):
            for seed in range(int(cfg.seeds)):
                run = run_config(cfg, act, seed, setting)
                out = results.run_dir(cfg.results_dir, cfg.recipe, act, seed, setting)
                check_resumable(run, out)
                jobs.append((run, out))
    return jobs


def run_sweep(cfg: DictConfig, progress: bool = True, on_outcome: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Run every job of the sweep, `cfg.parallel` at a time; returns the outcomes in plan order."""
    jobs = plan(cfg)
    parallel = min(int(cfg.parallel), len(jobs))
    outcomes: dict[int, Outcome] = {}
    if parallel <= 1:
        for i, (run, out) in enumerate(jobs):
            outcomes[i] = execute(run, out, progress=progress)
            if on_outcome:
                on_outcome(outcomes[i])
    else:
        threads = max(1, (os.cpu_count() or 1) // parallel)
        with ProcessPoolExecutor(max_workers=parallel, mp_context=get_context("spawn")) as pool:
            futures = {pool.submit(_execute_in_subprocess, run, str(out), threads): i for i, (run, out) in enumerate(jobs)}
            for fut in as_completed(futures):
                i = futures[fut]
                try:
                    outcomes[i] = fut.result()
                except Exception as e:  # noqa: BLE001 - a crashed worker process is one failed run
                    run, out = jobs[i]
                    summary = {"schema": results.SCHEMA, "recipe": run["recipe"], "act": run["act"],
                               "act_label": run["act_label"], "seed": run["seed"], "setting": run["setting"],
                               "status": "failed", "error": f"worker crashed: {e!r}"}
                    results.write_summary(out, summary)
                    outcomes[i] = Outcome(run["act_label"], run["seed"], "failed", summary, out)
                if on_outcome:
                    on_outcome(outcomes[i])
    return [outcomes[i] for i in range(len(jobs))]
