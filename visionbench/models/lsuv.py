"""LSUV data-dependent init, in two variants: Mishkin & Matas's and the one paper 004's code used.

    >>> records = lsuv_init(model, images)                        # Mishkin & Matas ("mishkin", default)
    >>> max(abs(r.variance - 1) for r in records) <= 0.1
    >>> records = lsuv_init(model, images, variant="paper004")    # 004 code's LSUV (the 004 recipes)
    >>> images = lsuv_images(train_loader, "paper004")             # the first 64 training images

**mishkin** (Mishkin & Matas, "All you need is a good init", ICLR 2016):
1. orthonormal pre-init of every conv / linear weight (Saxe et al. 2014);
2. for each conv / linear layer in execution order: run the batch, and while its output variance
   is not within `tol` of `target_var` (1), scale its weight by sqrt(target_var / variance).
Norm/SLAF layers see the batch in training mode (batch statistics, as in training); dropout /
drop-path are off.

**paper004** (004 code, the augmented CIFAR script's `lsuv_init`; 004 App E / Table 6 name only
"LSUV toggle"): no pre-init, the model in eval mode, the first 64 images; for each conv / linear
layer in execution order, at most 10 times: run the batch; measure the variance (population,
over the whole tensor) of the output of the first activation after the layer whose output has the
layer's output shape (the layer's own output when there is none: the classifier); shift the bias
by -mean of the layer's output when |mean| > 1e-3; stop if the variance is not finite and > 0, or
within 10 % (relative) of 0.125; else scale the weight by sqrt(0.125 / (variance + 1e-6)).
As in 004 code the bias shift comes after the measurement, so a layer that stops in tolerance has
a zero-mean output whose post-activation variance was measured just before that last shift; a
layer that never gets there (GroupNorm makes the variance independent of the weight's scale, so
every conv of a GN model rescales 10 times) keeps its 10th scaling.

Both: layers are visited in the order the forward pass first calls them (found with hooks), so a
layer is set only after everything feeding it; a pass stops right after the tensor it measures,
which leaves the algorithm unchanged and saves the rest of the forward. Learnable activations are
ordinary modules here: they just run. Every buffer and all train/eval flags are restored afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from .swap import swappable_types

LAYER_TYPES = (nn.modules.conv._ConvNd, nn.Linear)

# 004 code's LSUV_* constants (augmented CIFAR script): target variance after the activation,
# relative tolerance, rescalings per layer, variance epsilon, images, and the bias-shift threshold.
PAPER004 = dict(target_var=0.125, tol_rel=0.10, max_iters=10, eps=1e-6, num_images=64, mean_tol=1e-3)


@dataclass
class LSUVRecord:
    """Outcome for one layer: the last variance measured, how many rescalings it took, and where.

    `measured` is the module whose output variance was set: the layer itself (mishkin; the
    classifier under paper004) or the activation following it (paper004).
    """

    name: str
    variance: float
    iterations: int
    converged: bool
    measured: str = ""


class _Stop(Exception):
    """Raised by a hook once the tensor being measured exists: the rest of the forward is not needed."""


def _is_stochastic(module: nn.Module) -> bool:
    return isinstance(module, nn.modules.dropout._DropoutNd) or type(module).__name__ in ("DropPath", "DropBlock2d")


@contextmanager
def _restored(model: nn.Module) -> Iterator[None]:
    """Restore every train/eval flag and buffer afterwards (buffers by reference: a lazily sized one
    may change shape in the forward)."""
    flags = {m: m.training for m in model.modules()}
    buffers = {
        (m, k): (None if b is None else b.detach().clone()) for m in model.modules() for k, b in m._buffers.items()
    }
    try:
        yield
    finally:
        for m, flag in flags.items():
            m.train(flag)
        for (m, k), b in buffers.items():
            m._buffers[k] = b


@torch.no_grad()
def orthonormal_init(model: nn.Module) -> int:
    """Orthogonal init of every conv / linear weight (viewed as out x rest); returns the count."""
    n = 0
    for module in model.modules():
        if isinstance(module, LAYER_TYPES) and module.weight is not None and module.weight.dim() >= 2:
            w = module.weight
            flat = torch.empty(w.shape[0], w[0].numel(), dtype=torch.float32, device=w.device)
            nn.init.orthogonal_(flat)
            w.copy_(flat.view_as(w))
            n += 1
    return n


def _execution_order(model: nn.Module, batch: torch.Tensor) -> list[tuple[str, nn.Module]]:
    order: list[tuple[str, nn.Module]] = []
    seen: set[int] = set()

    def hook(name):
        def fn(module, inputs, output):
            if id(module) not in seen:
                seen.add(id(module))
                order.append((name, module))

        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if isinstance(m, LAYER_TYPES)]
    try:
        model(batch)
    finally:
        for h in handles:
            h.remove()
    return order


def _output_variance(model: nn.Module, layer: nn.Module, batch: torch.Tensor) -> float:
    box: list[float] = []

    def fn(module, inputs, output):
        box.append(float(output.detach().float().var()))
        raise _Stop

    handle = layer.register_forward_hook(fn)
    try:
        model(batch)
    except _Stop:
        pass
    finally:
        handle.remove()
    if not box:
        raise RuntimeError("LSUV: layer was not called by the forward pass")
    return box[0]


@torch.no_grad()
def lsuv_mishkin(
    model: nn.Module,
    batch: torch.Tensor,
    target_var: float = 1.0,
    tol: float = 0.1,
    max_iters: int = 10,
    orthonormal: bool = True,
) -> list[LSUVRecord]:
    """Mishkin & Matas's LSUV on `batch`, in place.

    Args:
        model: any model whose conv / linear layers should get unit output variance.
        batch: a representative input batch (the papers: one training mini-batch).
        target_var: the output variance each layer is scaled to.
        tol: accept a layer when |variance - target_var| < tol.
        max_iters: rescalings per layer at most (a layer may stop short, e.g. when a bias dominates).
        orthonormal: do step 1 (orthonormal pre-init) first.

    Returns:
        One `LSUVRecord` per conv / linear layer, in execution order.
    """
    records: list[LSUVRecord] = []
    with _restored(model):
        model.train()
        for m in model.modules():
            if _is_stochastic(m):
                m.eval()
        if orthonormal:
            orthonormal_init(model)
        for name, layer in _execution_order(model, batch):
            var, it = _output_variance(model, layer, batch), 0
            while abs(var - target_var) >= tol and it < max_iters and 0 < var < math.inf:
                layer.weight.mul_((target_var / var) ** 0.5)
                var, it = _output_variance(model, layer, batch), it + 1
            records.append(LSUVRecord(name, var, it, abs(var - target_var) < tol, name))
    return records


def _call_trace(model: nn.Module, batch: torch.Tensor, watched: dict[nn.Module, str]) -> list[tuple[str, tuple]]:
    """(name, output shape) of every call of a watched module, in the order of one forward pass."""
    trace: list[tuple[str, tuple]] = []

    def hook(name):
        def fn(module, inputs, output):
            trace.append((name, tuple(output.shape) if torch.is_tensor(output) else None))

        return fn

    handles = [m.register_forward_hook(hook(n)) for m, n in watched.items()]
    try:
        model(batch)
    finally:
        for h in handles:
            h.remove()
    return trace


def _paper004_plan(
    model: nn.Module, batch: torch.Tensor
) -> tuple[dict[nn.Module, str], list[tuple[str, int, int, str]]]:
    """The watched modules and, per conv / linear layer (first call, execution order), the trace index
    of its output, of the tensor to measure (004 code: the next activation output of the same shape,
    else the layer's own) and the name of the module measured."""
    acts = swappable_types()
    watched = {m: n for n, m in model.named_modules() if isinstance(m, LAYER_TYPES) or isinstance(m, acts)}
    trace = _call_trace(model, batch, watched)
    names = {n for m, n in watched.items() if isinstance(m, LAYER_TYPES)}
    plan, seen = [], set()
    for i, (name, shape) in enumerate(trace):
        if name not in names or name in seen or shape is None:
            continue
        seen.add(name)
        target = next((j for j in range(i + 1, len(trace)) if trace[j][0] not in names and trace[j][1] == shape), i)
        plan.append((name, i, target, trace[target][0]))
    return watched, plan


def _measure(
    model: nn.Module, batch: torch.Tensor, watched: dict[nn.Module, str], at: int, target: int
) -> tuple[float, float]:
    """(mean of trace entry `at`, population variance of trace entry `target`), from one forward
    pass stopped at `target`."""
    box: dict[str, float] = {}
    calls = [0]

    def fn(module, inputs, output):
        i = calls[0]
        calls[0] += 1
        if i == at:
            box["mean"] = float(output.detach().float().mean())
        if i == target:
            box["var"] = float(output.detach().float().var(correction=0))
            raise _Stop

    handles = [m.register_forward_hook(fn) for m in watched]
    try:
        model(batch)
    except _Stop:
        pass
    finally:
        for h in handles:
            h.remove()
    if "var" not in box:
        raise RuntimeError("LSUV: the forward pass did not repeat its call order")
    return box["mean"], box["var"]


@torch.no_grad()
def lsuv_paper004(
    model: nn.Module,
    batch: torch.Tensor,
    target_var: float = PAPER004["target_var"],
    tol_rel: float = PAPER004["tol_rel"],
    max_iters: int = PAPER004["max_iters"],
    eps: float = PAPER004["eps"],
    num_images: int = PAPER004["num_images"],
    mean_tol: float = PAPER004["mean_tol"],
) -> list[LSUVRecord]:
    """Paper 004 code's LSUV on the first `num_images` of `batch`, in place (module docstring).

    Args:
        model: any model; its conv / linear layers are set, activations are the modules of
            `swap.swappable_types()` (004 code: ReLU, ReLU6, GELU, SiLU, LeakyReLU, Rational).
        batch: training images; only the first `num_images` are used (004 code: 64).
        target_var: variance after the activation that follows each layer (004 code: 0.125).
        tol_rel: accept when |variance - target_var| / target_var <= tol_rel (004 code: 0.10).
        max_iters: measurements (and so rescalings) per layer at most (004 code: 10).
        eps: added to the variance in the scale factor (004 code: 1e-6).
        num_images: images of `batch` used (004 code: 64).
        mean_tol: the bias is shifted only when |mean| exceeds this (004 code: 1e-3).

    Returns:
        One `LSUVRecord` per conv / linear layer in execution order, with the last variance measured.
    """
    batch = batch[:num_images]
    records: list[LSUVRecord] = []
    with _restored(model):
        model.eval()
        watched, plan = _paper004_plan(model, batch)
        layers = dict(model.named_modules())
        for name, at, target, measured in plan:
            layer = layers[name]
            var, scalings, converged = math.nan, 0, False
            for _ in range(max_iters):
                mean, var = _measure(model, batch, watched, at, target)
                if getattr(layer, "bias", None) is not None and abs(mean) > mean_tol:
                    layer.bias.sub_(mean)
                if not (0.0 < var < math.inf):
                    break
                if abs(var - target_var) / max(target_var, eps) <= tol_rel:
                    converged = True
                    break
                layer.weight.mul_(math.sqrt(target_var / (var + eps)))
                scalings += 1
            records.append(LSUVRecord(name, var, scalings, converged, measured))
    return records


LSUV_VARIANTS: dict[str, Callable[..., list[LSUVRecord]]] = {"mishkin": lsuv_mishkin, "paper004": lsuv_paper004}


def lsuv_init(model: nn.Module, batch: torch.Tensor, variant: str = "mishkin", **options) -> list[LSUVRecord]:
    """LSUV-initialise `model` in place on `batch` by `variant` ("mishkin" or "paper004").

    `options` go to `lsuv_mishkin` / `lsuv_paper004` (their defaults are the papers' values). A run's
    `model.lsuv_variant` is checked against LSUV_VARIANTS once, by the sweep's preflight.
    """
    return LSUV_VARIANTS[variant](model, batch, **options)


def lsuv_images(batches: Iterable, variant: str = "mishkin") -> torch.Tensor:
    """The init images for `variant`, from the first batches of `batches` (a training loader):
    one batch for mishkin, the first 64 images for paper004 (004 code: LSUV_BATCH = 64, cut from
    the first training batch; batches are joined when one holds fewer)."""
    need = PAPER004["num_images"] if variant == "paper004" else None
    parts, have = [], 0
    for b in batches:
        x = b[0] if isinstance(b, (tuple, list)) else b
        parts.append(x)
        have += len(x)
        if need is None or have >= need:
            break
    if not parts:
        raise ValueError("LSUV needs at least one training batch; the loader is empty")
    return torch.cat(parts)[:need] if need is not None else parts[0]
