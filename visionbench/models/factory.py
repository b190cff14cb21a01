"""Build a benchmark model by short name (or any timm id), with its activations swapped and toggles applied.

    >>> models.create("vgg8", act="rational", act_kwargs={"init": "leaky_relu"}, num_classes=10, norm="group")
    >>> models.create("vit_s8", act="rational", img_size=64, num_classes=200, norm_free=True, drop_path_rate=0.1)
    >>> models.create("convnext_t", act="hermite", pretrained=True, fit_to_replaced=True)   # paper 001 App O

Every model is built with timm's own activation and then swapped (`swap.swap_activations`), so
each model and each activation go through the same code path and the report always says what
was replaced; it is kept on the model as `model.swap_report` (None without `act`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import timm
from torch import nn

from .. import activations
from . import fmnist_resnet, resnet_cifar, vgg  # noqa: F401  (registers vb_vgg4, vb_vgg8, vb_resnet32, vb_fmnist_* in timm)
from .norms import make_norm_free
from .swap import swap_activations, swap_options

SWIN_PATCH, SWIN_WINDOW, SWIN_STAGES = 4, 7, 4


@dataclass(frozen=True)
class ModelSpec:
    """How one short name maps onto timm.

    Attributes:
        timm_id: the timm model name.
        takes_img_size: the constructor sizes itself from `img_size` (transformers, VGG's flatten
            head); CNNs with global pooling ignore it.
        group_norm: timm kwargs that switch the model to GroupNorm; None = toggle unsupported.
        norm_free: blocks' norm1/norm2 can be bypassed (paper 004 App G).
    """

    timm_id: str
    takes_img_size: bool = False
    group_norm: dict[str, Any] | None = None
    norm_free: bool = False


MODELS: dict[str, ModelSpec] = {
    # timm's resnet50_gn variant: timm.layers.GroupNorm, 32 groups (every width divides by 32)
    "resnet50": ModelSpec("resnet50", group_norm={"norm_layer": "groupnorm"}),
    "convnext_t": ModelSpec("convnext_tiny"),
    "vit_s8": ModelSpec("vit_small_patch8_224", takes_img_size=True, norm_free=True),
    "cait_s24": ModelSpec("cait_s24_224", takes_img_size=True, norm_free=True),
    "swin_t": ModelSpec("swin_tiny_patch4_window7_224", takes_img_size=True, norm_free=True),
    "vgg4": ModelSpec("vb_vgg4", takes_img_size=True, group_norm={"norm": "group"}),
    "vgg8": ModelSpec("vb_vgg8", takes_img_size=True, group_norm={"norm": "group"}),
    "resnet32": ModelSpec("vb_resnet32", takes_img_size=True, group_norm={"norm": "group"}),
    # paper 003 Table 6's Fashion-MNIST net (models/fmnist_resnet.py); img_size sizes fc1
    "fmnist_resnet": ModelSpec("vb_fmnist_resnet", takes_img_size=True),
    "fmnist_slnn": ModelSpec("vb_fmnist_slnn", takes_img_size=True),
}
_BY_TIMM_ID = {spec.timm_id: spec for spec in MODELS.values()}
NORMS = ("group",)


def names() -> list[str]:
    """The short model names."""
    return list(MODELS)


def _supporting(attr: str) -> str:
    return ", ".join(n for n, s in MODELS.items() if getattr(s, attr))


def resolve(name: str) -> ModelSpec:
    """The spec of a short name or timm id; ValueError listing what is accepted."""
    if name in MODELS:
        return MODELS[name]
    if name in _BY_TIMM_ID:
        return _BY_TIMM_ID[name]
    if isinstance(name, str) and timm.is_model(name.split(".")[0]):
        return ModelSpec(name, takes_img_size=True)  # other timm models: img_size passes through if given
    raise ValueError(
        f"unknown model {name!r}; accepted: {', '.join(MODELS)}, or any timm model id (timm.list_models())"
    )


def check(name: str, norm: str | None = None, norm_free: bool = False) -> ModelSpec:
    """The spec of model `name` with its norm toggles checked (the one check: `create` and the sweep's
    preflight call it); ValueError naming what is accepted."""
    spec = resolve(name)
    if norm is not None and norm not in NORMS:
        raise ValueError(f"unknown norm {norm!r}; accepted: {', '.join(NORMS)} or None")
    if norm == "group" and spec.group_norm is None:
        raise ValueError(f"norm='group' is not supported by {name!r}; supported models: {_supporting('group_norm')}")
    if norm_free and not spec.norm_free:
        raise ValueError(f"norm_free is not supported by {name!r}; supported models: {_supporting('norm_free')}")
    return spec


def swin_window_size(
    img_size: int, patch_size: int = SWIN_PATCH, max_window: int = SWIN_WINDOW, num_stages: int = SWIN_STAGES
) -> int:
    """The largest window <= `max_window` that tiles every Swin stage's map without padding.

    At 224 px this is timm's 7. At 64 px (paper 004 Table 9) the maps are 16, 8, 4, 2 and 7
    fits none of them: timm 1.0 then pads the first two stages, and its shifted-window mask is
    built for the padded map, so tokens rolled across the image border are not masked from their
    new neighbours. Window 4 tiles 16 and 8 and spans the whole 4x4 and 2x2 maps (timm clamps
    the window to maps no larger than it, without shift), just as 7 spans Swin-T's last 7x7 stage.
    """
    grid = int(img_size) // patch_size
    sizes = [max(grid // 2**s, 1) for s in range(num_stages)]
    for w in range(max_window, 0, -1):
        if all(r <= w or r % w == 0 for r in sizes):
            return w
    return 1


def create(
    name: str,
    act: str | None = None,
    num_classes: int | None = 1000,
    img_size: int | None = None,
    norm: str | None = None,
    norm_free: bool = False,
    fit_to_replaced: bool = False,
    act_kwargs: dict[str, Any] | None = None,
    swap_layers: Any = None,
    **timm_kwargs: Any,
) -> nn.Module:
    """Build model `name` (short name or timm id) and swap its activations to `act`.

    Args:
        name: `resnet50`, `convnext_t`, `vit_s8`, `cait_s24`, `swin_t`, `vgg4`, `vgg8`,
            `resnet32`, `fmnist_resnet`, `fmnist_slnn`, or any timm model id (passed through).
        act: visionbench activation registry name; None keeps the model's own activations.
        num_classes: classifier outputs; None = the timm entrypoint's default.
        img_size: input size for models that size themselves from it (ViT/CaiT/Swin, VGG's
            flatten head); globally pooled CNNs ignore it, as do pass-through timm models whose
            constructor has no `img_size`. For `swin_t` the window is `swin_window_size(img_size)`
            unless `window_size` is passed.
        norm: None (the model's own) or "group" (VGG: GroupNorm after every conv, 16 groups
            reduced to divide the channels; ResNet: GroupNorm instead of BatchNorm).
        norm_free: bypass norm1/norm2 in every transformer block (ViT, CaiT, Swin).
        fit_to_replaced: fit each new learnable activation to the activation it replaces.
        act_kwargs: options of the new activation (e.g. {"init": "gelu"}); the reserved key
            `swap_layers` is the swap's, not the activation's (`act=slaf[swap_layers=last]`).
        swap_layers: which activation sites get `act` (swap.select_sites: "all" / None, "first",
            "last", an index, a list, a slice "a:b"); the others keep the model's own.
        **timm_kwargs: passed to `timm.create_model` (`pretrained` defaults to False;
            `in_chans`, `drop_rate`, `drop_path_rate`, ...).

    Returns:
        The model, with `model.swap_report` (a `SwapReport`, or None without `act`).
    """
    spec = check(name, norm, norm_free)
    if fit_to_replaced and act is None:
        raise ValueError("fit_to_replaced=True needs an act to fit")
    kwargs: dict[str, Any] = {"pretrained": False}
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    if norm == "group":
        kwargs.update(spec.group_norm)
    if img_size is not None and spec.takes_img_size:
        kwargs["img_size"] = img_size
        if spec.timm_id == MODELS["swin_t"].timm_id and "window_size" not in timm_kwargs:
            kwargs["window_size"] = swin_window_size(img_size)
    kwargs.update(timm_kwargs)
    act_kwargs, swap_layers = swap_options(act_kwargs, swap_layers, keyword="swap_layers")
    if swap_layers is not None and act is None:
        raise ValueError(f"swap_layers={swap_layers!r} needs an act to swap in")
    if act is not None:  # fail on a bad activation before spending time on a large model
        activations.check(act, act_kwargs)
    try:
        model = timm.create_model(spec.timm_id, **kwargs)
    except TypeError as err:  # a pass-through CNN that has no img_size: it pools globally, drop it
        if "img_size" not in str(err) or "img_size" in timm_kwargs or spec.timm_id in _BY_TIMM_ID:
            raise
        kwargs.pop("img_size", None)
        model = timm.create_model(spec.timm_id, **kwargs)
    if norm_free:
        make_norm_free(model)
    model.swap_report = (
        swap_activations(model, act, act_kwargs, fit_to_replaced, layers=swap_layers) if act is not None else None
    )
    return model
