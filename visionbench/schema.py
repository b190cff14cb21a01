"""The config schema: every key a recipe may set, its type, its default and what it means (issue 12 item 1).

Top-level (imports only Hydra/OmegaConf) so that data/ and runner/ both read it.

    defaults()              # plain dict of every key with its default (what `_base.yaml` held)
    RunSchema               # the dataclass tree: one field per key, its type, default and comment

The dataclasses are the one source of defaults: they are registered in Hydra's ConfigStore as
`_base`, so a recipe's `defaults: [_base, _self_]` composes over them in OmegaConf struct mode
(an unknown key is refused by the composition itself), and `data/config.py`, `upgrade()` and
the Trainer check read their defaults from here. A key that may hold an int or a float (or a
number or a list) is typed `Any` because OmegaConf 2.3 has no Union of primitives and would turn
`warmup_epochs: 20` into 20.0 (a different config hash for existing results); runner/checks.py
checks those. Lightning's `limit_*_batches` keep their int (batches) vs float (fraction) meaning.
"""
from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

BASE_NAME = "_base"  # recipes start with `defaults: [_base, _self_]`


def _list(*items: Any) -> Any:
    return field(default_factory=lambda: list(items))


def _dict() -> Any:
    return field(default_factory=dict)


@dataclass
class ReportConfig:
    """What the recipe's paper reports: `visionbench run` and `report` use it (docs/report.md)."""

    metric: Optional[str] = None  # summary metric scored; null: test_top1_at_best_val with a held-out val split, else val_top1_best
    baseline: Optional[str] = "relu"  # the activation the report's t-test compares against (command line: baseline=gelu)
    best_of: List[str] = _list()  # factor keys reduced to the best setting per cell in the recipe-level table (004 Table 2: [model.lsuv])


@dataclass
class AugmentSchema:
    """`data.augment`: training-time augmentation (data/transforms.py)."""

    crop_pad: int = 0  # random crop with this zero padding (CIFAR style); 0 = off
    scale: Optional[List[float]] = None  # random-resized-crop scale range, e.g. [0.08, 1.0] (ImageNet); null = off
    hflip: float = 0.0
    # ColorJitter before auto_augment: b (= brightness, contrast, saturation; hue 0) or [b, c, s] or
    # [b, c, s, hue] (004 code: [0.4, 0.4, 0.4, 0.1]); null = off
    color_jitter: Any = None
    auto_augment: Optional[str] = None  # policy string, e.g. rand-m9-mstd0.5-inc1 (timm) or rand-n2-m9 (either impl)
    # timm: timm's RandAugment/AugMix/AutoAugment (m out of 10, mean fill, bicubic);
    # torchvision: T.RandAugment(num_ops=n, magnitude=m) (m out of 30, black fill, nearest)
    auto_augment_impl: str = "timm"
    re_prob: float = 0.0  # random erasing probability
    re_mode: str = "pixel"
    repeated_aug: Any = 1  # repeated-augmentation sampler: each image this many times per epoch (a number >= 1)
    # expand: an epoch is repeated_aug x N samples (004 code's sampler, 004 App G);
    # deit: timm/DeiT's, an epoch keeps N samples (N/repeated_aug distinct images)
    repeated_aug_epoch: str = "expand"


@dataclass
class SyntheticSchema:
    """`data.synthetic` (data.name=synthetic): random tensors, for speed tests."""

    num_train: int = 512
    num_val: int = 128
    num_classes: int = 10
    img_size: int = 32
    in_chans: int = 3


@dataclass
class DataSchema:
    """`data:` the dataset and its splits (typed for training by data/config.py's DataConfig)."""

    name: str = "digits"  # cifar10 | tiny_imagenet | imagenet | digits | synthetic
    root: Optional[str] = None  # null -> $VISIONBENCH_DATA, else ./data
    download: bool = False  # cifar10 only: torchvision download where there is internet
    img_size: Optional[int] = None  # null -> the dataset's native size
    mean: Optional[List[float]] = None  # null -> the dataset's usual statistics
    std: Optional[List[float]] = None
    val_split: float = 0.0  # fraction of train held out (stratified, fixed) for model selection
    num_workers: int = 0
    limit_train: Optional[int] = None  # cap the number of training images (smoke tests)
    limit_val: Optional[int] = None
    augment: AugmentSchema = field(default_factory=AugmentSchema)
    synthetic: SyntheticSchema = field(default_factory=SyntheticSchema)


