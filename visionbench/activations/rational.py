"""Safe rational activations F = P/Q (paper 004 Sec 3, App D; the rational-activations package).

    >>> from visionbench import activations
    >>> act = activations.create("rational", version="A", degrees=(5, 4))   # fitted to GELU on [-3, 3]
    >>> act = activations.create("rational", init="leaky_relu")             # fitted here, on [-3, 3]
    >>> act = activations.create("rational", init="gelu", init_source="rational_activations")  # 004's start

P(x) = sum_{i=0..m} a_i x^i over a denominator that has no real zeros by construction:

    A: Q = 1 + sum_{j=1..n} |b_j x^j|
    B: Q = 1 + |sum_{j=1..n} b_j x^j|
    C: Q = 0.1 + |sum_{j=0..n-1} b_j x^j|
    D: B, with every numerator coefficient scaled by U(0.9, 1.1) noise in training mode only.

The plain forward evaluates P and the inner sums by Horner's rule (`horner`, `denominator`); the
fused kernel (`_fused_forward`, `_fused_backward`) evaluates the same expressions and writes
dF/dx, dF/da, dF/db out analytically. Inits are least-squares fits to a classical activation (the
paper fits LeakyReLU or GELU), computed in milliseconds and cached per process, or, with
`init_source="rational_activations"`, the coefficients that package ships (`rational_published.py`):
004's runs started from those. Both agree on [-3, 3] (within 0.01) but not beyond (up to 1-2 on
[-10, 10]), where plain VGG and the norm-free ViT put many inputs.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch

from .base import LearnableActivation, solve_least_squares
from .fused import Elementwise, horner_and_derivative, reduce_to, slices
from .rational_published import published_fit
from .registry import register

VERSIONS = ("A", "B", "C", "D")
INIT_SOURCES = ("fit", "rational_activations")  # where reset_parameters takes an init's coefficients
NOISE = 0.1  # version D: +-10 % multiplicative noise on the numerator (rational-activations' default)
C_FLOOR = 0.1  # version C: Q >= 0.1 (rational-activations' "eps")
A_FLOOR = 1e-5  # version A: smallest |b_j| after a fit (see Rational._refine)


def _check_degrees(degrees) -> tuple[int, int]:
    try:
        m, n = degrees
        ok = all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 1 for d in (m, n))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"rational: degrees must be a pair of integers (m, n) with m >= 1 and n >= 1, got {degrees!r}")
    return int(m), int(n)


def _check_version(version) -> str:
    v = str(version).upper()
    if v not in VERSIONS:
        raise ValueError(f"rational: unknown version {version!r}; accepted: {', '.join(VERSIONS)}")
    return v


def _check_init_source(source) -> str:
    s = str(source).lower()
    if s not in INIT_SOURCES:
        raise ValueError(f"rational: unknown init_source {source!r}; accepted: {', '.join(INIT_SOURCES)}")
    return s


def horner(coefs: Sequence[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """coefs[0] + coefs[1] x + ... + coefs[k] x^k by Horner's rule (coefficients broadcastable to x).

    No power of x is ever formed: |x| up to ~50 stays finite and accurate in float32 for the
    default degrees, and only input-sized temporaries are allocated.
    """
    out = coefs[-1]
    for c in reversed(coefs[:-1]):
        out = torch.addcmul(c, out, x)
    return out


def denominator(version: str, b: Sequence[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Q(x) of `version` for denominator coefficients b (b_1..b_n, or b_0..b_{n-1} for C)."""
    if version == "A":
        # sum_j |b_j x^j| = |x| (|b_1| + |x| (|b_2| + ...)): the same value, in Horner form
        ax = x.abs()
        return 1.0 + horner([c.abs() for c in b], ax) * ax
    if version == "C":
        return C_FLOOR + horner(list(b), x).abs()
    return 1.0 + (horner(list(b), x) * x).abs()  # B and D


def _fused_forward(x, a, b, *, form: str, m: int, n: int):
    """The plain formula on a `coef_view` a (m + 1) and b (n); form "B" also serves version D."""
    return (horner(slices(a, m + 1), x) / denominator(form, slices(b, n), x),)


