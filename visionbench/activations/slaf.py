"""SLAF, self-learnable activation (paper 003 Sec 2.1): a Taylor series on batch-normalised powers.

    >>> from visionbench import activations
    >>> act = activations.create("slaf", degree=2)          # statistics sized on the first batch
    >>> loss = task_loss + cfg.loss.act_l2 * act.penalty()  # the paper's L2 on the coefficients (Sec 4)

Fused kernels (`fused.py`): in eval the statistics fold into a polynomial's coefficients (PolyReLU's
Horner kernel without the ReLU); in training the per-channel statistics are reductions inside the
kernel, and the backward is BatchNorm's, once per power: with z_i = (x^i - m_i) r_i,
dL/dx = sum_i i x^(i-1) a_i r_i (g - mean(g) - z_i mean(g z_i)), means per channel.
"""

from __future__ import annotations

import math

import torch

from . import fused
from .base import FitResult, LearnableActivation, SurrogateFit, check_count
from .fused import reduce_to
from .polycom import run_poly
from .registry import register


def _normal_moment(n: int) -> float:
    """E[x^n] for x ~ N(0, 1): (n - 1)!! for even n, 0 for odd n."""
    return float(math.prod(range(n - 1, 0, -2))) if n % 2 == 0 else 0.0


def _normal_half_moment(n: int) -> float:
    """E[x^n 1{x > 0}] for x ~ N(0, 1) = 2^(n/2 - 1) Gamma((n + 1)/2) / sqrt(pi)."""
    return 2.0 ** (n / 2 - 1) * math.gamma((n + 1) / 2) / math.sqrt(math.pi)


