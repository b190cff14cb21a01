"""A family needs a reference formula only; a fused kernel (`fused.Elementwise`) and Triton bodies are levels it may
add (docs/your_activation.md). One tiny family, F(x) = a x + b x^2, at each level, registered as a plugin registers
it (and forgotten after each test): the reference formula alone, with a fused kernel, and with Triton bodies in a
module of its own outside the package (this one, found by its name: `triton_ops.resolve`). Each level runs on every
backend, forward and backward, shared and per channel, and gives the reference formula's numbers; the first also
in a model whose activations it replaces. Without Triton installed, every built-in family imports and runs (its Triton
module, named as text, is never imported)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from visionbench import activations, models
from visionbench.activations import LearnableActivation, fused, registry, triton_ops
from visionbench.activations.fused import Elementwise, reduce_to

from .helpers import ROOT

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the Triton path's; the others run on the CPU
RUNS_TRITON = triton_ops.HAVE_TRITON and (triton_ops.interpreting() or torch.cuda.is_available())


# ---- level 1: the reference formula ----------------------------------------------------------------------------------
class Quadratic(LearnableActivation):
    """F(x) = a x + b x^2, coefficients `weight` (..., 2) = (a, b)."""

    def __init__(self, init: str = "default", **kwargs):
        super().__init__(**kwargs)
        self.weight = self.coefficient([1.0, 0.1])
        self.reset_parameters(init)

    def init_default(self) -> None:
        self.set_coefficients(weight=torch.tensor([1.0, 0.1]))

    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.coef(self.weight, 0, x) * x + self.coef(self.weight, 1, x) * (x * x)


# ---- level 2: a fused kernel -------------------------------------------------------------------------------------------
def _forward(x, c):
    return (c[..., 0] * x + c[..., 1] * (x * x),)


def _backward(x, g, c):
    a, b = c[..., 0], c[..., 1]
    return g * (a + 2.0 * b * x), torch.stack([reduce_to(g * x, a), reduce_to(g * (x * x), b)], -1)


FUSED = Elementwise("quadratic", _forward, _backward)


class FusedQuadratic(Quadratic):
    kernel = FUSED

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run_elementwise(FUSED, x, self.weight)


# ---- level 3: Triton bodies, in this module ---------------------------------------------------------------------------
TRITON = Elementwise("quadratic", _forward, _backward, triton=__name__)


class TritonQuadratic(Quadratic):
    kernel = TRITON

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run_elementwise(TRITON, x, self.weight)


if triton_ops.HAVE_TRITON:  # imported only where the Triton kernels run (`triton_ops.resolve`); here, by the tests too
    import triton
    import triton.language as tl

    from visionbench.activations.triton_template import Body, coef, emit

    @triton.jit
    def quadratic_forward(x, C, cb):
        return coef(C, cb, 0) * x + coef(C, cb, 1) * (x * x)

    @triton.jit
    def quadratic_backward(x, g, C, cb, acc, MODE: tl.constexpr):
        acc = emit(acc, MODE, 0, g * x)
        acc = emit(acc, MODE, 1, g * (x * x))
        return g * (coef(C, cb, 0) + 2.0 * coef(C, cb, 1) * x), acc

    BODIES = {"quadratic": Body(quadratic_forward, quadratic_backward, lambda: ())}


LEVELS = {"quadratic": Quadratic, "quadratic_fused": FusedQuadratic, "quadratic_triton": TritonQuadratic}


@pytest.fixture(autouse=True)
def registered():
    with registry.preserved():
        for name, cls in LEVELS.items():
            activations.register(name)(cls)
        yield


def run(act, x, g, backend: str, device: str) -> list[torch.Tensor]:
    """[y, grad_x, grad_weight] of act at x under `backend` on `device`, on the CPU."""
    act = act.to(device)
    act.zero_grad()
    x = x.to(device).requires_grad_(True)
    with fused.use_backend(backend):
        if backend != "auto":
            assert fused.backend_for(x) == backend
        y = act(x)
        y.backward(g.to(device))
    return [t.detach().cpu() for t in (y, x.grad, act.weight.grad)]


def test_the_levels_say_what_they_have():
    assert [cls.triton_kernels for cls in LEVELS.values()] == [False, False, True]
    assert Quadratic.kernel is None and not FUSED.has_triton and TRITON.has_triton == triton_ops.HAVE_TRITON
    assert triton_ops.spec(TRITON, {}) == f"{__name__}:quadratic()"
    if triton_ops.HAVE_TRITON:  # the spec's text alone finds the bodies: this module, by its name
        assert triton_ops.resolve(triton_ops.spec(TRITON, {})) == (BODIES["quadratic"], (0, 0, 0, 0))


@pytest.mark.parametrize("per_channel", [False, True], ids=["shared", "per_channel"])
@pytest.mark.parametrize("backend", fused.BACKENDS)
@pytest.mark.parametrize("name", list(LEVELS))
def test_every_level_on_every_backend(name, backend, per_channel, monkeypatch):
    monkeypatch.setattr(fused, "COMPILE_MIN_NUMEL", 0)  # backend compile: this small input compiled too
    extra = {"per_channel": True, "num_channels": 5} if per_channel else {}
    act = activations.create(name, **extra)
    with torch.no_grad():
        act.weight.add_(0.1 * torch.randn_like(act.weight))
    x, g = torch.randn(3, 5, 4, 6), torch.randn(3, 5, 4, 6)
    want = run(act, x, g, "reference", "cpu")
    device = DEVICE if backend == "triton" else "cpu"
    if backend == "triton" and not RUNS_TRITON:
        pytest.skip("needs Triton and a GPU or TRITON_INTERPRET=1")
    launched = []
    spy = triton_ops.elementwise
    monkeypatch.setattr(
        triton_ops, "elementwise", lambda kernel, *a, **k: launched.append(kernel) or spy(kernel, *a, **k)
    )
    for label, a, b in zip(("y", "grad_x", "grad_weight"), run(act, x, g, backend, device), want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m: f"{label}: {m}")
    assert launched == ([TRITON] if name == "quadratic_triton" and backend == "triton" else [])  # its own bodies


def test_a_family_with_only_a_reference_formula_replaces_a_models_activations():
    model = models.create("vgg4", act="quadratic", num_classes=10, img_size=32)
    assert len(model.swap_report) == 4
    assert all(type(model.get_submodule(p)) is Quadratic for p in model.swap_report.paths)
    model(torch.randn(2, 3, 32, 32)).pow(2).mean().backward()
    coefs = list(activations.learnable_parameters(model))
    assert len(coefs) == 4 and all(p.grad is not None and torch.isfinite(p.grad).all() for p in coefs)


WITHOUT_TRITON = """
import sys
sys.modules["triton"] = None  # import triton fails: a CPU-only install
import torch
from visionbench import activations
from visionbench.activations import fused, triton_ops
assert not triton_ops.HAVE_TRITON
for name in activations.names():
    if activations.is_learnable(name):
        x = torch.randn(2, 3, 4, 4, requires_grad=True)
        with fused.use_backend("triton"):
            activations.create(name)(x).sum().backward()
bodies = [m for m in sys.modules if m.startswith("visionbench.activations.triton_") and m != "visionbench.activations.triton_ops"]
assert not bodies, bodies
print("ok")
"""


def test_every_family_imports_and_runs_without_triton():
    # the kernel objects name their Triton modules as text: without Triton none is imported, and every family runs
    done = subprocess.run([sys.executable, "-c", WITHOUT_TRITON], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "ok", done.stderr[-3000:]
