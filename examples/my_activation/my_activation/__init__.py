"""my_act: F(x) = a·relu(x) + b·gelu(x) + c·x with (a, b, c) learnable — a visionbench plugin, worked example
of docs/your_activation.md.

    pip install -e examples/my_activation                      # an entry point: always loaded
    visionbench run act=relu,my_act seeds=3
    PYTHONPATH=examples/my_activation visionbench run imports=my_activation act=relu,my_act seeds=3   # not installed

Registering is all a plugin does: `@register` from `visionbench.activations`, a `LearnableActivation` subclass
(models: timm's `@register_model`). visionbench's registry-wide contract holds for it: it takes `inplace` (timm
calls `act_layer(inplace=True)`), `per_channel`/`num_channels`/`channel_dim`/`learnable`, and an `init`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from visionbench.activations import LearnableActivation, register

__version__ = "0.1.0"


@register("my_act")
class MixAct(LearnableActivation):
    """F(x) = a relu(x) + b gelu(x) + c x: one coefficient set per module (per channel with per_channel=True).

    Args:
        init: `default` (a, b, c = 1, 0, 0: exactly ReLU at the start), or a fit target (`gelu`, `silu`, ...):
            the least-squares (a, b, c) of F and F' on [-3, 3].
        **kwargs: `per_channel`, `num_channels`, `channel_dim`, `learnable`, `inplace` (`LearnableActivation`).
    """

    # relu and gelu are in F's span: the fits are exact (sup-norm errors of F and F' on [-3, 3])
    fit_tolerance = {"gelu": (1e-6, 1e-6), "relu": (1e-6, 1e-6)}

    def __init__(self, init: str = "default", **kwargs):
        super().__init__(**kwargs)
        self.weight = self.coefficient([1.0, 0.0, 0.0])
        self.reset_parameters(init)

    def init_default(self) -> None:
        self.set_coefficients(weight=torch.tensor([1.0, 0.0, 0.0]))

    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        return self.coef(w, 0, x) * F.relu(x) + self.coef(w, 1, x) * F.gelu(x) + self.coef(w, 2, x) * x

    def basis(self, x: torch.Tensor) -> torch.Tensor:
        """Linear in (a, b, c): `fit` solves one least-squares problem."""
        return torch.stack([F.relu(x), F.gelu(x), x], dim=1)

    def theta_to_coefficients(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"weight": theta}
