"""The Triton kernels as torch ops: `visionbench::act_forward` / `act_backward` (`torch.library.triton_op`,
autograd by `register_autograd`), so that torch.compile and CUDA graphs trace through them.

    y = triton_ops.elementwise(rational.KERNEL, x, channel_axis, a, b, form="A", m=5, n=4)

`fused.elementwise` calls this for CUDA tensors when the backend is Triton (`fused.backend_for`) and the family's kernel
object (`fused.Elementwise`) names the module of its Triton bodies. Eager calls take a lean `autograd.Function` to the
same launches (a custom op's dispatch costs host time per call; inside torch.compile the op is what the compiler
sees): `OpPair`, which triton_normalized.py's ops use too. The coefficient tensors go to the kernels as they are, up to four of them, (K_i,) shared or (C, K_i) per
channel (float32, contiguous: other dtypes, and shared tensors beside per-channel ones, are converted first); the
backward returns their gradients as contiguous views of one row of sums, which autograd hands to each parameter
without a copy.

The ops take the family and its configuration as a string, `spec(kernel, config)`:
"visionbench.activations.triton_polynomial:rational(form='A', m=5, n=4)", the module that holds the family's bodies
and the family's name in its `BODIES` (triton_template.py `Body`: the forward and backward bodies and the function
that turns the configuration, the keyword arguments of the fused kernel, into the template's P0..P3). Any process reads
it back the same way (`resolve` imports that module), so a compiled graph cached on disk means the same kernels in
every process, a family from outside the package brings its own body module, and nothing is imported or registered
while a compiler traces the call: `resolve` runs only inside the ops' implementations. Without Triton
(`HAVE_TRITON` False) no body module is ever imported, and every family still imports.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .triton_template import Body

try:
    import triton  # noqa: F401 - torch's CUDA wheels bring it; a CPU-only install may not

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - every supported install has triton; the switch then says "compile"
    HAVE_TRITON = False


def interpreting() -> bool:
    """Whether Triton runs its kernels in the CPU interpreter (TRITON_INTERPRET=1: tests, dry runs)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def runs_on(x: torch.Tensor) -> bool:
    """Whether the Triton kernels can run on x: CUDA (or any device under the interpreter), fp16/bf16/fp32."""
    return HAVE_TRITON and (x.device.type == "cuda" or interpreting()) and x.dtype in DTYPES


DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def spec(kernel, config: dict) -> str:
    """The ops' `spec` argument: the module of the family's Triton bodies, the family and its configuration as text,
    e.g. "visionbench.activations.triton_polynomial:hermite(clamp=False, degree=3)" (kernel: a `fused.Elementwise`)."""
    return f"{kernel.triton}:{kernel.name}(" + ", ".join(f"{k}={v!r}" for k, v in sorted(config.items())) + ")"


@functools.cache
def resolve(text: str) -> tuple[Body, tuple]:
    """(the family's bodies, P0..P3) of a `spec` string: its module imported, the family's `Body` in its `BODIES`."""
    module, call = text.split(":", 1)
    call = ast.parse(call, mode="eval").body
    body = importlib.import_module(module).BODIES[call.func.id]
    return body, body.launch_params(**{kw.arg: ast.literal_eval(kw.value) for kw in call.keywords})


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


def elementwise(kernel, x: torch.Tensor, channel_axis: int, *coefs: torch.Tensor, **config) -> torch.Tensor:
    """F(x) by the Triton kernels of the family (kernel: its `fused.Elementwise`); coefs (K_i,) shared or (C, K_i) per
    channel (autograd-tracked)."""
    return call(ACT, x, list(coefficients(x, channel_axis, coefs)), spec(kernel, config), channel_axis)


# ---- the template's launches, and their autograd -------------------------------------------------
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


def _save(ctx, inputs, output) -> None:
    x, coefs, text, channel_axis = inputs
    ctx.save_for_backward(x, *coefs)
    ctx.text, ctx.channel_axis = text, channel_axis


def _grads(ctx, grad_output, backward) -> tuple:
    x, *coefs = ctx.saved_tensors
    grad_x, flat = backward(x, grad_output[0], coefs, ctx.text, ctx.channel_axis)
    return grad_x, list(_split(x, coefs, flat, ctx.channel_axis)), None, None


