"""KAF, kernel activation functions (Scardapane et al., Neural Networks 2019, "Kafnets: kernel-based
non-parametric activation functions for neural networks"): a learnable mixture of Gaussians on a
fixed, uniformly spaced dictionary.

    >>> from visionbench import activations
    >>> act = activations.create("kaf")                          # D = 20 on [-3, 3], init ~ ELU
    >>> act = activations.create("kaf", dictionary_size=30, boundary=4.0, init="gelu")

Fast path: on a uniform dictionary with gamma = a / spacing^2 the D kernel values of an element
follow from two exponentials: with v the element's position in spacings from the middle atom m,
E_m = exp(-a v^2), and each step to a neighbouring atom multiplies by a ratio that itself changes
by the constant q = exp(-2 a) per step (E_{i+1} / E_i = exp(a (2 (v - i + m) - 1))). The fused
kernel walks the dictionary outwards from the middle with those ratios (2 multiplies per atom
instead of an exp), and its backward recomputes them: autograd keeps only x.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .base import LearnableActivation, check_count
from .fused import Elementwise, reduce_to
from .registry import register

BANDWIDTH_RULE = 1.0 / 6.0  # gamma * spacing^2: the paper's rule of thumb gamma = 1 / (6 spacing^2)
KRR_RIDGE = 1e-4  # epsilon of the default init's kernel ridge regression (K + eps I) alpha = ELU(d)
# Positions are clamped to this many spacings beyond the dictionary: every kernel value there is
# below exp(-a 40^2) (0 in float32), and the ratios exp(a (2 v + 1)) stay far from overflow.
CLAMP_SPACINGS = 40.0


def dictionary(size: int, boundary: float, dtype=torch.float64) -> torch.Tensor:
    """The D atoms d_i, uniformly spaced on [-boundary, boundary] (both ends included)."""
    return torch.linspace(-boundary, boundary, size, dtype=dtype)


def _position(x, *, start: float, spacing: float, size: int):
    """v = (x - d_m) / spacing, the position of x in spacings from the middle atom m, unclamped."""
    return (x - (start + (size // 2) * spacing)) * (1.0 / spacing)


def _kernel_values(x, *, start: float, spacing: float, size: int, a: float):
    """[(i, exp(-a ((x - d_i) / spacing)^2)) for every atom i], by the ratio walk of the module
    docstring, plus v = (x - d_m) / spacing, m the middle atom (the walk takes it clamped: `_position`)."""
    m = size // 2
    v = _position(x, start=start, spacing=spacing, size=size).clamp(-size - CLAMP_SPACINGS, size + CLAMP_SPACINGS)
    q = math.exp(-2.0 * a)
    e_mid = torch.exp(-a * v * v)
    up = torch.exp(a * (2.0 * v - 1.0))  # E_{m+1} / E_m
    down = q / up  # E_{m-1} / E_m
    out = [(m, e_mid)]
    e, r = e_mid, up
    for i in range(m + 1, size):
        e, r = e * r, r * q
        out.append((i, e))
    e, r = e_mid, down
    for i in range(m - 1, -1, -1):
        e, r = e * r, r * q
        out.append((i, e))
    return out, v


def _kaf_forward(x, alpha, *, start: float, spacing: float, size: int, a: float):
    terms, _ = _kernel_values(x, start=start, spacing=spacing, size=size, a=a)
    out = None
    for i, e in terms:
        t = alpha[..., i] * e
        out = t if out is None else out + t
    return (out,)


def _kaf_backward(x, g, alpha, *, start: float, spacing: float, size: int, a: float):
    """dF/dx = -(2 a / spacing) sum_i alpha_i E_i (v - (i - m)), dF/dalpha_i = E_i. The clamp of v
    only acts where every E_i is 0 in float32, so its zero derivative there is exact; the factor
    v - (i - m) is taken unclamped, as the plain formula's (x - d_i): at x = +-inf its E_i (x - d_i) is
    0 * inf = NaN there, and so is dF/dx here (tests/test_nonfinite.py)."""
    terms, _ = _kernel_values(x, start=start, spacing=spacing, size=size, a=a)
    v = _position(x, start=start, spacing=spacing, size=size)
    m, like = size // 2, alpha[..., 0]
    grads: list = [None] * size
    slope = None
    for i, e in terms:
        t = (alpha[..., i] * e) * (v - float(i - m))
        slope = t if slope is None else slope + t
        grads[i] = reduce_to(g * e, like)
    return g * slope * (-2.0 * a / spacing), torch.stack(grads, -1)


KERNEL = Elementwise("kaf", _kaf_forward, _kaf_backward, triton="visionbench.activations.triton_basis")


@register("kaf")
class KAF(LearnableActivation):
    """f(x) = sum_{i=1..D} alpha_i exp(-gamma (x - d_i)^2): kernel activation function (Scardapane
    et al. 2019, with the Gaussian kernel), learnable alpha, fixed dictionary d.

    Args:
        dictionary_size: D, the number of atoms (default 20: the authors' code, ispamm/
            kernel-activation-functions, in every framework).
        boundary: the atoms are uniformly spaced on [-boundary, boundary] (default 3.0: the
            authors' PyTorch `KAF` (their Keras one: 4.0); it matches the [-3, 3] fit interval of
            `init=<target>` and covers 99.7 % of unit-variance conv outputs).
            Far outside it f decays to 0, as in the paper.
        init: `default` = the paper's init, kernel ridge regression of ELU on the dictionary:
            (K + eps I) alpha = ELU(d), K_ij = exp(-gamma (d_i - d_j)^2), eps = 1e-4 (the authors'
            code solves the same with `init_fcn`; K is ill-conditioned, cond ~ 4e5, and eps keeps
            |alpha| <= 20 while f stays within 0.017 of ELU on [-3, 3]); or a fit target name,
            fitted by least squares on [-3, 3] (values and derivatives, see `fit`).
        **kwargs: `per_channel` (the paper: one KAF per neuron), `num_channels`, `channel_dim`,
            `learnable`, `inplace` (see `LearnableActivation`).

    gamma = 1 / (6 spacing^2), the paper's rule of thumb for the bandwidth (spacing = 2 boundary /
    (D - 1); the authors' code uses 1 / (8 spacing^2)). Parameter `weight` (..., D) holds alpha.
    """

    kernel = KERNEL

    family = "piecewise"
    cache_fits = True
    # Sup-norm errors of fit(target) on [-3, 3] with derivative matching, D = 20 on [-3, 3]:
    # measured gelu 3.0e-3 / 0.098 (largest at the interval's ends, where the mixture bends
    # towards its zero tails) and relu 0.035 / 0.496 (ReLU's kink: f' is smooth).
    fit_tolerance = {"gelu": (0.004, 0.12), "relu": (0.05, 0.55)}

    def __init__(self, dictionary_size: int = 20, boundary: float = 3.0, init: str = "default", **kwargs):
        super().__init__(**kwargs)
        self.dictionary_size = check_count("kaf", "dictionary_size", dictionary_size, 2)
        ok = isinstance(boundary, (int, float)) and not isinstance(boundary, bool) and math.isfinite(boundary)
        if not ok or boundary <= 0:
            raise ValueError(f"kaf: boundary must be a finite number > 0, got {boundary!r}")
        self.boundary = float(boundary)
        self.spacing = 2.0 * self.boundary / (self.dictionary_size - 1)
        self.gamma = BANDWIDTH_RULE / self.spacing**2
        self.weight = self.coefficient(torch.zeros(self.dictionary_size))
        self.reset_parameters(init)

    def fit_cache_key(self) -> tuple:
        return (type(self).__name__, self.dictionary_size, self.boundary)

    # ---- initialisation --------------------------------------------------------------
    def init_default(self) -> None:
        d = dictionary(self.dictionary_size, self.boundary)
        k = torch.exp(-self.gamma * (d[:, None] - d[None, :]) ** 2)
        alpha = torch.linalg.solve(k + KRR_RIDGE * torch.eye(len(d), dtype=d.dtype), F.elu(d))
        self.set_coefficients(weight=alpha)

    # ---- forward -----------------------------------------------------------------------
    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        # One atom at a time, as the formula reads (the authors' code stacks a [..., D] kernel tensor).
        atoms = dictionary(self.dictionary_size, self.boundary).tolist()
        out = None
        for i in range(self.dictionary_size):
            t = self.coef(self.weight, i, x) * torch.exp(-self.gamma * (x - atoms[i]) ** 2)
            out = t if out is None else out + t
        return out

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run_elementwise(
            KERNEL,
            x,
            self.weight,
            start=-self.boundary,
            spacing=self.spacing,
            size=self.dictionary_size,
            a=BANDWIDTH_RULE,
        )

    # ---- fitting (linear in alpha) -------------------------------------------------------
    def basis(self, x: torch.Tensor) -> torch.Tensor:
        d = dictionary(self.dictionary_size, self.boundary, x.dtype).to(x.device)
        return torch.exp(-self.gamma * (x[:, None] - d) ** 2)

    def theta_to_coefficients(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"weight": theta}

    def extra_repr(self) -> str:
        return ", ".join(
            filter(None, [f"dictionary_size={self.dictionary_size}, boundary={self.boundary:g}", super().extra_repr()])
        )
