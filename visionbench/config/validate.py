"""One pass that checks a config, from a recipe, the command line, the Hydra app or a partial `block`: each
key by its field's rule, as written (before OmegaConf turns 3 into "3"), then CROSS, then every factor setting."""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable, Mapping
from typing import Any

from omegaconf import OmegaConf

from . import tune_space
from .keys import NOT_FACTORS, ConfigError, fields, is_free, unknown_key, valid_keys
from .rules import check_of, did_you_mean, is_int
from .schema import TV_MAGNITUDE_MAX, AugmentConfig, RunConfig, defaults, rand_augment_ops


def _augment(a: dict) -> list[tuple[str, str]]:
    out, key = [], "data.augment."
    if a.get("crop_pad") and a.get("scale") is not None:
        # ConvNeXt/DeiT swap random-resized-crop for a padded crop at <= 32 px: one or the other
        out.append((key + "scale", f"{key}crop_pad and {key}scale are alternatives; set only one"))
    scale = a.get("scale")
    if scale is not None and scale[0] > scale[1]:
        out.append((key + "scale", f"{key}scale must be [min, max] with 0 < min <= max <= 1, got {scale!r}"))
    if (
        a.get("auto_augment")
        and a.get("auto_augment_impl") == "torchvision"
        and not rand_augment_ops(a["auto_augment"])
    ):
        out.append(
            (
                key + "auto_augment",
                f"{key}auto_augment {a['auto_augment']!r} with auto_augment_impl torchvision "
                f"must be rand[-nN][-mM] (N >= 0 ops, magnitude 0 <= M <= {TV_MAGNITUDE_MAX})",
            )
        )
    if a.get("repeated_aug_epoch") == "expand" and not float(a.get("repeated_aug", 1)).is_integer():
        out.append(
            (
                key + "repeated_aug",
                f"{key}repeated_aug must be an integer with repeated_aug_epoch=expand (each "
                f"image that many times), got {a['repeated_aug']!r}; fractional: deit",
            )
        )
    return out


