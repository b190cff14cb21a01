"""The config schema: every key a recipe may set, with its type, default, rule (config/rules.py) and meaning.
An int-or-float key is `Any` with a `kind`: OmegaConf 2.3 would turn `warmup_epochs: 20` into 20.0 (another
config hash). Registry names and Lightning's arguments are checked by visionbench/sweep/preflight.py."""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING, OmegaConf

from .rules import any_of, at_most, choice, integer, is_number, list_of, path, rule, text

OPTIMIZERS = ("sgd", "adamw")  # train/optim.py
SCHEDULES = ("constant", "step", "cosine")  # train/module.py `lr_lambda`
# Lightning's precision values (Trainer(precision=...)); Lightning itself is asked by the sweep's preflight
PRECISIONS = (
    "64-true",
    "32-true",
    "16-true",
    "bf16-true",
    "16-mixed",
    "bf16-mixed",
    "transformer-engine",
    "transformer-engine-float16",
    64,
    32,
    16,
    "64",
    "32",
    "16",
    "bf16",
)
TV_MAGNITUDE_MAX = 30  # torchvision RandAugment: num_magnitude_bins 31 -> magnitudes 0..30
MAX_SEEDS = 10_000  # per activation: a sweep plans every run before the first (a typo of 1e20 seeds would hang)
MAX_BATCH = 2**31 - 1  # the loaders' index arithmetic (itertools.islice) takes no larger count
# the learnable activations' kernel backends (activations/fused.py BACKENDS, which the config may not import: a test
# keeps the two alike)
KERNELS = ("auto", "triton", "compile", "eager", "reference")


def _seeds(v: Any) -> str | None:
    wanted = None if v == "auto" else at_most(integer(">= 1"), MAX_SEEDS)(v)
    return f"{wanted} or auto (seeds in rounds)" if wanted else None


def _compile(v: Any) -> str | None:
    ok = isinstance(v, bool) or v == "reduce-overhead"
    return None if ok else "true, false or reduce-overhead (the captured step)"


def _multipliers(v: Any) -> str | None:
    ok = isinstance(v, dict) and all(is_number(x) and x > 0 for x in v.values())
    return None if ok else "a mapping {act: multiplier > 0}"


def _jitter(v: Any) -> str | None:
    """null, b (= b, b, b, hue 0, as timm) or [b, c, s(, hue)]; each >= 0, hue <= 0.5."""
    values = [v] * 3 if is_number(v) else v
    ok = v is None or (
        isinstance(values, list)
        and len(values) in (3, 4)
        and all(is_number(x) and x >= 0 for x in values)
        and (len(values) == 3 or values[3] <= 0.5)
    )
    return None if ok else "null, a number or [brightness, contrast, saturation(, hue)], each >= 0 and hue <= 0.5"


def rand_augment_ops(policy: str) -> tuple[int, int] | None:
    """(num_ops, magnitude) of a `rand-nN-mM` policy for torchvision's RandAugment (defaults 2, 9); None
    when it is not one: timm's other fields (mstd, inc, ...) have no torchvision counterpart."""
    parts, ops = policy.split("-"), {"n": 2, "m": 9}
    if parts[0] != "rand" or any(p[:1] not in ops or not p[1:].isdigit() for p in parts[1:]):
        return None
    ops.update({p[0]: int(p[1:]) for p in parts[1:]})
    return (ops["n"], ops["m"]) if ops["m"] <= TV_MAGNITUDE_MAX else None


@dataclass
class ReportConfig:
    """What the recipe's paper reports: `visionbench run` and `report` use it (docs/report.md)."""

    metric: str | None = (
        None  # summary metric scored; null: test_top1_at_best_val with a held-out val split, else val_top1_best
    )
    baseline: str | None = "relu"  # the activation the report's t-test compares against (command line: baseline=gelu)
    best_of: list[str] = field(
        default_factory=list
    )  # factor keys reduced to the best setting per cell in the recipe-level table (004 Table 2: [model.lsuv])


