"""The estimate of a sweep (bench/estimate.py, from bench/measure.py; docs/running.md, "Before a sweep"): the preflight
before a sweep is submitted.

It times each (setting, act) of the sweep, projects the run and sweep wall time from the real
loader lengths, leaves out completed runs, writes nothing, and fails in one line on a missing
dataset, a bad config (both in test_bad_inputs.py) or a batch that does not fit in memory.
"""

from __future__ import annotations

import os

import pytest
import torch

from tests.helpers import copy_tree, shrunk
from visionbench.bench import estimate as est
from visionbench.bench import measure
from visionbench.cli import main
from visionbench.results import layout
from visionbench.sweep import sweep
from visionbench.sweep.preflight import load_config

SMALL = ["data.limit_train=128", "data.limit_val=64"]  # the default recipe (digits_vgg4), cut down


def _rows(out: str) -> dict[str, list[str]]:
    """The estimate table's rows by activation."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] not in ("act", "---"):
            rows[cells[0]] = cells
    return rows


def test_estimate_of_the_default_recipe_prints_a_total_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may appear in the working directory either (lightning_logs, ...)
    results = tmp_path / "results"
    assert main(["estimate", f"results_dir={results}", "act=relu,rational", "seeds=2", *SMALL]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert list(rows) == ["relu", "rational"]
    assert rows["relu"][1] == f"{963_722:,}"  # params of digits VGG4 + GroupNorm with ReLU
    assert rows["relu"][2] == "2"  # 128 images / batch 64
    assert rows["relu"][6] == "2/2"
    assert "projected total:" in out and "for 4 of 4 runs" in out
    assert not results.exists()
    assert list(tmp_path.iterdir()) == [], "visionbench estimate must not write anything"


def test_the_loader_is_timed_alone_and_each_row_says_what_bounds_the_run(monkeypatch):
    """The training loader's images/s (no model) beside the model's (batch / s per step)."""
    cfg = load_config(["act=relu", "seeds=1", "results_dir=/nonexistent/results", *SMALL])
    (row,) = est.estimate(cfg).rows
    assert row.loader_img_s > 0 and row.model_img_s == pytest.approx(64 / row.step_s)
    assert row.bound == (
        "model" if row.loader_img_s >= row.model_img_s else f"loader ({row.model_img_s / row.loader_img_s:.1f}x)"
    )
    monkeypatch.setattr(measure, "loader_rate", lambda loader, device: row.model_img_s / 2.5)  # a slow loader
    result = est.estimate(cfg)
    (slow,) = result.rows
    assert slow.bound == f"loader ({slow.model_img_s / slow.loader_img_s:.1f}x)"
    cells = _rows(est.format_estimate(result))["relu"]
    assert cells[-3:] == [est.rate(slow.model_img_s), est.rate(slow.loader_img_s), slow.bound]
    on_device = est.estimate(
        load_config(
            [
                "act=relu",
                "seeds=1",
                "results_dir=/nonexistent/results",
                *SMALL,
                "data.on_device=true",
                "data.augment.crop_pad=1",
            ]
        )
    )
    assert on_device.rows[0].train_steps == row.train_steps  # the same epoch, drawn on the device


def test_loader_rate_times_batches_over_several_passes_of_a_short_epoch():
    batches = [(torch.zeros(4, 1), torch.zeros(4))] * 2  # two batches per pass: one untimed, then passes
    assert measure.loader_rate(batches, torch.device("cpu")) > 0
    assert measure.loader_rate([(torch.zeros(4, 1), torch.zeros(4))], torch.device("cpu")) > 0  # one per pass
    assert est.rate(float("nan")) == "-" and est.rate(12345.6) == "12,346"


@pytest.mark.parametrize(
    "extra, steps, evals",
    [
        ([], 2, 2),  # 128 / 64; val 64 + test 64 images: one batch each
        (["trainer.accumulate_grad_batches=2"], 4, 4),  # batch 32 per step: twice the steps
        (["data.augment.repeated_aug=3"], 6, 2),  # 3 x 128 images per epoch (004 code's epoch)
        (
            ["trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp"],
            2,
            2,
        ),  # 64 images and batch 32 per rank
        (["ema.decay=0.9"], 2, 4),  # the EMA copy is evaluated too
    ],
)
def test_steps_per_epoch_come_from_the_real_loaders(extra, steps, evals):
    cfg = load_config(["act=relu", "seeds=1", "results_dir=/nonexistent/results", *SMALL, *extra])
    (row,) = est.estimate(cfg).rows
    assert (row.train_steps, row.eval_batches) == (steps, evals)
    assert row.run_s == pytest.approx(cfg.epochs * (steps * row.step_s + evals * row.eval_batch_s))


@pytest.mark.slow  # times parallel workers (10 s): make test-slow
def test_parallel_workers_are_timed_with_their_share_of_the_cores_and_the_wall_time_divided(monkeypatch, capsys):
    timed_with, real = [], est.measure
    monkeypatch.setattr(est, "measure", lambda *a: timed_with.append(torch.get_num_threads()) or real(*a))
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    own = torch.get_num_threads()
    cfg = load_config(["act=relu,gelu", "seeds=3", "parallel=4", "results_dir=/nonexistent/results", *SMALL])
    result = est.estimate(cfg)
    assert timed_with == [sweep.worker_threads(4)] * 2 == [2, 2] and torch.get_num_threads() == own
    assert (result.parallel, result.threads) == (4, 2) and result.wall_s == pytest.approx(result.total_s / 4)
    text = est.format_estimate(result)
    assert f"≈ {est.duration(result.wall_s)} wall with parallel=4 (runs timed at 2 threads each" in text
    assert "cpu (2 threads)" in text
    one = est.estimate(load_config(["act=relu", "seeds=1", "parallel=4", "results_dir=/nonexistent/results", *SMALL]))
    assert one.parallel == 1 and one.threads == own and "wall with" not in est.format_estimate(one)  # one job


def test_completed_runs_are_left_out_and_unfinished_ones_count_their_epochs_left(relu_pair, tmp_path, capsys):
    results = copy_tree(relu_pair, tmp_path / "r")  # `visionbench run ... act=relu seeds=2`, trained once per session
    before = sorted(p for p in results.rglob("*"))
    capsys.readouterr()

    assert main(["estimate", f"results_dir={results}", *shrunk(), "act=relu", "seeds=3"]) == 0
    out = capsys.readouterr().out
    assert _rows(out)["relu"][6] == "1/3"
    assert "for 1 of 3 runs (2 completed in" in out
    assert sorted(p for p in results.rglob("*")) == before  # no seed_2, nothing rewritten

    # seed 1 interrupted after its first of 2 epochs: one epoch left (+ 2 of seed 2)
    run = results / "digits_vgg4" / "relu" / "seed_1"
    summary = layout.read_summary(run)
    layout.write_summary(run, {**summary, "status": layout.INTERRUPTED})
    metrics = (run / "metrics.csv").read_text().splitlines()
    (run / "metrics.csv").write_text("\n".join(metrics[:2]) + "\n")
    (row,) = est.estimate(load_config([f"results_dir={results}", *shrunk(), "act=relu", "seeds=3"])).rows
    assert (row.runs_left, row.epochs_left) == (2, 3)
    assert row.left_s == pytest.approx(3 * row.epoch_s)

    # a results dir trained with other settings fails as the sweep would, before any timing
    assert main(["estimate", f"results_dir={results}", *shrunk(), "act=relu", "seeds=3", "optim.lr=0.05"]) == 2
    assert "holds a run with a different configuration" in capsys.readouterr().err


def test_a_huge_batch_is_one_line_memory_error_and_refused_at_once(tmp_path, capsys):
    """The CPU allocator refuses the 256 GB input outright (more than RAM + swap): nothing is touched.
    (How long the refusal takes is no pass/fail matter here: a loaded machine is slow for nothing.)"""
    code = main(["estimate", f"results_dir={tmp_path / 'r'}", "act=relu", "seeds=1", "batch_size=1000000000"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(
        "visionbench estimate: batch 1000000000 (per device) does not fit in memory on cpu for vgg4/relu: "
    )
    assert err.endswith("; lower batch_size or set trainer.accumulate_grad_batches=K")
    assert not (tmp_path / "r").exists()


def test_a_batch_the_allocator_would_grant_is_refused_before_it_swaps(tmp_path, capsys, monkeypatch):
    """Below RAM + swap the allocator grants anything (then the machine swaps): the estimate checks the
    step's extrapolated need against the available memory (here: pretended 50 MB) before running it."""
    monkeypatch.setattr(measure, "available_bytes", lambda: 50 * 10**6)
    assert main(["estimate", f"results_dir={tmp_path / 'r'}", "act=relu", "seeds=1", "batch_size=4096"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "does not fit in memory on cpu for vgg4/relu: not enough memory: a step needs about" in err
    assert err.endswith("50 MB available; lower batch_size or set trainer.accumulate_grad_batches=K")


def test_out_of_memory_messages_are_recognised():
    cpu = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
        "you tried to allocate 256000000000 bytes. Error code 12 (Cannot allocate memory)"
    )
    assert measure.out_of_memory(cpu) == "tried to allocate 256.0 GB"
    cuda = torch_oom("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.15 GiB")
    assert measure.out_of_memory(cuda) == "tried to allocate 20.00 GiB"
    assert measure.out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) is None


def torch_oom(text: str):
    import torch

    return torch.OutOfMemoryError(text)


def test_durations_read_naturally():
    assert [est.duration(s) for s in (4.25, 42, 210, 7560, 2 * 86400)] == ["4.2 s", "42 s", "3.5 min", "2.1 h", "2.0 d"]
