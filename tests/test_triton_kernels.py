"""The Triton kernels of every learnable family (`triton_ops.BODIES`), on this CPU under the Triton interpreter
(TRITON_INTERPRET=1, set by tests/conftest.py where no GPU is): values, grad_x and every coefficient gradient
against the plain formulas in float64, shared and per channel, NCHW, channels_last and tokens, odd sizes that
leave tiles partly masked; the same bits on every run; the ops pass `torch.library.opcheck` and are keyed by the
family's configuration; a first call under torch.compile works for every family; every kernel compiles for a Hopper
GPU (sm_90) with this machine's Triton, as launched and as Inductor re-emits it."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest
import torch

from visionbench import activations
from visionbench.activations import fused, kaf, rational, triton_ops
from visionbench.bench import act_speed

from .families import CASES, IDS
from .helpers import ROOT

pytestmark = pytest.mark.skipif(
    not triton_ops.HAVE_TRITON or not (triton_ops.interpreting() or torch.cuda.is_available()),
    reason="needs Triton and a GPU or TRITON_INTERPRET=1",
)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

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


def test_every_family_with_triton_kernels_has_a_case_here():
    # from the registry: the built-in families whose class runs Triton kernels, its kernel object's (whose module holds
    # the family's bodies, where `triton_ops.resolve` finds them by the module's name) or its own; a family with a
    # reference formula only, or a fused kernel only, needs none (tests/test_act_levels.py)
    classes = [activations.get_class(n) for n in activations.names() if activations.is_learnable(n)]
    builtin = [cls for cls in classes if cls.__module__.startswith("visionbench.activations.")]
    with_triton = {cls.registry_name for cls in builtin if cls.triton_kernels}
    assert with_triton >= {"rational", "hermite", "polynorm", "slaf"}  # the rule finds them
    assert with_triton - {name for name, _ in CASES} == set(), "missing from tests/families.py CASES"
    from visionbench.activations.triton_template import Body

    for kernel in {cls.kernel for cls in builtin if cls.kernel is not None and cls.kernel.triton is not None}:
        assert isinstance(importlib.import_module(kernel.triton).BODIES[kernel.name], Body)


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
    assert_same_bits_twice(act, torch.randn(4, 5, 9, 9, device=DEVICE), torch.randn(4, 5, 9, 9, device=DEVICE))


def assert_same_bits_twice(act, x, g):
    """Two forward + backward calls of act give the same bits (tests/test_triton_normalized.py too)."""
    first = forward_backward(act, x, g)
    act.zero_grad()
    second = forward_backward(act, x, g)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@pytest.mark.parametrize("per_channel", [False, True], ids=["shared", "per_channel"])
def test_ops_pass_opcheck(per_channel):
    text = triton_ops.spec(rational.KERNEL, {"form": "A", "m": 5, "n": 4})
    x = torch.randn(2, 3, 4, 5, device=DEVICE, requires_grad=True)
    rows = (3,) if per_channel else ()
    coefs = [torch.randn(*rows, k, device=DEVICE, requires_grad=True) for k in (6, 4)]
    torch.library.opcheck(torch.ops.visionbench.act_forward, (x, coefs, text, 1))
    detached = [c.detach() for c in coefs]
    torch.library.opcheck(torch.ops.visionbench.act_backward, (x.detach(), torch.randn_like(x), detached, text, 1))


def test_the_op_is_keyed_by_its_configuration():
    # the op's argument names the family and its configuration, not an index into this process's registry: another
    # process (or a compiled graph from inductor's disk cache) reads the same kernels back from it
    text = triton_ops.spec(kaf.KERNEL, {"start": -2.5, "spacing": 0.25, "size": 21, "a": 1.5})
    assert text == "visionbench.activations.triton_basis:kaf(a=1.5, size=21, spacing=0.25, start=-2.5)"
    body, params = triton_ops.resolve(text)
    assert body.forward.__name__ == "kaf_forward" and params == (-2.5, 0.25, 21, 1.5)
    code = (
        "from visionbench.activations import triton_ops; "
        f"b, p = triton_ops.resolve({text!r}); print(b.forward.__name__, p)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["kaf_forward", "(-2.5,", "0.25,", "21,", "1.5)"], done.stderr[-2000:]


# ---- torch.compile: a first call traced, no eager call before it ------------------------------------------------
FIRST_CALL = """
import sys, torch, torch._inductor.config
from torch import nn
from visionbench import activations
from visionbench.activations import fused
from tests.families import CASES

