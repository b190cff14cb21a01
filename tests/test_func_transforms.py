"""torch.func transforms (vmap, grad, jvp) through learnable activations give the plain formulas'
gradients, never silently detached ones (docs/activations.md).

Modules take the plain formulas under any transform (`fused.fast_enabled`); direct calls of the
fused kernels batch under vmap (`VmapFusedFunction`'s generated rule) and refuse the transforms
they would get wrong. Every comparison is against autograd on the ordinary fast path (no transform) and against
the reference path under the same transform.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch.func import functional_call, grad, jvp, stack_module_state, vmap

from visionbench import activations as A
from visionbench import models
from visionbench.activations import fused

LEARNABLE = [n for n in A.names() if A.is_learnable(n)]
TOL = {"rtol": 1e-9, "atol": 1e-10}  # float64 throughout
SHAPE = (2, 4, 3, 3)  # one mini-batch, NCHW with 4 channels
COPIES = 3  # ensemble members / vmapped mini-batches


@pytest.fixture(autouse=True)
def eager(monkeypatch):
    monkeypatch.setattr(fused, "BACKEND", "eager")


def build(name: str, per_channel: bool, seed: int = 1) -> torch.nn.Module:
    """A float64 module in training mode with perturbed coefficients (channels differ)."""
    extra = {"per_channel": True, "num_channels": SHAPE[1]} if per_channel else {}
    act = A.create(name, **extra).double().train()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in act.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return act


def data(*lead: int):
    gen = torch.Generator().manual_seed(2)
    x = 1.5 * torch.randn(*lead, *SHAPE, generator=gen, dtype=torch.float64)
    return x, torch.randn(x.shape, generator=gen, dtype=torch.float64)


def plain_grads(act, x, g):
    """dL/dx and dL/dparameters for L = <act(x), g>: autograd on the fast path, no transform."""
    act = copy.deepcopy(act)
    x = x.clone().requires_grad_(True)
    params = dict(act.named_parameters())
    out = torch.autograd.grad((act(x) * g).sum(), [x, *params.values()])
    return out[0], dict(zip(params, out[1:]))


def assert_all_close(got, want, what):
    gx, gp = got
    wx, wp = want
    torch.testing.assert_close(gx, wx, **TOL, msg=lambda m: f"{what}: input gradient: {m}")
    assert gp.keys() == wp.keys()
    for k in gp:
        assert gp[k] is not None, f"{what}: {k} has no gradient"
        torch.testing.assert_close(gp[k], wp[k], **TOL, msg=lambda m: f"{what}: {k}: {m}")


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("name", LEARNABLE)
def test_grad(name, per_channel, training):
    """torch.func.grad w.r.t. input and coefficients (functional_call) = the fast path's autograd."""
    act = build(name, per_channel).train(training)
    x, g = data()

    def loss(x, params, module):
        return (functional_call(module, params, (x,)) * g).sum()

    params = {k: v.detach() for k, v in act.named_parameters()}
    want = plain_grads(act, x, g)
    for fast in (True, False):
        module = copy.deepcopy(act)  # SLAF's running statistics: one copy per run
        module.fast = fast
        if name == "slaf" and per_channel and training:
            # as BatchNorm's: running statistics updated in place are a captured tensor to grad,
            # which torch refuses (vmap with stacked buffers works, see the next test)
            with pytest.raises(RuntimeError, match="captured"):
                grad(loss, argnums=(0, 1))(x, params, module)
            continue
        assert_all_close(grad(loss, argnums=(0, 1))(x, params, module), want, f"grad, fast={fast}")


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("name", LEARNABLE)
def test_vmap_ensemble_and_vmap_grad(name, per_channel, monkeypatch):
    """Three module copies stacked by stack_module_state: vmap(functional_call) + backward, and
    vmap(grad) per copy, both equal to a loop of ordinary fast-path autograd over the copies."""
    acts = [build(name, per_channel, seed=s) for s in range(COPIES)]
    x, g = data(COPIES)
    wants = [plain_grads(a, xi, gi) for a, xi, gi in zip(acts, x, g)]
    want = (torch.stack([w[0] for w in wants]), {k: torch.stack([w[1][k] for w in wants]) for k in wants[0][1]})
    base = copy.deepcopy(acts[0]).to("meta")

    def loss(params, buffers, x, g):
        return (functional_call(base, (params, buffers), (x,)) * g).sum()

    for reference in (False, True):
        monkeypatch.setattr(
            fused, "BACKEND", "reference" if reference else "auto"
        )  # what VISIONBENCH_KERNELS=reference sets
        what = "reference" if reference else "fast"
        params, buffers = stack_module_state(acts)
        xs = x.clone().requires_grad_(True)
        vmap(loss)(params, buffers, xs, g).sum().backward()
        assert_all_close((xs.grad, {k: p.grad for k, p in params.items()}), want, f"vmap + backward, {what}")

        params, buffers = stack_module_state(acts)
        params = {k: v.detach() for k, v in params.items()}
        gp, gx = vmap(grad(loss, argnums=(0, 2)))(params, buffers, x, g)
        assert_all_close((gx, gp), want, f"vmap(grad), {what}")


