"""Filling the device (sweep/placement.py, docs/running.md#parallel): K workers per visible GPU, each pinned to one
by CUDA_VISIBLE_DEVICES; `parallel=auto`'s rule from given measurements; MPS detected, never started; a run that
runs out of memory among K is run again with fewer; a seed trained among others gives the bits it gives alone.
No GPU is needed: CUDA's answers are stood in for (torch.cuda.is_available / device_count), the GPU a worker
takes is read back from its environment, and out-of-memory is raised by a hook in the workers."""

from __future__ import annotations

import json
import os
import queue
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from visionbench.bench import estimate as est
from visionbench.config import ConfigError
from visionbench.report import environment as report_env
from visionbench.sweep import placement
from visionbench.sweep.placement import Placement, choose, choose_cpu
from visionbench.sweep.preflight import load_config
from visionbench.sweep.sweep import execute_jobs, plan, run_sweep, worker_threads
from visionbench.train.trainer import determinism

from .helpers import shrunk

GB = 2**30
TINY = ("act=relu", "data.limit_train=192", "data.limit_val=64", "snapshot_epochs=[]")  # deltas to the shrink


# ---- parallel=auto: the rule, from given measurements --------------------------------------------------------------


@pytest.mark.parametrize(
    "given, k, bound",
    [
        (dict(busy=0.27, run_bytes=GB, free_bytes=80 * GB, cores=16, gpus=1, jobs=20), 4, "27% busy"),  # the H100 VGG8
        (dict(busy=0.05, run_bytes=12 * GB, free_bytes=80 * GB, cores=64, gpus=1, jobs=20), 5, "fit in memory"),
        (dict(busy=0.05, run_bytes=GB, free_bytes=80 * GB, cores=16, gpus=2, jobs=40), 8, "16 CPU cores for 2 GPUs"),
        (dict(busy=0.05, run_bytes=GB, free_bytes=80 * GB, cores=64, gpus=2, jobs=5), 3, "5 runs on 2 GPUs"),
        (
            dict(busy=0.1, run_bytes=GB, free_bytes=80 * GB, cores=16, gpus=1, jobs=20, loader_workers=3),
            4,
            "4 processes a run",
        ),
        (dict(busy=1.0, run_bytes=100 * GB, free_bytes=80 * GB, cores=1, gpus=1, jobs=1), 1, ""),  # never below 1
        (dict(busy=None, run_bytes=None, free_bytes=None, cores=8, gpus=1, jobs=20), 8, "8 CPU cores"),  # unmeasured
    ],
)
def test_auto_picks_the_least_of_its_limits_and_names_the_one_that_binds(given, k, bound):
    chosen, why = choose(**given)
    assert chosen == k and why.startswith(f"parallel=auto: {k} per GPU, bound by") and bound in why, why


def test_auto_on_the_cpu_is_one_run_per_core():
    assert choose_cpu(cores=16, jobs=6)[0] == 6 and choose_cpu(cores=2, jobs=6)[0] == 2 and choose_cpu(4, 0)[0] == 1
    assert "one run per core (2 cores, 6 runs), each with 1 thread" in choose_cpu(2, 6)[1]


