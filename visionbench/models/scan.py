"""Find activations a module swap cannot reach: functional calls (`F.gelu(x)`) inside `forward`.

    >>> scan.functional_activations(model)      # [] for every supported model
    ['TransformerEncoderLayer.__init__: F.relu (torch/nn/modules/transformer.py:...)']

A swap replaces modules; an activation written as a function call in some class's code is
invisible to it. This reads the source of every class in the model (each class of its MRO
below `nn.Module`) and flags calls of, or references to, known elementwise activation
functions. Gates and attention (sigmoid, tanh, softmax) are not flagged: the papers do not
swap them. Free helper functions called by a class are not followed; the supported models'
ones (timm's window partition, padding) contain no activations.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap

from torch import nn

# Elementwise activations as functions / tensor methods (torch, F, timm.layers.activations).
FUNCTION_NAMES = frozenset(
    {
        "relu",
        "relu_",
        "relu6",
        "leaky_relu",
        "leaky_relu_",
        "gelu",
        "gelu_tanh",
        "quick_gelu",
        "silu",
        "swish",
        "mish",
        "elu",
        "elu_",
        "selu",
        "celu",
        "hardswish",
        "hard_swish",
        "hard_mish",
        "prelu",
    }
)
_MODULE_RECEIVERS = frozenset({"F", "torch", "functional"})


def _receiver(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_receiver(node.value)}.{node.attr}"
    return "<expr>"


@functools.cache
def _scan_class(cls: type) -> tuple[str, ...]:
    """Flags found in the source defined by `cls` itself (not its bases)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
        filename = inspect.getsourcefile(cls) or "?"
        first_line = inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):  # builtins, classes made at runtime
        return ()
    tree = ast.parse(source)
    found: list[str] = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        called = {id(n.func) for n in ast.walk(func) if isinstance(n, ast.Call)}
        for node in ast.walk(func):
            hit = None
            if isinstance(node, ast.Attribute) and node.attr in FUNCTION_NAMES:
                base = _receiver(node.value)
                # x.relu() is a call on a tensor; F.relu passed as a value (activation=F.relu) counts too
                if id(node) in called or base.split(".")[-1] in _MODULE_RECEIVERS:
                    hit = f"{base}.{node.attr}"
            elif isinstance(node, ast.Name) and node.id in FUNCTION_NAMES and id(node) in called:
                hit = node.id
            if hit:
                where = f"{filename.split('site-packages/')[-1]}:{first_line + node.lineno - 1}"
                found.append(f"{cls.__name__}.{func.name}: {hit} ({where})")
    return tuple(dict.fromkeys(found))


def functional_activations(model: nn.Module, skip: tuple[type, ...] = ()) -> list[str]:
    """Functional activation calls in the classes that make up `model`.

    Args:
        model: the model to scan.
        skip: classes not to scan, typically the activation modules themselves (timm's `GELU`
            wraps `F.gelu` in its forward, and that module *is* swapped).

    Returns:
        One line per finding: "Class.method: call (file:line)"; empty if there is none.
    """
    out: list[str] = []
    seen: set[type] = set()
    for module in model.modules():
        if skip and isinstance(module, skip):
            continue
        for cls in type(module).__mro__:
            if cls in seen or cls in (nn.Module, object) or not issubclass(cls, nn.Module):
                continue
            seen.add(cls)
            out.extend(_scan_class(cls))
    return list(dict.fromkeys(out))
