"""Recipes: find them, compose one with the command line's overrides, split it into runs, and compare
the runs' configs (fingerprint, hash, diff, upgrade of an older config.yaml).

    cfg = compose(parse(["recipe=cifar10_vgg8", "model.lsuv=false,true"]))     # checked, typed
    for setting in sweep_settings(cfg): ... run_config(cfg, "relu", seed, setting)

Recipes are YAML files inside the package (`visionbench/recipes/`, linked as the top-level
`recipes/`), composed with Hydra: each starts with `defaults: [_base, _self_]` (`_base`: every key's
default, from config/schema.py) or from a parent recipe. The composition keeps the values as written,
config/validate.py checks them all, and only then does OmegaConf type them (the schema's struct mode:
an assignment naming an unknown key or holding a wrong type fails afterwards too).
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import json
from pathlib import Path
from typing import Iterator

from hydra import compose as hydra_compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.initialize import get_gh_backup, restore_gh_from_backup
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from . import validate
from .overrides import Overrides, parse, parse_variant
from .schema import RunConfig, defaults
from .validate import ConfigError, is_free, settings

RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"
BASE_NAME = "_base"  # recipes start with `defaults: [_base, _self_]`
# keys that do not change what a run computes: a resumed run may differ in these ("act_label" and "setting"
# only name what act_options and the factor keys already hold; "baseline", "estimate" and "threads" are keys
# of older versions)
NOT_FINGERPRINTED = ("seeds", "seeds_max", "seeds_margin", "parallel", "results_dir", "baseline", "report", "act_label",
                     "setting", "factors", "estimate",
                     "threads", "data.root", "data.num_workers", "data.download", "snapshot_epochs")
PER_RUN = ("act", "act_label", "act_options", "act_lr_mult", "seed")  # what differs between the rows of one table
# keys added to the schema after runs were written without them, with the value that reproduces what
# those runs did where it is not the new default (the DeiT epoch was the only repeated-aug rule before)
LEGACY_VALUES = {"data.augment.repeated_aug_epoch": "deit"}

# the defaults as a plain mapping: composed recipes keep their values as written until they are checked
ConfigStore.instance().store(name=BASE_NAME, node=defaults())


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml") if not p.stem.startswith("_"))


def recipe_description(name: str) -> str:
    """The first comment line of a recipe file."""
    for line in (RECIPES_DIR / f"{name}.yaml").read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


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
    """The recipe with the overrides laid over it, checked (types, ranges, names of the schema) and
    typed. `ov.act_keys` (act.KEY=V) are the sweep's to apply: which activations take KEY is the
    registry's to say (visionbench/sweep/preflight.py)."""
    if ov.recipe not in recipe_names():
        raise ConfigError(f"unknown recipe {ov.recipe!r}; known: {', '.join(recipe_names())}", "recipe")
    try:
        with _recipes_dir():
            cfg = hydra_compose(config_name=ov.recipe, overrides=ov.hydra)
    except HydraException as e:  # an override Hydra's grammar cannot read
        raise ConfigError(f"recipe {ov.recipe!r}: {' '.join(str(e).split()) or type(e).__name__}") from None
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
    typed = OmegaConf.merge(OmegaConf.structured(RunConfig), plain)
    OmegaConf.set_struct(typed, True)
    return typed


def recipe_config(name: str) -> DictConfig:
    """The packaged recipe `name` as composed, without overrides."""
    return compose(parse([f"recipe={name}"]))


def sweep_settings(cfg: DictConfig) -> list[dict]:
    """The factor settings of the sweep ([{}] without factors): every combination, in order."""
    return settings({k: list(v) for k, v in (OmegaConf.to_container(cfg.factors) or {}).items()})


def apply_setting(cfg: DictConfig, setting: dict) -> DictConfig:
    """A copy of `cfg` with the setting's factor values in place."""
    out = copy.deepcopy(cfg)
    for key, value in setting.items():
        OmegaConf.update(out, key, value, merge=False)
    return out


def act_options(cfg: DictConfig, label: str) -> tuple[str, dict]:
    """(registry name, options) of one swept activation label (`rational[init=gelu]`, as the sweep's
    preflight wrote it): the recipe's `act_options[family]` under the variant's bracket options."""
    family, options = parse_variant(label)
    return family, {**dict(cfg.act_options.get(family) or {}), **options}


def run_config(cfg: DictConfig, act: str, seed: int, setting: dict | None = None) -> dict:
    """The fully resolved, plain-dict config of one run (what config.yaml stores).

    `act` is a label of the sweep; the run's `act` is its registry name, `act_label` the label,
    `act_options` the merged options, `setting` the factor values applied (and `factors` dropped).
    """
    setting = dict(setting or {})
    c = apply_setting(cfg, setting) if setting else cfg
    family, options = act_options(c, act)
    run = copy.deepcopy(OmegaConf.to_container(c, resolve=True))
    run["act"] = family
    run["act_label"] = act
    run["seed"] = int(seed)
    run["act_options"] = {family: options} if options else {}
    mult = (run.get("act_lr_mult") or {})
    run["act_lr_mult"] = {family: mult.get(act, mult[family])} if act in mult or family in mult else {}
    run.pop("factors", None)
    run["setting"] = setting
    return run


def fingerprint(run: dict) -> dict:
    """The part of a run config that determines its results (compared before resuming)."""
    out = copy.deepcopy(run)
    augment = (out.get("data") or {}).get("augment") or {}
    ignored = list(NOT_FINGERPRINTED)
    if float(augment.get("repeated_aug", 1) or 1) <= 1:  # no repeats: the epoch rule changes nothing
        ignored.append("data.augment.repeated_aug_epoch")
    for key in ignored:
        parts = key.split(".")
        d = out
        for p in parts[:-1]:
            d = d.get(p, {})
        if isinstance(d, dict):
            d.pop(parts[-1], None)
    out.pop("defaults", None)
    return out


def upgrade(stored: dict) -> dict:
    """A run's stored config.yaml with the keys that the schema gained since it was written: their
    legacy value (LEGACY_VALUES), else their default, which keeps what runs did before the key existed.
    A results directory from an older visionbench then resumes instead of failing on keys it never had."""
    out = copy.deepcopy(stored)

    def fill(into: dict, base: dict, prefix: str) -> None:
        for key, default in base.items():
            name = prefix + key
            if isinstance(default, dict) and not is_free(name):
                if isinstance(into.get(key), dict):
                    fill(into[key], default, name + ".")
            elif key not in into and name not in ("defaults", "seed"):
                into[key] = LEGACY_VALUES.get(name, default)

    fill(out, defaults(), "")
    return out


def shared_part(run: dict) -> dict:
    """The fingerprint without what may differ between the runs of one table (act and seed)."""
    return {k: v for k, v in fingerprint(run).items() if k not in PER_RUN}


def config_hash(run: dict) -> str:
    """A short hash of `shared_part`: runs of one table should all have the same."""
    text = json.dumps(shared_part(run), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def diff_configs(a: dict, b: dict, prefix: str = "", labels: tuple[str, str] = ("stored", "now")) -> list[str]:
    """Human-readable differences between two nested dicts: `path: <labels[0]> a, <labels[1]> b`."""
    out = []
    for k in sorted(set(a) | set(b)):
        path = f"{prefix}{k}"
        va, vb = a.get(k, "<absent>"), b.get(k, "<absent>")
        if isinstance(va, dict) and isinstance(vb, dict):
            out += diff_configs(va, vb, path + ".", labels)
        elif va != vb:
            out.append(f"{path}: {labels[0]} {va!r}, {labels[1]} {vb!r}")
    return out
