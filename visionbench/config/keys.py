"""The schema's keys (config/schema.py) and the one error a config raises: every key a config may set, the dicts
whose keys are the user's own, the keys a sweep cannot vary. Below the override grammar (overrides.py), the search
space (tune_space.py) and the checks (validate.py), which all name keys."""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

from .rules import did_you_mean
from .schema import RunConfig

FREE_DICTS = ("act_options", "act_lr_mult", "model.kwargs", "factors")  # keys below these are the user's own
# keys a factor sweep cannot vary
NOT_FACTORS = (
    "recipe",
    "seed",
    "seeds",
    "seeds_max",
    "seeds_margin",
    "results_dir",
    "parallel",
    "factors",
    "trainer.loggers",
    "tune.space",
    "tune.trials",
    "tune.seed",
    "tune.defaults",
    "tune.trial",
    "tune.repeats",
    "tune.repeat",
)


class ConfigError(ValueError):
    """A recipe or override the user must fix; the message says what is accepted (`key`: the key named)."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


@functools.cache
def fields(cls: type) -> dict[str, tuple[dataclasses.Field, Any]]:
    """Each field of schema block `cls` with its resolved type: {name: (field, type)}."""
    hints = typing.get_type_hints(cls)
    return {f.name: (f, hints[f.name]) for f in dataclasses.fields(cls)}


@functools.cache
def valid_keys(cls: type = RunConfig, prefix: str = "") -> tuple[str, ...]:
    """Every key of block `cls` at `prefix`, its blocks' keys included (by default: the whole schema)."""
    out: tuple[str, ...] = ()
    for name, (_, hint) in fields(cls).items():
        out += (prefix + name,) + (valid_keys(hint, f"{prefix}{name}.") if dataclasses.is_dataclass(hint) else ())
    return out


def is_free(key: str) -> bool:
    return any(key == f or key.startswith(f + ".") for f in FREE_DICTS)


def unknown_key(key: str) -> str:
    """`unknown key 'optim.nam' (did you mean optim.name?); every key: docs/configuration.md`: one line."""
    return (
        f"unknown key {key!r}{did_you_mean(key, valid_keys(), n=3)}; every key and its default: docs/configuration.md"
    )
