"""The base class of every learnable activation: coefficients, channel layout, inits, fitting.

A family subclasses `LearnableActivation`, creates its coefficients with `self.coefficient(...)`,
and implements `reference_forward` (the plain formula: enough on its own), `init_default` and (where the paper gives
one) `init_variance_preserving`; optionally `fast_forward`, the fused kernel of `fused.py` (same numbers): an
elementwise family's names its kernel object, `kernel = fused.Elementwise(...)`, which may name Triton bodies too
(docs/your_activation.md). `forward` picks the path and, under autocast, computes in float32.
Families linear in their coefficients implement `basis(x)` and get an exact least-squares `fit`;
the others get a linearised start (`fit_start`) followed by a short float64 L-BFGS refinement of
the same objective. Fits always use the plain formulas (their objective needs F' differentiated);
the fitting itself is fitting.py's, which `fit`, `_objective` and `_refine` call.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator

import torch
from torch import nn

from . import fitting, fused

# the fitting's pieces, imported from here by the families and by check/, bench/, experiments/
from .fitting import FitResult, SurrogateFit, one_thread, solve_least_squares  # noqa: F401
from .targets import target_names

INIT_INTERVAL = (-3.0, 3.0)  # where `reset_parameters(target)` fits

# Fitted init coefficients per (family configuration, target, interval), for families that opt in
# (`cache_fits`): a ResNet50 builds 49 activations and should fit once, not 49 times.
# Explicit `fit()` calls always refit.
_FIT_CACHE: dict[tuple, dict[str, torch.Tensor]] = {}


def check_count(name: str, option: str, value, minimum: int = 1) -> int:
    """An integer option (a degree, a number of hinges or atoms) as an int, or ValueError naming the
    family, the option and what is accepted (bools and non-integers are refused)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or int(value) != value or value < minimum:
        raise ValueError(f"{name}: {option} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class LearnableActivation(nn.Module):
    """Base class of learnable activations.

    Args:
        per_channel: one coefficient set per channel instead of one per module.
        num_channels: channel count, required with `per_channel=True`.
        channel_dim: which input dim holds channels. None = dim 1 for inputs with 4 or
            more dims (NCHW conv maps), the last dim otherwise (tokens, NHWC MLPs pass -1).
        learnable: False freezes coefficients at their init (paper 001 Table 5 ablation).
        inplace: accepted for timm's `act_layer(inplace=True)`; learnable activations
            never work in place.
    """

    registry_name: str = "learnable"
    has_variance_preserving_init: bool = False
    cache_fits: bool = False  # share fitted inits through _FIT_CACHE (key: `fit_cache_key`)
    refine_steps: int = 200  # L-BFGS iterations of `fit` after `fit_start` (families without a linear basis)
    fast: bool = True  # False: this module always uses `reference_forward`
    kernel: fused.Elementwise | None = None  # an elementwise family's kernel object: its fused pair, its Triton bodies
    own_triton_kernels: bool = False  # Triton kernels outside the template, of the family's own (triton_normalized.py)
    # derived for every class (`__init_subclass__`): the fused path runs Triton kernels on the Triton backend, its
    # kernel object's (`kernel.triton` names their module) or its own
    triton_kernels: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.triton_kernels = cls.own_triton_kernels or (cls.kernel is not None and cls.kernel.triton is not None)

    def __init__(
        self,
        per_channel: bool = False,
        num_channels: int | None = None,
        channel_dim: int | None = None,
        learnable: bool = True,
        inplace: bool = False,
    ):
        super().__init__()
        if per_channel and (num_channels is None or int(num_channels) < 1):
            raise ValueError(f"{self.registry_name}: per_channel=True needs num_channels >= 1, got {num_channels!r}")
        self.per_channel = bool(per_channel)
        self.num_channels = int(num_channels) if per_channel else None
        self.channel_dim = channel_dim
        self.learnable = bool(learnable)

    # ---- coefficients -------------------------------------------------------------
    def coefficient(self, values) -> nn.Parameter:
        """A coefficient parameter: shape (K,), or (num_channels, K) with per_channel."""
        t = torch.as_tensor(values, dtype=torch.get_default_dtype()).reshape(-1)
        if self.per_channel:
            t = t.unsqueeze(0).repeat(self.num_channels, 1)
        return nn.Parameter(t.clone(), requires_grad=self.learnable)

    def coef_view(self, p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """p (K,) or (C, K) shaped so that `view[..., k]` is `coef(p, k, x)`: what fused kernels take."""
        return fused.broadcast(p, x, self.channel_axis(x))

    def run_elementwise(self, kernel: fused.Elementwise, x: torch.Tensor, *coefs: torch.Tensor, **config):
        """`fused.elementwise` on this module's channel axis; coefs (K,) or (C, K) (e.g. parameters)."""
        return fused.elementwise(kernel, x, self.channel_axis(x), *coefs, **config)

    def channel_axis(self, x: torch.Tensor) -> int:
        if self.channel_dim is not None:
            return self.channel_dim % x.dim()
        return 1 if x.dim() >= 4 else x.dim() - 1

    def coef(self, p: torch.Tensor, k: int, x: torch.Tensor) -> torch.Tensor:
        """Coefficient k of parameter p, shaped to broadcast against x (a scalar tensor unless per_channel)."""
        c = p[..., k]
        if not self.per_channel:
            return c
        shape = [1] * x.dim()
        shape[self.channel_axis(x)] = -1
        return c.reshape(shape)

    def set_coefficients(self, **values: torch.Tensor) -> None:
        """Copy 1-D coefficient vectors into the named parameters (every channel alike)."""
        with torch.no_grad():
            for name, v in values.items():
                p = getattr(self, name)
                p.copy_(torch.as_tensor(v, dtype=p.dtype, device=p.device).expand_as(p))

    # ---- forward -----------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """F(x) by the fused kernel (`fast_forward`) or the plain formula (`reference_forward`).

        Under autocast the activation computes in float32 and returns x's dtype: polynomial and
        rational terms overflow float16 for |x| of a few tens, and bfloat16's 8-bit mantissa
        loses the cancellations inside P/Q and the Hermite recurrence.
        """
        if x.is_floating_point() and _autocast_enabled(x.device.type):
            with torch.autocast(x.device.type, enabled=False):
                return self._forward(x.float()).to(x.dtype)
        return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fast and fused.fast_enabled(x, self.triton_kernels):
            return self.fast_forward(x)
        return self.reference_forward(x)

    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The fused path; families without one use the plain formula."""
        return self.reference_forward(x)

    # ---- initialisation -----------------------------------------------------------
    def reset_parameters(self, init: str = "default") -> None:
        """`default`, `variance_preserving` or the name of a fit target (fitted on [-3, 3])."""
        init = str(init).lower()
        if init == "default":
            self.init_default()
        elif init == "variance_preserving":
            if not self.has_variance_preserving_init:
                raise ValueError(
                    f"{self.registry_name} has no variance-preserving init; accepted inits: {', '.join(self.inits())}"
                )
            self.init_variance_preserving()
        elif init in target_names():
            self.fit_init(init)
        else:
            raise ValueError(f"{self.registry_name}: unknown init {init!r}; accepted: {', '.join(self.inits())}")

    def fit_init(self, target: str) -> None:
        """`fit(target)` on INIT_INTERVAL, through _FIT_CACHE when the family sets `cache_fits`."""
        if not self.cache_fits or self._param_device().type == "meta":  # meta: nothing to fit, nothing to cache
            self.fit(target, INIT_INTERVAL)
            return
        key = self.fit_cache_key() + (target, INIT_INTERVAL)
        if key not in _FIT_CACHE:
            self.fit(target, INIT_INTERVAL)
            _FIT_CACHE[key] = {
                name: p.detach()[0 if self.per_channel else slice(None)].to("cpu", torch.float64).clone()
                for name, p in self.named_parameters()
            }
        self.set_coefficients(**_FIT_CACHE[key])

    def fit_cache_key(self) -> tuple:
        """What determines a fitted init besides the target: the class and its degrees/version."""
        return (type(self).__name__,)

    @classmethod
    def inits(cls) -> list[str]:
        base = ["default"] + (["variance_preserving"] if cls.has_variance_preserving_init else [])
        return base + target_names()

    def init_default(self) -> None:
        raise NotImplementedError

    def init_variance_preserving(self) -> None:
        raise NotImplementedError

    # ---- fitting ("Hermite interpolation", paper 001 Sec 3.5) ----------------------
    def basis(self, x: torch.Tensor) -> torch.Tensor | None:
        """For families linear in their coefficients: features [len(x), K] of 1-D float64 x
        such that F(x) = features @ theta, and `theta_to_coefficients` maps theta back.
        Return None for nonlinear families."""
        return None

    def theta_to_coefficients(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def fit_start(self, x: torch.Tensor, y: torch.Tensor, dy: torch.Tensor) -> None:
        """Nonlinear families: set a good starting point before refinement (default: keep current)."""

    def fit_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The scalar function being fitted, evaluated on 1-D float64 x (default: forward in eval mode;
        per-channel modules see x in every channel, as [N, C] tokens, and return the channel mean)."""
        if not self.per_channel:
            return self(x)
        c = self.num_channels
        return (
            self(x[:, None].expand(-1, c)).mean(dim=1)
            if self.channel_axis(x[:, None].expand(-1, c)) == 1
            else self(x[None, :].expand(c, -1)).mean(dim=0)
        )

    def fit(
        self,
        target: str | Callable[[torch.Tensor], torch.Tensor],
        interval: tuple[float, float] = (-3.0, 3.0),
        derivative: bool = True,
        refine_steps: int | None = None,
    ) -> FitResult:
        """Choose coefficients so that F ≈ g (and F' ≈ g' if `derivative`) on `interval` (fitting.py `fit`).

        Linear families: one least-squares solve. Others: `fit_start`, then `refine_steps` (default:
        the family's `refine_steps`) L-BFGS iterations in float64 on mean (F-g)^2 + mean (F'-g')^2.
        Every channel gets the same coefficients.
        """
        return fitting.fit(self, target, interval, derivative, refine_steps)

    def _param_device(self) -> torch.device:
        p = next(self.parameters(), None)
        return p.device if p is not None else torch.device("cpu")

    def _param_dtype(self) -> torch.dtype:
        p = next(self.parameters(), None)
        return p.dtype if p is not None else torch.get_default_dtype()

    def _objective(self, x, y, dy, derivative: bool) -> torch.Tensor:
        """What a refinement minimises (fitting.py `objective`); a family may weigh it otherwise."""
        return fitting.objective(self, x, y, dy, derivative)

    def _refine(self, x, y, dy, derivative: bool, steps: int) -> None:
        """`steps` L-BFGS iterations on `_objective` (fitting.py `refine`); a family may constrain the result."""
        fitting.refine(self, x, y, dy, derivative, steps)

    def extra_repr(self) -> str:
        parts = []
        if self.per_channel:
            parts.append(f"per_channel=True, num_channels={self.num_channels}")
        if not self.learnable:
            parts.append("learnable=False")
        return ", ".join(parts)


def _autocast_enabled(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 has no device argument
        return torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()
    except RuntimeError:  # a device type autocast does not know (meta)
        return False


def learnable_parameters(model: nn.Module) -> Iterator[nn.Parameter]:
    """Exactly the parameters of every LearnableActivation in `model` (each once)."""
    seen: set[int] = set()
    for module in model.modules():
        if isinstance(module, LearnableActivation):
            for p in module.parameters(recurse=False):
                if id(p) not in seen:
                    seen.add(id(p))
                    yield p
