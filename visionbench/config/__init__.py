"""One typed schema that checks itself, one override grammar, recipe composition (docs/configuration.md); Hydra,
OmegaConf and YAML only: what needs a registry or Lightning is checked by visionbench/sweep/preflight.py.

    cfg = config.compose(config.parse(["recipe=cifar10_vgg8", "epochs=5", "model.norm=null,group"]))
    run = config.run_config(cfg, "relu", seed=0, setting={"model.norm": "group"})   # config.yaml's dict
    optim = config.block("optim", {"name": "adamw"})                                # a partial block, typed
"""

from __future__ import annotations

from .keys import ConfigError, valid_keys
from .overrides import DEFAULT_RECIPE, Overrides, parse, parse_value, parse_variant, split_top_level
from .recipes import (
    RECIPES_DIR,
    act_options,
    compose,
    most_seeds,
    recipe_config,
    recipe_description,
    recipe_names,
    run_config,
    sweep_settings,
    typed,
)
from .schema import OPTIMIZERS, SCHEDULES, AugmentConfig, DataConfig, RunConfig, defaults, rand_augment_ops
from .validate import apply_setting, block

__all__ = [
    "DEFAULT_RECIPE",
    "OPTIMIZERS",
    "RECIPES_DIR",
    "SCHEDULES",
    "AugmentConfig",
    "ConfigError",
    "DataConfig",
    "Overrides",
    "RunConfig",
    "act_options",
    "apply_setting",
    "block",
    "compose",
    "most_seeds",
    "defaults",
    "parse",
    "parse_value",
    "parse_variant",
    "rand_augment_ops",
    "recipe_config",
    "recipe_description",
    "recipe_names",
    "run_config",
    "split_top_level",
    "sweep_settings",
    "typed",
    "valid_keys",
]
