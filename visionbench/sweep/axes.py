"""The axes of a sweep besides the seed: activation variants and factor settings.

    act=relu,rational[init=leaky_relu],rational[init=gelu]     # three rows, three result dirs
    act=relu,all                                               # every registered activation, relu first
    model.lsuv=false,true model.norm=null,group                 # four settings, one sub-dir each

An activation *variant* is a registry name with options in brackets; its label (the text as
written, with the family's canonical name) is its row in the report and its directory on disk.
A *factor* is a config key swept over several values; each combination of factor values is a
*setting*, whose runs live in `<recipe>/<setting label>/<act>/seed_<k>` (runner/results.py).
Paper 004 Table 2 is such a sweep: acts x {GN off, on} x {default init, LSUV}.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import yaml

from .. import activations

_OPEN, _CLOSE = "[{(", "]})"


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split `text` at `sep` outside brackets and quotes: `a[x=1,y=2],b` -> [`a[x=1,y=2]`, `b`].

    Raises:
        ValueError: unbalanced brackets or quotes.
    """
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced {ch!r} in {text!r}")
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth or quote:
        raise ValueError(f"unbalanced brackets or quotes in {text!r}")
    parts.append(text[start:])
    return [p.strip() for p in parts]


def parse_value(text: str) -> Any:
    """A YAML scalar or flow value as the config would read it (`null`, `true`, `0.5`, `[5, 4]`, `gelu`)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def format_value(value: Any) -> str:
    """The inverse of `parse_value` for labels, without spaces: `null`, `true`, `0.5`, `[5,4]`, `gelu`."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).removesuffix("...\n").strip()


@dataclass(frozen=True)
class ActSpec:
    """One activation row of a sweep.

    Attributes:
        label: the row name and directory: `rational` or `rational[init=gelu]`.
        family: the registry name (`rational`).
        options: the bracket options, laid over the recipe's `act_options[family]`.
    """

    label: str
    family: str
    options: dict = field(default_factory=dict)


def parse_act(text: str) -> ActSpec:
    """`name` or `name[key=value,...]` -> ActSpec; ValueError naming what is wrong."""
    text = text.strip()
    name, options = text, {}
    if "[" in text:
        if not text.endswith("]"):
            raise ValueError(f"activation variant {text!r}: expected name[key=value,...]")
        name, inner = text[:-1].split("[", 1)
        for item in filter(None, split_top_level(inner)):
            if "=" not in item:
                raise ValueError(f"activation variant {text!r}: expected key=value inside [...], got {item!r}")
            key, value = (s.strip() for s in item.split("=", 1))
            options[key] = parse_value(value)
        if not options:
            raise ValueError(f"activation variant {text!r}: no options inside [...]")
    family = activations.resolve(name.strip())
    if not options:
        return ActSpec(family, family)
    label = f"{family}[{','.join(f'{k}={format_value(v)}' for k, v in options.items())}]"
    return ActSpec(label, family, options)


ALL = "all"  # act=all: every registered activation (the zoo sweep), in registry order after any named first


def parse_acts(text: str) -> list[ActSpec]:
    """The comma-separated activations of a sweep, duplicates (same label) dropped, order kept;
    `all` stands for every registered name (`act=relu,all`: relu first, then the rest)."""
    try:
        specs = [spec for t in split_top_level(str(text)) if t
                 for spec in ([parse_act(n) for n in activations.names()] if t.strip() == ALL else [parse_act(t)])]
    except ValueError as e:
        raise ValueError(f"{e}; or {ALL} (every one)" if str(e).startswith("unknown activation") else str(e)) from None
    if not specs:
        raise ValueError("act is empty; give an activation name, e.g. act=relu")
    unique: dict[str, ActSpec] = {}
    for spec in specs:
        unique.setdefault(spec.label, spec)
    return list(unique.values())


def settings(factors: dict[str, list]) -> list[dict[str, Any]]:
    """Every combination of factor values, in the order given: [{} ] when there are no factors."""
    keys = list(factors)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(factors[k] for k in keys))]


def setting_label(setting: dict[str, Any]) -> str:
    """`model.lsuv=true,model.norm=group`: the directory of a setting's runs ('' without factors)."""
    label = ",".join(f"{k}={format_value(v)}" for k, v in setting.items())
    return label.replace("/", "|")  # one directory level, whatever the value


def parse_setting_label(label: str) -> dict[str, Any]:
    """The inverse of `setting_label`."""
    if not label:
        return {}
    out = {}
    for item in split_top_level(label):
        key, value = item.split("=", 1)
        out[key] = parse_value(value.replace("|", "/"))
    return out