def _accumulate(c: dict) -> str | None:
    """`trainer.accumulate_grad_batches` must divide the per-device batch: the recipe's global batch is
    kept (each step loads batch_size / (processes x accumulate) images, train/run.py `step_batch`)."""
    t, batch = c.get("trainer") or {}, c.get("batch_size")
    accumulate, devices, nodes = t.get("accumulate_grad_batches", 1), t.get("devices", 1), t.get("num_nodes", 1)
    if not (is_int(batch) and is_int(accumulate)) or accumulate <= 1:
        return None
    count = len(devices) if isinstance(devices, list) else devices
    # "auto", -1, "0,1": train/run.py checks again once Lightning knows the world size
    processes = count * nodes if is_int(count) and count >= 1 and is_int(nodes) and nodes >= 1 else 1
    per_device = max(1, batch // processes)
    if per_device % accumulate == 0:
        return None
    return (
        f"trainer.accumulate_grad_batches must divide the per-device batch "
        f"{per_device} (batch_size={batch} over {processes} process(es)), got {accumulate}"
    )


def _seeds_margin(c: dict) -> str | None:
    """`seeds_margin` is a rule of `seeds=auto` only: with a fixed number of seeds it would be ignored."""
    if c.get("seeds_margin") is None or c.get("seeds") == "auto":
        return None
    return (
        f"seeds_margin applies only with seeds=auto (equivalence stops a round), got "
        f"seeds={c.get('seeds')!r}; add seeds=auto or drop seeds_margin (report --margin M tests equivalence "
        "after a fixed number of seeds)"
    )


def _seeds_max(c: dict) -> str | None:
    """`seeds_max` is a rule of `seeds=auto` only (its last round): set away from its default with a fixed number of
    seeds, it would be ignored without a word."""
    default = fields(RunConfig)["seeds_max"][0].default
    if c.get("seeds_max") in (None, default) or c.get("seeds") == "auto":
        return None
    return (
        f"seeds_max applies only with seeds=auto (the most seeds its rounds may train), got "
        f"seeds={c.get('seeds')!r} with seeds_max={c.get('seeds_max')!r}; add seeds=auto, or drop seeds_max "
        f"(seeds=N trains seeds 0..N-1)"
    )


def snapshot_epochs_beyond(c: dict) -> str | None:
    """Entries of `snapshot_epochs` past the sweep's last epoch (the largest `epochs` of its settings); checked
    only for a list given on the command line (a recipe's, kept under a shorter `epochs=`, skips them)."""
    epochs = [v for v in (c.get("factors") or {}).get("epochs") or [c.get("epochs")] if is_int(v)]
    snaps = c.get("snapshot_epochs")
    late = [e for e in snaps if is_int(e) and e > max(epochs)] if epochs and isinstance(snaps, list) else []
    return (
        f"snapshot_epochs={snaps} names epoch(s) {', '.join(map(str, late))} beyond epochs={max(epochs)}; each "
        f"entry must be 0 (the init), an epoch from 1 to {max(epochs)}, or -1 (the last)"
        if late
        else None
    )


# a rule of one key that needs others to tell: the key -> its message for a config it refuses (None: accepted)
Rule = Callable[[dict], str | None]
RUN_RULES: dict[str, Rule] = {
    "trainer.accumulate_grad_batches": _accumulate,
    "seeds_margin": _seeds_margin,
    "seeds_max": _seeds_max,
}


def refusals(rules: Mapping[str, Rule], c: dict) -> list[tuple[str, str]]:
    """(key, message) of each of `rules` that refuses the plain config `c`, in the rules' order."""
    return [(key, message) for key, rule in rules.items() if (message := rule(c))]


def _tune(c: dict) -> list[tuple[str, str]]:
    """`tune.space`: a space that can be drawn from (config/tune_space.py `parse_space`), whose bounds each pass their key's
    own rule, on a sweep that selects on a held-out validation split; no factors or noise= design beside it."""
    t = c.get("tune") or {}
    if t.get("trial") is not None:
        return [
            (
                "tune.trial",
                f"tune.trial is set per run by the sweep (a trial's index, best or defaults), got {t['trial']!r}; "
                "declare a design with tune=SPACE trials=B",
            )
        ]
    if t.get("repeat") is not None:
        return [
            (
                "tune.repeat",
                f"tune.repeat is set per run by the sweep (a procedure's index), got {t['repeat']!r}; "
                "declare R procedures with tune_repeats=R",
            )
        ]
    if t.get("space") is None:
        return []
    if int(t.get("repeats") or 1) > 1 and str(c.get("seeds")) == "auto":
        return [
            (
                "tune.repeats",
                "tune_repeats > 1 retrains each procedure's selection with a fixed number of fresh "
                "seeds; seeds=auto is not supported with it: give seeds=S",
            )
        ]
    repeats = int(t.get("repeats") or 1)
    if repeats > 1 and str(c.get("seeds")) != "auto" and repeats * int(c.get("seeds") or 0) > tune_space.TRIAL_SEED:
        return [
            (
                "tune.repeats",
                f"tune_repeats={repeats} x seeds={c.get('seeds')} retrain seeds would reach the trials' seed "
                f"{tune_space.TRIAL_SEED}; keep tune_repeats x seeds <= {tune_space.TRIAL_SEED}",
            )
        ]
    try:
        dims = tune_space.parse_space(t["space"], defaults(), NOT_FACTORS)
    except tune_space.SpaceError as e:
        return [(e.key, str(e))]
    for d in dims:
        for value in d.values or (d.lo, d.hi):
            value = int(value) if d.integer else value
            found = errors(apply_setting({k: v for k, v in c.items() if k != "tune"}, {d.key: value}))
            if found:
                return [("tune.space", f"tune.space {d.describe()}: {found[0][1]}")]
    if not (c.get("data") or {}).get("val_split"):
        return [
            (
                "data.val_split",
                "tune= selects each activation's best configuration on a held-out validation split, and "
                "data.val_split=0 has none (its val metric is read on the test set); set data.val_split=0.2",
            )
        ]
    if c.get("factors"):
        return [
            (
                "factors",
                f"tune= draws its own settings; a factor sweep beside it ({', '.join(c['factors'])}) is not supported: "
                "tune that key too (KEY:[V1,V2]) or run the factor sweep without tune=",
            )
        ]
    if c.get("noise", "all") != "all":
        return [("noise", "tune= with a noise= design is not supported; run them separately")]
    return []


# the rules that need several keys of one block, by the block's class
CROSS: dict[type, Callable[[dict], list[tuple[str, str]]]] = {
    AugmentConfig: _augment,
    RunConfig: lambda c: refusals(RUN_RULES, c) + _tune(c),
}


def errors(values: Mapping, cls: type = RunConfig, prefix: str = "") -> list[tuple[str, str]]:
    """(key, message) for every key of `values` (a plain dict of block `cls` at `prefix`) that its rule
    refuses, or that the schema lacks; then the block's CROSS rules, when every key passed."""
    out: list[tuple[str, str]] = []
    known = fields(cls)
    for name, value in values.items():
        key = prefix + name
        if name not in known:
            out.append((key, unknown_key(key)))
            continue
        f, hint = known[name]
        if dataclasses.is_dataclass(hint):
            out += (
                errors(value, hint, key + ".")
                if isinstance(value, Mapping)
                else [(key, f"{key} must be a mapping, got {value!r}")]
            )
            continue
        check = check_of(f, hint)
        wanted = check(value) if check else None
        if wanted:
            out.append((key, f"{key} must be {wanted}, got {value!r}"))
    return out or (CROSS[cls](dict(values)) if cls in CROSS else [])


def _raise(found: list[tuple[str, str]], where: str = "") -> None:
    if found:
        key, message = found[0]
        raise ConfigError(message + where, key)


def settings(factors: Mapping[str, list]) -> list[dict[str, Any]]:
    """Every combination of factor values, in the order given: [{}] when there are no factors."""
    keys = list(factors)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(factors[k] for k in keys))]


