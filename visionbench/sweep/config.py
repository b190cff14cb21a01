"""Recipes: find them, compose one with command-line overrides, validate, and split into runs.

    cfg = load_config(["recipe=cifar10_vgg8", "act=relu,rational[init=gelu]", "model.lsuv=false,true"])
    for setting in sweep_settings(cfg): for act in sweep_acts(cfg): for seed in range(cfg.seeds):
        run_config(cfg, act, seed, setting)

Recipes are YAML files inside the installed package (`visionbench/recipes/`, linked as the
top-level `recipes/`), composed with Hydra: each starts with `defaults: [_base, _self_]`, where
`_base` is the typed schema (`visionbench/schema.py`, in Hydra's ConfigStore, struct mode): the
one source of every key's type and default.
"""
from __future__ import annotations

import copy
import difflib
import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict

from .. import activations, schema
from . import checks
from .axes import parse_act, parse_acts, parse_value, settings, split_top_level

RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"
DEFAULT_RECIPE = "digits_vgg4"
FREE_DICTS = ("act_options", "act_lr_mult", "model.kwargs", "factors")  # keys below these are the user's own
# keys that do not change what a run computes: a resumed run may differ in these ("act_label" and "setting"
# only name what act_options and the factor keys already hold; "baseline" is the pre-`report:` key)
NOT_FINGERPRINTED = ("seeds", "seeds_max", "seeds_margin", "parallel", "results_dir", "baseline", "report", "act_label",
                     "setting", "factors", "estimate",
                     "threads", "data.root", "data.num_workers", "data.download", "snapshot_epochs")
PER_RUN = ("act", "act_label", "act_options", "act_lr_mult", "seed")  # what differs between the rows of one table
ALIASES = {"baseline": "report.baseline"}  # short command-line names
# keys a factor sweep cannot vary
NOT_FACTORS = ("recipe", "seed", "seeds", "seeds_max", "seeds_margin", "results_dir", "parallel", "factors", "estimate")


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
    """Every key with its default, from the schema dataclasses (visionbench/schema.py)."""
    return schema.defaults()


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
    return any(key == f or key.startswith(f + ".") for f in FREE_DICTS)


def load_config(args: Iterable[str]) -> DictConfig:
    """Compose `recipe=NAME` (default: the embedded digits recipe) with `key=value` overrides.

    `act=a,b[k=v]` is a sweep of activations (variants in brackets); `act.KEY=V` sets option
    KEY of every swept learnable activation that accepts it; `KEY=v1,v2` on any other key is a
    factor sweep (added to the recipe's `factors`); every other key must exist in the schema.
    Command-line values are type-checked as given (before OmegaConf would coerce 3 to "3").
    """
    recipe, acts, act_opts, overrides, factors, fixed = DEFAULT_RECIPE, None, {}, [], {}, set()
    keys = set(valid_keys())
    for arg in args:
        if "=" not in arg:
            raise ConfigError(f"expected key=value, got {arg!r}")
        key, value = arg.split("=", 1)
        key = ALIASES.get(key.lstrip("+"), key.lstrip("+"))
        if key == "recipe":
            recipe = value
        elif key == "act":
            acts = value
        elif key.startswith("act."):
            act_opts[key[4:]] = parse_value(value)
        elif _is_free(key):
            overrides.append(f"++{key}={value}")
        elif key not in keys:
            close = difflib.get_close_matches(key, keys, n=3)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise ConfigError(f"unknown key {key!r}{hint}; valid keys: {', '.join(sorted(keys))} "
                              f"(and act.<option>, act_options.<act>.<option>, act_lr_mult.<act>, model.kwargs.<arg>)")
        else:
            values = _split(key, value)
            if len(values) > 1:  # a factor: the composed value is the first, each run gets its own
                if key in NOT_FACTORS:
                    raise ConfigError(f"{key} cannot be swept (got {key}={value}); factor sweeps take any other key")
                factors[key] = [parse_value(v) for v in values]
                value = values[0]
            _check_given(key, factors[key] if len(values) > 1 else [_hydra_value(key, value)], len(values) > 1)
            fixed.add(key)
            overrides.append(f"{key}={value}")
    if recipe not in recipe_names():
        raise ConfigError(f"unknown recipe {recipe!r}; known: {', '.join(recipe_names())}")
    try:
        with initialize_config_dir(config_dir=str(RECIPES_DIR), version_base=None):
            cfg = compose(config_name=recipe, overrides=overrides)
    except HydraException as e:  # the schema refused a recipe's key or value (struct mode, typed fields)
        raise ConfigError(_composition_error(recipe, e, keys)) from None
    # the composed config stays in struct mode with its typed fields: an assignment below that names an
    # unknown key or holds a wrong type fails; only the free mappings (act_options) gain keys, in open_dict
    if acts is not None:
        cfg.act = acts
    # a key given on the command line replaces the recipe's factor of that key: one value, or new values
    merged = {k: v for k, v in (OmegaConf.to_container(cfg.factors) or {}).items() if k not in fixed}
    cfg.factors = {**merged, **factors}
    _apply_act_options(cfg, act_opts)
    return validate(cfg)


