"""The Triton kernels of every learnable family (`triton_ops.BODIES`), on this CPU under the Triton interpreter
(TRITON_INTERPRET=1, set by tests/conftest.py where no GPU is): values, grad_x and every coefficient gradient
against the plain formulas in float64, shared and per channel, NCHW, channels_last and tokens, odd sizes that
leave tiles partly masked; the same bits on every run; the ops pass `torch.library.opcheck` and torch.compile
traces through them; every kernel compiles for a Hopper GPU (sm_90) with this machine's Triton."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from visionbench import activations
from visionbench.activations import fused, triton_ops

from .helpers import ROOT

pytestmark = pytest.mark.skipif(
    not triton_ops.HAVE_TRITON or not (triton_ops.interpreting() or torch.cuda.is_available()),
    reason="needs Triton and a GPU or TRITON_INTERPRET=1",
)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# (registry name, constructor arguments): every configuration whose kernel body differs
CASES = [
    ("rational", {"version": "A"}),
    ("rational", {"version": "B"}),
    ("rational", {"version": "C"}),
    ("rational", {"version": "D"}),
    ("rational", {"version": "A", "degrees": (3, 2)}),
    ("polyrelu", {}),
    ("hermite", {}),
    ("hermite", {"clamp": True}),
    ("hermite", {"degree": 6}),
    ("fourier", {}),
    ("tropical", {}),
    ("tropical_rational", {}),
    ("prelu", {}),
    ("swish_beta", {}),
    ("acon_c", {}),
    ("star_relu", {}),
    ("apl", {}),
    ("kaf", {}),
    ("bspline", {}),
    ("bspline", {"residual": "none"}),
    ("bspline", {"order": 2}),
    ("polynorm", {}),
    ("slaf", {}),
]
IDS = [name + "".join(f"-{v}" for v in kwargs.values()) for name, kwargs in CASES]
# input layouts: (shape, memory format, channel_dim)
LAYOUTS = {
    "nchw": ((3, 5, 7, 6), torch.contiguous_format, None),
    "channels_last": ((3, 5, 7, 6), torch.channels_last, None),
    "tokens": ((4, 9, 6), torch.contiguous_format, -1),
    "channels_last_dim3": ((3, 5, 7, 6), torch.channels_last, 3),
}  # memory NHWC, channels a spatial-like dim


def twins(name: str, kwargs: dict, per_channel: bool, channels: int, channel_dim, nudge: float = 0.05):
    """The module under test (float32, coefficients moved off their init by `nudge` sd) and its float64 twin
    (tests/test_triton_normalized.py too)."""
    extra = {"per_channel": True, "num_channels": channels} if per_channel else {}
    act = activations.create(name, **kwargs, **extra, channel_dim=channel_dim)
    with torch.no_grad():
        for p in act.parameters():
            p.add_(nudge * torch.randn_like(p))
    if name == "rational" and kwargs.get("version") == "D":
        act.eval()  # no noise: the twin would draw other numbers
    twin = activations.create(name, **kwargs, **extra, channel_dim=channel_dim).double()
    twin.load_state_dict(act.state_dict())
    twin.train(act.training)
    return act.to(DEVICE), twin


def forward_backward(act, x, g):
    """y, grad_x and every coefficient gradient of act at x, for the output gradient g."""
    x = x.detach().requires_grad_(True)
    y = act(x)
    y.backward(g)
    return [y.detach(), x.grad] + [p.grad for p in act.parameters() if p.requires_grad]


def test_every_learnable_family_has_triton_kernels_and_a_case_here():
    learnable = {n for n in activations.names() if activations.is_learnable(n)}
    assert learnable == {name for name, _ in CASES}
    assert all(activations.get_class(n).triton_kernels for n in learnable)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("per_channel", [False, True], ids=["shared", "per_channel"])
@pytest.mark.parametrize("name,kwargs", CASES, ids=IDS)
def test_triton_matches_float64(name, kwargs, per_channel, layout, monkeypatch):
    shape, memory_format, channel_dim = LAYOUTS[layout]
    channels = shape[1] if channel_dim is None else shape[channel_dim]
    act, twin = twins(name, kwargs, per_channel, channels, channel_dim)
    x = (2.0 * torch.randn(shape)).contiguous(memory_format=memory_format)
    g = torch.randn(shape)
    with fused.reference_path():
        want = forward_backward(twin, x.double(), g.double())
        act.zero_grad()
        float32 = forward_backward(act, x.to(DEVICE), g.to(DEVICE))  # the plain formulas' own float32 rounding
    act.zero_grad()
    monkeypatch.setattr(fused, "BACKEND", "triton")
    assert fused.backend_for(x.to(DEVICE)) == "triton"
    got = forward_backward(act, x.to(DEVICE), g.to(DEVICE))
    labels = ["y", "grad_x"] + [n for n, p in act.named_parameters() if p.requires_grad]
    for label, a, b, f in zip(labels, got, want, float32):
        assert a.shape == b.shape, label
        # relative to the largest value, or within 4x the plain formulas' float32 error where a sum cancels
        scale = float(b.abs().max()) + 1e-6
        err, own = (float((t.double().cpu() - b).abs().max()) / scale for t in (a, f))
        assert err < max(2e-5, 4 * own), f"{label}: relative error {err:.2e} (plain float32: {own:.2e})"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["rational", "hermite", "kaf"])
def test_half_inputs_run_in_float32(name, dtype, monkeypatch):
    # a half-precision input comes back in its dtype, from fp32 math: within the input's rounding of the float64 values
    act, twin = twins(name, {}, False, 5, None)
    x = torch.randn(3, 5, 7, 6).to(dtype)
    with fused.reference_path():
        want = twin(x.double())
    monkeypatch.setattr(fused, "BACKEND", "triton")
    y = act(x.to(DEVICE))
    assert y.dtype == dtype
    assert float((y.detach().double().cpu() - want).abs().max()) <= 2e-2 * (float(want.abs().max()) + 1)


@pytest.mark.parametrize(
    "name,kwargs",
    CASES[:1] + [c for c in CASES if c[0] in ("kaf", "bspline", "tropical")],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_same_bits_every_run(name, kwargs, monkeypatch):
    # no atomics: the coefficient gradients are per-program partial sums added in a fixed order
    monkeypatch.setattr(fused, "BACKEND", "triton")
    act, _ = twins(name, kwargs, True, 5, None)
    x, g = torch.randn(4, 5, 9, 9, device=DEVICE), torch.randn(4, 5, 9, 9, device=DEVICE)
    first = forward_backward(act, x, g)
    act.zero_grad()
    second = forward_backward(act, x, g)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@pytest.mark.parametrize("per_channel", [False, True], ids=["shared", "per_channel"])
def test_ops_pass_opcheck(per_channel):
    spec = triton_ops.spec_id("rational", {"form": "A", "m": 5, "n": 4})
    x = torch.randn(2, 3, 4, 5, device=DEVICE, requires_grad=True)
    c = torch.randn(*((3,) if per_channel else ()), 10, device=DEVICE, requires_grad=True)
    torch.library.opcheck(torch.ops.visionbench.act_forward, (x, c, spec, 1))
    torch.library.opcheck(torch.ops.visionbench.act_backward, (x.detach(), torch.randn_like(x), c.detach(), spec, 1))


def test_torch_compile_traces_the_op(monkeypatch):
    # inside torch.compile a Triton-backed activation stays the op (not the plain formulas) and gives its numbers
    monkeypatch.setattr(fused, "BACKEND", "triton")
    act = activations.create("hermite").to(DEVICE)
    x = torch.randn(2, 4, 5, 5, device=DEVICE)
    eager = forward_backward(act, x, torch.ones_like(x))
    act.zero_grad()
    calls = []
    monkeypatch.setattr(act, "reference_forward", lambda t: calls.append(t) or t)
    compiled = torch.compile(act, fullgraph=True, backend="aot_eager")
    got = forward_backward(compiled, x, torch.ones_like(x))
    assert not calls
    for a, b in zip(got, eager):
        torch.testing.assert_close(a, b)


def _configs(name: str, kwargs: dict) -> list[tuple[str, dict]]:
    """The (family, kernel config) pairs a module of this configuration launches, found by running it once."""
    seen = []
    real = triton_ops.spec_id

    def spy(family, config):
        seen.append((family, config))
        return real(family, config)

    act, _ = twins(name, kwargs, False, 5, None)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fused, "BACKEND", "triton")
        mp.setattr(triton_ops, "spec_id", spy)
        act(torch.randn(2, 5, 3, 3, device=DEVICE, requires_grad=True)).sum().backward()
    return list({repr(c): c for c in seen}.values())


def compile_for_hopper(configs: list, modes=(1,), dtypes=("fp32",)) -> None:
    """Compile the template's kernels with each config's bodies to sm_90 machine code (run with the interpreter
    off: `triton.compile` takes real JIT functions)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from visionbench.activations import triton_template as template

    for family, config, kt in configs:
        body, params = triton_ops._SPECS[triton_ops.spec_id(family, config)]
        for mode in modes:
            for dtype in dtypes:
                for backward in (False, True):
                    names = ["X", "G", "GX", "C", "PART"] if backward else ["X", "Y", "C"]
                    signature = {n: "*fp32" if n in ("C", "PART") else f"*{dtype}" for n in names}
                    signature.update({"M": "i32", "N": "i32", "CH": "i32"})
                    constants = dict(
                        KT=kt, P0=params[0], P1=params[1], P2=params[2], P3=params[3], MODE=mode, BM=2, BN=1024
                    )
                    signature.update({k: "constexpr" for k in constants})
                    kernel = template.kernels(body.forward, body.backward)[int(backward)]
                    compiled = triton.compile(
                        ASTSource(fn=kernel, signature=signature, constexprs=constants),
                        target=GPUTarget("cuda", 90, 32),
                    )
                    assert compiled.asm["cubin"], (family, config, mode, dtype, backward)


def _compile_in_subprocess(cases, modes, dtypes) -> None:
    pytest.importorskip("triton.backends.nvidia")
    configs = []
    for name, kwargs in cases:
        kt = sum(p.shape[-1] for p in activations.create(name, **kwargs).parameters())
        configs += [(family, config, kt) for family, config in _configs(name, kwargs)]
    assert configs  # (PolyNorm's and SLAF's own kernels: tests/test_triton_normalized.py)
    code = (
        "from tests.test_triton_kernels import compile_for_hopper; "
        f"compile_for_hopper({configs!r}, {modes!r}, {dtypes!r})"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def test_kernels_compile_for_hopper():
    # the interpreter runs what a GPU would reject (it has no register limits, no type rules of the compiler):
    # every body also compiles to sm_90 machine code here, per-channel NCHW in fp32, in one process
    # (every MODE, bf16 and fp16 too: the slow suite)
    _compile_in_subprocess(CASES, (1,), ("fp32",))


@pytest.mark.slow
def test_kernels_compile_for_hopper_every_mode():
    _compile_in_subprocess(CASES, (0, 1, 2), ("fp32", "bf16"))  # fp16 compiles as bf16 does (a cast on load/store)