@dataclass
class ModelConfig:
    """`model:` the network and how it is initialised."""

    name: str = "vgg4"  # vgg4 | vgg8 | resnet32 | resnet50 | convnext_t | vit_s8 | cait_s24 | swin_t | any timm id
    norm: Optional[str] = None  # group: GroupNorm (VGG, ResNet)
    norm_free: bool = False  # ViT/CaiT/Swin: bypass block norm1/norm2
    lsuv: bool = False  # LSUV data-dependent init before training
    # mishkin: Mishkin & Matas 2016 (orthonormal, unit output variance, one batch);
    # paper004: 004 code's (variance 0.125 after the activation, bias -mean, 64 images, eval mode)
    lsuv_variant: str = "mishkin"
    # classifier pooling; null = the model's own (VGG: avg; flatten = 004 code's head); timm models: avg, max, avgmax, token, ...
    global_pool: Optional[str] = None
    dropout: float = 0.0  # before the classifier
    drop_path: float = 0.0
    pretrained: bool = False
    kwargs: Dict[str, Any] = _dict()  # more keyword arguments for the timm constructor


@dataclass
class OptimConfig:
    """`optim:` the optimizer (train/optim.py); the name is checked once, in runner/checks.py."""

    name: str = "sgd"  # sgd | adamw
    lr: float = 0.02
    lr_base_batch: Optional[int] = None  # if set, lr is scaled by batch_size / lr_base_batch
    momentum: float = 0.9
    nesterov: bool = True
    betas: List[float] = _list(0.9, 0.999)
    eps: float = 1.0e-8
    weight_decay: float = 0.0  # on the parameters decay_rule picks
    # conv_linear: conv/linear weights only, minus the model's no_weight_decay() (004 App E);
    # ndim: all but 1-D params, biases, names with norm/bn (004 Tiny code: pos_embed, cls_token decay)
    decay_rule: str = "conv_linear"
    act_weight_decay: float = 0.0  # activation coefficients (the papers: none)


@dataclass
class SchedConfig:
    """`sched:` the learning-rate schedule (train/schedules.py)."""

    name: str = "constant"  # constant | step | cosine
    milestones: List[int] = _list()  # step: epochs at which lr *= gamma
    gamma: float = 0.1
    warmup_epochs: Any = 0  # linear warmup (cosine), in epochs (a number >= 0)
    warmup_lr: float = 1.0e-6
    min_lr: float = 0.0  # cosine floor


@dataclass
class LossConfig:
    """`loss:` label smoothing, mixup/cutmix and the activation penalty (train/module.py)."""

    label_smoothing: float = 0.0
    mixup: float = 0.0  # mixup alpha (0 = off)
    cutmix: float = 0.0  # cutmix alpha (0 = off)
    mixup_prob: float = 1.0
    switch_prob: float = 0.5
    act_l2: float = 0.0  # L2 penalty on activation coefficients that define penalty() (SLAF, paper 003 Sec 4 and 5; APL)


@dataclass
class EmaConfig:
    """`ema:` weight EMA."""

    decay: Optional[float] = None  # weight EMA decay, e.g. 0.9999; null = off