def test_estimate_names_what_auto_picks_without_a_gpu(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    cfg = load_config(shrunk(*TINY, "act=relu,gelu", "seeds=2", "parallel=auto", "results_dir=/nonexistent/results"))
    k, why = est.choose_parallel(cfg)
    assert k == 2 and why.endswith("(no GPU here: the CPU rule)") and "2 workers" in why


def test_the_python_api_takes_parallel_auto_by_the_command_lines_rule(tmp_path, monkeypatch):
    """`run_sweep` (visionbench.run_sweep) resolves parallel=auto itself (placement.choose_parallel, the rule
    `visionbench run` applies) and says the same line; the caller's config is left as it was, and any placement
    asked for with auto gets the same K."""
    from visionbench.sweep import sweep as sweep_module

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    placed, lines = [], []
    monkeypatch.setattr(sweep_module, "execute_jobs", lambda jobs, where, *_: placed.append((len(jobs), where)) or [])
    cfg = load_config(shrunk(*TINY, "act=relu,gelu", "seeds=2", "parallel=auto", f"results_dir={tmp_path}"))
    assert run_sweep(cfg, on_note=lines.append) == []
    assert placed == [(4, Placement(2))] and cfg.parallel == "auto"
    assert lines == [est.choose_parallel(cfg)[1]] and "2 workers" in lines[0]
    assert placement.resolve(cfg, 4) == Placement(2)


def test_cuda_without_measurements_takes_one_run_per_gpu_and_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg = load_config(shrunk(*TINY, "seeds=2", "parallel=auto", "results_dir=/nonexistent/results"))
    k, why = placement.choose_parallel(cfg)
    assert k == 1 and why.startswith("parallel=auto on CUDA, unmeasured: 1 run per GPU")
    assert placement.choose_parallel(cfg, measured=lambda c: (3, "measured")) == (3, "measured")


def test_the_hydra_app_takes_parallel_auto(tmp_path):
    """A Hydra job is one run, trained alone (hydra_app.main: `execute_jobs([...], 1)`): parallel=auto is accepted there
    as parallel=K is, by the sweep's check and in the job's config."""
    from hydra import compose, initialize_config_dir

    from visionbench.config import RECIPES_DIR
    from visionbench.sweep import hydra_app

    argv = ["act=relu", "parallel=auto", f"results_dir={tmp_path}"]
    hydra_app.check_sweep(argv)
    with initialize_config_dir(config_dir=str(RECIPES_DIR), version_base=None):
        job, setting = hydra_app.job_config(compose("digits_vgg4", overrides=hydra_app.to_hydra(argv)), "digits_vgg4")
    assert job.parallel == "auto" and setting == {}


def test_the_projection_shares_a_gpu_by_its_busy_share():
    def row(busy):
        return est.Row("", "relu", 1, 100, 0, 0.01, 0.0, GB, 10, 10, 10, 100, batch=128, gpu_s=0.01 * busy)

    rows = [row(0.25)]
    one = est.Estimate(rows, torch.device("cuda"), 1, 128, parallel=1, gpus=1)
    four = est.Estimate(rows, torch.device("cuda"), 1, 128, parallel=4, gpus=1)
    eight = est.Estimate(rows, torch.device("cuda"), 1, 128, parallel=8, gpus=1)
    two_gpus = est.Estimate(rows, torch.device("cuda"), 1, 128, parallel=4, gpus=2)
    assert one.wall_s == pytest.approx(one.total_s)  # 100 epochs x 1 s
    assert four.wall_s == pytest.approx(one.total_s / 4)  # four runs fill the GPU
    assert eight.wall_s == pytest.approx(one.total_s / 4)  # more than fill it: no faster
    assert two_gpus.wall_s == pytest.approx(one.total_s / 8)
    assert est._wall(two_gpus, "H100").startswith(
        f"; ≈ {est.duration(two_gpus.wall_s)} wall with parallel=4 per GPU x 2 GPUs"
    )
    unmeasured = est.Estimate(
        [est.Row("", "relu", 1, 100, 0, 0.01, 0.0, GB, 10, 10, 10, 100)],
        torch.device("cuda"),
        1,
        128,
        parallel=4,
        gpus=1,
    )
    assert unmeasured.wall_s == pytest.approx(unmeasured.total_s)  # busy unknown: no gain promised


def test_an_explicit_k_above_auto_says_which_limit_it_passes_and_what_happens_out_of_memory():
    k, why = choose(busy=0.05, run_bytes=12 * GB, free_bytes=80 * GB, cores=64, gpus=1, jobs=20)
    note = est.over_auto(8, k, why, 12 * GB, 80 * GB)
    assert note.startswith("parallel=8 per GPU is more than parallel=auto's 5 (5 runs fit in memory")
    assert note.endswith(
        "8 runs need ≈ 100.7 GB of the 80.0 GB free: the runs that run out of memory will be run again with K halved"
    )
    assert "free" not in est.over_auto(2, 1, "parallel=auto: 1 per GPU, bound by 1 run on 1 GPU", GB, 80 * GB)


# ---- where: the devices -------------------------------------------------------------------------------------------


@pytest.fixture
def gpus(monkeypatch, tmp_path):
    """A machine with `n` GPUs as torch sees them, and no MPS daemon (its pipe directory empty)."""

    def machine(n: int, visible: str | None = None):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "mps"))

    return machine


def cfg(parallel=1, devices=1, mps=None, accelerator="auto", num_nodes=1):
    return SimpleNamespace(
        parallel=parallel,
        trainer=SimpleNamespace(devices=devices, mps=mps, accelerator=accelerator, num_nodes=num_nodes),
    )


def test_k_workers_per_visible_gpu_each_pinned_interleaved(gpus):
    gpus(2)
    where = placement.resolve(cfg(3), jobs=20)
    assert where == Placement(3, ("0", "1"), False) and where.workers == 6
    assert where.slots() == ["0", "1", "0", "1", "0", "1"] and where.describe() == "3 per GPU x 2 GPUs (MPS off)"
    gpus(4, visible="2,3")  # the user's choice of GPUs is kept
    assert placement.resolve(cfg(2), jobs=20).slots() == ["2", "3", "2", "3"]
    assert placement.resolve(cfg(8), jobs=3).per_device == 2  # no more workers than runs need
    gpus(2)
    assert placement.resolve(cfg(1), jobs=4) == Placement(1, ("0", "1"), False)  # K = 1 still uses both GPUs
    gpus(1)
    assert placement.resolve(cfg(1), jobs=4).workers == 1  # one GPU, K = 1: in this process, as before


