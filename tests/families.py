"""The learnable families' configurations that the kernel tests run, one list for all of them (test_fast_path.py,
test_triton_kernels.py, test_nonfinite.py): (registry name, constructor arguments), every built-in configuration whose
kernels differ. A family with a fused kernel must be here (test_fast_path.py checks it from the registry), and so must
one with Triton kernels (test_triton_kernels.py, from the kernel objects); a family with only a reference formula
needs no case (test_act_levels.py)."""

from __future__ import annotations

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
