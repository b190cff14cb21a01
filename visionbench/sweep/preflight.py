"""A command line to a checked sweep config: the config layer's part, then what only the registries
and Lightning can say, before any training (nothing written, one line naming the key).

    cfg = load_config(["recipe=cifar10_vgg8", "act=relu,rational[init=gelu]", "act.version=B"])

`visionbench run`, `visionbench estimate`, `visionbench bench train` and the Hydra app all come
through here. visionbench/config/ has checked every key's type, range and choices; this adds, for
every factor setting: each activation variant built once (bad options fail now, not after hours of
other seeds), the model's name and norm toggles (models/factory.py `check`), the names the model
and fine-tuning registries hold, the Trainer's device arguments (Lightning builds one), and a
fine-tuning checkpoint's content and `finetune.source_act`, the trackers' packages (`trainer.loggers`).
The dataset is checked by `sweep.check_data` as the sweep plans, and with it the fine-tuning checkpoint
against the architecture (`check_finetune_weights`: it needs the dataset's classes and image size).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .. import activations, plugins
from ..config import (
    ConfigError,
    act_options,
    apply_setting,
    block,
    compose,
    defaults,
    parse,
    run_config,
    sweep_settings,
    typed,
)
from ..config.rules import choice
from ..models.swap import check_layers, probe_shape, split_swap_options
from ..train import seeds
from .acts import Act, apply_act_keys, sweep_acts
from .tune_sweep import protocol_warnings, value_settings


def load_config(args: Iterable[str], strict_act_keys: bool = True) -> DictConfig:
    """Compose `recipe=NAME` with `key=value` overrides (visionbench/config/overrides.py), apply
    `act.KEY=V` to the swept activations that take KEY (`strict_act_keys`: one of them must), and
    check everything before any training."""
    ov = parse(args)
    cfg = compose(ov)
    if ov.gave("data.name"):  # the recipe's image size and statistics are its dataset's: the given one's instead
        cfg.data.merge_with({k: None for k in ("img_size", "mean", "std") if not ov.gave(f"data.{k}")})
    plugins.load_for(cfg)  # the user's activations and models (its `imports`), before any name is checked
    apply_act_keys(cfg, ov.act_keys, strict_act_keys)
    return preflight(cfg)


def _registry_rules() -> dict[str, Callable[[Any], str | None]]:
    """Keys whose accepted names a registry holds (imported only when a config is checked): the one
    check of each; train/ and models/ take the names as given."""
    from ..models.finetune import TRAIN_CHOICES, parse_train
    from ..models.lsuv import LSUV_VARIANTS
    from ..models.param_groups import DECAY_RULES

    def train_parts(value: Any) -> str | None:  # what models/finetune.py reads: parts in any order
        try:
            parse_train(value)
        except (ValueError, AttributeError):
            return f"one of {', '.join(TRAIN_CHOICES)} (parts in any order: head,act)"
        return None

    return {
        "model.lsuv_variant": choice(*LSUV_VARIANTS),
        "optim.decay_rule": choice(*DECAY_RULES),
        "finetune.train": train_parts,
    }


def preflight(cfg: DictConfig) -> DictConfig:
    """Check the sweep `cfg` setting by setting (see the module docstring); ConfigError, one line."""
    _noise_design(cfg)
    if cfg.tune.space is not None:  # the recipe's cited values a search would vary: a warning line each, no refusal
        import sys

        for line in protocol_warnings(cfg):
            print(line, file=sys.stderr)
    acts = sweep_acts(cfg)
    if set(cfg.trainer.loggers) - {"tensorboard", "csv"}:  # an optional tracker: is its package installed?
        from ..train.trackers import missing

        if why := missing(cfg.trainer.loggers):
            raise ConfigError(why, "trainer.loggers")
    checked: set[str] = set()
    rules = _registry_rules()
    for setting in sweep_settings(cfg) + value_settings(cfg):  # a tuned key's values: checked as overrides
        c = apply_setting(cfg, setting)
        where = f" (setting {', '.join(f'{k}={v}' for k, v in setting.items())})" if setting else ""
        for key, check in rules.items():
            value = OmegaConf.select(c, key)
            wanted = check(value)
            if wanted:
                raise ConfigError(f"{key} must be {wanted}, got {value!r}{where}", key)
        _check_model(c.model, where)
        _check_trainer(c.trainer, where, checked)
        for act in acts:
            family, opts = act_options(c, act)
            try:
                opts, layers = split_swap_options(opts)  # `swap_layers` is the swap's option, not the act's
                check_layers(layers)
                if opts.get("per_channel") and "num_channels" in activations.accepted_kwargs(family):
                    opts.setdefault("num_channels", 1)  # the model gives the real count when it is built
                owners = " ".join(f"imports={p.module}" for p in plugins.owner(family))
                probe_shape(
                    activations.create(family, **opts),
                    act,  # a wrong output shape: here, not in a conv
                    check=f"visionbench check {owners + ' ' if owners else ''}act={act}",
                )
            except (ValueError, TypeError) as e:
                raise ConfigError(f"act {act}{where}: {e}", "act") from None
        if c.finetune.source_act is not None:
            _check_source_act(c.finetune, where)
        if c.finetune.checkpoint:
            _check_finetune(c, acts, where, checked)
    return cfg


def _noise_design(cfg: DictConfig) -> None:
    """A `noise=init,order,aug` design gets the ordinary run (noise=all) as its first arm; ConfigError when the
    seed keys contradict each other or the sweep (train/seeds.py `contradiction`)."""
    arms = list(cfg.factors.get("noise") or [cfg.noise])
    if "noise" in cfg.factors:
        cfg.factors.noise = arms = [seeds.ALL, *(a for a in arms if a != seeds.ALL)]
    why = seeds.contradiction(arms, cfg.seeds, {s: cfg[f"seed_{s}"] for s in seeds.SOURCES})
    if why:
        raise ConfigError(why, "noise")


def _check_source_act(ft: DictConfig, where: str) -> None:
    """`finetune.source_act`: a registered activation, and only where a checkpoint's weights are loaded."""
    if not ft.checkpoint or str(ft.checkpoint) == "timm":
        why = (
            "timm's weights are trained with the model's own activation"
            if ft.checkpoint
            else "it names the activation a finetune.checkpoint was trained with, and none is set"
        )
        raise ConfigError(
            f"finetune.source_act={ft.source_act} is not used: {why}; drop it{where}", "finetune.source_act"
        )
    try:
        activations.resolve(str(ft.source_act))
    except ValueError as e:
        raise ConfigError(f"finetune.source_act: {e}{where}", "finetune.source_act") from None


