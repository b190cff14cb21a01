"""The multi-seed sweep: every (activation, seed) of a recipe, skipping completed runs,
resuming unfinished ones, recording divergence and failures without stopping.

    visionbench run recipe=cifar10_vgg8 act=relu,rational seeds=5 parallel=2
"""

from __future__ import annotations

import contextlib
import csv
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from omegaconf import DictConfig

from .. import plugins
from ..config import ConfigError, apply_setting, defaults, run_config, sweep_settings
from ..results import integrity, layout
from ..results import provenance as results
from ..results.checkpoint import UnsafeCheckpoint
from ..results.identity import config_hash, diff_configs, fingerprint, upgrade
from ..results.io import DiskFullError, RunStateError, is_disk_full
from ..results.predictions import FILE_NAME
from ..results.safe_paths import UnsafePath
from . import placement, portable
from .acts import sweep_acts
from .locks import RunLock, RunLocked
from .placement import Placement
from .preflight import check_finetune_weights
from .ranks import is_rank_zero
from .resultsdir import ResultsMoved, ResultsWatch, check_writable, quiet_writer_threads
from .rounds import run_rounds
from .signals import Interrupted, init_worker, received, starting_workers, worker_run
from .steps import Steps
from .tune_sweep import is_tuning, run_tuning


class ConfigMismatch(ConfigError):
    """A run directory holds a run of a different configuration."""


@dataclass
class Outcome:
    act: str  # the sweep's label: `rational[init=gelu]`
    seed: int
    status: str  # completed | diverged | failed | skipped | locked
    summary: dict
    run_dir: Path


def check_resumable(run: dict, out: Path) -> None:
    stored = layout.read_config(out)
    if stored is None:
        return
    _check_damaged(out)  # damage (a cut, an edit) is no other configuration: that run alone fails
    stored = upgrade(stored, defaults())
    diffs = diff_configs(fingerprint(stored), fingerprint(run))
    if diffs:
        raise ConfigMismatch(
            f"{out} holds a run with a different configuration:\n  "
            + "\n  ".join(diffs)
            + "\nUse another results_dir=..., restore the stored settings, or delete that directory to start over."
        )
    _check_portable(stored, run, out)


def _check_damaged(out: Path) -> None:
    """A config.yaml that disagrees with its own run's summary, which records its settings' hash, act and seed, is
    damaged (cut short on a line boundary, edited: results/integrity.py), not another configuration:
    `RunStateError`, that run alone fails with one line. A summary that cannot be read leaves it to `ConfigMismatch`."""
    try:
        summary = layout.read_summary(out)
    except RunStateError:
        return
    if summary and (damage := integrity.config_damage(out, summary)):
        raise RunStateError(damage)


def _check_portable(stored: dict, run: dict, out: Path) -> None:
    """`trainer.portable` is not part of a run's identity (results/identity.py), but one run trained partly with
    it and partly without would be neither, while its summary names only the last: a resume from last.ckpt
    under the other setting is refused (a completed run is only skipped; one without last.ckpt restarts)."""
    old = bool((stored.get("trainer") or {}).get("portable"))
    new = bool((run.get("trainer") or {}).get("portable"))
    if old == new or not layout.files(out).last.exists():
        return
    try:
        if (layout.read_summary(out) or {}).get("status") == layout.COMPLETED:
            return
    except RunStateError:
        pass
    flag = {True: "true", False: "false"}
    raise ConfigMismatch(
        f"{out} was trained so far with trainer.portable={flag[old]}; resuming it with "
        f"trainer.portable={flag[new]} would mix both in one run: rerun with "
        f"trainer.portable={flag[old]}, or delete that directory to retrain it",
        "trainer.portable",
    )