@pytest.mark.parametrize("name", LEARNABLE)
def test_fused_function_batches_under_vmap(name, monkeypatch):
    """The fused kernels called directly under vmap (VmapFusedFunction's generated vmap rule) give
    the plain formulas' values and gradients."""
    acts = [build(name, per_channel=True, seed=s) for s in range(COPIES)]
    x, g = data(COPIES)
    base = copy.deepcopy(acts[0]).to("meta")
    results = []
    for path in ("fast_forward", "reference_forward"):
        monkeypatch.setattr(base, "_forward", getattr(base, path))  # bypass the transform check
        params, buffers = stack_module_state(acts)
        xs = x.clone().requires_grad_(True)
        y = vmap(lambda p, b, x: functional_call(base, (p, b), (x,)))(params, buffers, xs)
        (y * g).sum().backward()
        results.append((y.detach(), xs.grad, {k: p.grad for k, p in params.items()}))
    (y, *got), (y_ref, *want) = results
    torch.testing.assert_close(y, y_ref, **TOL)
    assert_all_close(got, want, "fused under vmap")


def test_fused_function_refuses_what_it_would_get_wrong(monkeypatch):
    """grad (a grad of grad would see a constant), jvp (no forward-mode rule) and create_graph under
    vmap raise instead of returning zeros."""
    act = build("rational", per_channel=False)
    monkeypatch.setattr(act, "_forward", act.fast_forward)
    x = torch.randn(COPIES, 5, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="supports torch.func.vmap only"):
        grad(lambda x: act(x).sum())(x)
    with pytest.raises(RuntimeError, match="supports torch.func.vmap only"):
        jvp(lambda x: act(x), (x,), (torch.ones_like(x),))
    xs = x.clone().requires_grad_(True)
    y = vmap(act)(xs)
    with pytest.raises(RuntimeError, match="differentiable once"):
        torch.autograd.grad(y.sum(), xs, create_graph=True)


def test_transforms_take_the_plain_formulas():
    """Under vmap/grad/jvp modules never reach the fused path, so second order and forward mode
    (which the fused path lacks) are exact too."""
    act = build("hermite", per_channel=False)
    ref = copy.deepcopy(act)
    ref.fast = False
    act.fast_forward = lambda x: pytest.fail("the fused path ran under a torch.func transform")
    x = torch.randn(4, 5, dtype=torch.float64)
    torch.testing.assert_close(vmap(act)(x), ref(x), **TOL)
    results = [
        (torch.func.hessian(lambda x: m(x).sum())(x[0]), jvp(m, (x,), (torch.ones_like(x),))[1]) for m in (act, ref)
    ]
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, **TOL)


def test_vmapped_rational_vgg4_ensemble(monkeypatch):
    """Three rational VGG4s (digits recipe: 1x8x8, 10 classes, GroupNorm) through
    vmap(functional_call): every parameter gets the reference path's gradient (before the fix 2 of
    26 did), equal to training the three models one by one on the fast path."""
    torch.manual_seed(0)
    nets = [
        models.create("vgg4", act="rational", in_chans=1, img_size=8, num_classes=10, norm="group").double()
        for _ in range(COPIES)
    ]
    x = torch.randn(COPIES, 4, 1, 8, 8, dtype=torch.float64)
    labels = torch.randint(0, 10, (COPIES, 4))
    base = copy.deepcopy(nets[0]).to("meta")

    def loss(params, buffers, x, y):
        return torch.nn.functional.cross_entropy(functional_call(base, (params, buffers), (x,)), y)

    grads = {}
    for reference in (False, True):
        monkeypatch.setattr(
            fused, "BACKEND", "reference" if reference else "auto"
        )  # what VISIONBENCH_KERNELS=reference sets
        params, buffers = stack_module_state(nets)
        vmap(loss)(params, buffers, x, labels).sum().backward()
        assert len(params) == 26
        missing = [k for k, p in params.items() if p.grad is None]
        assert not missing, f"no gradient for {missing}"
        grads[reference] = {k: p.grad for k, p in params.items()}

    monkeypatch.setattr(fused, "BACKEND", "auto")
    one_by_one = []
    for net, xi, yi in zip(nets, x, labels):
        net.zero_grad()
        torch.nn.functional.cross_entropy(net(xi), yi).backward()
        one_by_one.append({k: p.grad for k, p in net.named_parameters()})
    for k in grads[True]:
        torch.testing.assert_close(grads[False][k], grads[True][k], **TOL, msg=lambda m: f"{k}: {m}")
        want = torch.stack([g[k] for g in one_by_one])
        torch.testing.assert_close(grads[False][k], want, rtol=1e-7, atol=1e-9, msg=lambda m: f"{k}: {m}")
