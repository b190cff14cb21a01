"""Activation registry: look activations up by name, build them, hand them to timm.

>>> from visionbench import activations
>>> activations.create("rational", version="B")
>>> activations.get_act_layer("hermite", degree=4)   # what timm takes as act_layer
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

from torch import nn

_REGISTRY: dict[str, Callable[..., nn.Module]] = {}
_ALIASES: dict[str, str] = {}


RESERVED = ("all",)  # words of the sweep syntax, never activation names
# a registered name is a run's folder (runs/<recipe>/<act>/seed_<k>) and a word of `act=NAME[key=value,...]`: a letter,
# digit or '_' first, then those, '.', '+' and '-' (no '/', '\\', '..', space, bracket, comma, '=' or control character)
NAME = re.compile(r"[^\W][\w.+-]*")


def register(name: str | None = None, *, aliases: tuple[str, ...] = ()):
    """Class decorator: register an activation under `name` (default: lower-cased class name)."""

    def decorator(cls):
        key = (name or cls.__name__).lower()
        bad = next((n for n in (key, *aliases) if not isinstance(n, str) or not NAME.fullmatch(n) or ".." in n), None)
        if bad is not None:
            raise ValueError(
                f"activation name {bad!r} of {cls.__module__}.{cls.__name__} cannot name a folder "
                "(runs/<recipe>/<act>/seed_<k>): use letters, digits and '_' (then also '.', '+', '-'); "
                "no '/', '\\', '..', spaces, brackets, commas or '='"
            )
        reserved = [n for n in (key, *aliases) if n in RESERVED]
        if reserved:
            raise ValueError(f"activation name {reserved[0]!r} is reserved: act=all sweeps every activation")
        taken = next((n for n in (key, *aliases) if n in _REGISTRY or n in _ALIASES), None)
        if taken:  # a plugin may not replace a built-in (nor another plugin's): name both modules
            other = _REGISTRY[_ALIASES.get(taken, taken)].__module__
            raise ValueError(
                f"activation {taken!r} of {cls.__module__}.{cls.__name__} is already registered by "
                f'{other}; give it another name (@register("my_name"))'
            )
        _REGISTRY[key] = cls
        cls.registry_name = key
        for alias in aliases:
            _ALIASES[alias] = key
        return cls

    return decorator


def snapshot() -> tuple[dict, dict]:
    """The registry's state (its names and aliases) for `restore`: what a test, or a notebook trying a module that
    registers activations, puts back afterwards. visionbench/plugins.py `snapshot` adds the loaded plugins."""
    return dict(_REGISTRY), dict(_ALIASES)


def restore(state: tuple[dict, dict]) -> None:
    """Put the registry back as `snapshot` saw it: names registered since are gone, removed ones are back."""
    registry, aliases = state
    _REGISTRY.clear()
    _REGISTRY.update(registry)
    _ALIASES.clear()
    _ALIASES.update(aliases)


@contextlib.contextmanager
def preserved() -> Iterator[None]:
    """`with registry.preserved():` whatever is registered inside is forgotten on leaving."""
    state = snapshot()
    try:
        yield
    finally:
        restore(state)


def names(include_aliases: bool = False) -> list[str]:
    """Registered activation names, sorted."""
    out = list(_REGISTRY) + (list(_ALIASES) if include_aliases else [])
    return sorted(out)


def resolve(name: str) -> str:
    """Canonical registry name of `name` (aliases resolved); ValueError listing the known names."""
    if not isinstance(name, str):
        raise ValueError(f"activation name must be a string, got {type(name).__name__}")
    key = name.lower().strip()
    key = _ALIASES.get(key, key)
    if key not in _REGISTRY:
        close = difflib.get_close_matches(key, names(include_aliases=True), n=2)
        suggestion = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise ValueError(
            f"unknown activation {name!r}{suggestion}; `visionbench list` lists the {len(names())} known ones "
            "(your own: load the module that registers it with imports=MODULE, docs/your_activation.md)"
        )
    return key


def get_class(name: str) -> type[nn.Module]:
    return _REGISTRY[resolve(name)]


def is_learnable(name: str) -> bool:
    from .base import LearnableActivation

    return issubclass(get_class(name), LearnableActivation)


# Family labels (a registered class's `family` attribute) -> heading of `visionbench list`, in listing order.
FAMILIES: dict[str, str] = {
    "fixed": "fixed",
    "gated": "scaled / gated (few parameters)",
    "piecewise": "piecewise linear / spline / kernel",
    "rational": "rational",
    "polynomial": "polynomial",
    "orthogonal": "orthogonal series",
    "tropical": "tropical",
    "other": "other learnable",
}


def family(name: str) -> str:
    """Family label of activation `name` (a key of FAMILIES): its class's `family` attribute;
    "fixed" for fixed activations (they set none), "other" for a learnable class that sets none."""
    cls = get_class(name)
    label = getattr(cls, "family", None)
    if label is None:
        return "other" if is_learnable(name) else "fixed"
    return label


def accepted_kwargs(name: str) -> list[str]:
    """Keyword arguments the activation's constructor accepts (for error messages and the CLI)."""
    out: list[str] = []
    for klass in get_class(name).__mro__:  # follow **kwargs up to the base classes
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters
        out += [
            p
            for p, v in params.items()
            if p != "self" and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD) and p not in out
        ]
        if not any(v.kind == v.VAR_KEYWORD for v in params.values()):
            break
    return out


def check(name: str, kwargs: dict[str, Any] | None = None) -> str:
    """Canonical name of `name`; ValueError for an unknown name or option (listing the accepted
    ones). What `create` checks, without building anything (config checks before training)."""
    key = resolve(name)
    unknown = sorted(set(kwargs or {}) - set(accepted_kwargs(key)))
    if unknown:
        raise ValueError(
            f"activation {key!r} does not take {', '.join(unknown)}; accepted: {', '.join(accepted_kwargs(key))}"
        )
    return key


def create(name: str, **kwargs: Any) -> nn.Module:
    """Build a fresh activation module by name. Bad names or options raise ValueError (`check`)."""
    return _REGISTRY[check(name, kwargs)](**kwargs)


def get_act_layer(spec: str | type | functools.partial | Callable | None, **kwargs: Any):
    """Something timm accepts as `act_layer`: a class, or a partial that builds a fresh module per call.

    Strings are resolved through this registry (never through timm's private name table);
    classes and partials pass through unchanged (kwargs bound onto them if given).
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        key = resolve(spec)
        create(key, **kwargs)  # validate options now, not deep inside a timm constructor
        return functools.partial(create, key, **kwargs) if kwargs else _REGISTRY[key]
    if kwargs:
        return functools.partial(spec, **kwargs)
    return spec
