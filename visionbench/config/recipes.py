"""Recipes: find them, compose one with the command line's overrides (Hydra), split it into runs
(docs/configuration.md). A run's identity on disk (fingerprint, hash, upgrade): visionbench/results/identity.py."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from hydra.initialize import get_gh_backup, restore_gh_from_backup
from omegaconf import DictConfig, OmegaConf

from . import validate
from .keys import ConfigError
from .overrides import Overrides, parse, parse_variant
from .rules import did_you_mean
from .schema import RunConfig, defaults
from .validate import apply_setting, settings

RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"
BASE_NAME = "_base"  # recipes start with `defaults: [_base, _self_]`
# the defaults as a plain mapping: composed recipes keep their values as written until they are checked
ConfigStore.instance().store(name=BASE_NAME, node=defaults())


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml") if not p.stem.startswith("_"))


def recipe_description(name: str) -> str:
    """The first comment line of a recipe file."""
    lines = (RECIPES_DIR / f"{name}.yaml").read_text().splitlines()
    return next((line.lstrip("# ").strip() for line in lines if line.startswith("#")), "")


@contextlib.contextmanager
def _recipes_dir() -> Iterator[None]:
    """Hydra initialised on the recipes, also inside the Hydra app (whose own state comes back after)."""
    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(RECIPES_DIR), version_base=None):
            yield
    finally:
        restore_gh_from_backup(backup)


def compose(ov: Overrides) -> DictConfig:
    """The recipe with the overrides laid over it, checked and typed. `ov.act_keys` (act.KEY=V) are the sweep's
    to apply: which activations take KEY is the registry's to say (visionbench/sweep/preflight.py)."""
    if ov.recipe not in recipe_names():
        raise ConfigError(
            f"unknown recipe {ov.recipe!r}{did_you_mean(str(ov.recipe), recipe_names())}; `visionbench list` lists "
            f"the {len(recipe_names())} recipes",
            "recipe",
        )
    try:
        with _recipes_dir():
            cfg = hydra_compose(config_name=ov.recipe, overrides=ov.hydra)
    except HydraException as e:  # an override Hydra's grammar cannot read
        raise ConfigError(grammar_error(ov.recipe, e, ov.hydra)) from None
    plain = OmegaConf.to_container(cfg, resolve=True)
    if ov.act is not None:
        plain["act"] = ov.act
    if isinstance(plain.get("factors"), dict):  # else the check below names the recipe's bad `factors`
        # a key given on the command line replaces the recipe's factor of that key: one value, or new values
        plain["factors"] = {**{k: v for k, v in plain["factors"].items() if k not in ov.given}, **ov.factors}
    try:
        validate.check(plain)
    except ConfigError as e:  # a key the command line did not set is the recipe's: say so
        if ov.gave(e.key) or (e.key == "factors" and ov.factors):
            raise
        verb = " sets " if str(e).startswith("unknown key") else ": "
        raise ConfigError(f"recipe {ov.recipe!r}{verb}{e}", e.key) from None
    if ov.gave("snapshot_epochs"):
        validate._raise(validate.refusals({"snapshot_epochs": validate.snapshot_epochs_beyond}, plain))
    typed = OmegaConf.merge(OmegaConf.structured(RunConfig), plain)
    OmegaConf.set_struct(typed, True)
    return typed


GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic/"


def grammar_error(recipe: str, error: Exception, overrides: list[str]) -> str:
    """One line for an override Hydra's grammar cannot read: which one, and how to quote a value that holds `;`,
    `$(`, spaces or other characters the grammar reserves (inside the shell's quotes, Hydra's own)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    text = " ".join(str(error).split()) or type(error).__name__
    parser = OverridesParser.create()

    def unreadable(override: str) -> bool:
        try:
            parser.parse_overrides([override])
        except HydraException:
            return True
        return False

    bad = next((o for o in overrides if unreadable(o)), None)
    if bad is None or "=" not in bad:
        return f"recipe {recipe!r}: {text}"
    key, value = bad.split("=", 1)
    return (
        f"cannot read the override {bad!r}: its value holds characters Hydra's override grammar reserves "
        f"({text.split(' See ')[0]}); quote the value for Hydra inside the shell's quotes, e.g. "
        f"'{key}=\"{value}\"' ({GRAMMAR})"
    )


def recipe_config(name: str) -> DictConfig:
    """The packaged recipe `name` as composed, without overrides."""
    return compose(parse([f"recipe={name}"]))


def sweep_settings(cfg: DictConfig) -> list[dict]:
    """The factor settings of the sweep ([{}] without factors): every combination, in order."""
    return settings({k: list(v) for k, v in (OmegaConf.to_container(cfg.factors) or {}).items()})


def most_seeds(cfg: DictConfig) -> int:
    """The most seeds the sweep may train per (setting, activation): `seeds`, or `seeds_max` under seeds=auto."""
    return int(cfg.seeds_max if str(cfg.seeds) == "auto" else cfg.seeds)


def act_options(cfg: DictConfig, act: str) -> tuple[str, dict]:
    """(registry name, options) of one swept activation (a sweep/acts.py `Act`, or a label the grammar reads):
    the recipe's `act_options[family]` under its own."""
    family, options = (act.family, act.options) if hasattr(act, "family") else parse_variant(act)
    recipe = OmegaConf.to_container(cfg.act_options, resolve=True).get(family) or {}  # plain: config.yaml's
    return family, {**recipe, **options}


def run_config(cfg: DictConfig, act: str, seed: int, setting: dict | None = None) -> dict:
    """The fully resolved, plain-dict config of one run (what config.yaml stores; `typed` reads it back): `act`
    (a sweep/acts.py `Act`, or its label) gives the run's `act` (its registry name), `act_label` and merged
    `act_options`; `setting` holds the factor values applied (`factors` dropped)."""
    setting = dict(setting or {})
    c = apply_setting(cfg, setting) if setting else cfg
    family, options = act_options(c, act)
    run = copy.deepcopy(OmegaConf.to_container(c, resolve=True))
    run["act"] = family
    run["act_label"] = str(act)
    run["seed"] = int(seed)
    run["act_options"] = {family: options} if options else {}
    mult = run.get("act_lr_mult") or {}
    run["act_lr_mult"] = {family: mult.get(act, mult[family])} if act in mult or family in mult else {}
    run.pop("factors", None)
    run["setting"] = setting
    return run


def typed(run: Mapping | RunConfig) -> RunConfig:
    """A run's plain config (config.yaml's dict) as the typed `RunConfig` that train/, models/ and data/ take,
    where a run starts; keys the schema lacks (act_label, setting, threads) are the sweep's records."""
    if isinstance(run, RunConfig):
        return run
    keys = {f.name for f in dataclasses.fields(RunConfig)}
    return OmegaConf.to_object(
        OmegaConf.merge(OmegaConf.structured(RunConfig), {k: v for k, v in run.items() if k in keys})
    )
