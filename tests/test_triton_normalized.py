"""The Triton kernels of PolyNorm and SLAF's training mode (`triton_normalized.py`), beyond the shared checks of
tests/test_triton_kernels.py: shapes that take several channel chunks and tile blocks, half-precision inputs,
the same bits every run, SLAF's running statistics as the reference path updates them, `torch.library.opcheck`
of the four ops (torch.compile tracing them, and their sm_90 machine code: tests/test_triton_kernels.py)."""

from __future__ import annotations

import pytest
import torch

from visionbench import activations
from visionbench.activations import fused, triton_ops

from .test_triton_kernels import DEVICE, assert_same_bits_twice, forward_backward, twins

pytestmark = pytest.mark.skipif(
    not triton_ops.HAVE_TRITON or not (triton_ops.interpreting() or torch.cuda.is_available()),
    reason="needs Triton and a GPU or TRITON_INTERPRET=1",
)

# (shape, memory format, channel_dim): several channel chunks (PolyNorm), several tiles per channel (SLAF),
# partly masked blocks, channels on dim 1 of a 3-D input (post > 1), channels_last with channels elsewhere
SHAPES = {
    "nchw_many_chunks": ((2, 20, 15, 20), torch.contiguous_format, None),  # post 300: 2 blocks of 256, BC 8
    "nchw_wide_map": ((2, 3, 45, 50), torch.contiguous_format, None),  # SLAF: 2 column blocks per row
    "tokens_wide": ((5, 13, 70), torch.contiguous_format, -1),  # C 70: 3 chunks of 32
    "tokens_300": ((41, 300), torch.contiguous_format, -1),  # SLAF MODE 2: 2 column blocks, 6 row blocks
    "channels_last": ((3, 40, 5, 7), torch.channels_last, None),
    "dim1_of_3d": ((4, 6, 33), torch.contiguous_format, 1),
    "channels_last_dim3": ((2, 3, 4, 6), torch.channels_last, -1),
}
FAMILIES = [
    ("polynorm", {}),
    ("polynorm", {"degree": 4}),
    ("slaf", {}),
    ("slaf", {"degree": 3}),
    ("slaf", {"degree": 1}),
]
FAMILY_IDS = [name + "".join(f"-{v}" for v in kw.values()) for name, kw in FAMILIES]


def _channels(shape, channel_dim):
    return shape[channel_dim] if channel_dim is not None else shape[1]


def _check(got, want, tol):
    for label, a, b in zip(["y", "grad_x", "weight"], got, want):
        assert a.shape == b.shape, label
        a, b = a.detach(), b.detach()
        err = float((a.double().cpu() - b).abs().max()) / (float(b.abs().max()) + 1e-6)
        assert err < tol, f"{label}: relative error {err:.2e}"


# the wide map (a grid of many programs per channel: ~3.5 s a case under the interpreter) in make test-slow
@pytest.mark.parametrize(
    "layout", [pytest.param(k, marks=pytest.mark.slow) if k == "nchw_wide_map" else k for k in SHAPES]
)
@pytest.mark.parametrize("per_channel", [False, True], ids=["shared", "per_channel"])
@pytest.mark.parametrize("name,kwargs", FAMILIES, ids=FAMILY_IDS)
def test_matches_float64(name, kwargs, per_channel, layout, monkeypatch):
    shape, memory_format, channel_dim = SHAPES[layout]
    act, twin = twins(name, kwargs, per_channel, _channels(shape, channel_dim), channel_dim, nudge=0.1)
    x = (1.5 * torch.randn(shape) + 0.3).contiguous(memory_format=memory_format)
    g = torch.randn(shape)
    with fused.reference_path():
        want = forward_backward(twin, x.double(), g.double())
    monkeypatch.setattr(fused, "BACKEND", "triton")
    got = forward_backward(act, x.to(DEVICE), g.to(DEVICE))
    _check(got, want, 2e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["polynorm", "slaf"])
def test_half_inputs_run_in_float32(name, dtype, monkeypatch):
    act, twin = twins(name, {}, True, 6, None, nudge=0.1)
    x = torch.randn(3, 6, 7, 5).to(dtype)
    with fused.reference_path():
        want = twin(x.double())
    monkeypatch.setattr(fused, "BACKEND", "triton")
    xd = x.to(DEVICE).requires_grad_(True)
    y = act(xd)
    assert y.dtype == dtype
    y.float().sum().backward()
    assert xd.grad.dtype == dtype and act.weight.grad.dtype == torch.float32
    assert float((y.double().cpu() - want).abs().max()) <= 2e-2 * (float(want.abs().max()) + 1)