def normal_power_stats(degree: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance of x^i, i = 1..degree, for x ~ N(0, 1) (float64, shape (degree,))."""
    mean = [_normal_moment(i) for i in range(1, degree + 1)]
    var = [_normal_moment(2 * i) - m * m for i, m in zip(range(1, degree + 1), mean)]
    return torch.tensor(mean, dtype=torch.float64), torch.tensor(var, dtype=torch.float64)


def _reduced_dims(x: torch.Tensor, dim: int) -> list[int]:
    return [d for d in range(x.dim()) if d != dim % x.dim()]


def _train_forward(x, a, *, degree: int, eps: float, dim: int):
    """The training forward of `SLAF.reference_forward`, returning each power's batch (mean, var)."""
    reduce = _reduced_dims(x, dim)
    out, p, stats = a[..., 0], x, []
    for i in range(1, degree + 1):
        if i > 1:
            p = p * x
        var, mean = torch.var_mean(p, dim=reduce, correction=0, keepdim=True)
        out = out + a[..., i] * (p - mean) * torch.rsqrt(var + eps)
        stats += [mean, var]
    return (out, *stats)


def _train_backward(x, g, a, *stats, degree: int, eps: float, dim: int):
    reduce = _reduced_dims(x, dim)
    like = a[..., 0]
    g_mean = g.mean(dim=reduce, keepdim=True)
    grads, grad_x, prev, p = [reduce_to(g, like)], None, None, x
    for i in range(1, degree + 1):
        if i > 1:
            prev, p = p, p * x  # x^(i-1), x^i
        mean, var = stats[2 * i - 2], stats[2 * i - 1]
        r = torch.rsqrt(var + eps)
        z = (p - mean) * r
        gz = (g * z).mean(dim=reduce, keepdim=True)  # per channel
        grads.append(reduce_to(gz * (x.numel() / x.shape[dim]), like))
        term = (a[..., i] * r * i) * (g - g_mean - z * gz)
        term = term if prev is None else term * prev
        grad_x = term if grad_x is None else grad_x + term
    return grad_x, torch.stack(grads, -1)


@register("slaf")
class SLAF(SurrogateFit, LearnableActivation):
    """F(x) = a_0 + sum_{i=1..k} a_i x̂_i, x̂_i = (x^i - mean(x^i)) / sqrt(var(x^i) + eps) (paper 003 Eq. 4-5).

    Statistics are per channel (Sec 2.1: "for CNN, x_i's would denote a channel"), exactly as in
    BatchNorm: over every dim but the channel dim, from the batch while training (biased
    variance, gradients flow through them) and from running averages in eval, updated as
    running = (1 - momentum) running + momentum batch (unbiased variance for the running one).
    The i = 0 term is degenerate (x^0 has variance 0), so, as in the authors' code, a_0 is a
    plain constant and only the powers 1..k are normalised.

    Buffers `running_mean`, `running_var` have shape (C, k). They start at the moments of x^i for
    x ~ N(0, 1). Without `num_channels` they are (1, k) until the first training batch gives C
    (until then eval broadcasts them to any channel count); `load_state_dict` adopts the saved C.

    Args:
        degree: k (default 2, the paper's CIFAR-10 ResNet setting, Table 5).
        init: `default`, or a fit target name (see `fit`). The paper does not give one (its code
            draws a ~ N(0, 1)); the default here is ReLU-like: the L2(N(0, 1)) projection of ReLU
            on the basis, a = (0.399, 0.5, 0.282) for k = 2.
        momentum: running-average factor, BatchNorm's convention. Default 0.01, the authors' value
            (torch BatchNorm's 0.1 settles 10x sooner: pass it for short runs). Paper 003 only says the statistics are
            "exponentially averaged ... similar to batch normalization" (Sec 2.1); the authors'
            code uses 0.01 (003 links mohit1997/SLAF; the code index has it as mohit1997/PAF, whose
            README names SLAF and 003's arXiv id): every `taylor(..., decay=0.99)` variant there,
            and its CIFAR-10 ResNet (`Experiments/Cifar10/resnet_model.py`, 003 Table 5's
            experiment) calls `taylor_batch_norm.taylor` with that default, updating
            pop = 0.99 pop + 0.01 batch.
        eps: added to the variances.
        **kwargs: `per_channel`, `num_channels` (also sizes the statistics when not per channel),
            `channel_dim`, `learnable`, `inplace` (see `LearnableActivation`).

    Parameters: `weight` (..., k + 1) holds a_0..a_k.
    """

    own_triton_kernels = True  # triton_normalized.py

    family = "polynomial"  # `visionbench list` group (registry.family)

    # Sup-norm errors of `fit(target)` on [-3, 3] with derivative matching, k = 2: measured
    # 0.213 / 0.397 (gelu) and 0.340 / 0.500 (relu) — the same as for cubics, since g(x) - x/2
    # is even for both targets.
    fit_tolerance = {"gelu": (0.25, 0.45), "relu": (0.4, 0.55)}

    def __init__(self, degree: int = 2, init: str = "default", momentum: float = 0.01, eps: float = 1e-5, **kwargs):
        stat_channels = kwargs.get("num_channels")
        super().__init__(**kwargs)
        self.degree = check_count("slaf", "degree", degree)
        if not 0.0 <= float(momentum) <= 1.0:
            raise ValueError(f"slaf: momentum must be in [0, 1], got {momentum!r}")
        if stat_channels is not None and int(stat_channels) < 1:
            raise ValueError(f"slaf: num_channels must be >= 1, got {stat_channels!r}")
        self.momentum, self.eps = float(momentum), float(eps)
        self.stat_channels = None if stat_channels is None else int(stat_channels)  # None = lazy
        self.weight = self.coefficient(torch.zeros(self.degree + 1))
        rows = self.stat_channels or 1
        self.register_buffer("running_mean", torch.zeros(rows, self.degree))
        self.register_buffer("running_var", torch.ones(rows, self.degree))
        self.reset_running_stats()
        self.reset_parameters(init)

    # ---- statistics --------------------------------------------------------------------
    def reset_running_stats(self) -> None:
        """Running statistics := the moments of x^i for x ~ N(0, 1) (every channel alike)."""
        mean, var = normal_power_stats(self.degree)
        with torch.no_grad():
            self.running_mean.copy_(mean.to(self.running_mean).expand_as(self.running_mean))
            self.running_var.copy_(var.to(self.running_var).expand_as(self.running_var))

    def _check_channels(self, channels: int, materialise: bool) -> None:
        rows = self.running_mean.shape[0]
        if rows == channels:
            return
        if rows == 1 and self.stat_channels is None:
            if materialise:  # the first training batch fixes C; start each channel from the shared stats
                self.running_mean = self.running_mean.expand(channels, -1).clone()
                self.running_var = self.running_var.expand(channels, -1).clone()
            return
        raise ValueError(
            f"slaf: statistics are for {rows} channels, input has {channels} "
            f"on dim {self.channel_dim if self.channel_dim is not None else 'auto'}"
        )

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        # A lazily sized module adopts the channel count of the statistics it is given.
        if self.stat_channels is None:
            for name in ("running_mean", "running_var"):
                saved, mine = state_dict.get(prefix + name), getattr(self, name)
                if saved is not None and saved.dim() == 2 and saved.shape != mine.shape:
                    setattr(self, name, torch.empty(saved.shape, dtype=mine.dtype, device=mine.device))
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def _per_channel(self, t: torch.Tensor, x: torch.Tensor, dim: int) -> torch.Tensor:
        shape = [1] * x.dim()
        shape[dim] = -1
        return t.to(x.dtype).reshape(shape)

    # ---- forward -----------------------------------------------------------------------
    def _eval_polynomial(self, x: torch.Tensor, dim: int) -> list[torch.Tensor]:
        """Fixed statistics make F a polynomial in x: its coefficients c_0..c_k, per channel."""
        self._check_channels(x.shape[dim], materialise=False)
        scale = [
            self.coef(self.weight, i + 1, x) * self._per_channel(torch.rsqrt(self.running_var[:, i] + self.eps), x, dim)
            for i in range(self.degree)
        ]
        shift = self.coef(self.weight, 0, x) - sum(
            s * self._per_channel(self.running_mean[:, i], x, dim) for i, s in enumerate(scale)
        )
        return [shift] + scale

    def _check_batch(self, x: torch.Tensor, dim: int) -> int:
        n = x.numel() // max(x.shape[dim], 1)
        if n < 2:
            raise ValueError(
                f"slaf: training needs more than one value per channel, got input of shape "
                f"{tuple(x.shape)} with channels on dim {dim}"
            )
        self._check_channels(x.shape[dim], materialise=True)
        return n

    def _update_running(self, means: list[torch.Tensor], variances: list[torch.Tensor], n: int) -> None:
        with torch.no_grad():
            m = self.momentum
            batch_mean = torch.stack([t.detach().reshape(-1) for t in means], dim=1).to(self.running_mean)
            batch_var = torch.stack([t.detach().reshape(-1) for t in variances], dim=1).to(self.running_var)
            batch_var = batch_var * (n / (n - 1))  # unbiased, as BatchNorm's running variance
            self.running_mean.mul_(1 - m).add_(m * batch_mean)
            self.running_var.mul_(1 - m).add_(m * batch_var)

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        dim = self.channel_axis(x)
        if not self.training:
            coefs = self._eval_polynomial(x, dim)  # each a scalar or one value per channel
            c = torch.stack([t.reshape(-1).expand(coefs[0].numel()) for t in coefs], -1)
            return run_poly(self, x, c[0] if c.shape[0] == 1 else c, relu=False)
        n = self._check_batch(x, dim)
        if fused.backend_for(x) == "triton":  # the kernels update the running averages themselves
            from . import triton_normalized

            out, *_ = triton_normalized.slaf_train(
                x, dim, self.weight, self.eps, self.running_mean, self.running_var, self.momentum
            )
            return out
        kernel = fused.Kernel(
            "slaf", _train_forward, _train_backward, degree=self.degree, eps=self.eps, dim=dim - x.dim()
        )
        out, *stats = fused.apply(kernel, x, self.coef_view(self.weight, x))
        self._update_running(stats[0::2], stats[1::2], n)
        return out

    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        dim = self.channel_axis(x)
        k = self.degree
        if not self.training:
            coefs = self._eval_polynomial(x, dim)
            out = coefs[k]
            for i in range(k - 1, 0, -1):
                out = out * x + coefs[i]
            return out * x + coefs[0]

        n = self._check_batch(x, dim)
        reduce = [d for d in range(x.dim()) if d != dim]
        out = self.coef(self.weight, 0, x)
        p, means, variances = x, [], []
        for i in range(1, k + 1):
            if i > 1:
                p = p * x
            var, mean = torch.var_mean(p, dim=reduce, correction=0, keepdim=True)
            out = out + self.coef(self.weight, i, x) * (p - mean) * torch.rsqrt(var + self.eps)
            means.append(mean)
            variances.append(var)
        self._update_running(means, variances, n)
        return out

    # ---- regularisation (paper 003 Sec 4: L2 on the activation coefficients) ------------
    def penalty(self) -> torch.Tensor:
        """sum_{i>=1} a_i^2 over every coefficient set; a_0 is a bias and, as in the authors'
        code, is not penalised. The trainer adds `loss.act_l2 * penalty()` to the loss."""
        return self.weight[..., 1:].square().sum()

    # ---- initialisation and fitting ------------------------------------------------------
    def _normal_basis_stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        mean, var = normal_power_stats(self.degree)
        return mean, (var + self.eps).sqrt()

    def init_default(self) -> None:
        # Normal equations of min E[(F(x) - ReLU(x))^2], x ~ N(0, 1), in closed form: the x̂_i are
        # centred, so a_0 = E[ReLU] and G a = b with G_ij = E[x̂_i x̂_j], b_i = E[ReLU x̂_i].
        k = self.degree
        mean, std = self._normal_basis_stats()
        idx = range(1, k + 1)
        cross = torch.tensor([[_normal_moment(i + j) for j in idx] for i in idx], dtype=torch.float64)
        gram = (cross - mean[:, None] * mean[None, :]) / (std[:, None] * std[None, :])
        half = torch.tensor([_normal_half_moment(i + 1) for i in idx], dtype=torch.float64)
        rhs = (half - mean * _normal_half_moment(1)) / std
        a = torch.linalg.solve(gram, rhs)
        self.set_coefficients(weight=torch.cat([a.new_tensor([_normal_half_moment(1)]), a]))

    def fit(
        self,
        target,
        interval: tuple[float, float] = (-3.0, 3.0),
        derivative: bool = True,
        refine_steps: int | None = None,
    ) -> FitResult:
        """Fit the eval-mode function for N(0, 1) input: the running statistics are first reset to
        the moments of x^i under N(0, 1) (`reset_running_stats`), then F ≈ g is one least-squares
        solve (see `LearnableActivation.fit`). In training the batch statistics take over."""
        self.reset_running_stats()
        return super().fit(target, interval, derivative, refine_steps)

    def basis(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = (t.to(x) for t in self._normal_basis_stats())
        cols = [torch.ones_like(x)]
        p = x
        for i in range(self.degree):
            if i > 0:
                p = p * x
            cols.append((p - mean[i]) / std[i])
        return torch.stack(cols, dim=1)

    def extra_repr(self) -> str:
        stats = f"stat_channels={self.stat_channels or 'lazy'}"
        return ", ".join(
            filter(None, [f"degree={self.degree}", f"momentum={self.momentum}", stats, super().extra_repr()])
        )
