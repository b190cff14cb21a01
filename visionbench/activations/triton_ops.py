"""The Triton kernels as torch ops: `visionbench::act_forward` / `act_backward` (`torch.library.triton_op`,
autograd by `register_autograd`), so that torch.compile and CUDA graphs trace through them.

    y = triton_ops.elementwise("rational", x, channel_axis, a, b, form="A", m=5, n=4)

`fused.elementwise` calls this for CUDA tensors when the backend is Triton (`fused.backend_for`).
Eager calls take a lean `autograd.Function` to the same launches (a custom op's dispatch costs host
time per call; inside torch.compile the op is what the compiler sees). The coefficient tensors go to the kernels as
they are, up to four of them, (K_i,) shared or (C, K_i) per channel (float32, contiguous: other dtypes, and shared
tensors beside per-channel ones, are converted first); the backward returns their gradients as contiguous views of one
row of sums, which autograd hands to each parameter without a copy.

The ops take the family's configuration as a string, `spec(name, config)`: "rational(form='A', m=5, n=4)". Any
process reads it back the same way (`resolve`), so a compiled graph cached on disk means the same kernels in every
process, and nothing is registered while a compiler traces the call.

A family is in `BODIES` with its forward and backward bodies and the function that turns its
configuration (the keyword arguments of its fused kernel) into the template's P0..P3.
"""

from __future__ import annotations

import ast
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
FAMILIES = ("rational", "poly", "hermite", "prelu", "swish_beta", "acon_c", "star_relu", "apl", "tropical")
FAMILIES += ("tropical_rational", "kaf", "bspline", "fourier")  # the names in the body modules' BODIES


def interpreting() -> bool:
    """Whether Triton runs its kernels in the CPU interpreter (TRITON_INTERPRET=1: tests, dry runs)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def runs_on(x: torch.Tensor) -> bool:
    """Whether the Triton kernels can run on x: CUDA (or any device under the interpreter), fp16/bf16/fp32."""
    return HAVE_TRITON and (x.device.type == "cuda" or interpreting()) and x.dtype in DTYPES


DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def has(name: str) -> bool:
    """Whether family `name` has Triton bodies (a fixed list: nothing is imported or registered while tracing)."""
    return HAVE_TRITON and name in FAMILIES


def bodies() -> dict[str, Body]:
    """Every family's bodies, from the body modules (each has its own `BODIES`), imported on first use."""
    if not BODIES and HAVE_TRITON:
        from . import triton_basis, triton_gated, triton_piecewise, triton_polynomial

        for module in (triton_polynomial, triton_gated, triton_piecewise, triton_basis):
            BODIES.update(module.BODIES)
    return BODIES


def spec(name: str, config: dict) -> str:
    """The ops' `spec` argument: the family and its configuration as text, e.g. "hermite(clamp=False, degree=3)"."""
    return name + "(" + ", ".join(f"{k}={v!r}" for k, v in sorted(config.items())) + ")"


@functools.cache
def resolve(text: str) -> tuple[Body, tuple]:
    """(the family's bodies, P0..P3) of a `spec` string."""
    call = ast.parse(text, mode="eval").body
    body = bodies()[call.func.id]
    return body, tuple(body.params(**{kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}))


def coefficients(x: torch.Tensor, channel_axis: int, coefs) -> tuple[torch.Tensor, ...]:
    """The coefficient tensors as the kernels read them: float32 and contiguous, and all (C, K_i) where any is per
    channel (a shared one expanded). Parameters that are so already pass through untouched: no copy, no launch."""
    per_channel = any(c.dim() == 2 for c in coefs)
    out = []
    for c in coefs:
        if per_channel and c.dim() == 1:
            c = c.expand(x.shape[channel_axis], c.shape[-1])
        out.append(c if c.dtype == torch.float32 and c.is_contiguous() else c.to(torch.float32).contiguous())
    return tuple(out)


def elementwise(name: str, x: torch.Tensor, channel_axis: int, *coefs: torch.Tensor, **config) -> torch.Tensor:
    """F(x) by the family's Triton kernels; coefs (K_i,) shared or (C, K_i) per channel (autograd-tracked)."""
    text = spec(name, config)
    cs = coefficients(x, channel_axis, coefs)
    if torch.compiler.is_compiling():
        return torch.ops.visionbench.act_forward(x, list(cs), text, channel_axis)
    if torch.is_grad_enabled() and (x.requires_grad or any(c.requires_grad for c in cs)):
        return _Eager.apply(x, text, channel_axis, *cs)
    return _forward(x, cs, text, channel_axis)


# ---- the launches, shared by the eager Function and the ops ---------------------------------------------
def _forward(x, coefs, text: str, channel_axis: int, launch=None) -> torch.Tensor:
    from .triton_template import launch_forward, layout, tuning

    body, params = resolve(text)
    lay, xd = layout(x, channel_axis, coefs[0].dim() == 2, tuning(body.forward))
    return launch_forward((body.forward, body.backward), params, xd, tuple(coefs), lay, launch)


def _backward(x, g, coefs, text: str, channel_axis: int, launch=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_x, the coefficient gradients as one flat row)."""
    from .triton_template import launch_backward, layout, tuning

    body, params = resolve(text)
    lay, xd = layout(x, channel_axis, coefs[0].dim() == 2, tuning(body.forward), backward=True)
    return launch_backward((body.forward, body.backward), params, xd, g, tuple(coefs), lay, launch)


def _split(x, coefs, flat: torch.Tensor, channel_axis: int) -> tuple[torch.Tensor, ...]:
    from .triton_template import layout

    lay, _ = layout(x, channel_axis, coefs[0].dim() == 2)
    return tuple(g.to(c.dtype) for g, c in zip(lay.split(flat, tuple(coefs)), coefs))


class _Eager(torch.autograd.Function):
    """The ops' autograd, without the dispatcher: x and the coefficient tensors saved, nothing else."""

    @staticmethod
    def forward(ctx, x, text: str, channel_axis: int, *coefs):
        ctx.save_for_backward(x, *coefs)
        ctx.text, ctx.channel_axis = text, channel_axis
        return _forward(x, coefs, text, channel_axis)

    @staticmethod
    def backward(ctx, grad_y):
        x, *coefs = ctx.saved_tensors
        grad_x, flat = _backward(x, grad_y, coefs, ctx.text, ctx.channel_axis)
        return grad_x, None, None, *_split(x, coefs, flat, ctx.channel_axis)


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
    def act_forward(x: torch.Tensor, coefs: list[torch.Tensor], spec: str, channel_axis: int) -> torch.Tensor:
        return _forward(x, coefs, spec, channel_axis, op_launch)

    @define_op("visionbench::act_backward", mutates_args=())
    def act_backward(
        x: torch.Tensor, g: torch.Tensor, coefs: list[torch.Tensor], spec: str, channel_axis: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _backward(x, g, coefs, spec, channel_axis, op_launch)

    register_fakes((act_forward, _forward), (act_backward, _backward))

    def _setup_context(ctx, inputs, output):
        x, coefs, text, channel_axis = inputs
        ctx.save_for_backward(x, *coefs)
        ctx.text, ctx.channel_axis = text, channel_axis

    def _op_backward(ctx, grad_y):
        x, *coefs = ctx.saved_tensors
        grad_x, flat = torch.ops.visionbench.act_backward(x, grad_y, coefs, ctx.text, ctx.channel_axis)
        return grad_x, list(_split(x, coefs, flat, ctx.channel_axis)), None, None

    act_forward.register_autograd(_op_backward, setup_context=_setup_context)