fused.set_backend("triton")
torch._inductor.config.fallback_random = True  # rational D's noise: torch's generator in both runs
backend, every = sys.argv[1], sys.argv[2] == "every"
device = "cuda" if torch.cuda.is_available() else "cpu"  # on a GPU: the triton_op, as inductor compiles it there
cases = CASES if every else list({name: (name, kwargs) for name, kwargs in reversed(CASES)}.values())
for name, kwargs in cases:
    torch._dynamo.reset()  # a fresh trace per family (the recompile limit counts the models' types otherwise)
    torch.manual_seed(0)
    act = activations.create(name, **kwargs)
    model = nn.Sequential(nn.Conv2d(3, 4, 1), act).to(device)
    x = torch.randn(2, 3, 5, 5, device=device)
    before = [b.clone() for b in act.buffers()]
    plain, calls = act.reference_forward, []
    act.reference_forward = lambda t: calls.append(t) or plain(t)  # the compiled call must trace the kernels' ops
    torch.manual_seed(1)
    y = torch.compile(model, fullgraph=True, backend=backend)(x)  # the activation's first call in this process
    y.sum().backward()
    assert not calls, f"{name} {kwargs}: the compiled call took the plain formulas"
    del act.reference_forward
    got = [y.detach()] + [p.grad.clone() for p in model.parameters()]
    after_compiled = [b.clone() for b in act.buffers()]
    model.zero_grad()
    torch.manual_seed(1)
    y = model(x)
    y.sum().backward()
    want = [y.detach()] + [p.grad for p in model.parameters()]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name} {kwargs}: {m}")
    # running averages (SLAF): the compiled step moved them as the eager one, with the same batch statistics b:
    # r1 = (1 - m) r0 + m b, r2 = (1 - m) r1 + m b = (2 - m) r1 - (1 - m) r0
    m = getattr(act, "momentum", 0.0)
    for r0, r1, r2 in zip(before, after_compiled, act.buffers()):
        torch.testing.assert_close(r2, (2 - m) * r1 - (1 - m) * r0, msg=lambda s: f"{name} {kwargs} buffers: {s}")
    print("compiled", name, flush=True)
"""


def _first_calls(backend: str, every: bool) -> None:
    env = dict(os.environ, **({} if torch.cuda.is_available() else {"TRITON_INTERPRET": "1"}))
    done = subprocess.run(
        [sys.executable, "-c", FIRST_CALL, backend, "every" if every else "each family"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.count("compiled") == (len(CASES) if every else len({name for name, _ in CASES}))


def test_a_first_call_under_torch_compile_works_for_every_family():
    # every family of tests/families.py (one configuration each; all of them: the slow suite), its activation first
    # called inside torch.compile(fullgraph=True) in a fresh process (an eager call first would hide a registry filled
    # while Dynamo traces): the compiled call traces the kernels' ops (not the plain formulas), its numbers equal the
    # eager ones, and it moves running averages as an eager call does
    _first_calls("aot_eager", every=False)


@pytest.mark.slow
def test_a_first_call_under_inductor_works_for_every_configuration():
    _first_calls("inductor", every=True)


# ---- sm_90 machine code -----------------------------------------------------------------------------------------
# The interpreter runs what a GPU would reject (no register limits, no type rules of the compiler): every kernel is
# also compiled for a Hopper GPU, from the launches one forward + backward records (visionbench/bench/kernel_capture.py)
# with the JIT's own specialisation (kernel_compile.py), in a child Python with the interpreter off. The cost card
# (`visionbench bench kernels`, results/bench/kernels_sm90.md) is the same code over every layout and sm_80 too.
COMPILE = r"""
import json, sys
from visionbench.bench import kernel_card
cases, layouts, emitted, dtype = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3] == "emitted", sys.argv[4]
failures = []
for case in cases:
    for layout in layouts:
        for index in range(len(kernel_card.captured(case, layout, (4, 8, 6, 5), dtype)[0].triton)):
            _, result, copy = kernel_card.compile_one((case, layout, (4, 8, 6, 5), index, 90, emitted, dtype))
            if isinstance(result, str) or copy not in ("yes", "—"):
                failures.append(f"{case} / {layout} / kernel {index}: {result if isinstance(result, str) else copy}")
            else:
                print("compiled", case, layout, index, result.registers, result.spilled, copy, flush=True)
