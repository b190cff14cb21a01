"""Fast path of the learnable activations: one fused kernel forward, one backward, only x saved.

    visionbench run ... trainer.kernels=auto          # the default: Triton kernels on CUDA, compiled ones elsewhere
    visionbench run ... trainer.kernels=triton        # Triton wherever it runs (CUDA; any device if TRITON_INTERPRET=1)
    visionbench run ... trainer.kernels=compile       # torch.compile of the fused kernels (C++ on CPU, Triton on CUDA)
    visionbench run ... trainer.kernels=eager         # the fused kernels run eagerly (no compiler)
    visionbench run ... trainer.kernels=reference     # the plain formulas, differentiated by autograd
    VISIONBENCH_KERNELS=eager visionbench run ...     # the variable wins over the key (any process, not only runs)
    with fused.use_backend("eager"): y = act(x)       # a backend for a block of code
    with fused.reference_path(): y = act(x)           # the plain formulas for a block of code
    act.fast = False                                  # the same, for one module

The backend is one value per process, `backend()`, which every reader asks: it starts as VISIONBENCH_KERNELS
(the older VISIONBENCH_FAST=0 means reference, VISIONBENCH_COMPILE=0 eager; none set: auto), and a run sets it
from its `trainer.kernels` unless one of those variables is set (`resolve`, `configured`: train/run.py). Where it
came from is `source()`; a run records both, with `compile_min_numel()`, in summary.json `environment.kernels`.

Under a `torch.func` transform (vmap, grad, jvp, jacrev, functionalize, ...) modules take the plain
formulas too (`fast_enabled`), so every transform sees autograd's own derivatives: seed ensembles
through `vmap(functional_call)` and per-sample gradients match the reference path exactly.
Called directly under a transform, `apply` never detaches: it batches under vmap
(`VmapFusedFunction`, a generated vmap rule) and refuses grad/jvp, which it would get wrong.

A family's fast path is a `Kernel`: two pure tensor functions, written elementwise (Horner's rule,
three-term recurrences; no stacked powers), with the family's configuration as keyword-only
arguments:

    forward(x, *coefs, **config) -> (y, *aux)          aux: small tensors backward needs (norms, stats)
    backward(x, grad_y, *coefs, *aux, **config) -> (grad_x, *grad_coefs)

Coefficients arrive shaped to broadcast against x (coefficient k is `c[..., k]`, see `broadcast`)
and their gradients leave summed to that shape (`reduce_to`). `FusedFunction` saves x, the
coefficients and aux, and recomputes everything else in backward, so autograd holds one
input-sized tensor where the plain formulas hold one per term. An elementwise family names its pair once, in its
kernel object `Elementwise` (with, optionally, the module of its Triton bodies), and goes through `elementwise`, which
lays per-channel inputs out as rows (see `_rows_forward`).

With backend `compile`, both functions are compiled by torch.compile (C++/OpenMP on CPU, Triton
on CUDA) once per (kernel configuration, function, dtype, device) and cached for the process;
inductor's on-disk cache makes later processes fast. Compilation is skipped for inputs below
`compile_min_numel()` elements (seconds of compiling cannot pay back there), and a compilation that
fails falls back to the same functions run eagerly, with one warning. On CUDA the default (`auto`)
runs the families' hand-written Triton kernels instead (`triton_ops.py`, `backend_for`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
import time
import types
import warnings
from collections.abc import Callable, Sequence

import torch
from torch.autograd.function import once_differentiable

BACKENDS = ("auto", "triton", "compile", "eager", "reference")  # config/schema.py KERNELS: the same (a test says so)
KEY = "trainer.kernels"  # the config key that chooses the backend of a run
# 2^20 elements (VGG8's smallest map at CIFAR batch 128): below this a fused kernel saves well under
# a millisecond per call on a CPU, while a first compilation costs seconds (and a new shape class
# another), so digits-sized runs and tests stay eager.
DEFAULT_COMPILE_MIN_NUMEL = 1 << 20


def _backend_from_env() -> tuple[str, str] | None:
    """(backend, the variable that set it): VISIONBENCH_KERNELS, one of BACKENDS; the older VISIONBENCH_FAST=0
    means reference and VISIONBENCH_COMPILE=0 eager (a warning, once per process, names the spelling to use); None
    when none of them is set."""
    name = os.environ.get("VISIONBENCH_KERNELS", "").strip().lower()
    if name:
        return name, "VISIONBENCH_KERNELS"
    if os.environ.get("VISIONBENCH_FAST", "1") == "0":
        return _older_spelling("VISIONBENCH_FAST", "reference")
    if os.environ.get("VISIONBENCH_COMPILE", "1") == "0":
        return _older_spelling("VISIONBENCH_COMPILE", "eager")
    return None


_TOLD: set[str] = set()  # the older variables already warned about in this process


def _older_spelling(variable: str, backend: str) -> tuple[str, str]:
    """(backend, variable) of an older spelling, `variable`=0, with a FutureWarning the first time in this process
    naming the one to set instead (VISIONBENCH_KERNELS=backend)."""
    if variable not in _TOLD:
        _TOLD.add(variable)
        warnings.warn(
            f"visionbench: {variable}=0 is the older spelling of VISIONBENCH_KERNELS={backend} (it still sets "
            f"{backend}); set VISIONBENCH_KERNELS={backend} instead",
            FutureWarning,
            stacklevel=3,
        )
    return backend, variable


# The one switch: the stored value `backend()` reads (tests monkeypatch it), and where it came from
BACKEND, SOURCE = _backend_from_env() or ("auto", "default")
COMPILE_MIN_NUMEL = int(os.environ.get("VISIONBENCH_COMPILE_MIN_NUMEL", str(DEFAULT_COMPILE_MIN_NUMEL)))


def backend() -> str:
    """The kernel backend of this process now, one of BACKENDS (`backend_for` says what it means for a tensor)."""
    return BACKEND


def source() -> str:
    """Where `backend()` came from: "VISIONBENCH_KERNELS" (or an older variable), "trainer.kernels" (a run's
    key), "default" (nothing set) or the name of the call that set it (`set_backend`, `use_backend`)."""
    return SOURCE


def compile_min_numel() -> int:
    """Inputs with fewer elements run the fused kernels eagerly under backend compile (VISIONBENCH_COMPILE_MIN_NUMEL,
    else DEFAULT_COMPILE_MIN_NUMEL; `COMPILE_MIN_NUMEL` holds it)."""
    return COMPILE_MIN_NUMEL


def switch() -> str:
    """The setting that chose `backend()`, as a user writes it: `trainer.kernels=reference` for a run's key,
    else `VISIONBENCH_KERNELS=<backend>` (the older variables' meaning in its spelling; also the default)."""
    return f"{KEY if SOURCE == KEY else 'VISIONBENCH_KERNELS'}={backend()}"


def check_backend() -> None:
    """ValueError naming the accepted values when the backend is none of them: only VISIONBENCH_KERNELS can say so
    (`set_backend` and the schema refuse any other name; the CLI checks the variable first)."""
    if backend() not in BACKENDS:
        raise ValueError(f"VISIONBENCH_KERNELS={backend()!r} is not a kernel backend; accepted: {', '.join(BACKENDS)}")


def set_backend(name: str, source: str = "set_backend") -> tuple[str, str]:
    """Make `name` (one of BACKENDS) the backend of this process, recorded as coming from `source`; returns the
    previous (backend, source). ValueError naming the accepted values for any other name."""
    global BACKEND, SOURCE
    if name not in BACKENDS:
        raise ValueError(f"{source}={name!r} is not a kernel backend; accepted: {', '.join(BACKENDS)}")
    previous = (BACKEND, SOURCE)
    BACKEND, SOURCE = name, source
    return previous


@contextlib.contextmanager
def use_backend(name: str, source: str = "use_backend"):
    """`set_backend(name, source)` inside this block, the previous backend restored after it."""
    global BACKEND, SOURCE
    previous = set_backend(name, source)
    try:
        yield
    finally:
        BACKEND, SOURCE = previous


def resolve(key: str | None) -> tuple[str, str]:
    """(backend, where it came from) for a run whose `trainer.kernels` is `key`: the variable wins over the key
    (VISIONBENCH_KERNELS, or an older one, read now), else the key; neither: ("auto", "default")."""
    return _backend_from_env() or ((key, KEY) if key else ("auto", "default"))


def configured(key: str | None):
    """The backend `resolve(key)` picks, for a block of code (a run's training: train/run.py)."""
    return use_backend(*resolve(key))


def record() -> dict:
    """What decides the kernels now, as a run records it (summary.json `environment.kernels`, with the Triton
    version): {"backend", "from" (`source`), "compile_min_numel"}."""
    return {"backend": backend(), "from": source(), "compile_min_numel": compile_min_numel()}


_state = threading.local()
_COMPILED: dict[tuple, Callable | None] = {}  # None: compilation failed, run eagerly
COMPILE_SECONDS: dict[tuple, float] = {}  # first call of each compiled function (compile + one run)
# torch.func's state, as torch >= 2.0 exposes it (a torch without these has no transforms to detect)
_TRANSFORMS_ACTIVE = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_INTERPRETERS = getattr(getattr(torch._C, "_functorch", None), "get_interpreter_stack", None)


@contextlib.contextmanager
def reference_path():
    """Run learnable activations through their plain formulas inside this block (e.g. `fit`, whose
    objective differentiates F' and so needs a double backward the fused path does not provide)."""
    _state.reference = getattr(_state, "reference", 0) + 1
    try:
        yield
    finally:
        _state.reference -= 1


def fast_enabled(x: torch.Tensor | None = None, triton: bool = False) -> bool:
    """Whether the fused path may run now (for input x of a family with Triton kernels if `triton`).
    Inside an outer torch.compile the plain formulas are traced instead, and the outer compiler
    fuses them itself, unless x takes the Triton kernels: those are registered ops that the
    compiler and CUDA graphs trace through. Under a torch.func transform the plain formulas too: the
    transforms differentiate (and batch) them exactly, while the fused backward is first-order only
    and has no forward-mode rule."""
    if backend() == "reference" or getattr(_state, "reference", 0) or transforms_active():
        return False
    if getattr(torch.compiler, "is_compiling", lambda: False)():
        return triton and x is not None and backend_for(x) == "triton"
    return True


def backend_for(x: torch.Tensor) -> str:
    """The kernels a learnable activation runs on x: "triton" (CUDA, or any device under the Triton
    interpreter, with backend auto or triton), "compile" (torch.compile of the fused kernels), "eager"
    (the fused kernels uncompiled) or "reference" (the plain formulas)."""
    check_backend()
    name = backend()
    if name in ("auto", "triton"):
        from . import triton_ops

        if triton_ops.runs_on(x) and (name == "triton" or x.device.type == "cuda"):
            return "triton"
        return "compile"
    return name


def ran_on(x: torch.Tensor) -> str:
    """The kernels a learnable activation runs on x in fact: `backend_for`, with "compile" as "compiled", or as
    "eager" for an input under `compile_min_numel()` elements (the benchmarks' and the checks' label)."""
    name = backend_for(x)
    if name == "compile":
        return "compiled" if x.numel() >= compile_min_numel() else "eager"
    return name


def transforms_active() -> bool:
    """Whether a torch.func transform (vmap, grad, jvp, functionalize, ...) is running now."""
    return _TRANSFORMS_ACTIVE()


def compile_seconds(prefix: str = "") -> float:
    """Total first-call time of compiled kernels whose name starts with `prefix` (for the benchmark)."""
    return sum(s for key, s in COMPILE_SECONDS.items() if key[0].startswith(prefix))


def _own_code(fn: Callable, config: dict, tag: str) -> Callable:
    """A copy of `fn` with its own code object and `config` bound as keyword defaults. Dynamo keeps
    its compiled variants (and its recompile limit, 8) per code object; a shared one would let a
    model's many configurations, dtypes and shapes exhaust it."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}__{tag}")
    copy = types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = dict(config)
    return copy


class Kernel:
    """The forward/backward pair of one family configuration (see the module docstring).

    Args:
        name: kernel family name, the first part of the cache key (e.g. "rational").
        forward: forward(x, *coefs, **config) -> (y, *aux).
        backward: backward(x, grad_y, *coefs, *aux, **config) -> (grad_x, *grad_coefs).
        **config: hashable keyword-only arguments of both functions (degrees, version, dims).
    """

    def __init__(self, name: str, forward: Callable, backward: Callable, **config):
        self.name, self.config = name, config
        self.functions = {"forward": forward, "backward": backward}
        self.key = (name,) + tuple(sorted(config.items()))

    def forward(self, x: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self._run("forward", x, tensors)

    def backward(self, x: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self._run("backward", x, tensors)

    def _run(self, which: str, x: torch.Tensor, tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        # Kernels never see autograd: detached inputs spare dynamo guards on requires_grad and its
        # warnings about reading .grad of non-leaf tensors (coefficient views are non-leaves).
        fn, x, tensors = self.functions[which], x.detach(), [t.detach() for t in tensors]
        if (
            backend() != "eager" and x.numel() >= compile_min_numel() and not transforms_active()
        ):  # vmap's tensors: eager
            key = self.key + (which, x.dtype, str(x.device))
            compiled = self._compiled(key, fn)
            if compiled is not None:
                try:
                    return self._timed(key, compiled, x, *tensors)
                except Exception as e:  # noqa: BLE001 - any compiler failure means "run eagerly"
                    out = fn(x, *tensors, **self.config)  # a genuine input error raises here again
                    _COMPILED[key] = None
                    warnings.warn(
                        f"visionbench: torch.compile failed for {self.name} {which} "
                        f"({type(e).__name__}: {str(e)[:200]}); using the eager kernel",
                        stacklevel=3,
                    )
                    return out
        return fn(x, *tensors, **self.config)

    def _compiled(self, key: tuple, fn: Callable) -> Callable | None:
        if key not in _COMPILED:
            tag = f"{len(_COMPILED)}"
            try:
                _COMPILED[key] = torch.compile(_own_code(fn, self.config, tag), fullgraph=True)
            except Exception as e:  # noqa: BLE001 - e.g. a platform torch.compile does not support
                warnings.warn(
                    f"visionbench: torch.compile unavailable ({type(e).__name__}: {e}); using eager kernels",
                    stacklevel=4,
                )
                _COMPILED[key] = None
        return _COMPILED[key]

    @staticmethod
    def _timed(key: tuple, fn: Callable, *args: torch.Tensor):
        if key in COMPILE_SECONDS:
            return fn(*args)
        t0 = time.perf_counter()
        out = fn(*args)
        if args[0].device.type == "cuda":
            torch.cuda.synchronize(args[0].device)
        COMPILE_SECONDS[key] = time.perf_counter() - t0
        return out


def _setup(ctx, inputs: tuple, output: tuple) -> None:
    kernel, x, *coefs = inputs
    ctx.kernel, ctx.num_coefs = kernel, len(coefs)
    ctx.save_for_backward(x, *coefs, *output[1:])
    ctx.mark_non_differentiable(*output[1:])


@once_differentiable  # training needs first derivatives only; `fit` uses the plain formulas
def _backward(ctx, grad_y: torch.Tensor, *unused):
    x, *rest = ctx.saved_tensors
    coefs, aux = rest[: ctx.num_coefs], rest[ctx.num_coefs :]
    grads = ctx.kernel.backward(x, grad_y, *coefs, *aux)
    return (None, *grads)


class FusedFunction(torch.autograd.Function):
    """y = kernel.forward(x, *coefs)[0]; backward = kernel.backward. Saves x, coefs and aux only.

    Ctx-style forward: outside torch.func transforms it costs ~30 us less per call than the
    `setup_context` style, which binds the arguments with inspect.signature on every apply."""

    @staticmethod
    def forward(ctx, kernel: Kernel, x: torch.Tensor, *coefs: torch.Tensor):
        out = tuple(kernel.forward(x, *coefs))
        _setup(ctx, (kernel, x, *coefs), out)
        return out

    backward = staticmethod(_backward)


class VmapFusedFunction(torch.autograd.Function):
    """`FusedFunction` in the `setup_context` style with `generate_vmap_rule`, what `apply` uses
    under a torch.func transform: the kernels are plain tensor code, so vmap batches forward and
    backward as they are (`_check_transforms` refuses the transforms it would get wrong)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(kernel: Kernel, x: torch.Tensor, *coefs: torch.Tensor):
        return tuple(kernel.forward(x, *coefs))

    setup_context = staticmethod(_setup)

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor, *unused):
        if torch.is_grad_enabled():
            # create_graph=True: vmap's generated rule hands `once_differentiable` unbatched inputs
            # that need no grad, so it would skip its DelayedError and leave zeros for later
            raise RuntimeError(
                "visionbench: the fused kernels are differentiable once; a backward with "
                "create_graph=True under torch.func.vmap needs fused.reference_path()"
            )
        return _backward(ctx, grad_y)


