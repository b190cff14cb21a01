"""Activation functions, fixed and learnable, looked up by name.

>>> from visionbench import activations
>>> activations.names()
>>> act = activations.create("rational", version="A", degrees=(5, 4), init="gelu")
>>> act.fit("relu", interval=(-3, 3), derivative=True)
"""

# importing a family module registers it
from . import (
    families,  # noqa: E402,F401
    fixed,  # noqa: E402,F401
)
from .base import FitResult, LearnableActivation, learnable_parameters
from .registry import (
    FAMILIES,
    accepted_kwargs,
    check,
    create,
    family,
    get_act_layer,
    get_class,
    is_learnable,
    names,
    register,
    resolve,
)
from .targets import TARGETS, get_target, target_names

__all__ = [
    "FitResult",
    "LearnableActivation",
    "learnable_parameters",
    "FAMILIES",
    "accepted_kwargs",
    "check",
    "create",
    "family",
    "get_act_layer",
    "get_class",
    "is_learnable",
    "names",
    "register",
    "resolve",
    "TARGETS",
    "get_target",
    "target_names",
]