print("\n".join(failures), file=sys.stderr)
sys.exit(1 if failures else 0)
"""


def _compile_for_hopper(cases: list[str], layouts: list[str], emitted: bool, dtype: str = "float32") -> str:
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    args = [json.dumps(cases), json.dumps(layouts), "emitted" if emitted else "plain", dtype]
    done = subprocess.run(
        [sys.executable, "-c", COMPILE, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


@pytest.mark.slow  # ptxas for sm_90 on this CPU (17 s); its every-layout sibling is slow too
def test_kernels_compile_for_hopper():
    # every family's kernels (PolyNorm's and SLAF's six too), per channel NCHW in fp32, to sm_90 machine code; and the
    # copy of rational's that Inductor emits, the kernel with every function it calls, compiles as well
    out = _compile_for_hopper(list(act_speed.CASES), ["per channel, NCHW"], emitted=False)
    assert out.count("compiled") >= 2 * len(act_speed.CASES)
    out = _compile_for_hopper(["rational A"], ["shared"], emitted=True)
    assert out.count(" yes") == 2


@pytest.mark.slow
def test_kernels_compile_for_hopper_every_layout_and_as_inductor_emits_them():
    # every layout in fp32; Inductor's copy of every kernel (it is the same source in every layout: shared only); the
    # bf16 inputs of a bf16-true run (their loads and stores cast: per channel NCHW)
    _compile_for_hopper(list(act_speed.CASES), ["shared", "per channel, channels_last"], emitted=False)
    _compile_for_hopper(list(act_speed.CASES), ["shared"], emitted=True)
    _compile_for_hopper(list(act_speed.CASES), ["per channel, NCHW"], emitted=False, dtype="bfloat16")


# ---- deterministic mode: no NaN fill of the buffers the kernels overwrite -------------------------------------------
@pytest.mark.parametrize("name", ["rational", "kaf", "polynorm", "slaf"])
def test_deterministic_mode_does_not_nan_fill_the_kernels_buffers(name, monkeypatch):
    # Every run trains with torch.use_deterministic_algorithms(True), which makes torch.empty write NaN into each new
    # buffer first (torch.utils.deterministic.fill_uninitialized_memory): y, grad_x and the partial sums would be
    # written twice. The kernels overwrite theirs whole and allocate them with the fill off, for that allocation only.
    allocations = []

    def spy(allocate):
        def wrapped(*args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if os.path.basename(caller).startswith("triton_"):  # the kernels' own host code
                allocations.append((os.path.basename(caller), torch.utils.deterministic.fill_uninitialized_memory))
            return allocate(*args, **kwargs)

        return wrapped

    for fn in ("empty", "empty_like"):
        monkeypatch.setattr(torch, fn, spy(getattr(torch, fn)))
    monkeypatch.setattr(fused, "BACKEND", "triton")
    act, _ = twins(name, {}, True, 5, None)
    x, g = torch.randn(4, 5, 6, 7, device=DEVICE), torch.randn(4, 5, 6, 7, device=DEVICE)
    free = forward_backward(act, x, g)
    act.zero_grad()
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        assert torch.utils.deterministic.fill_uninitialized_memory  # the default that fills
        allocations.clear()
        got = forward_backward(act, x, g)
        assert torch.utils.deterministic.fill_uninitialized_memory  # restored after each allocation
    finally:
        torch.use_deterministic_algorithms(was)
    assert len(allocations) >= 3, allocations  # y, grad_x, the partial sums (SLAF: its statistics too)
    assert not any(filled for _, filled in allocations), allocations
    for a, b in zip(got, free):
        assert torch.equal(a, b)  # deterministic mode changes nothing the kernels compute
