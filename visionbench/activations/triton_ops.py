"""The Triton kernels as torch ops: `visionbench::act_forward` / `act_backward` (`torch.library.triton_op`,
autograd by `register_autograd`), so that torch.compile and CUDA graphs trace through them.

    y = triton_ops.elementwise("rational", x, channel_axis, a, b, form="A", m=5, n=4)

`fused.elementwise` calls this for CUDA tensors when the backend is Triton (`fused.backend_for`).
Eager calls take a lean `autograd.Function` to the same launches (a custom op's dispatch costs host
time per call; inside torch.compile the op is what the compiler sees). Coefficients are gathered
into one float32 block (KT,) shared or (C, KT) per channel; autograd maps the block's gradient back
to each parameter (and sums a shared one over channels).

A family is in `BODIES` with its forward and backward bodies and the function that turns its
configuration (the keyword arguments of its fused kernel) into the template's P0..P3.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable

import torch

try:
    import triton  # noqa: F401 - torch's CUDA wheels bring it; a CPU-only install may not

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - every supported install has triton; the switch then says "compile"
    HAVE_TRITON = False


@dataclasses.dataclass(frozen=True)
class Body:
    forward: Callable
    backward: Callable
    params: Callable[..., tuple]  # the family's kernel config -> (P0, P1, P2, P3)


BODIES: dict[str, Body] = {}
_SPECS: list[tuple[Body, tuple]] = []  # op argument `spec`: index into this list (body, P0..P3)
_SPEC_IDS: dict[tuple, int] = {}


def interpreting() -> bool:
    """Whether Triton runs its kernels in the CPU interpreter (TRITON_INTERPRET=1: tests, dry runs)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def runs_on(x: torch.Tensor) -> bool:
    """Whether the Triton kernels can run on x: CUDA (or any device under the interpreter), fp16/bf16/fp32."""
    return HAVE_TRITON and (x.device.type == "cuda" or interpreting()) and x.dtype in _DTYPES


_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def has(name: str) -> bool:
    _register()
    return name in BODIES


def _register() -> None:
    """Fill BODIES from the families' body modules (each has its own `BODIES`), on first use."""
    if BODIES or not HAVE_TRITON:
        return
    from . import triton_basis, triton_gated, triton_piecewise, triton_polynomial

    for module in (triton_polynomial, triton_gated, triton_piecewise, triton_basis):
        BODIES.update(module.BODIES)


def spec_id(name: str, config: dict) -> int:
    """The op's `spec` argument for this family configuration (an index, stable within a process)."""
    key = (name,) + tuple(sorted(config.items()))
    if key not in _SPEC_IDS:
        _register()
        body = BODIES[name]
        _SPEC_IDS[key] = len(_SPECS)
        _SPECS.append((body, tuple(body.params(**config))))
    return _SPEC_IDS[key]


def coefficient_block(x: torch.Tensor, channel_axis: int, coefs) -> torch.Tensor:
    """The coefficients as one float32 block: (KT,) if all are shared, else (C, KT), shared ones expanded."""
    per_channel = any(c.dim() == 2 for c in coefs)
    if per_channel:
        channels = x.shape[channel_axis]
        coefs = [c if c.dim() == 2 else c.expand(channels, c.shape[-1]) for c in coefs]
    block = coefs[0] if len(coefs) == 1 else torch.cat(coefs, -1)
    return block.to(torch.float32).contiguous()


def elementwise(name: str, x: torch.Tensor, channel_axis: int, *coefs: torch.Tensor, **config) -> torch.Tensor:
    """F(x) by the family's Triton kernels; coefs (K_i,) shared or (C, K_i) per channel (autograd-tracked)."""
    spec = spec_id(name, config)
    c = coefficient_block(x, channel_axis, coefs)
    if torch.compiler.is_compiling():
        return torch.ops.visionbench.act_forward(x, c, spec, channel_axis)
    if torch.is_grad_enabled() and (x.requires_grad or c.requires_grad):
        return _Eager.apply(x, c, spec, channel_axis)
    return _forward(x, c, spec, channel_axis)