@dataclass
class AugmentConfig:
    """`data.augment`: training-time augmentation (data/transforms.py)."""

    crop_pad: int = rule(0, ">= 0")  # random crop with this zero padding (CIFAR style); 0 = off
    scale: list[float] | None = rule(
        None, "(0, 1]", length=2
    )  # random-resized-crop scale range, e.g. [0.08, 1.0] (ImageNet); null = off
    hflip: float = rule(0.0, "[0, 1]")
    # ColorJitter before auto_augment: b (= b, b, b, hue 0) or [b, c, s(, hue)] (004 code: [0.4, 0.4, 0.4, 0.1]); null = off
    color_jitter: Any = rule(None, check=_jitter)
    auto_augment: str | None = None  # policy string, e.g. rand-m9-mstd0.5-inc1 (timm) or rand-n2-m9 (either impl)
    # timm: timm's RandAugment/AugMix/AutoAugment (m of 10); torchvision: T.RandAugment (m of 30; docs/data.md)
    auto_augment_impl: str = rule("timm", choices=("timm", "torchvision"))
    re_prob: float = rule(0.0, "[0, 1]")  # random erasing probability
    re_mode: str = rule("pixel", choices=("const", "rand", "pixel"))
    repeated_aug: Any = rule(
        1, ">= 1", kind=float
    )  # repeated-augmentation sampler: each image this many times per epoch
    # expand: an epoch is repeated_aug x N samples (004 code, App G); deit: timm/DeiT's, N samples (docs/data.md)
    repeated_aug_epoch: str = rule("expand", choices=("expand", "deit"))


@dataclass
class SyntheticConfig:
    """`data.synthetic` (data.name=synthetic): random tensors, for speed tests."""

    num_train: int = rule(512, ">= 1")
    num_val: int = rule(128, ">= 1")
    num_classes: int = rule(10, ">= 2")
    img_size: int = rule(32, ">= 1")
    in_chans: int = rule(3, ">= 1")


@dataclass
class DataConfig:
    """`data:` the dataset and its splits (data modules take it typed: config.block("data", ...))."""

    name: str = "digits"  # cifar10 | fashion_mnist | tiny_imagenet | imagenet | digits | synthetic | folder (data registry checks)
    root: str | None = rule(None, check=path)  # null -> $VISIONBENCH_DATA, else ./data
    download: bool = False  # cifar10, fashion_mnist: torchvision download where there is internet
    img_size: int | None = rule(None, ">= 1")  # null -> the dataset's native size
    mean: list[float] | None = None  # null -> the dataset's usual statistics
    std: list[float] | None = rule(None, "> 0")
    val_split: float = rule(0.0, "[0, 1)")  # fraction of train held out (stratified, fixed) for model selection
    num_workers: int = rule(0, ">= 0")
    # the uint8 training set kept on the device, crop/flip/normalise drawn there (data/on_device.py, docs/data.md)
    on_device: bool = False
    limit_train: int | None = rule(None, ">= 1")  # cap the number of training images (smoke tests)
    limit_val: int | None = rule(None, ">= 1")
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)


@dataclass
class ModelConfig:
    """`model:` the network and how it is initialised (models/factory.py checks name and norms)."""

    name: str = "vgg4"  # vgg4 | vgg8 | resnet32 | fmnist_resnet | fmnist_slnn | resnet50 | convnext_t | vit_s8 | cait_s24 | swin_t | any timm id
    norm: str | None = None  # group: GroupNorm (VGG, ResNet)
    norm_free: bool = False  # ViT/CaiT/Swin: bypass block norm1/norm2
    lsuv: bool = False  # LSUV data-dependent init before training
    lsuv_variant: str = "mishkin"  # mishkin: Mishkin & Matas 2016; paper004: the 004 code's variant (docs/models.md)
    # classifier pooling; null = the model's own (VGG: avg; flatten = 004 code's head); timm models: avg, max, avgmax, token, ...
    global_pool: str | None = None
    dropout: float = rule(0.0, "[0, 1)")  # before the classifier
    drop_path: float = rule(0.0, "[0, 1)")
    pretrained: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)  # more keyword arguments for the timm constructor


