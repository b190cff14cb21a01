"""LSUV data-dependent init (Mishkin & Matas, "All you need is a good init", ICLR 2016).

    >>> records = lsuv_init(model, next(iter(train_loader))[0])     # paper 004's LSUV toggle
    >>> max(abs(r.variance - 1) for r in records) <= 0.1

1. Orthonormal pre-init of every conv / linear weight (Saxe et al. 2014).
2. For each conv / linear layer in execution order: run the batch, and while its output variance
   is not within `tol` of `target_var`, scale its weight by sqrt(target_var / variance).

Layers are visited in the order the forward pass first calls them (found with hooks), so a
layer is scaled only after everything feeding it. A pass stops right after the layer being
scaled, which leaves the algorithm unchanged and saves the rest of the forward. Learnable
activations are ordinary modules here: they just run. Norm/SLAF layers see the batch in
training mode (batch statistics, as in training); their running statistics, every other buffer
and all train/eval flags are restored afterwards, and dropout / drop-path are off during LSUV.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

LAYER_TYPES = (nn.modules.conv._ConvNd, nn.Linear)


@dataclass
class LSUVRecord:
    """Outcome for one layer: its final output variance and how many rescalings it took."""

    name: str
    variance: float
    iterations: int
    converged: bool


class _Stop(Exception):
    """Raised by the hook of the layer being initialised: the rest of the forward is not needed."""


def _is_stochastic(module: nn.Module) -> bool:
    return isinstance(module, nn.modules.dropout._DropoutNd) or type(module).__name__ in ("DropPath", "DropBlock2d")


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
def lsuv_init(
    model: nn.Module,
    batch: torch.Tensor,
    target_var: float = 1.0,
    tol: float = 0.1,
    max_iters: int = 10,
    orthonormal: bool = True,
) -> list[LSUVRecord]:
    """Initialise `model` in place by LSUV on `batch` (a tensor the model accepts).

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
    flags = {m: m.training for m in model.modules()}
    # saved per module, restored by reference: a lazily sized buffer may change shape in the forward
    buffers = {(m, k): (None if b is None else b.detach().clone())
               for m in model.modules() for k, b in m._buffers.items()}
    model.train()
    for m in model.modules():
        if _is_stochastic(m):
            m.eval()
    records: list[LSUVRecord] = []
    try:
        if orthonormal:
            orthonormal_init(model)
        for name, layer in _execution_order(model, batch):
            var, it = _output_variance(model, layer, batch), 0
            while abs(var - target_var) >= tol and it < max_iters and 0 < var < math.inf:
                layer.weight.mul_((target_var / var) ** 0.5)
                var, it = _output_variance(model, layer, batch), it + 1
            records.append(LSUVRecord(name, var, it, abs(var - target_var) < tol))
    finally:
        for m, flag in flags.items():
            m.train(flag)
        for (m, k), b in buffers.items():
            m._buffers[k] = b
    return records
