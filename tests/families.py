"""The learnable families' configurations that the kernel tests run, one list for all of them (test_fast_path.py,
test_triton_kernels.py, test_nonfinite.py): (registry name, constructor arguments), every built-in configuration whose
kernels differ. A family with a fused kernel must be here (test_fast_path.py checks it from the registry), and so must
one with Triton kernels (test_triton_kernels.py, from the kernel objects); a family with only a reference formula
needs no case (test_act_levels.py). `assert_matches_formula`: a family's F against its definition written out.
"""

from __future__ import annotations

import numpy as np
import torch

from visionbench import activations

CASES = [
    ("rational", {"version": "A"}),
    ("rational", {"version": "B"}),
    ("rational", {"version": "C"}),
    ("rational", {"version": "D"}),
    ("rational", {"version": "A", "degrees": (3, 2)}),
    ("polyrelu", {}),
    ("hermite", {}),
    ("hermite", {"clamp": True}),
    ("hermite", {"degree": 6}),
    ("fourier", {}),
    ("tropical", {}),
    ("tropical_rational", {}),
    ("prelu", {}),
    ("swish_beta", {}),
    ("acon_c", {}),
    ("star_relu", {}),
    ("apl", {}),
    ("kaf", {}),
    ("bspline", {}),
    ("bspline", {"residual": "linear"}),
    ("bspline", {"residual": "none"}),
    ("bspline", {"order": 2}),
    ("polynorm", {}),
    ("slaf", {}),
]


def case_id(name: str, kwargs: dict) -> str:
    """The test id of a case: its name and its arguments' values, e.g. rational-A-(3, 2)."""
    return name + "".join(f"-{v}" for v in kwargs.values())


IDS = [case_id(*case) for case in CASES]


def assert_matches_formula(name: str, degree: int, formula, interval: tuple, points: int, tol: float) -> None:
    """F of family `name` of `degree` (float64, random coefficients `weight`, seeded by the degree) on a grid of the
    interval equals formula(x, a) (numpy) within tol."""
    torch.manual_seed(degree)
    act = activations.create(name, degree=degree).double()
    a = torch.randn(degree + 1, dtype=torch.float64)
    act.set_coefficients(weight=a)
    x = torch.linspace(*interval, points, dtype=torch.float64)
    np.testing.assert_allclose(act(x).detach().numpy(), formula(x.numpy(), a.numpy()), rtol=tol, atol=tol)
