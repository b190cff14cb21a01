"""Fine-tune only the activations (and the classifier) of a trained backbone -- paper 001 App O.

    >>> build = lambda act, act_kwargs, num_classes, pretrained: models.create(
    ...     "convnext_t", act=act, act_kwargs=act_kwargs, num_classes=num_classes, pretrained=pretrained)
    >>> net = prepare(build, "convnext_tiny.pth", act="hermite", act_kwargs={"degree": 3}, num_classes=10)
    >>> net.finetune_report.summary()

`prepare` (1) builds the backbone as the checkpoint was trained -- its original activation and head
size -- and loads the weights (`"timm"`: timm's pretrained weights), (2) swaps every activation for
`act`, each learnable one fitted to the activation it replaces in value and derivative (001 Sec 3.5),
(3) replaces the classifier for `num_classes`, and (4) freezes all but what `train` names:

    act,head   activation coefficients + classifier (001 App O; the default). With a fixed `act` (the
               baseline, e.g. gelu) only the classifier trains -- the "linear probe" the learnable
               activations are compared against.
    act        activation coefficients only (an error with a fixed act: nothing would train)
    head       classifier only (learnable activations stay at their fitted init)
    all        everything (full fine-tuning from the fitted init)

Frozen BatchNorms become `FrozenBatchNorm`, which normalises with the stored statistics in train and
eval mode alike, so every frozen tensor -- parameters and buffers -- stays bit-identical in training.
Pure torch: the trainer only sees fewer parameters with requires_grad.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from timm.layers import freeze_batch_norm_2d
from torch import nn

from ..activations import is_learnable, learnable_parameters
from .pretrained import check_path, read_checkpoint
from .swap import SwapReport, check_act, swap_activations

TIMM = "timm"
TRAIN_PARTS = ("act", "head", "all")
TRAIN_CHOICES = ("act,head", "act", "head", "all")
# exactly these become FrozenBatchNorm; subclasses (timm's BatchNormAct2d: BN + act) go through timm's freeze
PLAIN_BATCHNORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)
# build(act, act_kwargs, num_classes, pretrained) -> model; act None = the model's own activation,
# num_classes None = the architecture's (or timm weights') default
Build = Callable[[Any, Any, Any, bool], nn.Module]


class FrozenBatchNorm(nn.Module):
    """A BatchNorm whose statistics and affine parameters are fixed: eval-mode arithmetic in every mode.

    Keeps the replaced module's parameter and buffer names (state dicts load both ways) and its
    tensors; `F.batch_norm(training=False)` is exactly what the BatchNorm computes in eval mode, so
    the outputs are bit-identical to it. Nothing is updated, whatever `train()` says.
    """

    def __init__(self, bn: nn.modules.batchnorm._BatchNorm):
        super().__init__()
        self.num_features, self.eps = bn.num_features, bn.eps
        self.weight, self.bias = bn.weight, bn.bias  # the same Parameter objects (or None), frozen
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            self.register_buffer(name, getattr(bn, name, None))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}"


@dataclass
class FinetuneReport:
    """What `prepare` did; kept on the model as `model.finetune_report`."""

    source: str  # the checkpoint path, or "timm"
    kind: str  # "timm" | "state_dict" | "visionbench"
    source_act: str | None  # the activation the weights were trained with (None = the model's own)
    source_num_classes: int | None
    num_classes: int | None  # the new head's size (None = the checkpoint's head kept)
    train: str
    swap: SwapReport
    trainable: list[str] = field(default_factory=list)
    frozen_batchnorms: list[str] = field(default_factory=list)

    def max_fit_error(self) -> tuple[float, float]:
        """Worst (value, derivative) sup-norm error of the activation fits on [-3, 3] (0 if none)."""
        fits = [e.fit for e in self.swap if e.fit is not None]
        return (
            max((f.max_abs_error for f in fits), default=0.0),
            max((f.max_abs_deriv_error for f in fits), default=0.0),
        )

    def summary(self) -> str:
        err, derr = self.max_fit_error()
        return (
            f"fine-tune {self.source} ({self.kind}, trained with {self.source_act or 'its own act'}, "
            f"{self.source_num_classes} classes): {self.swap.summary()}, fit error <= {err:.3g} "
            f"(derivative {derr:.3g}); head -> {self.num_classes or self.source_num_classes} classes; "
            f"training {self.train}: {len(self.trainable)} tensors; "
            f"{len(self.frozen_batchnorms)} BatchNorms frozen"
        )


def parse_train(train: str | list[str] | tuple[str, ...]) -> frozenset[str]:
    """The parts of `finetune.train` ("act,head", ["act", "head"], ...); ValueError listing the choices."""
    items = train.split(",") if isinstance(train, str) else list(train or [])
    parts = frozenset(str(p).strip().lower() for p in items if str(p).strip())
    if not parts or not parts <= set(TRAIN_PARTS) or ("all" in parts and len(parts) > 1):
        raise ValueError(f"finetune.train={train!r} is not accepted; choose one of {', '.join(TRAIN_CHOICES)}")
    return parts


def classifier_path(model: nn.Module) -> str:
    """Module path of the classifier (`model.get_classifier()`: timm's API, also the CIFAR models')."""
    get = getattr(model, "get_classifier", None)
    if not callable(get):
        raise ValueError(f"{type(model).__name__} has no get_classifier(): cannot find its head to replace or train")
    head = get()
    path = next((p for p, m in model.named_modules() if m is head), None)
    if not path:
        raise ValueError(f"{type(model).__name__}.get_classifier() returned a module outside the model")
    return path


def count_trainable(model: nn.Module) -> int:
    """Elements of the parameters with requires_grad (shared tensors counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters() if p.requires_grad}.values())


