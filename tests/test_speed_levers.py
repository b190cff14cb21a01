"""The speed levers (docs/running.md, "Speed levers"): trainer.channels_last, trainer.compile, trainer.accumulate_grad_batches,
trainer.sync_batchnorm, and trainer.precision=bf16-mixed with every learnable activation.

Each lever must leave the training itself alone: on digits VGG4 (GroupNorm, per-sample, so half
batches give the same statistics; no mixup) the per-epoch train_loss of metrics.csv is compared
with the plain run's. Measured on this CPU (3 epochs, 256 images, batch 64): channels_last and
accumulate_grad_batches=2 differ from the plain run by 1.1e-7 relative (float32 rounding of a
different summation order), compile (torch.compile of the model) by the same; bf16-mixed only has to finish with finite losses.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from visionbench import activations
from visionbench.config import ConfigError, run_config
from visionbench.sweep.preflight import load_config
from visionbench.train.run import step_batch, train_run

from .helpers import shrunk

TINY = ("recipe=digits_vgg4", "data.limit_train=256", "loss.mixup=0", "loss.cutmix=0")  # deltas to the shrink
RTOL = 1e-4  # the bound; measured: 1.1e-7


def _losses(tmp: Path, *overrides: str, act: str = "relu", epochs: int = 3) -> list[float]:
    """Train one tiny run and return its per-epoch train_loss (metrics.csv)."""
    run = run_config(load_config(shrunk(*TINY, f"act={act}", f"epochs={epochs}", *overrides)), act, 0)
    run_dir = tmp / "_".join([act, *overrides]).replace("=", "-")
    train_run(run, run_dir, progress=False)
    with open(run_dir / "metrics.csv") as f:
        return [float(r["train_loss"]) for r in csv.DictReader(f)]


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> list[float]:
    return _losses(tmp_path_factory.mktemp("plain"))


def _close(got: list[float], want: list[float], rtol: float = RTOL) -> None:
    assert len(got) == len(want) == 3
    assert got == pytest.approx(want, rel=rtol)


def test_channels_last_matches_plain_run(plain, tmp_path):
    _close(_losses(tmp_path, "trainer.channels_last=true"), plain)


def test_channels_last_converts_model_and_batches(tmp_path, monkeypatch):
    """The lever must act: the model's conv weights and the batches it sees are NHWC."""
    import torch

    from visionbench.train import module as module_file

    seen = []
    step = module_file.ClassificationModule.training_step

    def training_step(self, batch, batch_idx):
        x = self._images(batch[0])
        conv = next(m for m in self.model.modules() if isinstance(m, torch.nn.Conv2d))
        seen.append(
            (
                x.is_contiguous(memory_format=torch.channels_last),
                conv.weight.is_contiguous(memory_format=torch.channels_last),
            )
        )
        return step(self, batch, batch_idx)

    monkeypatch.setattr(module_file.ClassificationModule, "training_step", training_step)
    _losses(tmp_path, "trainer.channels_last=true", epochs=1)
    assert seen and all(a and b for a, b in seen)


def test_accumulate_keeps_global_batch_and_matches(plain, tmp_path):
    """accumulate=2: two steps of 32 per update give the 64-image update of the plain run."""
    _close(_losses(tmp_path, "trainer.accumulate_grad_batches=2"), plain, rtol=1e-5)