def _check_given(key: str, values: list[Any], factor: bool = False) -> None:
    """A command-line value's type and range, as given: `epochs=abc` fails here naming the key (and the
    factor setting: `batch_size=64,0` names `(setting batch_size=0)`)."""
    for value in values:
        nested: dict = {}
        d = nested
        *parents, leaf = key.split(".")
        for p in parents:
            d = d.setdefault(p, {})
        d[leaf] = value
        errors = checks.key_errors(nested, _base(), FREE_DICTS)
        if errors:
            raise ConfigError("; ".join(errors) + (f" (setting {key}={value})" if factor else ""))


def _hydra_value(key: str, text: str) -> Any:
    """The value Hydra's override grammar reads from `key=text` (`1e6` is a float there, a string in YAML)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_override(f"{key}={text}").value()
    except HydraException:  # a syntax error: Hydra reports it when composing
        return parse_value(text)


def _composition_error(recipe: str, e: Exception, keys: set[str]) -> str:
    """One line naming the key Hydra/OmegaConf refused (an unknown key gets the closest valid ones)."""
    cause: BaseException | None = e
    while cause is not None and not getattr(cause, "full_key", None):  # OmegaConf's error names the key
        cause = cause.__cause__ or cause.__context__
    cause = cause or e
    key = getattr(cause, "full_key", None)
    msg = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    if key and key not in keys:
        close = difflib.get_close_matches(key, keys, n=3)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        return f"recipe {recipe!r} sets unknown key {key!r}{hint}; valid keys: {', '.join(sorted(keys))}"
    if key:
        return f"recipe {recipe!r}: {key}: {msg}"
    return f"recipe {recipe!r}: {' '.join(str(e).split()) or type(e).__name__}"  # Hydra's message, on one line


def _split(key: str, value: str) -> list[str]:
    try:
        return split_top_level(value)
    except ValueError as e:
        raise ConfigError(f"{key}: {e}") from None


def sweep_acts(cfg: DictConfig) -> list[str]:
    """The activation labels of the sweep (`relu`, `rational[init=gelu]`), in the order given."""
    try:
        return [spec.label for spec in parse_acts(cfg.act)]
    except ValueError as e:
        raise ConfigError(str(e)) from None


def sweep_settings(cfg: DictConfig) -> list[dict]:
    """The factor settings of the sweep ([{}] without factors): every combination, in order."""
    return settings({k: list(v) for k, v in (OmegaConf.to_container(cfg.factors) or {}).items()})


def act_options(cfg: DictConfig, label: str) -> tuple[str, dict]:
    """(registry name, options) of one swept activation: the recipe's `act_options[family]` under
    the variant's bracket options."""
    spec = parse_act(label)
    return spec.family, {**dict(cfg.act_options.get(spec.family) or {}), **spec.options}