def test_a_ddp_run_is_left_to_lightning_and_refused_among_k(gpus):
    gpus(2)
    assert placement.resolve(cfg(1, devices=2), jobs=4) == Placement(1, (), False)  # one DDP run at a time
    with pytest.raises(ConfigError, match=r"^parallel=2 on CUDA places single-GPU runs.*trainer.devices=2"):
        placement.resolve(cfg(2, devices=2), jobs=4)


def test_a_gpu_that_does_not_exist_is_one_line(gpus):
    gpus(1, visible="0,7")
    with pytest.raises(ConfigError, match=r"^CUDA_VISIBLE_DEVICES=0,7: CUDA sees 1 of these 2 GPUs \(0\)"):
        placement.resolve(cfg(2), jobs=4)
    gpus(0, visible="7")  # none of them: CUDA is off, and a run would fall back to the CPU unsaid
    with pytest.raises(ConfigError, match=r"^CUDA_VISIBLE_DEVICES=7: CUDA sees none of these GPUs"):
        placement.resolve(cfg(2), jobs=4)
    for hidden in ("", "-1"):  # the usual ways to hide every GPU on purpose: the CPU, without a word
        gpus(0, visible=hidden)
        assert placement.resolve(cfg(2), jobs=4) == Placement(2)


def test_mps_is_detected_never_started_and_refused_when_asked_but_absent(gpus, tmp_path):
    gpus(1)
    with pytest.raises(ConfigError, match=r"^trainer.mps=true: no MPS control daemon is running .*nvidia-cuda-mps"):
        placement.resolve(cfg(4, mps=True), jobs=8)
    (tmp_path / "mps").mkdir()
    (tmp_path / "mps" / "control").touch()  # a daemon's pipe: used when there, asked for or not
    assert placement.resolve(cfg(4), jobs=8).mps is True and placement.resolve(cfg(4, mps=True), jobs=8).mps is True
    gpus(0)
    with pytest.raises(ConfigError, match=r"^trainer.mps=true needs CUDA"):
        placement.resolve(cfg(2, mps=True), jobs=4)


def test_a_worker_sees_only_its_gpu_before_cuda_starts(monkeypatch):
    slots = queue.Queue()
    for gpu in Placement(2, ("0", "1")).slots():
        slots.put(gpu)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    placement.take_slot(slots, 2, 4, True)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0" and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert placement.recorded() == {"parallel": 2, "workers": 4, "visible_gpu": "0", "mps": True}
    placement.take_slot(slots, 2, 4, True)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    placement.set_current(1, 1)


def test_determinism_on_cuda_by_default_and_as_a_recorded_lever(gpus):
    t = SimpleNamespace(accelerator="auto", portable=False, deterministic=True)
    gpus(0)
    assert determinism(t) == {"deterministic": None}  # the CPU: kernels chosen without timing, as before
    gpus(1)
    assert determinism(t) == {"deterministic": "warn"}
    assert determinism(SimpleNamespace(accelerator="gpu", portable=False, deterministic=False)) == {
        "deterministic": False,
        "benchmark": True,
    }


def test_bad_parallel_values_are_one_line():
    with pytest.raises(ConfigError, match=r"parallel must be an integer >= 1 or one of auto, got 0"):
        load_config(shrunk(*TINY, "parallel=0"))
    with pytest.raises(ConfigError, match=r"parallel must be an integer >= 1 or one of auto, got 'many'"):
        load_config(shrunk(*TINY, "parallel=many"))


# ---- the report's footer names K and MPS --------------------------------------------------------------------------


def test_the_footer_names_k_and_mps_and_k_is_no_difference():
    def run(seed, k, gpu, mps):
        env = {
            "python": "3.11",
            "threads": 1,
            "placement": {"parallel": k, "workers": 2 * k, "visible_gpu": gpu, "mps": mps},
        }
        return {"act": "relu", "seed": seed, "status": "completed", "environment": json.dumps(env, sort_keys=True)}

    runs = pd.DataFrame([run(0, 4, "0", True), run(1, 4, "1", True), run(2, 1, None, None)])
    assert report_env.environment_footer(runs).endswith(" · parallel=1/4 per GPU (8 workers), MPS on")
    assert report_env.mixed_environments(runs) == []  # where a run trained is not an environment of its numbers
    old = pd.DataFrame([{"act": "relu", "seed": 0, "status": "completed", "environment": json.dumps({"threads": 1})}])
    assert "parallel" not in report_env.environment_footer(
        old
    )  # committed records from before: their footers unchanged


# ---- end to end on the CPU: among K, the bits of alone; out of memory, again with fewer ---------------------------


