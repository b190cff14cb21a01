"""The one override grammar of `visionbench run`, `visionbench estimate` and the Hydra app: values are read as
Hydra reads them; commas inside brackets or quotes do not split a sweep (docs/configuration.md#overrides)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from .keys import NOT_FACTORS, ConfigError, is_free, unknown_key, valid_keys

DEFAULT_RECIPE = "digits_vgg4"
# short command-line names
ALIASES = {
    "baseline": "report.baseline",
    "tune": "tune.space",
    "trials": "tune.trials",
    "tune_seed": "tune.seed",
    "tune_repeats": "tune.repeats",
}
_OPEN, _CLOSE = "[{(", "]})"
LIST_KEYS = ("imports", "trainer.loggers")  # `KEY=a,b` is one list value, not a factor sweep
TEXT_KEYS = ("tune.space",)  # `KEY=a:log[1,2],b:[3,4]` is one text value, as written


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split `text` at `sep` outside brackets and quotes: `a[x=1,y=2],b` -> [`a[x=1,y=2]`, `b`]; ValueError if
    its brackets or quotes are unbalanced."""
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


class _Loader(yaml.SafeLoader):
    """YAML as Hydra and OmegaConf read it: `1e-3`, `1.0e8`, `5e-4` are numbers (YAML 1.2), not the strings
    of YAML 1.1 (whose floats need a dot and a signed exponent), so a factor's value is the single value's."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:
     [-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def parse_value(text: str) -> Any:
    """A YAML scalar or flow value as the config would read it (`null`, `true`, `0.5`, `1e-3`, `[5, 4]`, `gelu`)."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader with one more float form
    except yaml.YAMLError:
        return text


def hydra_value(text: str) -> str:
    """`text` as Hydra's override grammar reads it: a plain value with characters beyond ASCII (a path such as
    `/data/données`, which the grammar cannot lex unquoted) is quoted; anything else is passed as written."""
    if text.isascii() or text[:1] in _OPEN or any(q in text for q in "'\"\\"):
        return text
    return f"'{text}'"


def parse_variant(text: str) -> tuple[str, dict]:
    """`name` or `name[key=value,...]` -> (name, options), as written; ValueError naming what is wrong."""
    text = text.strip()
    if "[" not in text:
        return text, {}
    if not text.endswith("]"):
        raise ValueError(f"activation variant {text!r}: expected name[key=value,...]")
    name, inner = text[:-1].split("[", 1)
    options = {}
    for item in filter(None, split_top_level(inner)):
        if "=" not in item:
            raise ValueError(f"activation variant {text!r}: expected key=value inside [...], got {item!r}")
        key, value = (s.strip() for s in item.split("=", 1))
        options[key] = parse_value(value)
    if not options:
        raise ValueError(f"activation variant {text!r}: no options inside [...]")
    return name.strip(), options


@dataclass
class Overrides:
    """A command line, parsed: what `config.compose` lays over the recipe."""

    recipe: str = DEFAULT_RECIPE
    act: str | None = None  # act=, as written
    act_keys: dict[str, Any] = field(default_factory=dict)  # act.KEY=V
    hydra: list[str] = field(default_factory=list)  # key=value for Hydra's compose (the first value of a factor)
    factors: dict[str, list] = field(default_factory=dict)  # KEY=v1,v2
    given: set[str] = field(default_factory=set)  # keys set here (a schema key replaces the recipe's factor)

    def gave(self, key: str | None) -> bool:
        """Whether the command line set `key`, a key below it or above it (act= and act.KEY= count)."""
        given = self.given | ({"act"} if self.act is not None or self.act_keys else set())
        return key is not None and any(key == g or g.startswith(key + ".") or key.startswith(g + ".") for g in given)


def parse(args: Iterable[str]) -> Overrides:
    """The command line's `key=value` pairs; ConfigError naming the key (and what is accepted)."""
    out = Overrides()
    for arg in args:
        if "=" not in arg:
            raise ConfigError(f"expected key=value, got {arg!r}")
        key, value = arg.split("=", 1)
        key = ALIASES.get(key.lstrip("+"), key.lstrip("+"))
        if key == "recipe":
            out.recipe = value
        elif key == "act":
            out.act = value
        elif key.startswith("act."):
            out.act_keys[key[4:]] = parse_value(value)
        elif is_free(key):
            out.given.add(key)
            out.hydra.append(f"++{key}={hydra_value(value)}")
        elif key not in valid_keys():
            raise ConfigError(
                unknown_key(key) + " (and act.<option>, act_options.<act>.<option>, act_lr_mult.<act>, "
                "model.kwargs.<arg>)",
                key,
            )
        elif key in TEXT_KEYS:
            out.given.add(key)
            out.hydra.append(f"{key}='{value}'" if "'" not in value else f'{key}="{value}"')
        else:
            try:
                values = split_top_level(value)
            except ValueError as e:
                raise ConfigError(f"{key}: {e}", key) from None
            if len(values) > 1 and "" in values:  # `null,group,`: not a third value (YAML would read it as null)
                raise ConfigError(
                    f"{key}={value}: an empty value between commas; separate the values with single "
                    "commas (write null for none)",
                    key,
                )
            values = [f"[{','.join(values)}]"] if key in LIST_KEYS and value[:1] not in _OPEN else values
            if len(values) > 1:  # a factor: the composed value is the first, each run gets its own
                if key in NOT_FACTORS:
                    raise ConfigError(
                        f"{key} cannot be swept (got {key}={value}); factor sweeps take any other key", key
                    )
                out.factors[key] = [parse_value(v) for v in values]
            out.given.add(key)
            out.hydra.append(f"{key}={hydra_value(values[0])}")
    return out