def _apply_act_options(cfg: DictConfig, options: dict) -> None:
    if not options:
        return
    families = list(dict.fromkeys(parse_act(a).family for a in sweep_acts(cfg)))
    for key, value in options.items():
        takers = [a for a in families if key in activations.accepted_kwargs(a)]
        if not takers:
            raise ConfigError(f"no activation in the sweep ({', '.join(families)}) takes option {key!r}; "
                              + "; ".join(f"{a}: {', '.join(activations.accepted_kwargs(a))}" for a in families))
        with open_dict(cfg.act_options):  # a free mapping: the user's own keys
            for a in takers:
                cfg.act_options.setdefault(a, {})
                cfg.act_options[a][key] = value


def apply_setting(cfg: DictConfig, setting: dict) -> DictConfig:
    """A copy of `cfg` with the setting's factor values in place."""
    out = copy.deepcopy(cfg)
    for key, value in setting.items():
        OmegaConf.update(out, key, value, merge=False)
    return out


def validate(cfg: DictConfig) -> DictConfig:
    """Check the sweep before any training: counts, names, every activation variant in every setting."""
    acts = sweep_acts(cfg)
    _check_factors(cfg)  # counts, ranges and names of every key: runner/checks.py, per setting below
    from ..train.optim import check_name
    from ..train.schedules import SCHEDULES

    checked: set[str] = set()
    for setting in sweep_settings(cfg):
        c = apply_setting(cfg, setting)
        where = f" (setting {', '.join(f'{k}={v}' for k, v in setting.items())})" if setting else ""
        _check_values(c, where, checked)
        try:  # the optimizer name's one check (train/optim.py)
            check_name(c.optim.name, where)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if str(c.sched.name).lower() not in SCHEDULES:
            raise ConfigError(f"unknown sched.name {c.sched.name!r}{where}; accepted: {', '.join(SCHEDULES)}")
        for label in acts:  # build each activation once: bad options fail now, not after hours of other seeds
            family, opts = act_options(c, label)
            try:
                activations.create(family, **opts)
            except (ValueError, TypeError) as e:
                raise ConfigError(f"act {label}{where}: {e}") from None
        if (c.get("finetune") or {}).get("checkpoint"):  # a missing checkpoint or train=act with a fixed act
            from ..models.finetune import check  # imports timm: only for fine-tuning recipes

            try:
                for label in acts:
                    family, opts = act_options(c, label)
                    check(c.finetune.checkpoint, c.finetune.train, family, opts)
            except (ValueError, FileNotFoundError) as e:
                raise ConfigError(str(e)) from None
    return cfg


def _check_values(c: DictConfig, where: str, checked: set[str]) -> None:
    """Every key's type and range (`checks.CHECKS`, else its default's type), then what needs several
    keys or a library: the data block, the model's norm toggles, Lightning's Trainer arguments, a
    fine-tuning checkpoint's content. Each a `ConfigError` of one line naming the key."""
    plain = OmegaConf.to_container(c, resolve=True)
    errors = checks.key_errors(plain, _base(), FREE_DICTS)
    if errors:
        raise ConfigError("; ".join(errors) + where)
    from ..data import DataConfig

    try:
        DataConfig.from_mapping(plain["data"])
    except ValueError as e:
        raise ConfigError(f"{e}{where}") from None
    _check_model(plain["model"], where)
    _check_trainer(plain["trainer"], where, checked)
    ft = plain.get("finetune") or {}
    if ft.get("checkpoint") and str(ft["checkpoint"]) != "timm" and f"ckpt:{ft['checkpoint']}" not in checked:
        from ..models.checkpoint import read_checkpoint

        checked.add(f"ckpt:{ft['checkpoint']}")
        try:  # its content, not only its name: a text file or a torn download fails here, once
            read_checkpoint(ft["checkpoint"], ema=bool(ft.get("ema")))
        except (ValueError, FileNotFoundError) as e:
            raise ConfigError(f"finetune.checkpoint: {e}{where}") from None