@dataclass
class OptimConfig:
    """`optim:` the optimizer (train/optim.py)."""

    name: str = rule("sgd", choices=OPTIMIZERS)
    lr: float = rule(0.02, ">= 0")
    lr_base_batch: int | None = rule(None, "> 0")  # if set, lr is scaled by batch_size / lr_base_batch
    momentum: float = rule(0.9, "[0, 1]")
    nesterov: bool = True
    betas: list[float] = rule([0.9, 0.999], "[0, 1)", length=2)
    eps: float = rule(1.0e-8, "> 0")
    weight_decay: float = rule(0.0, ">= 0")  # on the parameters decay_rule picks
    # conv_linear: conv/linear weights (004 App E); ndim: all but 1-D params and norms (004 Tiny code; docs/models.md)
    decay_rule: str = "conv_linear"
    act_weight_decay: float = rule(0.0, ">= 0")  # activation coefficients (the papers: none)


@dataclass
class SchedConfig:
    """`sched:` the learning-rate schedule (train/module.py `lr_lambda`)."""

    name: str = rule("constant", choices=SCHEDULES)
    milestones: list[int] = rule([], ">= 1")  # step: epochs at which lr *= gamma
    gamma: float = rule(0.1, "> 0")
    warmup_epochs: Any = rule(0, ">= 0", kind=float)  # linear warmup (cosine), in epochs
    warmup_lr: float = rule(1.0e-6, ">= 0")
    min_lr: float = rule(0.0, ">= 0")  # cosine floor


@dataclass
class LossConfig:
    """`loss:` label smoothing, mixup/cutmix and the activation penalty (train/module.py)."""

    label_smoothing: float = rule(0.0, "[0, 1)")
    mixup: float = rule(0.0, ">= 0")  # mixup alpha (0 = off)
    cutmix: float = rule(0.0, ">= 0")  # cutmix alpha (0 = off)
    mixup_prob: float = rule(1.0, "[0, 1]")
    switch_prob: float = rule(0.5, "[0, 1]")
    act_l2: float = rule(
        0.0, ">= 0"
    )  # L2 penalty on activation coefficients that define penalty() (SLAF, paper 003 Sec 4 and 5; APL)


@dataclass
class EmaConfig:
    """`ema:` weight EMA."""

    decay: float | None = rule(None, "(0, 1)")  # weight EMA decay, e.g. 0.9999; null = off