def _trained(results: Path) -> dict:
    """Per run: its predictions' arrays, its metrics without times, its placement."""
    out = {}
    for summary_path in sorted(results.glob("digits_vgg4/*/seed_*/summary.json")):
        summary = json.loads(summary_path.read_text())
        assert summary["status"] == "completed", summary.get("error")
        with np.load(summary_path.parent / "predictions.npz") as npz:
            arrays = {k: npz[k].tobytes() for k in npz.files}
        metrics = {k: v for k, v in summary["metrics"].items() if "time" not in k}
        out[summary_path.parent.relative_to(results).as_posix()] = (arrays, metrics)
    return out


@pytest.mark.slow  # two sweeps of two runs (18 s): make test-slow, beside the pool's OOM and kill tests
def test_a_seed_among_k_gives_the_bits_it_gives_alone(tmp_path):
    """parallel=2 vs one after another, each run at the thread count a worker has: the same predictions (every
    logit's bits) and metrics, so the same table."""
    threads, own = worker_threads(2), torch.get_num_threads()
    args = shrunk(*TINY, "act=relu,rational", "seeds=1")
    parallel = run_sweep(load_config([f"results_dir={tmp_path / 'k2'}", "parallel=2", *args]), progress=False)
    torch.set_num_threads(threads)
    try:
        alone = run_sweep(load_config([f"results_dir={tmp_path / 'k1'}", "parallel=1", *args]), progress=False)
    finally:
        torch.set_num_threads(own)
    assert [o.status for o in parallel + alone] == ["completed"] * 4
    k2, k1 = _trained(tmp_path / "k2"), _trained(tmp_path / "k1")
    assert k2 == k1 and len(k2) == 2
    places = [json.loads(p.read_text())["environment"]["placement"] for p in (tmp_path / "k2").rglob("summary.json")]
    assert {p["parallel"] for p in places} == {2}


# in the workers (sitecustomize): a run among more than VB_TEST_FAIL_ABOVE per device runs out of GPU memory, or
# (VB_TEST_FAIL=kill) its worker process is killed, as the kernel's OOM killer does
FAIL_HOOK = """
import os
if os.environ.get("VB_TEST_FAIL_ABOVE"):
    import signal
    import torch
    from visionbench.sweep import placement
    from visionbench.train import run as _run
    _real = _run.train_run
    def _train(*args, **kwargs):
        if placement.recorded()["parallel"] > int(os.environ["VB_TEST_FAIL_ABOVE"]):
            if os.environ.get("VB_TEST_FAIL") == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (a test's)")
        return _real(*args, **kwargs)
    _run.train_run = _train
"""


def _failing_workers(tmp_path, monkeypatch, how: str) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(FAIL_HOOK))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("VB_TEST_FAIL_ABOVE", "1")
    monkeypatch.setenv("VB_TEST_FAIL", how)


# slow: a real pool of workers (10 s); make test keeps the same-bits test of a seed among k
@pytest.mark.slow
def test_out_of_memory_among_k_fails_that_run_clearly_and_it_runs_again_with_fewer(tmp_path, monkeypatch):
    _failing_workers(tmp_path, monkeypatch, "oom")
    cfg = load_config([f"results_dir={tmp_path / 'r'}", *shrunk(*TINY, "parallel=2", "seeds=2")])
    jobs, notes, seen = plan(cfg), [], []
    outcomes = execute_jobs(jobs, Placement(2), progress=False, on_outcome=seen.append, note=notes.append)
    assert [o.status for o in seen] == ["failed", "failed", "completed", "completed"]  # each said as it ended
    assert all(
        o.summary["error"].startswith(
            "out of memory with 2 run(s) per device (2 workers): OutOfMemoryError: CUDA out of memory"
        )
        for o in seen[:2]
    )
    assert notes == ["note: 2 runs ran out of memory with 2 on the CPU: running them again with 1 on the CPU"]
    assert [o.status for o in outcomes] == ["completed", "completed"]
    assert all(o.summary["environment"]["placement"]["parallel"] == 1 for o in outcomes)


# slow: a real pool of workers killed (9 s)
@pytest.mark.slow
def test_a_killed_worker_loses_no_run_they_run_again_with_fewer(tmp_path, monkeypatch):
    _failing_workers(tmp_path, monkeypatch, "kill")
    cfg = load_config([f"results_dir={tmp_path / 'r'}", *shrunk(*TINY, "parallel=2", "seeds=2")])
    notes = []
    outcomes = execute_jobs(plan(cfg), Placement(2), progress=False, note=notes.append)
    assert notes == ["note: 2 runs lost their worker process with 2 on the CPU: running them again with 1 on the CPU"]
    assert [o.status for o in outcomes] == ["completed", "completed"]