# ---- the launches, shared by the eager Function and the ops ---------------------------------------------
def _forward(x, c, spec: int, channel_axis: int, launch=None) -> torch.Tensor:
    from .triton_template import launch_forward, layout

    body, params = _SPECS[spec]
    lay, xd = layout(x, channel_axis, c.dim() == 2)
    return launch_forward((body.forward, body.backward), params, xd, c, lay, launch)


def _backward(x, g, c, spec: int, channel_axis: int, launch=None) -> tuple[torch.Tensor, torch.Tensor]:
    from .triton_template import launch_backward, layout

    body, params = _SPECS[spec]
    lay, xd = layout(x, channel_axis, c.dim() == 2)
    return launch_backward((body.forward, body.backward), params, xd, g, c, lay, launch)


class _Eager(torch.autograd.Function):
    """The ops' autograd, without the dispatcher: x and the coefficient block saved, nothing else."""

    @staticmethod
    def forward(ctx, x, c, spec: int, channel_axis: int):
        ctx.save_for_backward(x, c)
        ctx.spec, ctx.channel_axis = spec, channel_axis
        return _forward(x, c, spec, channel_axis)

    @staticmethod
    def backward(ctx, grad_y):
        x, c = ctx.saved_tensors
        grad_x, grad_c = _backward(x, grad_y, c, ctx.spec, ctx.channel_axis)
        return grad_x, grad_c.to(c.dtype), None, None


# ---- the registered ops (what torch.compile traces) -------------------------------------------------------
class _NoLaunch:
    """A launcher that launches nothing: the ops' fake implementations (shapes only)."""

    def __init__(self, kernel):
        pass

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def register_fakes(*pairs) -> None:
    """Under the interpreter, each (op, host function) pair: the op's fake implementation is its host code
    launching nothing (`_NoLaunch`); a `triton_op` needs none (the compiler traces its kernels)."""
    if interpreting():
        for op, host in pairs:
            op.register_fake(functools.partial(host, launch=_NoLaunch))


OPS = HAVE_TRITON and hasattr(torch.library, "triton_op")
if OPS:
    # Compiled Triton: `triton_op`, whose kernels the compiler traces through `wrap_triton`. Under the CPU
    # interpreter the kernels cannot be traced: a plain custom op, opaque to the compiler, with a fake
    # implementation (`register_fakes`). triton_normalized.py defines its ops with the same pair.
    if interpreting():
        define_op, op_launch = torch.library.custom_op, None
    else:
        from torch.library import triton_op as define_op
        from torch.library import wrap_triton as op_launch

    @define_op("visionbench::act_forward", mutates_args=())
    def act_forward(x: torch.Tensor, c: torch.Tensor, spec: int, channel_axis: int) -> torch.Tensor:
        return _forward(x, c, spec, channel_axis, op_launch)

    @define_op("visionbench::act_backward", mutates_args=())
    def act_backward(
        x: torch.Tensor, g: torch.Tensor, c: torch.Tensor, spec: int, channel_axis: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _backward(x, g, c, spec, channel_axis, op_launch)

    register_fakes((act_forward, _forward), (act_backward, _backward))

    def _setup_context(ctx, inputs, output):
        x, c, spec, channel_axis = inputs
        ctx.save_for_backward(x, c)
        ctx.spec, ctx.channel_axis = spec, channel_axis

    def _op_backward(ctx, grad_y):
        x, c = ctx.saved_tensors
        grad_x, grad_c = torch.ops.visionbench.act_backward(x, grad_y, c, ctx.spec, ctx.channel_axis)
        return grad_x, grad_c.to(c.dtype), None, None

    act_forward.register_autograd(_op_backward, setup_context=_setup_context)