def _fused_backward(x, g, a, b, *, form: str, m: int, n: int):
    """dL/dx = g (P' - F Q') / Q, dL/da_i = sum g x^i / Q, dL/db_j = -sum g (F / Q) dQ/db_j."""
    p, dp = horner_and_derivative(slices(a, m + 1), x)
    bs = slices(b, n)
    if form == "A":  # Q = 1 + u H(u), u = |x|, H from |b|: dQ/dx = sign(x) (H + u H'), dQ/d|b_j| = u^j
        u = x.abs()
        h, dh = horner_and_derivative([c.abs() for c in bs], u)
        q, dq, base, first = 1.0 + h * u, torch.sign(x) * (h + u * dh), u, u
    elif form == "C":  # Q = 0.1 + |T|, T = sum_{j<n} b_j x^j: dQ/db_j = sign(T) x^j
        t, dt = horner_and_derivative(bs, x)
        s = torch.sign(t)
        q, dq, base, first = C_FLOOR + t.abs(), s * dt, x, s
    else:  # B, D: Q = 1 + |T|, T = x H(x): dQ/db_j = sign(T) x^j, j >= 1
        h, dh = horner_and_derivative(bs, x)
        t = h * x
        s = torch.sign(t)
        q, dq, base, first = 1.0 + t.abs(), s * (h + x * dh), x, s * x
    rq = 1.0 / q
    f = p * rq
    w = g * rq
    grad_x = w * (dp - f * dq)
    like = a[..., 0]
    grad_a, term = [], w
    for _ in range(m + 1):  # sum g x^i / Q, one power at a time
        grad_a.append(reduce_to(term, like))
        term = term * x
    grad_b, term = [], -(w * f) * first
    for _ in range(n):
        grad_b.append(reduce_to(term, like))
        term = term * base
    if form == "A":  # d|b_j|/db_j
        grad_b = [gb * torch.sign(c) for gb, c in zip(grad_b, bs)]
    return grad_x, torch.stack(grad_a, -1), torch.stack(grad_b, -1)


