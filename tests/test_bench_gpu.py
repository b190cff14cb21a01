"""The GPU benchmarks (docs/bench.md, "On the first GPU"; all of them run by `make gpu-window`: tests/test_gpu_window.py):
the speed levers `bench train` applies as a run does (trainer.precision, trainer.channels_last), tested on CPU."""

from __future__ import annotations

import torch

from visionbench.bench import main as bench_main
from visionbench.bench.train_step import TrainStep
from visionbench.config import run_config, typed
from visionbench.sweep.preflight import load_config
from visionbench.train.run import build_model


def _step(*overrides: str, batch: int = 8) -> tuple[TrainStep, list[torch.dtype]]:
    """A TrainStep of digits VGG4/rational with the given overrides, and the dtypes its first conv outputs."""
    run = typed(run_config(load_config(["act=rational", *overrides]), "rational", 0))
    torch.manual_seed(0)
    model = build_model(run, 10, 1, 8)
    seen: list[torch.dtype] = []
    conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    conv.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    x, y = torch.randn(batch, 1, 8, 8), torch.randint(0, 10, (batch,))
    return TrainStep(model, run, x, y), seen


def test_bf16_mixed_runs_the_forward_under_autocast_and_keeps_fp32_weights():
    step, seen = _step("trainer.precision=bf16-mixed")
    step()
    assert seen == [torch.bfloat16]
    assert all(p.dtype == torch.float32 for p in step.model.parameters())
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in step.model.parameters() if p.requires_grad)
    plain, seen = _step()
    plain()
    assert seen == [torch.float32]


def test_channels_last_converts_model_and_batch():
    step, _ = _step("trainer.channels_last=true")
    conv = [m for m in step.model.modules() if isinstance(m, torch.nn.Conv2d)][-1]  # 128 -> 256 channels
    assert conv.weight.is_contiguous(memory_format=torch.channels_last) and not conv.weight.is_contiguous()
    assert step.x.is_contiguous(memory_format=torch.channels_last)  # (1 channel: NHWC is NCHW too)
    step()
    step.evaluate()
    assert step.model.training


def test_bench_train_applies_the_levers_and_says_so(tmp_path):
    args = [
        "train",
        "act=rational",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--name",
        "levers",
        "trainer.precision=bf16-mixed",
        "trainer.channels_last=true",
    ]
    assert bench_main(args) == 0
    text = (tmp_path / "levers.md").read_text()
    assert "speed levers: trainer.precision=bf16-mixed, channels_last=true, compile=false" in text