@dataclass
class TrainerConfig:
    """`trainer:` Lightning Trainer arguments (Lightning itself is asked by the sweep's preflight)."""

    accelerator: str = "auto"
    # an int, -1, "auto", a string or a list of device indices (Lightning's `devices`)
    devices: Any = rule(1, check=any_of(integer(">= 1"), choice(-1, "auto"), text, list_of(integer(">= 0"))))
    num_nodes: int = rule(1, ">= 1")
    strategy: str = "auto"
    # bf16-mixed / 16-mixed on GPUs; learnable activations stay fp32 (Lightning: str or int)
    precision: Any = rule("32-true", choices=PRECISIONS)
    gradient_clip_val: float | None = rule(None, "> 0")
    limit_train_batches: Any = rule(
        None,
        "> 0",
        kind=Optional[float],  # noqa: UP045 - rule() reads typing.Optional's arguments
    )  # Lightning's: an int counts batches, a float is a fraction
    limit_val_batches: Any = rule(None, ">= 0", kind=Optional[float])  # noqa: UP045 - as above
    channels_last: bool = False  # model and image batches in NHWC (timm --channels-last; docs/running.md#speed-levers)
    # torch.compile the model (timm --torchcompile; checkpoints keep their keys); reduce-overhead: the captured step,
    # CUDA graphs of forward and backward on CUDA (docs/running.md#the-captured-step)
    compile: Any = rule(False, check=_compile)
    # on CUDA: deterministic algorithms (a warning where an op has none) and cuDNN's benchmark off, so that a seed gives
    # the same bits alone or among parallel=K others; false: a speed lever that gives that up (recorded per run)
    deterministic: bool = True
    # NVIDIA MPS for parallel=K on CUDA: a running daemon serves the workers whatever this says; true: refuse to run
    # without one (visionbench starts none); recorded per run, not in the config hash
    mps: bool | None = None
    # the learnable activations' kernels (docs/bench.md): auto (Triton on CUDA, compiled elsewhere), triton, compile,
    # eager (fused, uncompiled) or reference (the plain formulas); VISIONBENCH_KERNELS wins over it; recorded per run
    # (summary.json environment.kernels), not in the config hash (results/identity.py)
    kernels: str = rule("auto", choices=KERNELS)
    accumulate_grad_batches: int = rule(1, ">= 1")  # steps per optimizer update; the global batch_size is kept
    sync_batchnorm: bool = False  # under DDP, BatchNorm statistics over all processes (timm --sync-bn)
    portable: bool = (
        False  # the same bits on any x86-64 CPU with AVX2: ISA, BLAS path, 1 thread pinned (sweep/portable.py)
    )
    loggers: list[str] = rule(
        ["tensorboard"], check=list_of(choice("tensorboard", "csv", "mlflow", "wandb"))
    )  # trackers (train/trackers.py)


@dataclass
class FinetuneConfig:
    """`finetune:` docs/finetune.md; models/finetune.py."""

    checkpoint: str | None = (
        None  # PATH (state dict / visionbench checkpoint) or "timm" (pretrained weights); set: model.pretrained unused
    )
    train: str = "act,head"  # what is trained: act,head | act | head | all (act,head with a fixed act = head only)
    source_act: str | None = (
        None  # act the checkpoint was trained with; null: its run's config.yaml, else the model's own
    )
    ema: bool = False  # load the checkpoint's weight-EMA copy (visionbench ema.*, timm state_dict_ema)


def _space(v: Any) -> str | None:
    ok = v is None or isinstance(v, str) or isinstance(v, dict)
    return None if ok else "null, KEY:log[LO,HI],KEY:uniform[LO,HI],KEY:[V1,V2,...] or a mapping {KEY: spec}"


@dataclass
class TuneConfig:
    """`tune:` equal tuning budgets (config/tune_space.py, sweep/tune_sweep.py, docs/tuning.md): per activation the same `trials`
    configurations drawn from `space` with `seed`, each a run; each activation's best on validation retrained with
    `seeds` fresh seeds and compared with the baseline's best. Command line: tune=SPACE trials=B tune_seed=K
    tune_repeats=R."""

    space: Any = rule(None, check=_space)  # null: no tuning; optim.lr:log[1e-4,1e-1],optim.weight_decay:[0,5e-4]
    trials: int = rule(16, check=at_most(integer(">= 2"), MAX_SEEDS))  # B: trials per activation (the budget)
    seed: int = rule(0, ">= 0")  # the draw's seed: trial i is drawn from (seed, i), the same for every activation
    defaults: bool = True  # also retrain the recipe's own values with the same seeds (the verdict without tuning)
    # R: independent tuning procedures per activation (own draw, trial seed, selection, fresh retrain seeds); R >= 3
    # makes the equal-budget verdict one about the activations, R = 1 one about the two selected configurations
    repeats: int = rule(1, check=at_most(integer(">= 1"), MAX_SEEDS))
    trial: Any = None  # set per run by the sweep: the trial's index, best (the retrain) or defaults
    repeat: Any = None  # set per run by the sweep when repeats > 1: the procedure's index j


