"""Recipes: find them, compose one with command-line overrides, validate, and split into runs.

    cfg = load_config(["recipe=cifar10_vgg8", "act=relu,rational", "seeds=5", "optim.lr=0.01"])
    for act in sweep_acts(cfg): for seed in range(cfg.seeds): run_config(cfg, act, seed)

Recipes are YAML files inside the installed package (`visionbench/recipes/`, linked as the
top-level `recipes/`), composed with Hydra: each starts with `defaults: [_base, _self_]`.
"""
from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import Any, Iterable

import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from .. import activations

RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"
DEFAULT_RECIPE = "digits_vgg4"
FREE_DICTS = ("act_options", "act_lr_mult", "model.kwargs")  # keys below these are the user's own
# keys that do not change what a run computes: a resumed run may differ in these
NOT_FINGERPRINTED = ("seeds", "parallel", "results_dir", "baseline", "data.root", "data.num_workers", "data.download",
                     "snapshot_epochs")


class ConfigError(ValueError):
    """A recipe or override the user must fix; the message says what is accepted."""


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml") if not p.stem.startswith("_"))


def recipe_description(name: str) -> str:
    """The first comment line of a recipe file."""
    for line in (RECIPES_DIR / f"{name}.yaml").read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def _base() -> dict:
    return yaml.safe_load((RECIPES_DIR / "_base.yaml").read_text())


def _flat_keys(d: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in d.items():
        path = f"{prefix}{k}"
        out.append(path)
        if isinstance(v, dict) and path not in FREE_DICTS:
            out += _flat_keys(v, path + ".")
    return out


def valid_keys() -> list[str]:
    return _flat_keys(_base())


def _is_free(key: str) -> bool:
    return any(key.startswith(f + ".") for f in FREE_DICTS)


def _parse_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def load_config(args: Iterable[str]) -> DictConfig:
    """Compose `recipe=NAME` (default: the embedded digits recipe) with `key=value` overrides.

    `act=a,b` is a sweep; `act.KEY=V` sets option KEY of every swept learnable activation
    that accepts it; every other key must exist in `_base.yaml`.
    """
    recipe, acts, act_opts, overrides = DEFAULT_RECIPE, None, {}, []
    keys = set(valid_keys())
    for arg in args:
        if "=" not in arg:
            raise ConfigError(f"expected key=value, got {arg!r}")
        key, value = arg.split("=", 1)
        key = key.lstrip("+")
        if key == "recipe":
            recipe = value
        elif key == "act":
            acts = value
        elif key.startswith("act."):
            act_opts[key[4:]] = _parse_value(value)
        elif _is_free(key):
            overrides.append(f"++{key}={value}")
        elif key not in keys:
            close = difflib.get_close_matches(key, keys, n=3)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise ConfigError(f"unknown key {key!r}{hint}; valid keys: {', '.join(sorted(keys))} "
                              f"(and act.<option>, act_options.<act>.<option>, act_lr_mult.<act>, model.kwargs.<arg>)")
        else:
            overrides.append(f"{key}={value}")
    if recipe not in recipe_names():
        raise ConfigError(f"unknown recipe {recipe!r}; known: {', '.join(recipe_names())}")
    try:
        with initialize_config_dir(config_dir=str(RECIPES_DIR), version_base=None):
            cfg = compose(config_name=recipe, overrides=overrides)
    except HydraException as e:
        raise ConfigError(f"recipe {recipe!r}: {e}") from None
    unknown = sorted(set(_flat_keys(OmegaConf.to_container(cfg))) - keys)
    if unknown:
        raise ConfigError(f"recipe {recipe!r} sets unknown keys {', '.join(unknown)}; valid keys: {', '.join(sorted(keys))}")
    OmegaConf.set_struct(cfg, False)
    if acts is not None:
        cfg.act = acts
    _apply_act_options(cfg, act_opts)
    return validate(cfg)


def sweep_acts(cfg: DictConfig) -> list[str]:
    """The activations of the sweep, canonical names, in the order given."""
    names = [a.strip() for a in str(cfg.act).split(",") if a.strip()]
    if not names:
        raise ConfigError("act is empty; give an activation name, e.g. act=relu")
    try:
        return list(dict.fromkeys(activations.resolve(a) for a in names))
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _apply_act_options(cfg: DictConfig, options: dict) -> None:
    if not options:
        return
    acts = sweep_acts(cfg)
    for key, value in options.items():
        takers = [a for a in acts if key in activations.accepted_kwargs(a)]
        if not takers:
            raise ConfigError(f"no activation in the sweep ({', '.join(acts)}) takes option {key!r}; "
                              + "; ".join(f"{a}: {', '.join(activations.accepted_kwargs(a))}" for a in acts))
        for a in takers:
            cfg.act_options.setdefault(a, {})
            cfg.act_options[a][key] = value


def validate(cfg: DictConfig) -> DictConfig:
    acts = sweep_acts(cfg)
    if not isinstance(cfg.seeds, int) or cfg.seeds < 1:
        raise ConfigError(f"seeds must be a whole number >= 1 (seeds=N runs seeds 0..N-1), got {cfg.seeds!r}")
    if not isinstance(cfg.epochs, int) or cfg.epochs < 1:
        raise ConfigError(f"epochs must be a whole number >= 1, got {cfg.epochs!r}")
    if not isinstance(cfg.parallel, int) or cfg.parallel < 1:
        raise ConfigError(f"parallel must be a whole number >= 1, got {cfg.parallel!r}")
    from ..train.optim import OPTIMIZERS
    from ..train.schedules import SCHEDULES

    if str(cfg.optim.name).lower() not in OPTIMIZERS:
        raise ConfigError(f"unknown optim.name {cfg.optim.name!r}; accepted: {', '.join(OPTIMIZERS)}")
    if str(cfg.sched.name).lower() not in SCHEDULES:
        raise ConfigError(f"unknown sched.name {cfg.sched.name!r}; accepted: {', '.join(SCHEDULES)}")
    for act in acts:  # build each activation once: bad options fail now, not after hours of other seeds
        opts = dict(cfg.act_options.get(act) or {})
        try:
            activations.create(act, **opts)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"act {act}: {e}") from None
    if (cfg.get("finetune") or {}).get("checkpoint"):  # a missing checkpoint or train=act with a fixed act: fail now
        from ..models.finetune import check  # imports timm: only for fine-tuning recipes

        try:
            for act in acts:
                check(cfg.finetune.checkpoint, cfg.finetune.train, act, dict(cfg.act_options.get(act) or {}))
        except (ValueError, FileNotFoundError) as e:
            raise ConfigError(str(e)) from None
    return cfg


