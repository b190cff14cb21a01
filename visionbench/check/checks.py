"""The checks of one activation module that need no model: shapes and dtypes, finiteness, gradients,
state, devices, determinism, the fitted init. Each takes a `Subject` (what to build) and the device,
and returns (passed, reason); an exception inside a check is its failure (`main.run_check`).

Inputs are channels-first with CHANNELS channels: (N, C) and (N, C, H, W).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import math
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.autograd.gradcheck import GradcheckError

from .. import activations
from ..activations import LearnableActivation, fused
from ..activations.base import INIT_INTERVAL
from ..activations.targets import value_and_derivative

CHANNELS = 8
SHAPES = ((16, CHANNELS), (2, CHANNELS, 5, 5))  # channels-first 2-D (features) and 4-D (conv maps)
DTYPES = (torch.float32, torch.bfloat16, torch.float64)
LARGE = 1e4  # |x| up to this must give finite outputs and gradients in float32
# special points: 0 (a pole of x/|x|, sin(x)/x, 1/x), tiny and denormal-adjacent values, the integers the
# polynomial and spline families have knots or cancellations at, and powers of ten up to LARGE
SPECIAL = (0.0, 1e-30, 1e-7, 0.5, 1.0, 2.0, 3.0, 10.0, 100.0, 1e3, LARGE)
GRADCHECK = {"eps": 1e-6, "atol": 1e-5, "rtol": 1e-3}  # float64, as tests/test_activations.py
MODES = ("train", "eval")


@dataclass
class Subject:
    """One activation to check: a registry name and its options (`label` as written, e.g. `rational[version=B]`)."""

    name: str
    options: dict = field(default_factory=dict)
    label: str = ""

    def __post_init__(self):
        self.name = activations.check(self.name, self.options)  # unknown name or option: ValueError
        self.label = self.label or self.name

    def make(self, channels: int = CHANNELS) -> nn.Module:
        """A fresh module. `per_channel=True` without `num_channels` gets `channels` (what the inputs have)."""
        options = dict(self.options)
        if options.get("per_channel") and "num_channels" not in options:
            options["num_channels"] = channels
        return activations.create(self.name, **options)

    def init_target(self) -> str | None:
        """The fit target the module starts as (`init=gelu`, or the family's default init), else None."""
        init = self.options.get("init")
        if init is None:
            param = inspect.signature(activations.get_class(self.name).__init__).parameters.get("init")
            init = None if param is None else param.default
        return str(init).lower() if str(init).lower() in activations.target_names() else None


def paths(module: nn.Module) -> list[str]:
    """The forward paths a module has: learnable ones with a fused kernel run both."""
    fast = isinstance(module, LearnableActivation) and module.fast and fused.backend() != "reference"
    return ["fused", "reference"] if fast else ["default"]


def on_path(path: str):
    return fused.reference_path() if path == "reference" else contextlib.nullcontext()


def learnable(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return [(n, p) for n, p in module.named_parameters() if p.requires_grad]


def randn(shape, device, dtype=torch.float32, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)


def first_bad(t: torch.Tensor, x: torch.Tensor | None = None) -> str | None:
    """'NaN at x = 0' for the first non-finite element of t (its input value when x has t's shape)."""
    bad = ~torch.isfinite(t.detach())
    if not bad.any():
        return None
    i = int(bad.flatten().nonzero()[0])
    kind = "NaN" if bool(torch.isnan(t.detach().flatten()[i])) else "inf"
    where = f" at x = {float(x.detach().flatten()[i]):g}" if x is not None and x.shape == t.shape else ""
    return kind + where


def shape_and_dtype(s: Subject, device: torch.device) -> tuple[bool, str]:
    """Output shape and dtype equal the input's, for float32 / bfloat16 / float64 modules and inputs on (N, C)
    and (N, C, H, W), and for bfloat16 inputs into a float32 module under autocast."""
    cases = [(dtype, shape, False) for dtype in DTYPES for shape in SHAPES]
    cases += [(torch.bfloat16, shape, True) for shape in SHAPES]
    for dtype, shape, autocast in cases:
        module = s.make().to(device=device, dtype=torch.float32 if autocast else dtype)
        x = randn(shape, device, dtype)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            y = module(x)
        what = f"{str(dtype).replace('torch.', '')}{' under autocast' if autocast else ''} input {tuple(shape)}"
        if not isinstance(y, torch.Tensor):
            return False, f"{what}: forward returned {type(y).__name__}, not a tensor"
        if y.shape != x.shape:
            return False, f"{what}: output shape {tuple(y.shape)}, expected {tuple(x.shape)}"
        if y.dtype != x.dtype:
            return False, f"{what}: output dtype {str(y.dtype).replace('torch.', '')}, expected {what.split()[0]}"
        if y.device != x.device:
            return False, f"{what}: output on {y.device}, input on {x.device}"
    return True, "float32, bfloat16, float64 and bfloat16 autocast; (N, C) and (N, C, H, W): shape and dtype kept"


def _finite_inputs(device) -> dict[str, torch.Tensor]:
    values = torch.tensor(SPECIAL, dtype=torch.float64)
    values = torch.cat([values, -values[1:], torch.linspace(-LARGE, LARGE, 401, dtype=torch.float64)])
    grid = values.view(1, 1, 1, -1).expand(2, CHANNELS, 1, -1).contiguous()  # every channel sees every value
    shape = (2, CHANNELS, 3, 3)
    inputs = {"grid": grid, "all-zero input": torch.zeros(shape, dtype=torch.float64)}  # zero variance: normalisers
    inputs |= {f"constant {v:g} input": torch.full(shape, v, dtype=torch.float64) for v in (LARGE, -LARGE)}
    return {k: v.to(device=device, dtype=torch.float32) for k, v in inputs.items()}


def finite(s: Subject, device: torch.device) -> tuple[bool, str]:
    """Finite outputs, input gradients and parameter gradients in float32, train and eval mode, every path,
    on |x| <= LARGE, the SPECIAL points of either sign and constant inputs (zero, +-LARGE)."""
    for mode in MODES:
        for path in paths(s.make()):
            for label, x in _finite_inputs(device).items():
                module = s.make().to(device).train(mode == "train")
                x = x.clone().requires_grad_(True)
                named = learnable(module)
                with on_path(path):
                    y = module(x)
                    grads = torch.autograd.grad(y, [x, *(p for _, p in named)], torch.ones_like(y), allow_unused=True)
                where = f"({mode} mode, {path} path{'' if label == 'grid' else ', ' + label})"
                bad = first_bad(y, x)
                if bad:
                    return False, f"output {bad} {where}"
                bad = first_bad(grads[0], x) if grads[0] is not None else None
                if bad:
                    return False, f"input gradient {bad} {where}"
                for (name, _), g in zip(named, grads[1:]):
                    if g is not None and first_bad(g):
                        return False, f"gradient of parameter {name!r} {first_bad(g)} {where}"
    return True, (
        f"float32 outputs and gradients finite for |x| <= {LARGE:g}, at 0, ±1e-30, ±1, ... and on "
        f"constant inputs (train and eval, {' and '.join(paths(s.make()))} path)"
    )


def _summary(error: Exception, names: list[str]) -> str:
    """The first line of a GradcheckError, its `input k` named (the input x or a parameter)."""
    line = str(error).strip().splitlines()[0].rstrip(",")
    for k in range(len(names) - 1, -1, -1):
        line = line.replace(f"respect to input {k}", f"respect to {names[k]}")
    return line


def gradcheck(s: Subject, device: torch.device, fast: bool = False) -> tuple[bool, str]:
    """float64 `torch.autograd.gradcheck` of the input and every learnable parameter, train and eval mode,
    every path (`fast`: gradcheck's fast mode, random projections of the Jacobians instead of all of them).
    Random draws inside forward (rational D's noise) are reseeded on every call, so the function gradcheck
    differentiates is deterministic."""
    x = torch.rand((2, CHANNELS, 1, 2), generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 4 - 2
    x = x.to(device)
    devices = [device] if device.type == "cuda" else []
    count = 0
    for mode in MODES:
        for path in paths(s.make()):
            module = s.make().to(device=device, dtype=torch.float64).train(mode == "train")
            names = [n for n, _ in learnable(module)]
            coefs = [module.get_parameter(n).detach().clone().requires_grad_(True) for n in names]

            def f(x, *cs):  # called in this iteration only, so the loop's module and names are this one's
                with torch.random.fork_rng(devices=devices):
                    torch.manual_seed(0)
                    return torch.func.functional_call(module, dict(zip(names, cs)), (x,))  # noqa: B023

            with on_path(path):
                try:
                    torch.autograd.gradcheck(f, (x.clone().requires_grad_(True), *coefs), fast_mode=fast, **GRADCHECK)
                except GradcheckError as e:
                    return False, f"{mode} mode, {path} path: {_summary(e, ['the input', *map(repr, names)])}"
            count = len(names)
    params = f"input and {count} learnable parameter tensor(s)" if count else "input (no learnable parameters)"
    return True, f"float64 gradcheck{' (fast mode)' if fast else ''} of the {params}, train and eval mode"


def parameter_gradients(s: Subject, device: torch.device) -> tuple[bool, str]:
    """Every learnable parameter gets a gradient from a random loss: not None, finite, and not all zero at a
    point moved off the init (at some inits a gradient is zero by design: APL's hinge locations at a = 0)."""
    module = _trained(s, device).train()
    named = learnable(module)
    if not named:
        return True, "no learnable parameters"
    x = randn((4, CHANNELS, 3, 3), device)
    y = module(x)
    grads = torch.autograd.grad((y * randn(y.shape, device, seed=1)).sum(), [p for _, p in named], allow_unused=True)
    for (name, _), g in zip(named, grads):
        if g is None:
            return False, f"parameter {name!r} gets no gradient (not used by forward, or detached)"
        if first_bad(g):
            return False, f"parameter {name!r} gets a {first_bad(g)} gradient"
        if not bool(g.abs().sum() > 0):
            return False, f"parameter {name!r} gets an all-zero gradient"
    return True, f"{len(named)} parameter tensor(s), each a finite non-zero gradient"


def _trained(s: Subject, device) -> nn.Module:
    """A module moved off its init: one train-mode forward (running statistics) and noise on its parameters."""
    module = s.make().to(device).train()
    with torch.no_grad():
        module(randn((4, CHANNELS, 3, 3), device, seed=2) * 2 + 0.5)
        for i, p in enumerate(module.parameters()):
            p.add_(0.01 * randn(p.shape, device, p.dtype, seed=10 + i))
    return module.eval()


def equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise-equal values, NaN equal to NaN at the same place (torch.equal says NaN != NaN: a module that
    returns NaN would fail every reproduction check, though its copy returns the same NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if not (a.is_floating_point() or a.is_complex()):
        return torch.equal(a, b)
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    return torch.equal(nan_a, nan_b) and torch.equal(a.masked_fill(nan_a, 0), b.masked_fill(nan_b, 0))


def _same(a: nn.Module, b: nn.Module, device) -> str | None:
    x = randn((2, CHANNELS, 3, 3), device, seed=3)
    with torch.no_grad():
        ya, yb = a.eval()(x), b.eval()(x)
    if equal(ya, yb):
        return None
    if ya.shape != yb.shape:
        return f"outputs of shapes {tuple(ya.shape)} and {tuple(yb.shape)}"
    nan_a, nan_b = torch.isnan(ya), torch.isnan(yb)
    if not torch.equal(nan_a, nan_b):
        return f"outputs are NaN at {int((nan_a ^ nan_b).sum())} different place(s)"
    return f"outputs differ by up to {float((ya - yb).masked_fill(nan_a, 0).abs().max()):.3g}"


def state_dict(s: Subject, device: torch.device) -> tuple[bool, str]:
    """state_dict -> torch.save -> torch.load(weights_only) -> a fresh module's load_state_dict: the same outputs."""
    source = _trained(s, device)
    buf = io.BytesIO()
    torch.save(source.state_dict(), buf)
    buf.seek(0)
    target = s.make().to(device)
    target.load_state_dict(torch.load(buf, weights_only=True))
    differ = _same(source, target, device)
    if differ:
        return (
            False,
            f"a fresh module loaded with the state_dict: {differ} (state kept outside parameters and buffers?)",
        )
    return True, f"{len(source.state_dict())} tensor(s) saved and loaded into a fresh module: identical outputs"


def deepcopy(s: Subject, device: torch.device) -> tuple[bool, str]:
    """copy.deepcopy gives the same outputs and shares no parameter or buffer storage with the original."""
    source = _trained(s, device)
    clone = copy.deepcopy(source)
    differ = _same(source, clone, device)
    if differ:
        return False, f"the copy's {differ}"
    ours = {t.untyped_storage().data_ptr() for t in [*source.parameters(), *source.buffers()] if t.numel()}
    shared = [
        n
        for n, t in [*clone.named_parameters(), *clone.named_buffers()]
        if t.numel() and t.untyped_storage().data_ptr() in ours
    ]
    if shared:
        return False, f"the copy shares storage with the original: {', '.join(shared)}"
    return True, "identical outputs, no shared storage"


def meta_device(s: Subject, device: torch.device) -> tuple[bool, str]:
    """Built under `with torch.device("meta")`: every parameter and buffer on meta (none created on a fixed
    device), and forward on a meta input gives a meta output of its shape."""
    with torch.device("meta"):
        module = s.make()
    off = [
        f"{n} on {t.device}"
        for n, t in [*module.named_parameters(), *module.named_buffers()]
        if t.device.type != "meta"
    ]
    if off:
        return False, f"built under torch.device('meta'), but {', '.join(off)}: a tensor created on a fixed device"
    for shape in SHAPES:
        x = torch.empty(shape, device="meta")
        try:
            y = module(x)
        except Exception as e:  # noqa: BLE001 - the reason is the check's result
            return False, (
                f"forward on a meta input {shape} raised {type(e).__name__}: {str(e).splitlines()[0][:160]} "
                "(a tensor created on a fixed device?)"
            )
        if y.device.type != "meta" or y.shape != x.shape:
            return False, f"forward on a meta input {shape} gave {tuple(y.shape)} on {y.device}"
    return True, "built under torch.device('meta'): parameters, buffers and outputs on meta"


def deterministic(s: Subject, device: torch.device) -> tuple[bool, str]:
    """Two builds under one seed are identical; two forwards + backwards of one module under one seed give
    bitwise-equal outputs and gradients (train mode, so random draws are seeded; eval mode). NaN equals NaN in
    every comparison here (`equal`): a NaN is the `finite` check's to report."""
    states = []
    for _ in range(2):
        torch.manual_seed(0)
        states.append(s.make().state_dict())
    differ = [k for k in states[0] if k not in states[1] or not equal(states[0][k], states[1][k])]
    if differ or list(states[0]) != list(states[1]):
        return False, f"two builds under torch.manual_seed(0) differ in {', '.join(differ) or 'their keys'}"
    x0 = randn((4, CHANNELS, 3, 3), device)
    for mode in MODES:
        module = s.make().to(device).train(mode == "train")
        named = learnable(module)
        runs = []
        for _ in range(2):
            torch.manual_seed(0)
            x = x0.clone().requires_grad_(True)
            y = module(x)
            runs.append([y, *torch.autograd.grad(y.square().sum(), [x, *(p for _, p in named)], allow_unused=True)])
        for what, a, b in zip(["output", "input gradient", *(f"gradient of {n!r}" for n, _ in named)], *runs):
            if (a is None) != (b is None) or (a is not None and not equal(a, b)):
                return False, f"{mode} mode: two calls on the same input under one seed give different {what}s"
    return True, "same build under one seed; bitwise-equal outputs and gradients on repeated calls (train, eval)"


def fit_error(s: Subject, device: torch.device) -> tuple[bool, str]:
    """The sup-norm error of F and F' to the init target on INIT_INTERVAL (float64, the plain formula), within
    the family's `fit_tolerance[target]` when it has one (else a figure)."""
    target = s.init_target()
    if target is None:
        return True, "no init target (nothing fitted)"
    module = copy.deepcopy(s.make()).to(device=device, dtype=torch.float64).eval()
    lo, hi = INIT_INTERVAL
    x = torch.linspace(lo, hi, 1001, dtype=torch.float64, device=device)
    y, dy = value_and_derivative(target, x)
    with fused.reference_path(), torch.enable_grad():
        xg = x.clone().requires_grad_(True)
        f = module.fit_forward(xg) if isinstance(module, LearnableActivation) else module(xg)
        (df,) = torch.autograd.grad(f.sum(), xg)
    err, derr = float((f.detach() - y).abs().max()), float((df - dy).abs().max())
    figure = f"sup |F - {target}| = {err:.3g}, sup |F' - {target}'| = {derr:.3g} on [{lo:g}, {hi:g}]"
    tolerance = getattr(module, "fit_tolerance", {}).get(target)
    if tolerance is None:
        return True, figure + " (the family states no tolerance for this target)"
    if not (err <= tolerance[0] and derr <= tolerance[1]) or math.isnan(err + derr):
        return False, figure + f": above the family's tolerance ({tolerance[0]:g}, {tolerance[1]:g})"
    return True, figure + f", within ({tolerance[0]:g}, {tolerance[1]:g})"


# name shown -> check, in the order run
MODULE_CHECKS = {
    "shape+dtype": shape_and_dtype,
    "finite": finite,
    "gradcheck": gradcheck,
    "param grads": parameter_gradients,
    "state_dict": state_dict,
    "deepcopy": deepcopy,
    "meta device": meta_device,
    "deterministic": deterministic,
    "init fit": fit_error,
}