def apply(kernel: Kernel, x: torch.Tensor, *coefs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(y, *aux) through `FusedFunction`; aux (statistics) carry no gradient."""
    if transforms_active():
        # never the inference shortcut: a transform's wrapped tensors report requires_grad=False
        # (vmap's batched ones always), and skipping the Function would detach them
        _check_transforms(kernel)
        return VmapFusedFunction.apply(kernel, x, *coefs)
    if not (torch.is_grad_enabled() and (x.requires_grad or any(c.requires_grad for c in coefs))):
        return tuple(kernel.forward(x, *coefs))  # inference: nothing to save
    return FusedFunction.apply(kernel, x, *coefs)


def _check_transforms(kernel: Kernel) -> None:
    """Refuse the torch.func transforms that the fused Functions would get wrong. vmap (its generated
    rule) and functionalize are fine. Under grad/vjp/jacrev a next level (grad of grad, or autograd
    over the result) would see the once-differentiable backward as a constant and get zeros, and
    jvp/jacfwd have no forward-mode rule. Modules never get here (`fast_enabled` sends them to the
    plain formulas under any transform); this guards direct calls of the fused kernels."""
    stack = _INTERPRETERS() if _INTERPRETERS is not None else None
    kinds = {i.key().name for i in stack} if stack else {"unknown"}
    refused = sorted(kinds - {"Vmap", "Functionalize"})
    if refused:
        raise RuntimeError(
            f"visionbench: the fused {kernel.name} kernel supports torch.func.vmap only, not "
            f"{'/'.join(refused)} transforms; call the activation module (it takes the plain "
            "formulas under torch.func transforms) or use fused.reference_path()"
        )


def broadcast(c: torch.Tensor, x: torch.Tensor, channel_axis: int) -> torch.Tensor:
    """c (K,) as is; c (C, K) shaped [C, 1, ..., 1, K] so that `c[..., k]` broadcasts along x's channel axis."""
    if c.dim() == 1:
        return c
    return c.reshape([c.shape[0]] + [1] * (x.dim() - 1 - channel_axis) + [c.shape[-1]])


@dataclasses.dataclass(frozen=True)
class Elementwise:
    """The kernel object of a family that is elementwise given its coefficients, defined once in its module and named
    by its class (`LearnableActivation.kernel`): the fused pair (see the module docstring) and, optionally, `triton`,
    the module that holds its Triton bodies (`BODIES[name]`, triton_template.py), imported by name only where they run.

        KERNEL = fused.Elementwise("hermite", _fused_forward, _fused_backward,
                                   triton="visionbench.activations.triton_polynomial")
        y = fused.elementwise(KERNEL, x, channel_axis, weight, degree=3, clamp=False)
    """

    name: str  # the compiled kernels' cache key, and the family's key in its Triton module's BODIES
    forward: Callable
    backward: Callable
    triton: str | None = None

    @property
    def has_triton(self) -> bool:
        """Whether the family's Triton kernels can run here: it names their module, and Triton is installed."""
        from . import triton_ops

        return self.triton is not None and triton_ops.HAVE_TRITON


def elementwise(
    kernel: Elementwise, x: torch.Tensor, channel_axis: int, *coefs: torch.Tensor, **config
) -> torch.Tensor:
    """F(x) of an elementwise family (`Elementwise`), coefficients each (K,) shared or (C, K) per channel.

    On the Triton backend (`backend_for`) the family's Triton kernels run (`triton_ops`), where it has
    them. Otherwise per-channel coefficients on a contiguous x with channels before other dims (NCHW)
    go through the row layout of `_rows_forward`, or broadcast along the channel axis.
    """
    if backend_for(x) == "triton" and kernel.has_triton:
        from . import triton_ops

        return triton_ops.elementwise(kernel, x, channel_axis, *coefs, **config)
    if any(c.dim() == 2 for c in coefs):
        post = math.prod(x.shape[channel_axis + 1 :])
        if post > 1 and x.is_contiguous():
            x3 = x.view(math.prod(x.shape[:channel_axis]), x.shape[channel_axis], post)
            rows = Kernel(
                kernel.name,
                _rows_forward,
                _rows_backward,
                inner_forward=kernel.forward,
                inner_backward=kernel.backward,
                inner_config=tuple(sorted(config.items())),
            )
            return apply(rows, x3, *coefs)[0].view(x.shape)
        coefs = tuple(broadcast(c, x, channel_axis) for c in coefs)
    return apply(Kernel(kernel.name, kernel.forward, kernel.backward, **config), x, *coefs)[0]


def _as_rows(x, coefs):
    """x (pre, C, post) as rows (pre C, post); per-channel coefficients (C, K) as (pre C, 1, K)."""
    pre, c, post = x.shape
    rows = [
        t.unsqueeze(0).expand(pre, c, t.shape[-1]).reshape(pre * c, 1, t.shape[-1]) if t.dim() == 2 else t
        for t in coefs
    ]
    return x.reshape(pre * c, post), rows


def _rows_forward(x, *coefs, inner_forward, inner_backward, inner_config):
    # Inductor fuses a per-channel sum with the elementwise pass only when both run over the same
    # loop nest: per row, over the contiguous post dims. Summed over (pre, post) of NCHW at once,
    # it re-reads x and grad_y in a second pass (2.5-3x slower per-channel backward, measured).
    # The expanded coefficients are index arithmetic inside the compiled kernel, never copies.
    xr, rows = _as_rows(x, coefs)
    y, *aux = inner_forward(xr, *rows, **dict(inner_config))
    return (y.view(x.shape), *aux)


def _rows_backward(x, g, *coefs, inner_forward, inner_backward, inner_config):
    xr, rows = _as_rows(x, coefs)
    pre, c, _ = x.shape
    gx, *grads = inner_backward(xr, g.reshape(xr.shape), *rows, **dict(inner_config))
    grads = [gr.reshape(pre, c, gr.shape[-1]).sum(0) if t.dim() == 2 else gr for gr, t in zip(grads, coefs)]
    return (gx.view(x.shape), *grads)


# ---- building blocks of kernels ---------------------------------------------------------------
def reduce_to(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Sum t over every dim that `like` (a coefficient slice that broadcast against t) does not hold."""
    if like.dim() == 0:
        return t.sum()
    return t.sum_to_size(like.shape)


def horner_and_derivative(coefs: Sequence[torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """sum_i coefs[i] x^i and its derivative in x, both by Horner's rule (coefs broadcastable to x)."""
    value, deriv = coefs[-1], None
    for c in reversed(coefs[:-1]):
        deriv = value if deriv is None else deriv * x + value
        value = value * x + c
    return value, (deriv if deriv is not None else torch.zeros_like(x))


def slices(c: torch.Tensor, count: int) -> list[torch.Tensor]:
    """[c[..., 0], ..., c[..., count - 1]]: the coefficients of a `coef_view`."""
    return [c[..., k] for k in range(count)]
