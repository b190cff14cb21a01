"""The activation axis of a sweep, as the activation registry reads it.

    act=relu,rational[init=leaky_relu],rational[init=gelu]     # three rows, three result dirs
    act=relu,all                                               # every registered activation, relu first
    act=relu,rational act.version=B                            # version=B for rational only (relu takes none)

An activation *variant* is a registry name with options in brackets (the grammar is
visionbench/config/overrides.py); its label (the text as written, with the family's canonical name)
is its row in the report and its directory on disk. A factor setting is the other axis
(`config.sweep_settings`); paper 004 Table 2 is both: acts x {GN off, on} x {default init, LSUV}.
"""

from __future__ import annotations

from omegaconf import DictConfig, open_dict

from .. import activations
from ..config import ConfigError, parse_variant, split_top_level
from ..results.settings import format_value

ALL = "all"  # act=all: every registered activation (the zoo sweep), in registry order after any named first


class Act(str):
    """One swept activation, parsed once (`parse_act`): the label (`rational[init=gelu]`: the row and
    directory name, with the registry's canonical name) is the string itself; `.family` its registry
    name, `.options` its bracket options. What run_config, the preflight and the run take."""

    family: str
    options: dict

    def __new__(cls, label: str, family: str | None = None, options: dict | None = None) -> Act:
        if isinstance(label, Act) and family is None:
            return label
        self = super().__new__(cls, label)
        self.family, self.options = (family, dict(options or {})) if family else parse_variant(label)
        return self

    @property
    def label(self) -> str:
        return str(self)

    def __reduce__(self):  # across the parallel=K workers' pickles
        return Act, (str(self), self.family, self.options)


ActSpec = Act  # one activation row of a sweep


def parse_act(text: str) -> Act:
    """`name` or `name[key=value,...]` -> its `Act`, parsed once (the registry's canonical name in the
    label); ValueError naming what is wrong."""
    name, options = parse_variant(text)
    family = activations.resolve(name)
    if not options:
        return Act(family, family)
    return Act(f"{family}[{','.join(f'{k}={format_value(v)}' for k, v in options.items())}]", family, options)


def parse_acts(text: str) -> list[ActSpec]:
    """The comma-separated activations of a sweep, in the order given; `all` stands for every registered
    name (`act=relu,all`: relu first, then the rest: the names `all` repeats are dropped). ValueError for an
    empty item (`relu,,gelu`), a name given twice (`relu,relu`) and options on `all` (`all[init=gelu]`:
    its activations take different options; `act.init=gelu` sets it for every one that takes it)."""
    items = split_top_level(str(text))
    if not any(items):
        raise ValueError("act is empty; give an activation name, e.g. act=relu")
    if "" in items:
        raise ValueError(f"act={text}: an empty name between commas; separate the activations with single commas")
    given: list[Act] = []
    for t in items:
        if t.split("[", 1)[0].strip() == ALL and t != ALL:
            options = " ".join(f"act.{k}={format_value(v)}" for k, v in parse_variant(t)[1].items())
            raise ValueError(
                f"act={t}: options cannot be given to {ALL} (its activations take different options); "
                f"write act={ALL} {options} (every activation that takes an option gets it)"
            )
        if t != ALL:
            try:
                given.append(parse_act(t))
            except ValueError as e:
                unknown = str(e).startswith("unknown activation")
                raise ValueError(f"{e}; or {ALL} (every one)" if unknown else str(e)) from None
    labels = [s.label for s in given] + [ALL] * items.count(ALL)
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise ValueError(f"act={text} lists {', '.join(twice)} more than once; give each activation once")
    rest = [x for x in map(parse_act, activations.names()) if x.label not in labels] if ALL in items else []
    queue = iter(given)
    return [spec for t in items for spec in (rest if t == ALL else [next(queue)])]


def sweep_acts(cfg: DictConfig) -> list[Act]:
    """The activations of the sweep (labels `relu`, `rational[init=gelu]`, each with its family and
    options: what run_config, the preflight and the run take), in the order given."""
    try:
        return parse_acts(cfg.act)
    except ValueError as e:
        raise ConfigError(str(e), "act") from None


def apply_act_keys(cfg: DictConfig, options: dict, strict: bool = True) -> None:
    """`act.KEY=V`: option KEY of every swept activation that takes it, into `act_options`; ConfigError
    when none does (`strict`: a Hydra job holds one activation of a sweep checked as a whole)."""
    families = list(dict.fromkeys(a.family for a in sweep_acts(cfg))) if options else []
    for key, value in options.items():
        takers = [a for a in families if key in activations.accepted_kwargs(a)]
        if not takers and strict:
            raise ConfigError(
                f"no activation in the sweep ({', '.join(families)}) takes option {key!r}; "
                + "; ".join(f"{a}: {', '.join(activations.accepted_kwargs(a))}" for a in families)
            )
        with open_dict(cfg.act_options):  # a free mapping: the user's own keys
            for a in takers:
                cfg.act_options.setdefault(a, {})
                cfg.act_options[a][key] = value
