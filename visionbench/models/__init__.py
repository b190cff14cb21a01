"""Models: timm factory, CIFAR VGG / ResNet-32, activation swap, norm toggles, LSUV, param groups.

    >>> from visionbench import models
    >>> net = models.create("vgg8", act="rational", num_classes=10, norm="group")
    >>> len(net.swap_report)                       # 8 activations swapped
    >>> models.lsuv_init(net, images)              # optional data-dependent init
    >>> torch.optim.SGD(models.param_groups(net, lr=0.02, weight_decay=5e-4, act_lr_mult=0.5), lr=0.02)

Models know nothing of Lightning; the CIFAR models are also in timm's registry as `vb_vgg4`,
`vb_vgg8`, `vb_resnet32`, paper 003's Fashion-MNIST nets as `vb_fmnist_resnet`, `vb_fmnist_slnn`.
"""

from .factory import MODELS, ModelSpec, create, names, resolve, swin_window_size
from .fmnist_resnet import FashionResNet
from .lsuv import LSUVRecord, lsuv_init, orthonormal_init
from .norms import group_norm, make_norm_free, num_groups
from .param_groups import count_parameters, param_groups
from .resnet_cifar import CifarResNet
from .scan import functional_activations
from .swap import (
    SwapEntry,
    SwapReport,
    check_act,
    fit_target,
    select_sites,
    split_swap_options,
    swap_activations,
    swappable_types,
)
from .vgg import VGG

__all__ = [
    "MODELS",
    "ModelSpec",
    "create",
    "names",
    "resolve",
    "swin_window_size",
    "LSUVRecord",
    "lsuv_init",
    "orthonormal_init",
    "group_norm",
    "make_norm_free",
    "num_groups",
    "count_parameters",
    "param_groups",
    "CifarResNet",
    "functional_activations",
    "SwapEntry",
    "SwapReport",
    "check_act",
    "fit_target",
    "swap_activations",
    "swappable_types",
    "VGG",
    "FashionResNet",
    "select_sites",
    "split_swap_options",
]
