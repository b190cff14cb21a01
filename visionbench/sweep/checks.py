"""Every config key's type and range, checked once before any training (issue 10 item 7).

    check_keys(run_container, base_defaults)   # -> None, or ConfigError naming the key

The validation layer on top of the typed schema (`visionbench/schema.py`): the schema's fields
refuse unknown keys and values OmegaConf cannot convert while a recipe is composed; this adds the
ranges and names, and checks command-line values as given (before OmegaConf would coerce 3 to
"3" or 1 to true). `CHECKS` holds the keys with a specific rule (a range, a list of names);
every other schema key must have its default's type (an int default takes ints, a float default
any number, a bool default true/false, a string default a string, a list a list; a null default
anything). So a key added to the schema is type-checked without touching this file, and a rule
is one line in the table. Checks that need two keys or a library (the dataset block as a
whole, the model's norm support, what Lightning's Trainer accepts) are in `config.validate`.
"""
from __future__ import annotations

import difflib
from typing import Any, Callable, Iterable

from omegaconf import MISSING

from ..data.config import AUTO_AUGMENT_IMPLS, REPEATED_AUG_EPOCHS

# A check returns None when the value is fine, else what is accepted ("an integer >= 1")
Check = Callable[[Any], "str | None"]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _range(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {lo:g}")
    if hi is not None:
        parts.append(f"{'<' if hi_open else '<='} {hi:g}")
    return " and ".join(parts)


def _in_range(v: float, lo, hi, lo_open: bool, hi_open: bool) -> bool:
    if lo is not None and (v <= lo if lo_open else v < lo):
        return False
    return hi is None or (v < hi if hi_open else v <= hi)


def _optional(check: Check, optional: bool) -> Check:
    if not optional:
        return check

    def or_null(v: Any) -> str | None:
        wanted = check(v) if v is not None else None
        return f"null or {wanted}" if wanted else None

    return or_null


def integer(lo: int | None = None, hi: int | None = None, optional: bool = False) -> Check:
    def check(v: Any) -> str | None:
        ok = _is_int(v) and _in_range(v, lo, hi, False, False)
        return None if ok else f"an integer {_range(lo, hi, False, False)}".rstrip()

    return _optional(check, optional)


def number(lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False,
           optional: bool = False) -> Check:
    def check(v: Any) -> str | None:
        ok = _is_number(v) and v == v and _in_range(v, lo, hi, lo_open, hi_open)  # v == v: not NaN
        return None if ok else f"a number {_range(lo, hi, lo_open, hi_open)}".rstrip()

    return _optional(check, optional)


def boolean(v: Any) -> str | None:
    return None if isinstance(v, bool) else "true or false"


def text(optional: bool = False) -> Check:
    return _optional(lambda v: None if isinstance(v, str) and v else "a non-empty string", optional)


def scalar(v: Any) -> str | None:
    return None if isinstance(v, (str, int, float)) and not isinstance(v, bool) else "a string"


def choice(values: Callable[[], Iterable[Any]] | Iterable[Any]) -> Check:
    """One of `values` (a callable is asked only when the check runs: registries import lazily)."""
    def check(v: Any) -> str | None:
        accepted = list(values() if callable(values) else values)
        if any(v == a and type(v) is type(a) for a in accepted):
            return None
        close = difflib.get_close_matches(str(v), [str(a) for a in accepted], n=2)
        hint = f"(did you mean {' or '.join(close)}?) " if close else ""
        return hint + "one of " + ", ".join("null" if a is None else str(a) for a in accepted)

    return check


def list_of(item: Check, length: int | None = None, optional: bool = False) -> Check:
    def check(v: Any) -> str | None:
        wanted = f"a list{f' of {length} values' if length else ''}, each {item(object())}"
        if not isinstance(v, list) or (length is not None and len(v) != length):
            return wanted
        return wanted if any(item(x) for x in v) else None

    return _optional(check, optional)


def any_of(*checks: Check) -> Check:
    def check(v: Any) -> str | None:
        wanted = [c(v) for c in checks]
        return None if any(w is None for w in wanted) else " or ".join(wanted)

    return check


def _datasets() -> list[str]:
    from ..data import names

    return names()


def _model_name(v: Any) -> str | None:
    if not isinstance(v, str) or not v:
        return "a model name"
    from ..models.factory import resolve  # imports timm: only when a config is checked

    try:
        resolve(v)
    except ValueError:
        close = difflib.get_close_matches(v, _short_models(), n=2)
        hint = f"(did you mean {' or '.join(close)}?) " if close else ""
        return hint + f"one of {', '.join(_short_models())}, or a timm model id (timm.list_models())"
    return None


def _short_models() -> list[str]:
    from ..models import names

    return names()


def _norms() -> list[Any]:
    from ..models.factory import NORMS

    return [None, *NORMS]


def _finetune_train() -> list[str]:
    from ..models.finetune import TRAIN_CHOICES

    return list(TRAIN_CHOICES)


def _lsuv_variants() -> list[str]:
    from ..models.lsuv import LSUV_VARIANTS

    return list(LSUV_VARIANTS)


def _decay_rules() -> list[str]:
    from ..models.param_groups import DECAY_RULES

    return list(DECAY_RULES)


def _lr_mults(v: Any) -> str | None:
    ok = isinstance(v, dict) and all(_is_number(x) and x > 0 for x in v.values())
    return None if ok else "a mapping {act: multiplier > 0}"


PROBABILITY = number(0, 1)
FRACTION = number(0, 1, hi_open=True)  # 1.0 would leave nothing (a split, a dropout, label smoothing)
# Lightning's precision values (Trainer(precision=...)); Lightning itself is asked in config.validate
PRECISIONS = ("64-true", "32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed", "transformer-engine",
              "transformer-engine-float16", 64, 32, 16, "64", "32", "16", "bf16")


def _seeds(v: Any) -> str | None:
    return None if v == "auto" or integer(1)(v) is None else "an integer >= 1 or auto (seeds in rounds)"


CHECKS: dict[str, Check] = {
    "recipe": text(), "act": text(), "results_dir": scalar,
    "seeds": _seeds, "seeds_max": integer(3),
    "seeds_margin": number(0, lo_open=True, optional=True), "seed": integer(0, optional=True), "epochs": integer(1), "batch_size": integer(1),
    "parallel": integer(1), "snapshot_epochs": list_of(integer(-1)), "act_lr_mult": _lr_mults,
    "report.metric": text(optional=True), "report.baseline": text(optional=True), "report.best_of": list_of(text()),
    "data.name": choice(_datasets), "data.root": _optional(scalar, True), "data.img_size": integer(1, optional=True),
    "data.mean": list_of(number(), optional=True), "data.std": list_of(number(0, lo_open=True), optional=True),
    "data.val_split": FRACTION, "data.num_workers": integer(0),
    "data.limit_train": integer(1, optional=True), "data.limit_val": integer(1, optional=True),
    "data.augment.crop_pad": integer(0), "data.augment.scale": list_of(number(0, 1, lo_open=True), 2, optional=True),
    "data.augment.hflip": PROBABILITY, "data.augment.re_prob": PROBABILITY,
    "data.augment.re_mode": choice(("const", "rand", "pixel")), "data.augment.repeated_aug": number(1),
    "data.synthetic.num_train": integer(1), "data.synthetic.num_val": integer(1),
    "data.synthetic.num_classes": integer(2), "data.synthetic.img_size": integer(1),
    "data.synthetic.in_chans": integer(1),
    "data.augment.repeated_aug_epoch": choice(REPEATED_AUG_EPOCHS),
    "data.augment.auto_augment_impl": choice(AUTO_AUGMENT_IMPLS),
    "model.name": _model_name, "model.norm": choice(_norms), "model.lsuv_variant": choice(_lsuv_variants),
    "model.global_pool": text(optional=True), "model.dropout": FRACTION, "model.drop_path": FRACTION,
    "optim.lr": number(0), "optim.lr_base_batch": number(0, lo_open=True, optional=True),
    "optim.momentum": PROBABILITY, "optim.betas": list_of(FRACTION, 2), "optim.eps": number(0, lo_open=True),
    "optim.weight_decay": number(0), "optim.act_weight_decay": number(0), "optim.decay_rule": choice(_decay_rules),
    "sched.milestones": list_of(integer(1)), "sched.gamma": number(0, lo_open=True), "sched.warmup_epochs": number(0),
    "sched.warmup_lr": number(0), "sched.min_lr": number(0),
    "loss.label_smoothing": FRACTION, "loss.mixup": number(0), "loss.cutmix": number(0),
    "loss.mixup_prob": PROBABILITY, "loss.switch_prob": PROBABILITY, "loss.act_l2": number(0),
    "ema.decay": number(0, 1, lo_open=True, hi_open=True, optional=True),
    "trainer.accelerator": text(), "trainer.strategy": text(), "trainer.precision": choice(PRECISIONS),
    "trainer.devices": any_of(integer(1), choice((-1, "auto")), text(), list_of(integer(0))),
    "trainer.num_nodes": integer(1), "trainer.gradient_clip_val": number(0, lo_open=True, optional=True),
    "trainer.limit_train_batches": number(0, lo_open=True, optional=True),
    "trainer.limit_val_batches": number(0, optional=True),
    "trainer.channels_last": boolean, "trainer.compile": boolean, "trainer.sync_batchnorm": boolean,
    "trainer.accumulate_grad_batches": integer(1),
    "finetune.checkpoint": text(optional=True), "finetune.train": choice(_finetune_train),
    "finetune.source_act": text(optional=True),
}


def by_default_type(default: Any) -> Check | None:
    """The check of a key without a rule: its schema default's type (None: anything goes)."""
    if default is None:
        return None
    if isinstance(default, bool):
        return boolean
    if isinstance(default, int):
        return integer()
    if isinstance(default, float):
        return number()
    if isinstance(default, str):
        return text() if default != MISSING else None
    if isinstance(default, list):
        return lambda v: None if isinstance(v, list) else "a list"
    if isinstance(default, dict):
        return lambda v: None if isinstance(v, dict) else "a mapping"
    return None


def _leaves(d: dict, free: Iterable[str], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for key, value in d.items():
        path = f"{prefix}{key}"
        yield path, value
        if isinstance(value, dict) and path not in free:
            yield from _leaves(value, free, path + ".")


def _lookup(d: dict, key: str, missing: Any) -> Any:
    for part in key.split("."):
        if not isinstance(d, dict) or part not in d:
            return missing
        d = d[part]
    return d


def key_errors(cfg: dict, defaults: dict, free: Iterable[str] = ()) -> list[str]:
    """One line per key of `cfg` whose value its check refuses: `key must be ..., got value`."""
    free = tuple(free)
    out = []
    absent = object()
    for key, value in _leaves(cfg, free):
        if any(key.startswith(f + ".") for f in free):
            continue
        default = _lookup(defaults, key, absent)
        if key not in CHECKS and default is absent:
            continue  # not a schema key (the composition refuses those)
        check = CHECKS[key] if key in CHECKS else by_default_type(default)
        wanted = check(value) if check else None
        if wanted:
            out.append(f"{key} must be {wanted}, got {value!r}")
    return out or accumulate_errors(cfg)


def _processes(trainer: dict) -> int | None:
    """How many processes share the batch, when the config says (devices an int >= 1 or a list)."""
    devices, nodes = trainer.get("devices", 1), trainer.get("num_nodes", 1)
    count = len(devices) if isinstance(devices, list) else devices
    if _is_int(count) and count >= 1 and _is_int(nodes) and nodes >= 1:
        return count * nodes
    return None  # "auto", -1, "0,1": train/run.py checks again once Lightning knows the world size


def accumulate_errors(cfg: dict) -> list[str]:
    """`trainer.accumulate_grad_batches` must divide the per-device batch: the recipe's global batch is
    kept (each step loads batch_size / (processes x accumulate) images, train/run.py `step_batch`)."""
    trainer, batch = cfg.get("trainer") or {}, cfg.get("batch_size")
    accumulate = trainer.get("accumulate_grad_batches", 1)
    if not (_is_int(batch) and _is_int(accumulate)) or accumulate <= 1:
        return []
    processes = _processes(trainer) or 1
    per_device = max(1, batch // processes)
    if per_device % accumulate == 0:
        return []
    return [f"trainer.accumulate_grad_batches must divide the per-device batch {per_device} "
            f"(batch_size={batch} over {processes} process(es)), got {accumulate}"]