def _under(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith(prefix + ".")


def _list(keys: list[str], limit: int = 20) -> str:
    return ", ".join(keys[:limit]) + (f", ... ({len(keys) - limit} more)" if len(keys) > limit else "")


def _timm_remap(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """The state dict through timm's converter for the architecture, if it has one (e.g. ConvNeXt's
    facebookresearch release, `convnext_tiny_1k_224_ema.pth`, to timm's key names)."""
    fn = getattr(sys.modules.get(type(model).__module__), "checkpoint_filter_fn", None)
    if not callable(fn):
        return None
    try:
        out = fn(dict(state), model)
    except Exception:  # noqa: BLE001 - a converter that does not apply is no match; the direct error is reported
        return None
    return out if isinstance(out, dict) else None


def _resize_and_compare(model: nn.Module, state: dict[str, torch.Tensor], head: str) -> list[str]:
    """Resize the head to the checkpoint's, then list what does not match (empty list = loadable)."""
    weight = state.get(f"{head}.weight")
    classes = int(weight.shape[0]) if weight is not None and weight.dim() >= 1 else None
    if classes is not None and classes != getattr(model.get_classifier(), "out_features", None):
        model.reset_classifier(classes)
    mine = model.state_dict()
    missing = [k for k in mine if k not in state and not _under(k, head)]
    unexpected = [k for k in state if k not in mine and not _under(k, head)]
    shapes = [
        f"{k} {tuple(state[k].shape)} vs model {tuple(mine[k].shape)}"
        for k in mine
        if k in state and state[k].shape != mine[k].shape and not _under(k, head)
    ]
    return [
        p
        for p in (
            f"{len(missing)} missing: {_list(missing)}" if missing else "",
            f"{len(unexpected)} unexpected: {_list(unexpected)}" if unexpected else "",
            f"{len(shapes)} of another shape: {_list(shapes)}" if shapes else "",
        )
        if p
    ]


def load_backbone(model: nn.Module, state: dict[str, torch.Tensor], source: str = "checkpoint") -> int | None:
    """Load `state` into `model`, the classifier excepted; ValueError listing every mismatch.

    The classifier is resized to the checkpoint's (`reset_classifier`) and loaded too, so the model
    is the checkpoint's network; a checkpoint without a classifier that fits leaves the head as built.
    Key names are taken as they are or, failing that, through timm's converter for the architecture.

    Returns:
        The checkpoint's number of classes (None if it has no classifier).
    """
    head = classifier_path(model)
    problems = _resize_and_compare(model, state, head)
    if problems:
        remapped = _timm_remap(model, state)
        if remapped is not None and not _resize_and_compare(model, remapped, head):
            state, problems = remapped, []
    if problems:
        raise ValueError(
            f"{source} does not match {type(model).__name__} (the classifier {head}.* excluded): "
            + "; ".join(problems)
            + ". Check model.name / model.* and the activation the checkpoint was trained with "
            "(finetune.source_act; a visionbench run's config.yaml)"
        )
    mine = model.state_dict()
    head_fits = all(state[k].shape == mine[k].shape for k in mine if _under(k, head) and k in state)
    model.load_state_dict(
        {k: v for k, v in state.items() if k in mine and (head_fits or not _under(k, head))}, strict=False
    )
    weight = state.get(f"{head}.weight")
    return int(weight.shape[0]) if weight is not None and weight.dim() >= 1 else None


def freeze(model: nn.Module, train: str | list[str] = "act,head") -> tuple[list[str], list[str]]:
    """Leave requires_grad only on what `train` names; make frozen BatchNorms `FrozenBatchNorm`.

    Activation coefficients built with `learnable=False` stay frozen in every mode. A frozen SLAF
    (`train=head`) gets momentum 0 so its running statistics stay as fitted.

    Returns:
        (names of the trainable parameters, paths of the frozen BatchNorms).
    """
    parts = parse_train(train)
    if "all" in parts:
        return [n for n, p in model.named_parameters() if p.requires_grad], []
    keep = {id(p) for p in learnable_parameters(model) if p.requires_grad} if "act" in parts else set()
    if "head" in parts:
        keep |= {id(p) for p in model.get_classifier().parameters()}
    for p in model.parameters():
        p.requires_grad_(id(p) in keep)
    frozen_bn: list[str] = []
    for path, m in list(model.named_modules()):
        if any(p.requires_grad for p in m.parameters(recurse=False)):
            continue
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats and path:
            frozen = FrozenBatchNorm(m) if type(m) in PLAIN_BATCHNORMS else freeze_batch_norm_2d(m)
            if frozen is m:
                raise ValueError(
                    f"cannot freeze the statistics of {type(m).__name__} at {path}; use finetune.train=all"
                )
            parent, _, attr = path.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, attr, frozen)
            frozen_bn.append(path)
        elif hasattr(m, "momentum") and isinstance(getattr(m, "running_mean", None), torch.Tensor):
            m.momentum = 0.0  # running = 1 * running + 0 * batch: unchanged, bit for bit
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    return trainable, frozen_bn


def _source_act(ckpt, source_act, source_act_kwargs, model_name):
    """The activation (and options) the checkpoint was trained with: explicit, else its run's config.yaml."""
    if model_name is not None and ckpt.trained_model is not None and ckpt.trained_model != model_name:
        raise ValueError(
            f"{ckpt.path} was trained as model {ckpt.trained_model!r} (its config.yaml), the recipe "
            f"builds {model_name!r}; set model.name={ckpt.trained_model}"
        )
    if source_act is not None:
        return source_act, dict(source_act_kwargs or {})
    if ckpt.trained_act:
        return ckpt.trained_act, dict(ckpt.trained_act_kwargs)
    if ckpt.missing_config:
        raise ValueError(
            f"{ckpt.path}: {ckpt.missing_config}; set finetune.source_act to the activation it was trained with"
        )
    return None, {}


def _build_timm(build: Build, source_act) -> nn.Module:
    if source_act is not None:
        raise ValueError(
            "finetune.checkpoint=timm loads weights trained with the model's own activation; "
            "leave finetune.source_act unset"
        )
    try:
        model = build(None, {}, None, True)
    except OSError as e:  # huggingface_hub / urllib errors: no internet, no cached file
        raise FileNotFoundError(
            f"timm's pretrained weights could not be loaded ({type(e).__name__}: {str(e).splitlines()[0]}). "
            "Without internet, download them where there is (e.g. timm.create_model(name, pretrained=True) and "
            "torch.save(model.state_dict(), 'name.pth')) and pass finetune.checkpoint=/path/name.pth"
        ) from None
    cfg = getattr(model, "pretrained_cfg", None) or {}
    if not any(cfg.get(k) for k in ("hf_hub_id", "url", "file", "state_dict")):
        raise ValueError(
            f"timm has no pretrained weights for {cfg.get('architecture', type(model).__name__)} "
            f"(tag {cfg.get('tag')!r}): it would start from random weights; give finetune.checkpoint=PATH"
        )
    return model


def check(
    checkpoint: str | Path, train: str | list[str], act: str, act_kwargs: dict[str, Any] | None = None
) -> tuple[frozenset[str], str]:
    """Validate fine-tuning settings without loading anything (the sweep calls it before training).

    Returns:
        (the parts of `train`, the canonical act name). ValueError for a bad `train`, act or option, and
        for train=act with an act that has no trainable coefficients; FileNotFoundError for a missing file.
    """
    parts = parse_train(train)
    name = check_act(act, act_kwargs)
    if parts == {"act"} and not (is_learnable(name) and (act_kwargs or {}).get("learnable", True)):
        raise ValueError(
            f"finetune.train=act with act={name}, which has no trainable coefficients: nothing would "
            f"train. Use finetune.train=act,head (= head only for a fixed act) or head"
        )
    if str(checkpoint) != TIMM:
        check_path(Path(checkpoint).expanduser())
    return parts, name


def prepare(
    build: Build,
    checkpoint: str | Path,
    act: str,
    act_kwargs: dict[str, Any] | None = None,
    num_classes: int | None = None,
    train: str | list[str] = "act,head",
    source_act: str | None = None,
    source_act_kwargs: dict[str, Any] | None = None,
    ema: bool = False,
    model_name: str | None = None,
) -> nn.Module:
    """Load a trained backbone, swap its activations to fitted `act`, replace the head, freeze the rest.

    Args:
        build: `build(act, act_kwargs, num_classes, pretrained)` -> the architecture (e.g. a partial of
            `models.create`); act None = its own activation, num_classes None = its default.
        checkpoint: a file `checkpoint.read_checkpoint` reads, or "timm" (timm's pretrained weights).
        act: the activation to fine-tune (registry name); learnable ones are fitted to the replaced one.
        act_kwargs: its options (e.g. {"degree": 3}); an `init` is superseded by the fit.
        num_classes: the new classifier's size; None keeps the checkpoint's classifier.
        train: "act,head" | "act" | "head" | "all" (see the module docstring).
        source_act: the activation the weights were trained with; None = the visionbench run's
            config.yaml, else the model's own (what a timm / torch state dict was trained with).
        source_act_kwargs: its options.
        ema: visionbench / timm-train checkpoints: load the weight-EMA copy.
        model_name: the recipe's model name, checked against a visionbench run's config.yaml.

    Returns:
        The model, with `model.finetune_report` (a `FinetuneReport`) and `model.swap_report`.
    """
    parts, name = check(checkpoint, train, act, act_kwargs)  # fail before loading anything big
    if str(checkpoint) == TIMM:
        model, kind, source_act = _build_timm(build, source_act), TIMM, None
        source_classes = getattr(model.get_classifier(), "out_features", None)
    else:
        ckpt = read_checkpoint(checkpoint, ema=ema)
        source_act, source_opts = _source_act(ckpt, source_act, source_act_kwargs, model_name)
        model, kind = build(source_act, source_opts, num_classes, False), ckpt.kind
        source_classes = load_backbone(model, ckpt.state_dict, source=str(ckpt.path))
        if num_classes is None and source_classes is None:
            raise ValueError(f"{ckpt.path} has no classifier to keep; set the number of classes")
    swap = swap_activations(model, name, act_kwargs, fit_to_replaced=True)
    if num_classes is not None:
        model.reset_classifier(int(num_classes))
    trainable, frozen_bn = freeze(model, parts)
    model.swap_report = swap
    model.finetune_report = FinetuneReport(
        str(checkpoint),
        kind,
        source_act,
        source_classes,
        num_classes,
        ",".join(sorted(parts)),
        swap,
        trainable,
        frozen_bn,
    )
    return model