def _check_model(model: dict, where: str) -> None:
    from ..models.factory import MODELS, resolve

    spec = resolve(model["name"])
    for key, value, supported in (("norm", model.get("norm") == "group", "group_norm"),
                                  ("norm_free", model.get("norm_free"), "norm_free")):
        if value and not getattr(spec, supported):
            takers = ", ".join(n for n, s in MODELS.items() if getattr(s, supported))
            raise ConfigError(f"model.{key}={model.get(key)} is not supported by model.name={model['name']}; "
                              f"supported models: {takers}{where}")


def _check_trainer(t: dict, where: str, checked: set[str]) -> None:
    """Build (and drop) a Lightning Trainer with the recipe's device arguments: what Lightning refuses
    (an unknown strategy, a GPU on a CPU machine, devices=0) fails here, once, not in every run."""
    args = {k: t[k] for k in ("accelerator", "devices", "num_nodes", "strategy", "precision")}
    key = json.dumps(args, sort_keys=True, default=str)
    defaults = _base()["trainer"]
    if key in checked or all(v == defaults.get(k) for k, v in args.items()):  # the defaults work everywhere
        return
    checked.add(key)
    import logging

    import lightning as L

    quiet = [logging.getLogger(n) for n in ("lightning.pytorch", "lightning.fabric")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)
    try:
        L.Trainer(**args, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False)
    except Exception as e:  # noqa: BLE001 - Lightning raises ValueError, TypeError, MisconfigurationException
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        given = ", ".join(f"trainer.{k}={v}" for k, v in args.items() if v != defaults.get(k)) or "trainer"
        raise ConfigError(f"{given}: {first}{where}") from None
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)


def _check_factors(cfg: DictConfig) -> None:
    keys = set(valid_keys())
    for key, values in (OmegaConf.to_container(cfg.factors) or {}).items():
        if key not in keys or key in NOT_FACTORS or _is_free(key):
            close = difflib.get_close_matches(key, keys, n=3)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise ConfigError(f"factors: {key!r} is not a config key a sweep can vary{hint}")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"factors.{key} must be a non-empty list of values, got {values!r}")
        if len(set(map(repr, values))) != len(values):
            raise ConfigError(f"factors.{key} repeats a value: {values!r}")


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


# keys added to the schema after runs were written without them, with the value that reproduces what
# those runs did where it is not the new default (the DeiT epoch was the only repeated-aug rule before)
LEGACY_VALUES = {"data.augment.repeated_aug_epoch": "deit"}


def upgrade(stored: dict) -> dict:
    """A run's stored config.yaml with the keys that the schema gained since it was written: their
    legacy value (LEGACY_VALUES), else their default, which keeps what runs did before the key existed.
    A results directory from an older visionbench then resumes instead of failing on keys it never had."""
    out = copy.deepcopy(stored)

    def fill(into: dict, defaults: dict, prefix: str) -> None:
        for key, default in defaults.items():
            name = prefix + key
            if isinstance(default, dict) and not _is_free(name):
                if isinstance(into.get(key), dict):
                    fill(into[key], default, name + ".")
            elif key not in into and name not in ("defaults", "seed"):
                into[key] = LEGACY_VALUES.get(name, default)

    fill(out, _base(), "")
    return out


def shared_part(run: dict) -> dict:
    """The fingerprint without what may differ between the runs of one table (act and seed)."""
    return {k: v for k, v in fingerprint(run).items() if k not in PER_RUN}


def config_hash(run: dict) -> str:
    """A short hash of `shared_part`: runs of one table should all have the same."""
    text = json.dumps(shared_part(run), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


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