def test_step_batch_divides_by_processes_and_accumulation():
    assert step_batch(64, 1, 1) == 64
    assert step_batch(64, 2, 2) == 16
    with pytest.raises(ValueError, match="accumulate_grad_batches=3 must divide the per-device batch 32"):
        step_batch(64, 2, 3)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["trainer.accumulate_grad_batches=3"], "must divide the per-device batch 64"),
        (["trainer.accumulate_grad_batches=64", "trainer.devices=2"], "must divide the per-device batch 32"),
        (["trainer.accumulate_grad_batches=0"], "trainer.accumulate_grad_batches must be an integer >= 1"),
        (["trainer.channels_last=1"], "trainer.channels_last must be true or false"),
        (["trainer.compile=yes"], "trainer.compile must be true, false or reduce-overhead"),
        (["trainer.sync_batchnorm=2"], "trainer.sync_batchnorm must be true or false"),
    ],
)
def test_bad_levers_fail_before_the_sweep(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_config(shrunk(*TINY, *overrides))


def test_levers_are_passed_to_lightning(tmp_path, monkeypatch):
    """accumulate_grad_batches and sync_batchnorm reach the Trainer; the loader batch is divided. The Trainer is
    replaced where the one builder of every Trainer (train/trainer.py's `build_trainer`) looks it up."""
    from visionbench.train import trainer as trainer_file

    captured, built = {}, []
    real = trainer_file.L.Trainer

    class Spy(real):
        def fit(self, module, datamodule=None, ckpt_path=None, **kwargs):
            captured.update(
                accumulate=self.accumulate_grad_batches, batch=datamodule.batch_size, sync=type(self.strategy).__name__
            )
            raise KeyboardInterrupt  # stop before training: only the wiring is under test

    def trainer(**kwargs):
        built.append(kwargs)
        return Spy(**kwargs)

    monkeypatch.setattr(trainer_file.L, "Trainer", trainer)
    with pytest.raises(KeyboardInterrupt):
        _losses(tmp_path, "trainer.accumulate_grad_batches=4", "trainer.sync_batchnorm=true", epochs=1)
    assert len(built) == 1, "the run's Trainer was not built by the replaced class: the patch missed its lookup"
    assert built[0]["sync_batchnorm"] is True and built[0]["accumulate_grad_batches"] == 4
    assert captured["accumulate"] == 4 and captured["batch"] == 16


@pytest.mark.parametrize("value, kwargs", [("true", {}), ("reduce-overhead", {"mode": "reduce-overhead"})])
def test_compile_lever_compiles_the_network_once(value, kwargs, tmp_path, monkeypatch):
    """The default-suite sibling of the slow test below: trainer.compile=true (or the captured step, reduce-overhead)
    reaches the network (one `Module.compile` call with its mode, here a stand-in that does not compile) and the run
    trains."""
    import torch

    compiled = []
    monkeypatch.setattr(
        torch.nn.Module, "compile", lambda self, *args, **kw: compiled.append((type(self).__name__, kw))
    )
    losses = _losses(tmp_path, f"trainer.compile={value}", epochs=1)
    assert [kw for _, kw in compiled] == [kwargs] and len(losses) == 1 and losses[0] == losses[0]


@pytest.mark.slow  # 15-30 s of compilation on a 2-core CPU
def test_compile_matches_plain_run(plain, tmp_path, monkeypatch):
    """torch.compile (14-17 s of compilation on this CPU) in the captured step's mode (on the CPU no CUDA graph is
    taken: the compile path the GPU window's capture builds on): the network is compiled, the losses kept."""
    import torch

    compiled = []
    real = torch.nn.Module.compile

    def record(self, *args, **kwargs):
        compiled.append(type(self).__name__)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "compile", record)
    _close(_losses(tmp_path, "trainer.compile=reduce-overhead"), plain)
    assert len(compiled) == 1


# two representative families by default (a rational function with its fused kernel, a polynomial basis); the rest slow
BF16_DEFAULT = {"rational", "hermite"}


@pytest.mark.parametrize(
    "act",
    [
        pytest.param(n, marks=() if n in BF16_DEFAULT else pytest.mark.slow)
        for n in activations.names()
        if activations.is_learnable(n)
    ],
)
def test_bf16_mixed_with_every_learnable_family(act, tmp_path):
    """bf16 autocast on CPU: the learnable activations compute in fp32 inside (docs/bench.md)."""
    losses = _losses(tmp_path, "trainer.precision=bf16-mixed", act=act, epochs=1)
    assert len(losses) == 1 and losses[0] == losses[0] and losses[0] < 1e3