# ---- a pair of Triton host functions as torch ops, and as an eager autograd Function ------------------------------
@dataclasses.dataclass
class OpPair:
    """A forward and a backward host function (Triton launches; `launch=None`, their last argument, wraps each kernel:
    `op_launch` in the ops, `_NoLaunch` in their fake implementations) and the autograd that joins them, written once
    for both ways a call goes (`call`): eager calls take `_Eager`, an `autograd.Function` that runs the backward's host
    function; calls under torch.compile take the forward op (`register`), whose autograd runs the backward op.

      save(ctx, inputs, output)      keeps what the backward needs (inputs in the forward op's order)
      grads(ctx, grad_outputs, run)  -> the gradients of those inputs (None for the constants); run is the backward's
                                        host function or its op
      eager                          the forward of eager calls where it is not `forward` (SLAF's updates in place)
    """

    forward: Callable
    backward: Callable
    save: Callable
    grads: Callable
    eager: Callable | None = None
    op: Callable | None = None  # the forward op, once registered (`register`)


def call(pair: OpPair, *inputs):
    """The pair's forward of the inputs (in the forward op's order): its op inside torch.compile (what the compiler
    sees), `_Eager` where a gradient is wanted (a custom op's dispatch costs host time per call), else the forward."""
    if torch.compiler.is_compiling():
        return pair.op(*inputs)
    layout, flat = _flatten(inputs)
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in flat):
        return _Eager.apply(pair, layout, *flat)
    return (pair.eager or pair.forward)(*inputs)


def _flatten(items) -> tuple[tuple, list]:
    """(layout, the items with each list spread): what autograd sees of a list of tensors is each tensor."""
    layout = tuple(len(i) if isinstance(i, list) else -1 for i in items)
    return layout, [t for i in items for t in (i if isinstance(i, list) else (i,))]


def _nest(layout: tuple, flat) -> tuple:
    """The items `_flatten` spread, lists again."""
    out, at = [], 0
    for n in layout:
        out.append(list(flat[at : at + n]) if n >= 0 else flat[at])
        at += n if n >= 0 else 1
    return tuple(out)


class _Eager(torch.autograd.Function):
    """A pair's autograd without the dispatcher: its host functions, and only what `save` keeps."""

    @staticmethod
    def forward(ctx, pair: OpPair, layout: tuple, *flat):
        inputs = _nest(layout, flat)
        output = (pair.eager or pair.forward)(*inputs)
        pair.save(ctx, inputs, output)
        if isinstance(output, tuple):
            ctx.set_materialize_grads(False)  # no zero tensors for the gradients of outputs that have none
        ctx.pair = pair
        return output

    @staticmethod
    def backward(ctx, *grad_outputs):
        return None, None, *_flatten(ctx.pair.grads(ctx, grad_outputs, ctx.pair.backward))[1]


class _NoLaunch:
    """A launcher that launches nothing: the ops' fake implementations (shapes only)."""

    def __init__(self, kernel):
        pass

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def register(pair: OpPair, name: str) -> None:
    """Join the ops visionbench::<name>_forward and <name>_backward (their host functions launching through
    `op_launch`) to the pair: the forward op's autograd is the pair's, with the backward op, and `call` takes the forward
    op under torch.compile. Under the interpreter each op also gets a fake implementation, its host code launching
    nothing (`_NoLaunch`); a `triton_op` needs none (the compiler traces its kernels)."""
    qualified = {part: f"visionbench::{name}_{part}" for part in ("forward", "backward")}
    if interpreting():
        for part, host in (("forward", pair.forward), ("backward", pair.backward)):
            torch.library.register_fake(qualified[part], functools.partial(host, launch=_NoLaunch))
    backward = getattr(torch.ops.visionbench, f"{name}_backward")
    torch.library.register_autograd(
        qualified["forward"],
        lambda ctx, *grad_outputs: pair.grads(ctx, grad_outputs, backward),
        setup_context=pair.save,
    )
    pair.op = getattr(torch.ops.visionbench, f"{name}_forward")


ACT = OpPair(_forward, _backward, _save, _grads)
OPS = HAVE_TRITON and hasattr(torch.library, "triton_op")
if OPS:
    # Compiled Triton: `triton_op`, whose kernels the compiler traces through `wrap_triton`. Under the CPU
    # interpreter the kernels cannot be traced: a plain custom op, opaque to the compiler, with a fake
    # implementation (`register`). triton_normalized.py defines its ops with the same pair.
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

    register(ACT, "act")