@pytest.mark.parametrize("per_channel", [False, True], ids=["shared", "per_channel"])
@pytest.mark.parametrize("name", ["polynorm", "slaf"])
def test_same_bits_every_run(name, per_channel, monkeypatch):
    # no atomics: per-program partial sums, added on the host in a fixed order
    monkeypatch.setattr(fused, "BACKEND", "triton")
    act, _ = twins(name, {}, per_channel, 20, None, nudge=0.1)
    assert_same_bits_twice(act, torch.randn(2, 20, 15, 20, device=DEVICE), torch.randn(2, 20, 15, 20, device=DEVICE))


@pytest.mark.parametrize(
    "shape,channel_dim,memory_format",
    [
        ((8, 3, 4, 4), None, torch.contiguous_format),
        ((8, 5, 4, 4), None, torch.channels_last),
        ((4, 6, 3), None, torch.contiguous_format),
        ((4, 3, 3, 5), -1, torch.contiguous_format),
    ],
)
def test_slaf_running_statistics_as_reference(shape, channel_dim, memory_format, monkeypatch):
    # the batch statistics the kernels return update the running averages as the reference path's do (also for an
    # input with an offset, where raw power sums would lose the variances in fp32), and eval then agrees too
    mods = [activations.create("slaf", degree=3, momentum=0.25, channel_dim=channel_dim).to(DEVICE) for _ in range(2)]
    for step in range(2):
        x = (torch.randn(shape) * 1.5 + 4.0 * step).contiguous(memory_format=memory_format).to(DEVICE)
        with fused.reference_path():
            mods[0](x)
        with monkeypatch.context() as mp:
            mp.setattr(fused, "BACKEND", "triton")
            mods[1](x)
    torch.testing.assert_close(mods[1].running_mean, mods[0].running_mean, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mods[1].running_var, mods[0].running_var, rtol=1e-5, atol=1e-5)
    for m in mods:
        m.eval()
    x = torch.randn(shape, device=DEVICE)
    with fused.reference_path():
        want = mods[0](x)
    monkeypatch.setattr(fused, "BACKEND", "triton")
    torch.testing.assert_close(mods[1](x), want, rtol=1e-5, atol=1e-5)


def test_slaf_returns_train_forward_stats():
    from visionbench.activations import slaf, triton_normalized

    x = torch.randn(4, 6, 5, 3, device=DEVICE) + 1.0
    w = torch.randn(6, 4, device=DEVICE)
    running_mean, running_var = torch.zeros(6, 3, device=DEVICE), torch.ones(6, 3, device=DEVICE)
    got = triton_normalized.slaf_train(x, 1, w, 1e-5, running_mean, running_var, 0.25)
    want = slaf._train_forward(x.double(), fused.broadcast(w.double(), x, 1), degree=3, eps=1e-5, dim=-3)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5)
    # the running averages moved a quarter of the way to the batch's (its unbiased variance), in place
    n = x.numel() // 6
    mean = torch.cat([t.reshape(6, 1) for t in want[1::2]], 1)
    var = torch.cat([t.reshape(6, 1) for t in want[2::2]], 1) * n / (n - 1)
    torch.testing.assert_close(running_mean.double(), 0.25 * mean, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(running_var.double(), 0.75 + 0.25 * var, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("per_channel", [False, True], ids=["shared", "per_channel"])
@pytest.mark.parametrize("channel_axis,shape", [(1, (2, 3, 4, 5)), (2, (3, 4, 6))], ids=["nchw", "tokens"])
def test_ops_pass_opcheck(per_channel, channel_axis, shape):
    from visionbench.activations import triton_normalized  # noqa: F401 - defines the ops

    ops = torch.ops.visionbench
    x = torch.randn(*shape, device=DEVICE, requires_grad=True)
    g = torch.randn(*shape, device=DEVICE)
    c = torch.randn(*((shape[channel_axis],) if per_channel else ()), 4, device=DEVICE, requires_grad=True)
    torch.library.opcheck(ops.polynorm_forward, (x, c, channel_axis, 1e-6))
    torch.library.opcheck(ops.polynorm_backward, (x.detach(), g, c.detach(), channel_axis, 1e-6))
    stats = [torch.zeros(shape[channel_axis], 3, device=DEVICE), torch.ones(shape[channel_axis], 3, device=DEVICE)]
    torch.library.opcheck(ops.slaf_forward, (x, c, *stats, channel_axis, 1e-5, 0.01))
    _, mean, var, _, _ = ops.slaf_forward(x.detach(), c.detach(), *stats, channel_axis, 1e-5, 0.01)
    torch.library.opcheck(ops.slaf_backward, (x.detach(), g, c.detach(), mean, var, channel_axis, 1e-5))
