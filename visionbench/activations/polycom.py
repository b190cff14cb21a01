"""PolyCom activations (paper 000 Sec 2, App D): PolyReLU and PolyNorm of order r (`degree`)."""
from __future__ import annotations

import torch

from .base import LearnableActivation
from .registry import register


def _check_degree(name: str, degree: int) -> int:
    if int(degree) != degree or degree < 1:
        raise ValueError(f"{name}: degree must be an integer >= 1, got {degree!r}")
    return int(degree)


@register("polyrelu")
class PolyReLU(LearnableActivation):
    """F(x) = sum_{i=1..r} a_i ReLU(x)^i + a_0 (paper 000 Eq. 3); init a_i = 1/r, a_0 = 0 (App D)."""

    def __init__(self, degree: int = 3, init: str = "default", **kwargs):
        super().__init__(**kwargs)
        self.degree = _check_degree("polyrelu", degree)
        self.weight = self.coefficient(torch.zeros(self.degree + 1))  # weight[i] = a_i, i = 0..r
        self.reset_parameters(init)

    def init_default(self) -> None:
        a = torch.full((self.degree + 1,), 1.0 / self.degree)
        a[0] = 0.0
        self.set_coefficients(weight=a)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = torch.relu(x)
        out = self.coef(self.weight, self.degree, x)  # Horner in ReLU(x)
        for i in range(self.degree - 1, 0, -1):
            out = out * r + self.coef(self.weight, i, x)
        return out * r + self.coef(self.weight, 0, x)

    def basis(self, x: torch.Tensor) -> torch.Tensor:
        r = torch.relu(x)
        return torch.stack([r**i for i in range(self.degree + 1)], dim=1)

    def theta_to_coefficients(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"weight": theta}

    def extra_repr(self) -> str:
        return ", ".join(filter(None, [f"degree={self.degree}", super().extra_repr()]))