def execute(run: dict, out: Path, progress: bool = True, watch: ResultsWatch | None = None) -> Outcome:
    """Train one run unless its summary says completed; leave a summary behind whatever happens.

    Outcomes that do not train: `skipped` (completed before), `locked` (another live process holds
    the directory), `failed` with a one-line error when the directory's files do not fit together
    (nothing in it is touched then). Raises `Interrupted` after recording status `interrupted`
    on SIGTERM or Ctrl-C; `ResultsMoved` (nothing written) when `watch` finds the results directory
    moved or deleted, before the run starts or before its summary is written.

    Under DDP every rank calls this for every run and trains (sweep/ranks.py); only rank 0 writes.
    All ranks decide skip/resume from the files as they were before this run's training: rank 0
    writes into the run directory only `running` before `trainer.fit`, which it cannot finish
    without the other ranks, so no rank can see this run `completed` before deciding to train it.
    """
    out = Path(out)
    label, seed = run.get("act_label", run["act"]), run["seed"]
    if watch:
        watch.check()
    try:
        with RunLock(out):
            return _execute(run, out, progress, watch)
    except RunLocked as e:
        return Outcome(label, seed, "locked", {"error": str(e)}, out)
    except RunStateError as e:
        return Outcome(label, seed, layout.FAILED, {"error": str(e)}, out)


