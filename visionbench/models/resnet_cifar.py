"""CIFAR ResNet-32 of He et al. 2016 (Sec 4.2), registered in timm as `vb_resnet32`.

    >>> timm.create_model("vb_resnet32", num_classes=10)            # 0.46M parameters, 31 ReLUs
    >>> visionbench.models.create("resnet32", act="slaf")           # paper 003 Table 5, all 31 swapped

A 3x3 conv (16) -> BN -> ReLU stem, then 3 stages of 5 basic blocks with 16, 32, 64 channels
(the first block of stages 2 and 3 has stride 2), global average pool, linear. A basic block is
conv3x3 -> BN -> act1 -> conv3x3 -> BN, plus the shortcut, -> act2: 1 + 3*5*2 = 31 activations,
the count paper 003 reports for "all activations replaced".

Shortcut: option **A** by default, as He et al. use on CIFAR ("identity shortcuts in all cases"):
where the shape changes, the input is subsampled by 2 and zero-padded with the missing channels,
so the shortcut has no parameters (0.46M in total, matching paper 003 Table 5). Option **B**
(`shortcut="B"`) uses a 1x1 strided conv + norm where the shape changes. Convs use He-normal
init (fan_out), as in He et al.; norms start at weight 1, bias 0.
"""

from __future__ import annotations

import torch.nn.functional as F
from timm.layers import DropPath
from torch import nn

from .builder import pretrained_cfgs, register
from .norms import norm_factory

default_cfgs = pretrained_cfgs(["vb_resnet32"], first_conv="stem.conv")


class PadShortcut(nn.Module):
    """Option A shortcut: stride-2 subsampling, then zero channels appended (parameter-free)."""

    def __init__(self, in_chs: int, out_chs: int, stride: int):
        super().__init__()
        self.stride, self.extra = stride, out_chs - in_chs

    def forward(self, x):
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, 0, self.extra)) if self.extra else x


class BasicBlock(nn.Module):
    def __init__(self, in_chs, out_chs, stride, make_norm, act_layer, shortcut: str, drop_path: float):
        super().__init__()
        self.conv1 = nn.Conv2d(in_chs, out_chs, 3, stride=stride, padding=1, bias=False)
        self.bn1 = make_norm(out_chs)
        self.act1 = act_layer()
        self.conv2 = nn.Conv2d(out_chs, out_chs, 3, stride=1, padding=1, bias=False)
        self.bn2 = make_norm(out_chs)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        if stride == 1 and in_chs == out_chs:
            self.shortcut = nn.Identity()
        elif shortcut == "A":
            self.shortcut = PadShortcut(in_chs, out_chs, stride)
        else:
            self.shortcut = nn.Sequential(nn.Conv2d(in_chs, out_chs, 1, stride=stride, bias=False), make_norm(out_chs))
        self.act2 = act_layer()

    def forward(self, x):
        out = self.bn2(self.conv2(self.act1(self.bn1(self.conv1(x)))))
        return self.act2(self.drop_path(out) + self.shortcut(x))


class CifarResNet(nn.Module):
    """He et al.'s CIFAR ResNet-(6n+2); n = 5 gives ResNet-32.

    Args:
        depth_per_stage: basic blocks per stage (n).
        num_classes: classifier outputs (0 = none).
        in_chans: input channels.
        norm: "batch" (He et al.) or "group" (paper 004's 16-group rule; 16 channels -> 16 groups).
        act_layer: activation constructor, called once per activation site.
        shortcut: "A" (zero-pad identity, default) or "B" (1x1 projection where the shape changes).
        drop_rate: dropout before the classifier.
        drop_path_rate: stochastic depth, rising linearly over the blocks to this rate.
        widths: channels of the three stages.
        img_size: accepted so every model takes the same factory call; the net is fully convolutional.
        device, dtype: where the parameters live, as for timm's own models.
    """

    def __init__(
        self,
        depth_per_stage: int = 5,
        num_classes: int = 10,
        in_chans: int = 3,
        norm: str = "batch",
        act_layer=nn.ReLU,
        shortcut: str = "A",
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        widths: tuple[int, int, int] = (16, 32, 64),
        img_size=None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if shortcut not in ("A", "B"):
            raise ValueError(f"shortcut must be 'A' or 'B', got {shortcut!r}")
        make_norm = norm_factory(norm)
        if make_norm is None:
            raise ValueError("resnet32 needs a norm: 'batch' or 'group'")
        self.num_classes, self.drop_rate = num_classes, drop_rate
        self.stem = nn.Sequential()
        self.stem.add_module("conv", nn.Conv2d(in_chans, widths[0], 3, padding=1, bias=False))
        self.stem.add_module("bn", make_norm(widths[0]))
        self.stem.add_module("act", act_layer())
        total = 3 * depth_per_stage
        rates = [drop_path_rate * i / max(total - 1, 1) for i in range(total)]
        stages, chs, k = [], widths[0], 0
        self.feature_info = []
        for s, width in enumerate(widths):
            blocks = []
            for b in range(depth_per_stage):
                stride = 2 if (s > 0 and b == 0) else 1
                blocks.append(BasicBlock(chs, width, stride, make_norm, act_layer, shortcut, rates[k]))
                chs, k = width, k + 1
            stages.append(nn.Sequential(*blocks))
            self.feature_info.append(dict(num_chs=width, reduction=2**s, module=f"stages.{s}"))
        self.stages = nn.Sequential(*stages)
        self.num_features = self.head_hidden_size = chs
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten(1)
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(chs, num_classes) if num_classes > 0 else nn.Identity()
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if device is not None or dtype is not None:
            self.to(device=device, dtype=dtype)

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        self.num_classes = num_classes
        self.head = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()

    def forward_features(self, x):
        return self.stages(self.stem(x))

    def forward_head(self, x, pre_logits: bool = False):
        x = self.head_drop(self.flatten(self.global_pool(x)))
        return x if pre_logits else self.head(x)

    def forward(self, x):
        return self.forward_head(self.forward_features(x))


register(
    CifarResNet,
    "vb_resnet32",
    "ResNet-32 for CIFAR (He et al. 2016 Sec 4.2), option A shortcuts: 31 activations.",
    (0, 1, 2),  # one map per stage
    depth_per_stage=5,
)