@dataclass
class TrainerConfig:
    """`trainer:` Lightning Trainer arguments (checked by building a Trainer in runner/config.py)."""

    accelerator: str = "auto"
    devices: Any = 1  # an int, -1, "auto", a string or a list of device indices (Lightning's `devices`)
    num_nodes: int = 1
    strategy: str = "auto"
    precision: Any = "32-true"  # bf16-mixed / 16-mixed on GPUs; learnable activations stay fp32 (Lightning: str or int)
    gradient_clip_val: Optional[float] = None
    limit_train_batches: Any = None  # Lightning's: an int counts batches, a float is a fraction
    limit_val_batches: Any = None
    # model and image batches in channels_last (NHWC) memory format (timm --channels-last): faster convs on
    # GPUs with tensor cores (AMP, Volta and newer); little or nothing on CPU; same results up to float rounding
    channels_last: bool = False
    # torch.compile the model (timm --torchcompile; nn.Module.compile: checkpoints keep their keys); pays off on
    # long GPU runs (compile time is minutes); learnable activations' plain formulas are then traced by this
    # outer compile instead of their own fused kernels (docs/bench.md)
    compile: bool = False
    # gradient accumulation (timm --grad-accum-steps; Lightning's accumulate_grad_batches): the recipe's global
    # batch_size is kept, each step loads batch_size / (devices x this) images, and the optimizer steps every
    # this many; for a recipe's batch that does not fit in GPU memory. Must divide the per-device batch
    accumulate_grad_batches: int = 1
    # under DDP, BatchNorm statistics over all processes (Lightning's sync_batchnorm; timm --sync-bn): for
    # BatchNorm models whose per-device batch is small; no effect on one device or with GroupNorm/LayerNorm
    sync_batchnorm: bool = False


@dataclass
class FinetuneConfig:
    """`finetune:` docs/finetune.md; models/finetune.py."""

    checkpoint: Optional[str] = None  # PATH (state dict / visionbench checkpoint) or "timm" (pretrained weights); set: model.pretrained unused
    train: str = "act,head"  # what is trained: act,head | act | head | all (act,head with a fixed act = head only)
    source_act: Optional[str] = None  # act the checkpoint was trained with; null: its run's config.yaml, else the model's own
    ema: bool = False  # load the checkpoint's weight-EMA copy (visionbench ema.*, timm state_dict_ema)


@dataclass
class RunSchema:
    """Every key a recipe may set, with its default. A recipe starts with `defaults: [_base, _self_]`
    and overrides only what differs; unknown keys are an error."""

    recipe: str = MISSING  # the recipe's own name; results go to <results_dir>/<recipe>/
    # activation name, or comma-separated names for a sweep: relu,gelu,rational;
    # a variant carries options in brackets: rational[init=leaky_relu],rational[init=gelu]
    act: str = "relu"
    act_options: Dict[str, Any] = _dict()  # per activation, options passed to it: {rational: {init: leaky_relu}}
    act_lr_mult: Dict[str, Any] = _dict()  # per activation, learning-rate multiplier of its coefficients: {rational: 4.0}
    # factor sweep {config key: [values]}, e.g. {model.norm: [null, group]}: every combination is a setting
    # with its runs in <recipe>/<setting>/; on the command line: model.norm=null,group
    factors: Dict[str, Any] = _dict()
    # N -> seeds 0..N-1; auto: seeds in rounds (3, 5, 7, ..., seeds_max), each activation stopped once its
    # comparison with report.baseline is decided by the group-sequential rule (report/sequential.py)
    seeds: Any = 3
    seeds_max: int = 10  # seeds=auto: the most seeds per activation (the last round)
    seeds_margin: Optional[float] = None  # seeds=auto: also stop as "equivalent" within ±this (metric units, TOST)
    seed: Optional[int] = None  # set per run by the runner (config.yaml of a run holds its seed)
    epochs: int = 10
    batch_size: int = 128
    results_dir: str = "results"
    parallel: int = 1  # run K seeds at once, in separate processes
    # preflight: build and time each (setting, act) of the sweep on the configured device, print projected
    # wall time (minus runs completed in results_dir), peak memory and parameters; train and write nothing
    estimate: bool = False
    snapshot_epochs: List[int] = _list(0, 5, 30, -1)  # epochs whose activation shapes + input histograms are stored (-1 = last)
    report: ReportConfig = field(default_factory=ReportConfig)
    data: DataSchema = field(default_factory=DataSchema)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    sched: SchedConfig = field(default_factory=SchedConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    ema: EmaConfig = field(default_factory=EmaConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)


def register() -> None:
    """Put the schema in Hydra's ConfigStore as `_base` (idempotent; done on import)."""
    ConfigStore.instance().store(name=BASE_NAME, node=RunSchema)


register()


@functools.lru_cache(maxsize=1)
def _defaults() -> dict:
    return OmegaConf.to_container(OmegaConf.structured(RunSchema))


def defaults() -> dict:
    """Every key with its default, as a plain dict (a fresh copy: callers may change it)."""
    return copy.deepcopy(_defaults())
