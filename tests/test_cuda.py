"""On a CUDA device (skipped on a machine without one; run on the first GPU: docs/bench.md, "On the first GPU"):
every registered activation is as accurate in float32 there as on the CPU, passes float64 gradcheck there, and
stays close to float32 under bf16 autocast; a training step's bookkeeping queues no device sync; a step under
`trainer.precision=bf16-mixed` keeps float32 weights; whole runs with `data.on_device=true` train on the GPU."""

from __future__ import annotations

import copy

import pytest
import torch

from visionbench import activations as A
from visionbench.config import run_config, typed
from visionbench.sweep.preflight import load_config
from visionbench.train.run import build_model

from .fixtures import gradcheck_module
from .helpers import sweep_small

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CUDA = torch.device("cuda")
ALL = A.names()
LEARNABLE = [n for n in ALL if A.is_learnable(n)]


def _forward_backward(act: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Output, input gradient and coefficient gradients of `act` at `x` (loss: a fixed weighting of y)."""
    x = x.clone().requires_grad_(True)
    y = act(x)
    weights = torch.linspace(-1, 1, y.numel(), device=y.device, dtype=y.dtype).view_as(y)
    (y * weights).sum().backward()
    return (y.detach(), x.grad, *(p.grad for p in act.parameters() if p.requires_grad))


@pytest.mark.parametrize("name", ALL)
def test_cuda_is_as_accurate_in_float32_as_the_cpu(name):
    # against a float64 CPU reference, the float32 values and gradients on CUDA are as close as the CPU's own
    # float32 ones: a plain tolerance fails for nothing where float32 itself is far off, as in the coefficient
    # gradients of tropical_rational (sums of large terms: 1.9e-3 off on the CPU too, seen on an H100 the same)
    torch.manual_seed(0)
    reference = A.create(name).double().train()
    cpu, gpu = copy.deepcopy(reference).float(), copy.deepcopy(reference).float().to(CUDA)
    x = 2 * torch.randn(4, 8, 6, 6, dtype=torch.float64)
    want = _forward_backward(reference, x)
    on_cpu, on_gpu = _forward_backward(cpu, x.float()), _forward_backward(gpu, x.float().to(CUDA))
    assert len(want) == len(on_cpu) == len(on_gpu)
    for i, (w, c, g) in enumerate(zip(want, on_cpu, on_gpu)):
        cpu_error = (c.double() - w).abs().max().item()
        gpu_error = (g.cpu().double() - w).abs().max().item()
        bound = 4 * cpu_error + 1e-6 * w.abs().max().item()
        assert gpu_error <= bound, f"output {i}: {gpu_error:.3g} off float64 on CUDA, {cpu_error:.3g} on the CPU"
    for (n, b), (_, b_gpu) in zip(cpu.named_buffers(), gpu.named_buffers()):  # running statistics (SLAF)
        torch.testing.assert_close(b_gpu.cpu(), b, rtol=1e-4, atol=1e-6, msg=f"buffer {n}")


@pytest.mark.parametrize("name", LEARNABLE)
def test_triton_kernels_run_on_cuda_and_agree_with_the_compiled_ones(name, monkeypatch):
    # the default backend picks a family's Triton kernels on CUDA (fused.backend_for); they agree with the
    # torch.compile'd fused kernels (VISIONBENCH_KERNELS=compile) on a training-sized map, NCHW and channels_last
    from visionbench.activations import fused

    torch.manual_seed(0)
    act = A.create(name).to(CUDA).train()
    x = 2 * torch.randn(16, 32, 32, 32, device=CUDA)
    assert fused.backend_for(x) == ("triton" if act.triton_kernels else "compile")
    for memory_format in (torch.contiguous_format, torch.channels_last):
        xm = x.contiguous(memory_format=memory_format)
        monkeypatch.setattr(fused, "BACKEND", "compile")
        torch.manual_seed(1)
        want = _forward_backward(copy.deepcopy(act), xm)
        monkeypatch.setattr(fused, "BACKEND", "auto")
        torch.manual_seed(1)
        got = _forward_backward(copy.deepcopy(act), xm)
        for i, (w, g) in enumerate(zip(want, got)):
            torch.testing.assert_close(g, w, rtol=2e-4, atol=2e-4 * w.abs().max().item(), msg=f"output {i}")


@pytest.mark.parametrize("name", LEARNABLE)
def test_gradcheck_on_cuda_in_float64(name):
    torch.manual_seed(0)
    act = A.create(name).to(CUDA, torch.float64).eval()  # eval: SLAF's normalisation is fixed, as on CPU
    x = torch.randn(2, 3, 4, 4, dtype=torch.float64, device=CUDA)
    assert gradcheck_module(act, x)


@pytest.mark.parametrize("name", ALL)
def test_bf16_autocast_stays_close_to_float32(name):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1).to(CUDA)
    act = A.create(name).to(CUDA).train()
    act32 = copy.deepcopy(act)
    x = torch.randn(8, 3, 16, 16, device=CUDA)
    y32 = act32(conv(x))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y16 = act(conv(x))
    assert torch.isfinite(y16).all()
    error = (y16.float() - y32).norm() / y32.norm().clamp_min(1e-6)
    assert error < 0.03, f"{name}: relative error {error:.3g} under bf16 autocast"


def test_a_bf16_mixed_step_on_cuda_keeps_float32_weights_and_finite_gradients():
    from visionbench.bench.train_step import TrainStep

    run = typed(run_config(load_config(["act=rational", "trainer.precision=bf16-mixed"]), "rational", 0))
    torch.manual_seed(0)
    model = build_model(run, 10, 1, 8).to(CUDA)
    step = TrainStep(model, run, torch.randn(16, 1, 8, 8, device=CUDA), torch.randint(0, 10, (16,), device=CUDA))
    step()
    assert all(p.dtype == torch.float32 and p.is_cuda for p in step.model.parameters())
    assert all(torch.isfinite(p.grad).all() for p in step.model.parameters() if p.grad is not None)


def test_a_training_steps_bookkeeping_does_not_sync():
    from visionbench.train.batch_mean import BatchMean
    from visionbench.train.loss_watch import LossWatch

    watch, mean = LossWatch(), BatchMean().to(CUDA)
    loss = torch.ones((), device=CUDA)
    watch.update(loss, 0)  # the first update allocates the watch's tensors
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(1, 5):  # what ClassificationModule.training_step does with each loss between checks
            watch.update(loss * step, step)
            mean.update(loss, weight=64)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert watch.check() is None


@pytest.mark.parametrize("act", ["relu", "rational", "slaf"])
def test_a_run_with_data_on_the_device_trains_on_cuda(tmp_path, act):
    outcome = sweep_small(
        tmp_path,
        f"act={act}",
        "data.on_device=true",
        "trainer.precision=bf16-mixed",
        "data.limit_train=null",
        "epochs=2",
    )
    assert outcome.status == "completed", outcome.summary.get("error")
    assert outcome.summary["peak_mem_mb"] > 0
    assert "cuda" in str(outcome.summary["environment"]).lower()
    assert outcome.summary["metrics"]["val_top1_final"] > 30  # percent; digits, 10 classes: chance is 10