def _execute(run: dict, out: Path, progress: bool, watch: ResultsWatch | None = None) -> Outcome:
    import torch

    from ..train import seeds
    from ..train.environment import environment
    from ..train.module import Diverged
    from ..train.run import train_run  # the heavy import only where training happens

    act, label, seed = run["act"], run.get("act_label", run["act"]), run["seed"]
    plugins.load_for(run)  # in a parallel=K worker, a Hydra or submitit job: the run's plugins
    check_resumable(run, out)
    previous = layout.read_summary(out)
    _check_summary_config(previous, run, out)
    if previous and previous.get("status") == layout.COMPLETED:
        if is_rank_zero() and not layout.files(out).predictions.exists():
            _rewrite_predictions(out, previous)
        return Outcome(label, seed, "skipped", previous, out)
    layout.check_unfinished(out)
    lead = is_rank_zero()  # other DDP ranks train along but leave the run directory to rank 0
    if lead:  # rank 0 of the job holds the lock and cleans
        layout.remove_stale_temps(out)  # a kill -9 leaves them; we hold the lock, so none is being written
        layout.files(out).error.unlink(missing_ok=True)  # a previous session's; this one writes its own if it fails
    run = {**run, "threads": torch.get_num_threads()}  # results depend on it: recorded, a change is shown
    stored_threads = (layout.read_config(out) or {}).get("threads")
    if lead and stored_threads not in (None, run["threads"]):
        print(
            f"note: {out} was trained with {stored_threads} threads so far, resumes with {run['threads']}: "
            "on CPU its numbers will differ slightly from an uninterrupted run",
            file=sys.stderr,
        )
    report = run.get("report") or {}
    env = environment(
        run
    )  # this process's (its kernels: the run's trainer.kernels, as train/run.py applied it): a parallel=K worker's, a DDP rank 0's (data: its digest once trained)
    env["placement"] = placement.recorded()  # K per device, the worker's GPU, MPS: a run's speed is evidence too
    summary = {
        "schema": layout.SCHEMA,
        "recipe": run["recipe"],
        "act": act,
        "act_label": label,
        "seed": seed,
        "status": layout.RUNNING,
        "setting": run.get("setting") or {},
        "baseline": report.get("baseline"),
        "report": report,
        "val_split": run["data"]["val_split"],
        "config_hash": config_hash(run),
        "threads": run["threads"],
        "act_options": (run.get("act_options") or {}).get(act, {}),
        "seeds": seeds.of(run)._asdict(),  # each source's seed: init, order, aug (train/seeds.py)
        "metrics": {},
        "versions": results.versions(env["packages"]),
        "git_commit": env["git_commit"],
        "environment": env,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    if run.get("plugins"):  # the report reads them: two versions of one plugin in a table are flagged
        summary["plugins"] = run["plugins"]
    try:
        if lead:
            layout.write_config(out, run)
            layout.write_summary(out, summary)
        r = train_run(run, out, progress=progress)
        summary.update(
            status=layout.COMPLETED,
            params=r.params,
            act_params=r.act_params,
            trainable_params=r.trainable_params,  # < params when fine-tuning (docs/finetune.md)
            train_time_s=round(r.train_time_s, 3),
            throughput_img_s=r.throughput_img_s,
            peak_mem_mb=r.peak_mem_mb,
            gpu_busy_pct=r.gpu_busy_pct,  # CUDA: NVML while training
            metrics=layout.metrics_from_rows(r.rows),
            **({"dataset": r.dataset} if r.dataset else {}),  # data.name=folder: classes, size, stats
            predictions=FILE_NAME if layout.files(out).predictions.exists() else None,
        )
        env["data"] = r.data
    except Diverged as e:
        summary.update(status=layout.DIVERGED, diverged_epoch=e.epoch, error=str(e), metrics=_metrics_so_far(out))
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM (ours, or Lightning's SIGTERMException)
        why = received()
        summary.update(
            status=layout.INTERRUPTED,
            error=f"interrupted by {why}; rerun the same command to resume",
            metrics=_metrics_so_far(out),
        )
        _finish(out, summary)
        raise Interrupted(why, recorded=1) from None
    except RunStateError as e:
        summary.update(status=layout.FAILED, error=str(e))
    except Exception as e:  # noqa: BLE001 - one seed's failure must not end the sweep
        if is_disk_full(e):
            summary.update(
                status=layout.FAILED,
                error=str(e if isinstance(e, DiskFullError) else DiskFullError(getattr(e, "filename", None) or out))
                + "; free space and rerun the same command to resume",
            )
        else:
            if lead:
                with contextlib.suppress(OSError):  # the traceback is a bonus; the summary holds the line
                    layout.files(out).error.write_text(traceback.format_exc())
            summary.update(status=layout.FAILED, error=one_line(e), metrics=_metrics_so_far(out))
            if isinstance(e, torch.OutOfMemoryError):  # the sweep runs it again with fewer runs per device
                where = placement.recorded()
                summary.update(
                    out_of_memory=True,
                    error=f"out of memory with {where['parallel']} run(s) per device "
                    f"({where['workers']} workers): {summary['error']}",
                )
    if watch:  # a run that failed because its directory went away: say that, and write nothing
        watch.check()
    _finish(out, summary)
    return Outcome(label, seed, summary["status"], summary, out)


def _rewrite_predictions(out: Path, summary: dict) -> None:
    """A completed run without its predictions.npz: rewritten from its checkpoint (train/rewrite.py), with a
    note; a run whose checkpoints hold none (from before per-example predictions) is left as it is, and
    said so only when its summary records that it wrote the file."""
    from ..train.rewrite import rewrite_predictions

    try:
        path = rewrite_predictions(out)
    except RunStateError as e:
        if summary.get("predictions") or isinstance(e, UnsafeCheckpoint):  # a refused checkpoint is always said
            print(f"note: {layout.files(out).predictions} is missing and cannot be rewritten: {e}", file=sys.stderr)
        return
    print(f"note: rewrote {path} from its checkpoint", file=sys.stderr)


def one_line(e: BaseException) -> str:
    """`Type: message` on one line. An error raised in a DataLoader worker arrives re-wrapped, its
    message a whole traceback ("Caught X in DataLoader worker process 0 ... Original Traceback"):
    its last line is the original error."""
    text = str(e).strip()
    if "Original Traceback" in text:
        return text.splitlines()[-1].strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def _check_summary_config(summary: dict | None, run: dict, out: Path) -> None:
    """A run directory whose config.yaml is gone: its summary's config hash still tells whether it
    was trained with these settings (else a rerun with other settings would count it as theirs)."""
    if not summary or layout.files(out).config.exists() or not summary.get("config_hash"):
        return
    if summary["config_hash"] != config_hash(run):
        raise RunStateError(
            f"{layout.files(out).config} is missing and {layout.files(out).summary} was written by a run "
            f"with other settings; delete the run directory {out} to retrain it with these"
        )


def _metrics_so_far(out: Path) -> dict:
    try:
        return layout.metrics_from_rows(layout.read_metrics(out))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, csv.Error):
        return {}


def _finish(out: Path, summary: dict) -> None:
    """Write the final summary (rank 0 of a DDP job only); on a full disk the summary on disk stays
    `running` (resumable)."""
    from ..train.environment import switches

    summary["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    if "environment" in summary:  # as the Trainer left them (Lightning's deterministic=, DDP's threads)
        summary["environment"].update(switches())
    if not is_rank_zero():
        return
    try:
        layout.write_summary(out, summary)
    except DiskFullError as e:
        summary["error"] = f"{summary.get('error') or ''} ({e}; summary.json not updated)".strip()


def _execute_in_subprocess(run: dict, out: str, watch: ResultsWatch | None = None) -> Outcome:
    """`execute` in a parallel=K worker. Told to stop (SIGTERM from the sweep, or from the kernel when
    the sweep died: signals.init_worker), the worker records its run `interrupted` and exits: back in
    the pool's loop it would wait forever for work from a parent that may be gone."""
    try:
        with worker_run(), quiet_writer_threads(watch) if watch else contextlib.nullcontext():
            return execute(run, Path(out), progress=False, watch=watch)
    except Interrupted as stop:
        sys.stderr.flush()
        os._exit(stop.exit_code)


def _interrupted_since(out: Path, since: float) -> bool:
    """Whether a worker recorded the run in `out` `interrupted` after `since` (time.time())."""
    path = layout.files(out).summary
    try:
        return path.stat().st_mtime >= since and (layout.read_summary(out) or {}).get("status") == layout.INTERRUPTED
    except (OSError, RunStateError):
        return False


def check_data(cfg: DictConfig):
    """Fail before any training when the dataset is not where the config says, does not fit it
    (data.mean of the wrong length) or is corrupt where that shows without decoding every image
    (CIFAR-10's pickles are read and checked), or holds no image in a split (datasets held in memory;
    the others' runs fail on it in one line): once, not in every run, in one line (a dataset's
    multi-line "not found" message is joined). Returns the data module."""
    from ..data import DatasetNotFoundError, create_datamodule

    try:
        dm = create_datamodule(cfg.data, batch_size=int(cfg.batch_size), seed=0)
        if dm.in_memory:
            dm.sources()
        return dm
    except (DatasetNotFoundError, ValueError) as e:  # CorruptDataError is a ValueError
        raise ConfigError(one_line_message(str(e))) from None


def one_line_message(text: str) -> str:
    """A multi-line message as one line: `a\\n  b:\\n    c\\n  d` -> `a; b: c; d`."""
    out = ""
    for part in (" ".join(line.split()) for line in text.splitlines() if line.strip()):
        out += part if not out else (" " if out.endswith(":") else "; ") + part
    return out


def plan(
    cfg: DictConfig,
    *,
    settings: list[dict] | None = None,
    acts: list[str] | None = None,
    seeds: Iterable[int] | None = None,
    folder: Mapping | None = None,
) -> list[tuple[dict, Path]]:
    """(run config, run directory) of every run of the sweep — setting by setting, act by act,
    seed by seed (or of the given subset: a round of `seeds=auto`, a phase of `tune=`); fails early on a config
    mismatch or a missing dataset. `folder`: the setting that names the runs' folders when it is not their own (a
    tuning design's retrain: `tune.trial=best`, each run holding its activation's values)."""
    jobs = []
    for setting in sweep_settings(cfg) if settings is None else settings:
        dm = check_data(apply_setting(cfg, setting))
        setting_acts = sweep_acts(cfg) if acts is None else acts
        if setting_acts:
            check_finetune_weights(cfg, setting, setting_acts[0], dm)
        for act in setting_acts:
            for seed in range(int(cfg.seeds)) if seeds is None else seeds:
                run = plugins.record(run_config(cfg, act, seed, setting))
                try:  # a label that is no plain folder name (act=gelu[approximate=../x]): one line, before any run
                    out = results.run_dir(cfg.results_dir, cfg.recipe, act, seed, setting if folder is None else folder)
                except UnsafePath as e:
                    raise ConfigError(str(e), "act") from None
                try:
                    check_resumable(run, out)
                except RunStateError:
                    pass  # an unreadable config.yaml: that run fails with one line, the others go on
                jobs.append((run, out))
    return jobs


def run_sweep(
    cfg: DictConfig,
    progress: bool = True,
    on_outcome: Callable[[Outcome], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    on_jobs: Callable[[int], None] | None = None,
) -> list[Outcome]:
    """Run every job of the sweep (`on_jobs` hears how many each batch of jobs holds: sweep/eta.py), `cfg.parallel` at a time (per visible GPU on CUDA: sweep/placement.py; `auto`
    resolved there first, its line said); returns the outcomes in plan order. With `seeds=auto`, in rounds
    (sweep/rounds.py; `on_note` gets a line per round). ConfigError when the results tree is not writable or the runs
    cannot be placed as asked; `ResultsMoved` when it is moved or deleted while the sweep runs."""
    if set(cfg.trainer.loggers) & {"mlflow", "wandb"}:  # a tracker that cannot work: one line, before any run
        from ..train.trackers import unusable

        if why := unusable(cfg.trainer.loggers, cfg.results_dir):
            raise ConfigError(why, "trainer.loggers")
    check_writable(cfg)
    watch = ResultsWatch(Path(cfg.results_dir) / cfg.recipe)
    note = on_note or (lambda line: print(line, file=sys.stderr, flush=True))
    if cfg.parallel == "auto":  # `visionbench run` resolved it already, from the estimate's measurements on CUDA
        cfg = cfg.copy()
        cfg.parallel, why = placement.choose_parallel(cfg)
        if is_rank_zero():
            note(why)
    said: set[str] = set()

    def execute_all(jobs):
        if on_jobs:
            on_jobs(len(jobs))
        where = placement.resolve(cfg, len(jobs))
        if where.gpus and where.workers > 1 and where.mps is False and "mps" not in said:
            said.add("mps")
            note(
                f"note: {where.describe()} without MPS: the workers' kernels take turns on each GPU (time-slicing); "
                "an MPS daemon (`nvidia-cuda-mps-control -d`, docs/running.md#parallel-many-runs-per-device) lets "
                "them run at once"
            )
        return execute_jobs(jobs, where, progress, on_outcome, watch, note)

    with quiet_writer_threads(watch):
        if is_tuning(cfg):  # a tuning design: its trials, then each activation's best (sweep/tune_sweep.py)
            return run_tuning(cfg, Steps(plan, execute_all, on_note or note))
        if cfg.seeds == "auto":
            return run_rounds(cfg, Steps(plan, execute_all, on_note))
        return execute_all(plan(cfg))


def worker_threads(parallel: int) -> int:
    """Torch threads of each of `parallel` worker processes: the cores shared out among them."""
    return max(1, (os.cpu_count() or 1) // parallel)


def _init_worker(threads: int, slots, per_device: int, workers: int, mps: bool | None) -> None:
    """A parallel=K worker's initializer: its GPU first (before anything starts CUDA), then threads and signals."""
    placement.take_slot(slots, per_device, workers, mps)
    init_worker(threads)


def execute_jobs(
    jobs: list[tuple[dict, Path]],
    where: Placement | int,
    progress: bool = True,
    on_outcome: Callable[[Outcome], None] | None = None,
    watch: ResultsWatch | None = None,
    note: Callable[[str], None] | None = None,
) -> list[Outcome]:
    """Run `jobs` on `where`'s workers (an int: that many on the CPU), in worker processes when more than one; the
    outcomes in job order. With `watch`, the results directory is checked before each run (`ResultsMoved` stops them
    all). Runs that ran out of memory among K per device are run again with K halved, down to 1 (`note` says so)."""
    where = Placement(where) if isinstance(where, int) else where
    outcomes = _execute_placed(jobs, where, progress, on_outcome, watch)
    while (lower := where.lowered()) is not None:
        again = [i for i, o in enumerate(outcomes) if o.status == layout.FAILED and _retried(o)]
        if not again:
            break
        why = sorted({_retried(outcomes[i]) for i in again})
        (note or print)(
            f"note: {len(again)} run{'s' * (len(again) > 1)} {' or '.join(why)} with {where.describe()}: "
            f"running {'them' if len(again) > 1 else 'it'} again with {lower.describe()}"
        )
        retried = _execute_placed([jobs[i] for i in again], lower, progress, on_outcome, watch)
        for i, outcome in zip(again, retried):
            outcomes[i] = outcome
        where = lower
    return outcomes


def _retried(outcome: Outcome) -> str | None:
    """Why a failed run among K is run again with fewer (None: it is not): out of memory, or its worker died (the
    kernel's OOM killer, a crash; the pool then fails the runs its other workers were training too)."""
    if outcome.summary.get("out_of_memory"):
        return "ran out of memory"
    return "lost their worker process" if outcome.summary.get("worker_died") else None


def _execute_placed(
    jobs: list[tuple[dict, Path]],
    where: Placement,
    progress: bool,
    on_outcome: Callable[[Outcome], None] | None,
    watch: ResultsWatch | None,
) -> list[Outcome]:
    outcomes: dict[int, Outcome] = {}
    isolated = portable.wanted(jobs)  # its variables are read when torch loads: a fresh worker process
    workers = min(where.workers, len(jobs))
    if workers <= 1 and not isolated:
        placement.set_current(1, 1, None, where.mps)
        for i, (run, out) in enumerate(jobs):
            outcomes[i] = execute(run, out, progress=progress, watch=watch)
            if on_outcome:
                on_outcome(outcomes[i])
    else:
        ctx = get_context("spawn")
        slots = ctx.Queue() if where.gpus else None  # each worker takes its GPU from here as it starts
        for gpu in where.slots()[:workers] if slots is not None else ():
            slots.put(gpu)
        threads = portable.THREADS if isolated else worker_threads(max(workers, 1))
        # workers die with this process
        pool = ProcessPoolExecutor(
            max_workers=max(workers, 1),
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(threads, slots, where.per_device, workers, where.mps),
        )
        started = time.time()
        try:
            if watch:
                watch.check()  # noted here, so that every worker compares with the same directory
            with starting_workers(), portable.portable_environment(isolated):  # submit() starts the workers
                futures = {
                    pool.submit(_execute_in_subprocess, run, str(out), watch): i for i, (run, out) in enumerate(jobs)
                }
            for fut in as_completed(futures):
                i = futures[fut]
                try:
                    outcomes[i] = fut.result()
                except (Interrupted, ResultsMoved):
                    raise
                except Exception as e:  # noqa: BLE001 - a crashed worker process is one failed run
                    run, out = jobs[i]
                    summary = {
                        "schema": layout.SCHEMA,
                        "recipe": run["recipe"],
                        "act": run["act"],
                        "act_label": run["act_label"],
                        "seed": run["seed"],
                        "setting": run["setting"],
                        "status": layout.FAILED,
                        "error": f"worker crashed: {e!r}",
                        "worker_died": isinstance(e, BrokenProcessPool),
                    }
                    layout.write_summary(out, summary)
                    outcomes[i] = Outcome(run["act_label"], run["seed"], layout.FAILED, summary, out)
                if on_outcome:
                    on_outcome(outcomes[i])
        except BaseException as e:  # SIGTERM, Ctrl-C or a bug here: stop the workers (they record `interrupted`)
            for child in multiprocessing.active_children():
                child.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
            if isinstance(e, KeyboardInterrupt):  # what the one line says: how many runs were in progress
                e.recorded = sum(_interrupted_since(out, started) for _, out in jobs)
            raise
        pool.shutdown(wait=True)
    return [outcomes[i] for i in range(len(jobs))]
