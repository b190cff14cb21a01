"""The configuration: one typed schema that checks itself, one override grammar, recipe composition.

    from visionbench import config
    cfg = config.compose(config.parse(["recipe=cifar10_vgg8", "epochs=5", "model.norm=null,group"]))
    run = config.run_config(cfg, "relu", seed=0, setting={"model.norm": "group"})   # config.yaml's dict
    data = config.data_config({"name": "digits", "val_split": 0.2})                 # a typed DataConfig
    optim = config.block("optim", {"name": "adamw"})                                # a partial block, completed

    schema.py      the dataclasses: every key's type, default, rule and comment (rules.py: the rule vocabulary)
    validate.py    one pass over a config, whatever it came from; `block` for partial blocks
    overrides.py   the grammar: recipe=, act=a,b[k=v], act.KEY=, baseline=, KEY=v1,v2
    recipes.py     recipes, Hydra composition, runs and settings, fingerprint/hash/diff/upgrade

A bottom layer: it imports Hydra, OmegaConf and YAML only. What needs a registry (is `act=foo`
registered, does it take option k, does the model support GroupNorm) or Lightning is checked by the
sweep before any training (visionbench/sweep/preflight.py, whose `load_config` is the whole path).
"""
from __future__ import annotations

from typing import Mapping

from omegaconf import OmegaConf

from .recipes import (RECIPES_DIR, act_options, apply_setting, compose, config_hash, diff_configs, fingerprint,
                      recipe_config, recipe_description, recipe_names, run_config, shared_part, sweep_settings,
                      upgrade)
from .overrides import DEFAULT_RECIPE, Overrides, parse, parse_value, parse_variant, split_top_level
from .schema import (DATA_ENV_VAR, DEFAULT_METRIC, HELD_OUT_METRIC, OPTIMIZERS, SCHEDULES, AugmentConfig, DataConfig, RunConfig, defaults,
                     default_metric, rand_augment_ops)
from .validate import ConfigError, block, valid_keys


def data_config(values: Mapping | None = None) -> DataConfig:
    """The `data:` block (a dict or DictConfig, possibly partial) over the defaults, checked, typed."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(DataConfig), block("data", values)))


__all__ = [
    "DATA_ENV_VAR", "DEFAULT_METRIC", "DEFAULT_RECIPE", "HELD_OUT_METRIC", "OPTIMIZERS", "RECIPES_DIR", "SCHEDULES", "AugmentConfig", "ConfigError",
    "DataConfig", "Overrides", "RunConfig", "act_options", "apply_setting", "block", "compose", "config_hash",
    "data_config", "default_metric", "defaults", "diff_configs", "fingerprint", "parse", "parse_value", "parse_variant",
    "rand_augment_ops", "recipe_config", "recipe_description", "recipe_names", "run_config", "shared_part",
    "split_top_level", "sweep_settings", "upgrade", "valid_keys",
]