def check_finetune_weights(cfg: DictConfig, setting: dict, act: Act, dm) -> None:
    """Build the network of the setting's first run as the run will (train/run.py `build_model`: the
    checkpoint loaded into the recipe's architecture, its activations swapped): a checkpoint of another
    architecture fails here, once, in one line, before any run directory is written. `dm`: the setting's
    data module (classes, channels, image size)."""
    if not cfg.finetune.checkpoint:
        return
    from ..train.run import build_model  # the heavy import only for fine-tuning sweeps

    try:
        build_model(typed(run_config(cfg, act, 0, setting)), dm.num_classes, dm.in_chans, dm.img_size)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        where = f" (setting {', '.join(f'{k}={v}' for k, v in setting.items())})" if setting else ""
        raise ConfigError(f"finetune.checkpoint: {first}{where}", "finetune.checkpoint") from None


def _check_model(model: DictConfig, where: str) -> None:
    from ..models.factory import check  # imports timm: only when a config is checked

    try:
        check(model.name, model.norm, model.norm_free)
    except ValueError as e:
        given = f"model.name={model.name}" + "".join(
            f", model.{k}={model[k]}" for k in ("norm", "norm_free") if model[k] not in (None, False)
        )
        raise ConfigError(f"{given}: {e}{where}", "model") from None


def _check_trainer(t: DictConfig, where: str, checked: set[str]) -> None:
    """Build (and drop) the run's probe Trainer (train/trainer.py `build_trainer`, the device arguments):
    what Lightning refuses (an unknown strategy, a GPU on a CPU machine, devices=0) fails here, once,
    not in every run."""
    from ..train.trainer import DEVICE_ARGS, build_trainer  # imports Lightning: only when a config is checked

    t = block("trainer", t)  # typed: Lightning takes `devices` as a list, not a ListConfig
    args = {k: getattr(t, k) for k in DEVICE_ARGS}
    key = json.dumps(args, sort_keys=True, default=str)
    base = defaults()["trainer"]
    if key in checked or all(v == base.get(k) for k, v in args.items()):  # the defaults work everywhere
        return
    checked.add(key)
    try:
        build_trainer(t)
    except Exception as e:  # noqa: BLE001 - Lightning raises ValueError, TypeError, MisconfigurationException
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        given = ", ".join(f"trainer.{k}={v}" for k, v in args.items() if v != base.get(k)) or "trainer"
        raise ConfigError(f"{given}: {first}{where}", "trainer") from None


def _check_finetune(c: DictConfig, acts: list[str], where: str, checked: set[str]) -> None:
    """The checkpoint's content, not only its name (a text file or a torn download fails here, once),
    and what it is trained with (a missing checkpoint, train=act with a fixed act)."""
    from ..models.finetune import check  # imports timm: only for fine-tuning recipes

    ft = c.finetune
    if str(ft.checkpoint) != "timm" and f"ckpt:{ft.checkpoint}" not in checked:
        from ..models.pretrained import read_checkpoint

        checked.add(f"ckpt:{ft.checkpoint}")
        try:
            read_checkpoint(ft.checkpoint, ema=bool(ft.ema))
        except (ValueError, FileNotFoundError) as e:
            raise ConfigError(f"finetune.checkpoint: {e}{where}", "finetune.checkpoint") from None
    try:
        for act in acts:
            family, opts = act_options(c, act)
            check(ft.checkpoint, ft.train, family, opts)
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(str(e), "finetune") from None