def _plain_rational_fit(
    x: torch.Tensor,
    y: torch.Tensor,
    dy: torch.Tensor,
    m: int,
    exps: list[int],
    use_abs: bool,
    nonneg: bool = False,
    iterations: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Least squares for P / (1 + sum_j c_j u^j), u = |x| if `use_abs` else x, matching g and g' on x.

    The rows P - g S = g and their x-derivatives are linear in (a, c); they are reweighted by
    1 / (1 + S) of the previous iterate so that they approximate the true errors
    (Sanathanan-Koerner). With `nonneg`, denominator terms that come out negative are dropped one
    at a time (a greedy active set), so that version A's |b_j| |x|^j reproduces 1 + S exactly.
    Returns (a_0..a_m, c per exponent in `exps`). Small dense solves: stacking powers is fine here.
    """
    u = x.abs() if use_abs else x
    du = torch.sign(x) if use_abs else torch.ones_like(x)
    pv = torch.stack([x**i for i in range(m + 1)], 1)
    pd = torch.stack([i * x ** max(i - 1, 0) for i in range(m + 1)], 1)
    sv = torch.stack([u**j for j in exps], 1) if exps else x.new_zeros(len(x), 0)
    sd = torch.stack([j * u ** (j - 1) * du for j in exps], 1) if exps else x.new_zeros(len(x), 0)
    a = torch.cat([torch.cat([pv, -y[:, None] * sv], 1), torch.cat([pd, -dy[:, None] * sv - y[:, None] * sd], 1)])
    rhs = torch.cat([y, dy])
    keep = list(range(len(exps)))
    while True:
        cols = list(range(m + 1)) + [m + 1 + k for k in keep]
        w = torch.ones_like(rhs)
        for _ in range(iterations):
            theta = solve_least_squares(a[:, cols] * w[:, None], rhs * w)
            q = 1.0 + sv[:, keep] @ theta[m + 1 :]
            if bool((q <= 0).any()):  # a pole inside the interval: stop reweighting by it
                break
            w = torch.cat([1.0 / q, 1.0 / q])
        den = theta[m + 1 :]
        if not nonneg or not keep or bool((den >= 0).all()):
            break
        del keep[int(den.argmin())]  # greedy active set: drop the most negative denominator term
    full = x.new_zeros(len(exps))
    full[keep] = den
    return theta[: m + 1], full


KERNEL = Elementwise("rational", _fused_forward, _fused_backward, triton="visionbench.activations.triton_polynomial")


@register("rational")
class Rational(LearnableActivation):
    """Safe rational activation P(x)/Q(x) in versions A-D.

    Args:
        degrees: (m, n), numerator and denominator degree (paper 004 Sec 3 uses (5, 4)).
        version: "A", "B", "C" or "D" (the denominator forms above; the paper uses A).
        init: a fit target ("gelu", "leaky_relu", "relu", "silu", "tanh", "sigmoid", "identity", ...)
            fitted on [-3, 3] with its derivative; "default" is "gelu" (paper 004 Table 9, 10).
        init_source: where `init`'s coefficients come from. "fit" (default): a fresh least-squares
            fit here. "rational_activations": the numbers rational-activations 0.2.0 ships for
            (version, degrees, init), as 004's runs started from (004 App G; 004 code
            `Rational(approx_func=...)`); stored for version A, degrees (5, 4), "gelu" and
            "leaky_relu" (slope 0.01), and any other combination is a ValueError. An explicit
            `fit()` (e.g. a swap's fit to the replaced activation) always fits, whatever the source.
        **kwargs: per_channel, num_channels, channel_dim, learnable, inplace (see LearnableActivation).

    Parameters `numerator` = (a_0..a_m) and `denominator` = (b_1..b_n), or (b_0..b_{n-1}) for C.
    """

    kernel = KERNEL

    family = "rational"  # `visionbench list` group (registry.family)

    cache_fits = True
    # sup-norm errors (value, derivative) of fit() on [-3, 3] with degrees (5, 4), worst version,
    # with headroom. Measured: gelu A 2.0e-3 / 1.1e-2, B and D 5.6e-4 / 5.0e-3, C 1.6e-3 / 8.7e-3;
    # relu A, B, D 3.0e-2 / 0.49, C 6.0e-2 / 0.50 (a smooth F must split ReLU's derivative jump).
    fit_tolerance = {"gelu": (2.5e-3, 1.3e-2), "relu": (7e-2, 0.55)}
    # A short refinement: the reweighted linear start is already near the least-squares optimum
    # (longer L-BFGS runs moved the sup errors by < 10 %), and 10 steps keep a fit well under 0.1 s.
    refine_steps = 10

    def __init__(
        self,
        degrees: tuple[int, int] = (5, 4),
        version: str = "A",
        init: str = "gelu",
        init_source: str = "fit",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.degrees = _check_degrees(degrees)
        self.version = _check_version(version)
        self.init_source = _check_init_source(init_source)
        m, n = self.degrees
        self.numerator = self.coefficient(torch.zeros(m + 1))
        self.denominator = self.coefficient(torch.zeros(n))
        self.reset_parameters(init)

    # ---- forward ----------------------------------------------------------------------
    def _numerator(self) -> torch.Tensor:
        a = self.numerator
        if self.version == "D" and self.training:
            # one U(0.9, 1.1) draw per coefficient (and channel) per forward, shared by all elements;
            # drawn here, outside any kernel, so both paths see the same noisy coefficients
            a = a * torch.empty_like(a).uniform_(1.0 - NOISE, 1.0 + NOISE)
        return a

    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self._numerator()
        num = [self.coef(a, i, x) for i in range(a.shape[-1])]
        den = [self.coef(self.denominator, j, x) for j in range(self.denominator.shape[-1])]
        return horner(num, x) / denominator(self.version, den, x)

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        m, n = self.degrees
        return self.run_elementwise(
            KERNEL,
            x,
            self._numerator(),
            self.denominator,
            form="B" if self.version == "D" else self.version,
            m=m,
            n=n,
        )

    # ---- initialisation and fitting ----------------------------------------------------
    def reset_parameters(self, init: str = "gelu") -> None:
        """A fit target name or "default" (= "gelu"): fitted on [-3, 3] and cached per process, or,
        with init_source "rational_activations", copied from the package's published fit."""
        key = str(init).lower()
        key = "gelu" if key == "default" else key
        if self.init_source == "rational_activations":
            fit = published_fit(self.version, self.degrees, key)  # ValueError lists what is stored
            self.set_coefficients(
                numerator=torch.tensor(fit.numerator, dtype=torch.float64),
                denominator=torch.tensor(fit.denominator, dtype=torch.float64),
            )
            return
        super().reset_parameters(key)  # ValueError lists the accepted inits

    def fit_cache_key(self) -> tuple:
        return ("rational", self.version, self.degrees)

    def init_default(self) -> None:
        self.reset_parameters("gelu")

    def fit_start(self, x: torch.Tensor, y: torch.Tensor, dy: torch.Tensor) -> None:
        """Linearised least squares for a plain rational P / (1 + S), then mapped to this version.

        Rows P - g (1 + S) = 0 and their x-derivative, reweighted by 1 / (1 + S) of the previous
        solve (Sanathanan-Koerner) so that they approximate the true errors. S is drawn from
        denominator shapes that the version represents exactly when its coefficients come out
        non-negative (A: powers of |x|; B, D: x^j with or without j = 1); C scales P and 1 + S so
        that 0.1 + |T| = 1 + S on the interval. The candidate with the smallest true error wins.
        """
        m, n = self.degrees
        if self.version == "A":
            shapes = [(range(1, n + 1), True, True), (range(2, n + 1, 2), False, True)]
        elif self.version == "C":
            shapes = [(range(1, n), False, False)]
        else:
            shapes = [(range(1, n + 1), False, False), (range(2, n + 1), False, False)]
        best, best_loss = None, float("inf")
        for exps, use_abs, nonneg in shapes:
            num, den = _plain_rational_fit(x, y, dy, m, list(exps), use_abs, nonneg)
            coefs = self._to_version(x, num, den, list(exps))
            self.set_coefficients(**coefs)
            loss = float(self._objective(x, y, dy, derivative=True).detach())
            if loss < best_loss:
                best, best_loss = coefs, loss
        self.set_coefficients(**best)

    def _refine(self, x: torch.Tensor, y: torch.Tensor, dy: torch.Tensor, derivative: bool, steps: int) -> None:
        """The base L-BFGS refinement; then, for version A, |b_j| >= 1e-5 and the numerator re-solved.

        d|b|/db = sign(b) is 0 at b = 0, so a denominator term the fit drives to 0 would never be
        trained again (and |b| near 0 is a kink that finite differences straddle). Given Q, P is
        linear, so one weighted least-squares solve for P absorbs the floor exactly.
        """
        super()._refine(x, y, dy, derivative, steps)
        if self.version != "A":
            return
        with torch.no_grad():
            self.denominator.copy_(self.denominator.abs().clamp_min(A_FLOOR))
        xg = x.clone().requires_grad_(derivative)
        b = self.denominator.detach()[0] if self.per_channel else self.denominator.detach()  # channels agree
        q = denominator("A", list(b), xg)
        feats = torch.stack([xg**i for i in range(self.degrees[0] + 1)], 1) / q[:, None]
        rows, rhs = [feats.detach()], [y]
        if derivative:
            rows.append(
                torch.stack(
                    [torch.autograd.grad(feats[:, i].sum(), xg, retain_graph=True)[0] for i in range(feats.shape[1])], 1
                )
            )
            rhs.append(dy)
        a = solve_least_squares(torch.cat(rows), torch.cat(rhs))
        self.set_coefficients(numerator=a)

    def _to_version(
        self, x: torch.Tensor, num: torch.Tensor, den: torch.Tensor, exps: list[int]
    ) -> dict[str, torch.Tensor]:
        """Coefficients of this version for the plain rational num / (1 + sum_j den_j x^j)."""
        m, n = self.degrees
        if self.version == "C":
            # P / (1 + S) = (s P) / (0.1 + T) with T = s (1 + S) - 0.1 > 0 on the interval
            q = 1.0 + sum(c * x**j for c, j in zip(den, exps)) if exps else torch.ones_like(x)
            s = max(1.0, 2 * C_FLOOR / float(q.min().clamp_min(1e-3)))
            b = x.new_zeros(n)
            b[0] = s - C_FLOOR
            for c, j in zip(den, exps):
                b[j] = s * c
            return {"numerator": s * num, "denominator": b}
        b = x.new_zeros(n)
        for c, j in zip(den, exps):
            b[j - 1] = c
        return {"numerator": num, "denominator": b}

    def extra_repr(self) -> str:
        source = f"init_source={self.init_source!r}" if self.init_source != "fit" else ""
        return ", ".join(
            filter(None, [f"degrees={self.degrees}", f"version={self.version!r}", source, super().extra_repr()])
        )