def run_config(cfg: DictConfig, act: str, seed: int) -> dict:
    """The fully resolved, plain-dict config of one run (what config.yaml stores)."""
    run = OmegaConf.to_container(cfg, resolve=True)
    run = copy.deepcopy(run)
    run["act"] = act
    run["seed"] = int(seed)
    run["act_options"] = {act: run["act_options"][act]} if act in (run.get("act_options") or {}) else {}
    run["act_lr_mult"] = {act: run["act_lr_mult"][act]} if act in (run.get("act_lr_mult") or {}) else {}
    return run


def fingerprint(run: dict) -> dict:
    """The part of a run config that determines its results (compared before resuming)."""
    out = copy.deepcopy(run)
    for key in NOT_FINGERPRINTED:
        parts = key.split(".")
        d = out
        for p in parts[:-1]:
            d = d.get(p, {})
        if isinstance(d, dict):
            d.pop(parts[-1], None)
    out.pop("defaults", None)
    return out


def diff_configs(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Human-readable differences between two nested dicts."""
    out = []
    for k in sorted(set(a) | set(b)):
        path = f"{prefix}{k}"
        va, vb = a.get(k, "<absent>"), b.get(k, "<absent>")
        if isinstance(va, dict) and isinstance(vb, dict):
            out += diff_configs(va, vb, path + ".")
        elif va != vb:
            out.append(f"{path}: stored {va!r}, now {vb!r}")
    return out