@dataclass
class RunConfig:
    """Every key a recipe may set, with its default. A recipe starts with `defaults: [_base, _self_]`
    and overrides only what differs; unknown keys are an error."""

    recipe: str = MISSING  # the recipe's own name; results go to <results_dir>/<recipe>/
    act: str = "relu"  # one name or a comma-separated sweep: relu,gelu; a variant: rational[init=leaky_relu]
    act_options: dict[str, Any] = field(
        default_factory=dict
    )  # per activation, options passed to it: {rational: {init: leaky_relu}}
    act_lr_mult: dict[str, Any] = rule(
        {}, check=_multipliers
    )  # per activation, learning-rate multiplier of its coefficients: {rational: 4.0}
    imports: Any = rule(
        [], check=any_of(text, list_of(text))
    )  # plugin modules (my_acts or [a, b]; visionbench/plugins.py)
    # factor sweep {config key: [values]}: every combination is a setting (command line: model.norm=null,group)
    factors: dict[str, Any] = field(default_factory=dict)
    # N -> seeds 0..N-1; auto: rounds of seeds up to seeds_max, stopped when decided (sweep/rounds.py)
    seeds: Any = rule(3, check=_seeds)
    seeds_max: int = rule(
        10, check=at_most(integer(">= 3"), MAX_SEEDS)
    )  # seeds=auto: the most seeds per activation (the last round)
    seeds_margin: float | None = rule(
        None, "> 0"
    )  # seeds=auto: also stop as "equivalent" within ±this (metric units, TOST)
    seed: int | None = rule(None, ">= 0")  # set per run by the sweep (config.yaml of a run holds its seed)
    seed_init: int | None = rule(None, ">= 0")  # each source's own seed, null: seed's (train/seeds.py): the weights,
    seed_order: int | None = rule(None, ">= 0")  # the training sampler's order,
    seed_aug: int | None = rule(None, ">= 0")  # augmentation, dropout and Mixup draws
    noise: str = rule(
        "all", choices=("all", "init", "order", "aug")
    )  # sources following seed; noise=init,order,aug: arms + all
    epochs: int = rule(10, ">= 1")
    batch_size: int = rule(128, check=at_most(integer(">= 1"), MAX_BATCH))
    results_dir: str = rule("runs", check=path)  # your runs: never the committed results/ (docs/reproducing.md)
    # K runs at once in worker processes: on the CPU K in all, on CUDA K per visible GPU (each worker pinned to one);
    # auto: chosen from a measured run (`visionbench estimate` says why; sweep/placement.py,
    # docs/running.md#parallel-many-runs-per-device)
    parallel: Any = rule(1, check=any_of(integer(">= 1"), choice("auto")))
    snapshot_epochs: list[int] = rule(
        [0, 5, 30, -1], ">= -1"
    )  # epochs whose activation shapes + input histograms are stored (-1 = last)
    report: ReportConfig = field(default_factory=ReportConfig)
    tune: TuneConfig = field(default_factory=TuneConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    sched: SchedConfig = field(default_factory=SchedConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    ema: EmaConfig = field(default_factory=EmaConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)

    @property
    def act_kwargs(self) -> dict:
        """A run's activation options (a run's `act_options` holds its own activation's only)."""
        return dict(self.act_options.get(self.act) or {})

    @property
    def lr_mult(self) -> float:
        """A run's activation learning-rate multiplier (1.0: none given)."""
        return self.act_lr_mult.get(self.act, 1.0)


@functools.lru_cache(maxsize=1)
def _defaults() -> dict:
    return OmegaConf.to_container(OmegaConf.structured(RunConfig))


def defaults() -> dict:
    """Every key with its default, as a plain dict (a fresh copy: callers may change it)."""
    return copy.deepcopy(_defaults())
