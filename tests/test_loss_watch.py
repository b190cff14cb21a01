"""The divergence check without a device sync per step (train/loss_watch.py) and the GPU's busy share of a
run (train/callbacks.GpuBusy), on CPU; tests/test_cuda.py checks on a GPU that neither syncs."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from visionbench.train.callbacks import GpuBusy
from visionbench.train.loss_watch import LossWatch

from .helpers import sweep_small


def test_the_first_non_finite_loss_and_its_step_are_kept_until_checked():
    watch = LossWatch(every=4)
    assert watch.check() is None  # nothing seen yet
    for step, loss in enumerate([1.0, 0.5, math.nan, math.inf, 2.0]):
        watch.update(torch.tensor(loss), step)
    step, value, here = watch.check()
    assert (step, here) == (2, True) and math.isnan(value)  # the first one, not the last


def test_finite_losses_pass_the_check():
    watch = LossWatch()
    for step in range(100):
        watch.update(torch.tensor(1.0 / (step + 1)), step)
    assert watch.check() is None


@pytest.mark.parametrize(
    "batch_idx, num_batches, due",
    [(0, 10, False), (3, 10, True), (7, 10, True), (8, 10, False), (9, 10, True), (5, math.inf, False)],
)
def test_checks_fall_every_n_batches_and_on_each_epochs_last(batch_idx, num_batches, due):
    assert LossWatch(every=4).due(batch_idx, num_batches) is due


def test_a_run_that_diverges_mid_epoch_reports_the_step_it_diverged_at(tmp_path):
    outcome = sweep_small(tmp_path, "optim.lr=1e12", "epochs=1")
    assert outcome.status == "diverged"
    assert outcome.summary["diverged_epoch"] == 1
    step = int(outcome.summary["error"].split("step ")[-1])
    assert step < 5  # 320 images at batch 64: the check comes at the epoch's last batch, the step is the first bad one


def _module(device: str):
    return SimpleNamespace(device=torch.device(device))


def test_gpu_busy_averages_nvml_readings_after_each_epochs_first_period(monkeypatch):
    readings = iter([90, 70, 80])
    monkeypatch.setattr(torch.cuda, "utilization", lambda device=None: next(readings))
    busy = GpuBusy(period_s=0.0)
    busy.on_train_epoch_start(None, _module("cuda"))
    for i in range(3):
        busy.on_train_batch_end(None, _module("cuda"), None, None, i)
    assert busy.percent == 80.0
    resumed = GpuBusy()
    resumed.load_state_dict(busy.state_dict())  # saved in the checkpoint: a resumed run reports all its epochs
    assert resumed.percent == 80.0


def test_gpu_busy_is_none_on_a_cpu_and_without_nvml(monkeypatch):
    busy = GpuBusy(period_s=0.0)
    busy.on_train_epoch_start(None, _module("cpu"))
    busy.on_train_batch_end(None, _module("cpu"), None, None, 0)
    assert busy.percent is None

    asked = []

    def no_nvml(device=None):
        asked.append(device)
        raise ModuleNotFoundError("pynvml does not seem to be installed")

    monkeypatch.setattr(torch.cuda, "utilization", no_nvml)
    for _ in range(3):
        busy.on_train_epoch_start(None, _module("cuda"))
        busy.on_train_batch_end(None, _module("cuda"), None, None, 0)
        busy.on_train_batch_end(None, _module("cuda"), None, None, 1)
    assert busy.percent is None
    assert len(asked) == 1  # asked once in the run, not once per epoch: the run goes on, unmeasured


def test_a_cpu_run_records_no_busy_share(tmp_path):
    outcome = sweep_small(tmp_path, "epochs=1")
    assert outcome.status == "completed" and outcome.summary["gpu_busy_pct"] is None


# ---- the epoch's mean loss: weighted by batch size (train/batch_mean.py) ---------------------------


def test_a_batch_mean_weighs_each_batch_by_its_images():
    from visionbench.train.batch_mean import BatchMean

    mean = BatchMean()
    mean.update(torch.tensor(1.0), weight=64)
    mean.update(torch.tensor(3.0), weight=32)  # a last, partial batch weighs what its images weigh
    assert float(mean.compute()) == pytest.approx(5 / 3, rel=1e-6)
    mean.reset()
    mean.update(torch.tensor(2.0), weight=5)
    assert float(mean.compute()) == pytest.approx(2.0)


@pytest.mark.filterwarnings("ignore::UserWarning")  # self.log outside a Trainer
def test_the_eval_and_train_losses_are_the_mean_over_images_when_batches_differ_in_size():
    """A 10-image set in batches of 8 and 2: the logged loss is the cross-entropy over the 10 images, not the mean
    of the two batch means (which weighs the 2-image batch like the 8-image one)."""
    import torch.nn.functional as F

    from visionbench.config import block
    from visionbench.train.module import ClassificationModule

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    module = ClassificationModule(model, 3, block("optim"), block("sched"), block("loss"), eval_names=("val",))
    x, y = torch.randn(10, 4), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])
    batches = [(x[:8], y[:8]), (x[8:], y[8:])]
    with torch.no_grad():
        for k, batch in enumerate(batches):
            module.validation_step(batch, k)
            module.train_loss.update(F.cross_entropy(model(batch[0]), batch[1]), weight=len(batch[1]))
        whole = float(F.cross_entropy(model(x), y))
        unweighted = sum(float(F.cross_entropy(model(b[0]), b[1])) for b in batches) / 2
    eval_loss = float(module.eval_metrics["raw_val"]["loss"].compute())
    assert eval_loss == pytest.approx(whole, rel=1e-5) and abs(eval_loss - unweighted) > 1e-3
    assert float(module.train_loss.compute()) == pytest.approx(whole, rel=1e-5)