def apply_setting(cfg: Any, setting: Mapping[str, Any]) -> Any:
    """A copy of `cfg` (a plain dict or a DictConfig) with the setting's factor values in place."""
    out = copy.deepcopy(cfg)
    for key, value in setting.items():
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def check(plain: dict) -> None:
    """The whole config: every key, then the factor sweep's keys and each setting's values."""
    _raise(errors(plain))
    factors = plain.get("factors") or {}
    for key, values in factors.items():
        if key not in valid_keys() or key in NOT_FACTORS or is_free(key):
            raise ConfigError(
                f"factors: {key!r} is not a config key a sweep can vary{did_you_mean(key, valid_keys(), n=3)}",
                "factors",
            )
        if not isinstance(values, list) or not values:
            raise ConfigError(f"factors.{key} must be a non-empty list of values, got {values!r}", "factors")
        if len(set(map(repr, values))) != len(values):
            raise ConfigError(f"factors.{key} repeats a value: {values!r}", "factors")
    for setting in settings(factors) if factors else []:
        _raise(errors(apply_setting(plain, setting)), f" (setting {', '.join(f'{k}={v}' for k, v in setting.items())})")


def block(key: str, values: Mapping | None = None) -> Any:
    """The schema block `key` ("data", "data.augment", "optim", ...) with `values` (a dict or DictConfig, possibly
    partial) laid over its defaults, checked, typed (its dataclass, as a run's `typed` config holds it): what a
    partial dict in a test or notebook means is what the same keys mean in a recipe."""
    values = OmegaConf.to_container(values, resolve=True) if OmegaConf.is_config(values) else values
    cls, base = RunConfig, defaults()
    for part in key.split("."):
        cls, base = fields(cls)[part][1], base[part]

    def over(into: dict, new: Mapping, path: str) -> dict:
        for k, v in new.items():
            sub = f"{path}.{k}"
            if isinstance(into.get(k), dict) and isinstance(v, Mapping) and not is_free(sub):
                over(into[k], v, sub)
            else:
                into[k] = v
        return into

    out = over(base, copy.deepcopy(dict(values or {})), key)
    _raise(errors(out, cls, key + "."))
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), out))
