"""CIFAR VGG4 / VGG8 of paper 004 (Sec 5.1, App E, Table 6), registered in timm as `vb_vgg4`, `vb_vgg8`.

    >>> timm.create_model("vb_vgg8", num_classes=10, norm="group", drop_rate=0.3)
    >>> visionbench.models.create("vgg4", act="rational", in_chans=1)   # 8x8 digits

Each stage is [3x3 conv (padding 1, bias) -> [GroupNorm] -> act] x n, then a 2x2 max-pool;
VGG4 = (1x64, 1x128, 2x256), VGG8 = (2x64, 2x128, 2x256, 2x512). The classifier is
global pool -> flatten -> [dropout] -> linear.

Paper 004's text does not give the classifier's input; 004 code (the plain and augmented CIFAR
scripts) flattens the whole final map: VGG4 4x4x256 -> Linear(4096, 10) (1,001,866 parameters
with ReLU), VGG8 2x2x512 -> Linear(2048, 10) (4,705,866). That is `global_pool="flatten"` (the
linear layer is then sized from `img_size`), which the cifar10_vgg* recipes set.
`global_pool="avg"` (default) averages the final map to 1x1, which is that same flatten whenever
the map is already 1x1 (VGG4 on 8x8 digits) and keeps the model usable at any input size whose
pooled map is >= 1x1. Everything else is as in 004 code: the stage widths, 3x3 convs (stride 1,
padding 1, bias), GroupNorm (004 code: 16 groups reduced to divide the channels) between conv and
activation, a 2x2 max-pool ending every stage, dropout after the flatten, and PyTorch's default
init (paper 004 App E: "standard PyTorch default initialization").
"""

from __future__ import annotations

from torch import nn

from .builder import pretrained_cfgs, register
from .norms import norm_factory

VGG_CFGS = {
    "vb_vgg4": ((1, 64), (1, 128), (2, 256)),
    "vb_vgg8": ((2, 64), (2, 128), (2, 256), (2, 512)),
}


default_cfgs = pretrained_cfgs(VGG_CFGS, first_conv="stages.0.conv1")


class VGG(nn.Module):
    """A plain CIFAR VGG: conv stages with one activation after every conv.

    Args:
        stages: (number of convs, channels) per stage.
        num_classes: classifier outputs (0 = no classifier, `forward` returns pooled features).
        in_chans: input channels (1 for the digits data).
        norm: None (paper's plain VGG), "group" (paper 004's GroupNorm toggle) or "batch".
        act_layer: activation constructor, called as `act_layer()` once per conv.
        drop_rate: dropout before the linear classifier (paper 004 Table 6: 0.3 augmented).
        global_pool: "avg" (adaptive average to 1x1) or "flatten" (the whole final map).
        img_size: input size, needed only by `global_pool="flatten"` and to check the pooled map.
        drop_path_rate: must be 0 (there are no residual branches); accepted because
            `timm.create_model` callers pass it to every model.
        device, dtype: where the parameters live, as for timm's own models.
    """

    def __init__(
        self,
        stages: tuple[tuple[int, int], ...],
        num_classes: int = 10,
        in_chans: int = 3,
        norm: str | None = None,
        act_layer=nn.ReLU,
        drop_rate: float = 0.0,
        global_pool: str = "avg",
        img_size: int | tuple[int, int] | None = None,
        drop_path_rate: float = 0.0,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if drop_path_rate:
            raise ValueError(f"VGG has no residual branches: drop_path_rate must be 0, got {drop_path_rate!r}")
        if global_pool not in ("avg", "flatten"):
            raise ValueError(f"global_pool must be 'avg' or 'flatten', got {global_pool!r}")
        make_norm = norm_factory(norm)
        self.num_classes, self.drop_rate, self.global_pool_type = num_classes, drop_rate, global_pool
        self.min_img_size = 2 ** len(stages)  # every stage halves the map; it must stay >= 1x1
        if img_size is not None:
            self._check_size(img_size)
        blocks, chs = [], in_chans
        self.feature_info = []
        for i, (n, out) in enumerate(stages):
            stage = nn.Sequential()
            for j in range(1, n + 1):
                stage.add_module(f"conv{j}", nn.Conv2d(chs, out, kernel_size=3, padding=1, bias=True))
                if make_norm is not None:
                    stage.add_module(f"norm{j}", make_norm(out))
                stage.add_module(f"act{j}", act_layer())
                chs = out
            stage.add_module("pool", nn.MaxPool2d(kernel_size=2, stride=2))
            blocks.append(stage)
            self.feature_info.append(dict(num_chs=out, reduction=2 ** (i + 1), module=f"stages.{i}"))
        self.stages = nn.Sequential(*blocks)
        if global_pool == "avg":
            self.global_pool, final_hw = nn.AdaptiveAvgPool2d(1), 1
        else:
            if img_size is None:
                raise ValueError("global_pool='flatten' needs img_size to size the classifier")
            h, w = (img_size, img_size) if isinstance(img_size, int) else img_size
            final_hw = (h // self.min_img_size) * (w // self.min_img_size)
            self.global_pool = nn.Identity()
        self.num_features = self.head_hidden_size = chs * final_hw
        self.flatten = nn.Flatten(1)
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()
        if device is not None or dtype is not None:
            self.to(device=device, dtype=dtype)

    def _check_size(self, img_size) -> None:
        h, w = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        if min(h, w) < self.min_img_size:
            raise ValueError(
                f"input {h}x{w} is too small: the 2x2 max-pools need at least "
                f"{self.min_img_size}x{self.min_img_size} to keep a >= 1x1 map"
            )

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        if global_pool is not None and global_pool != self.global_pool_type:
            raise ValueError("changing global_pool after construction is not supported")
        self.num_classes = num_classes
        self.head = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()

    def forward_features(self, x):
        if min(x.shape[-2:]) < self.min_img_size:
            self._check_size(tuple(x.shape[-2:]))
        return self.stages(x)

    def forward_head(self, x, pre_logits: bool = False):
        x = self.head_drop(self.flatten(self.global_pool(x)))
        return x if pre_logits else self.head(x)

    def forward(self, x):
        return self.forward_head(self.forward_features(x))


for _name, _stages in VGG_CFGS.items():  # vb_vgg4, vb_vgg8; features_only gives one map per stage
    _blocks, _acts = ", ".join(f"{n}x{c}" for n, c in _stages), sum(n for n, _ in _stages)
    register(
        VGG,
        _name,
        f"VGG{_acts} of paper 004: ({_blocks}), {_acts} activations.",
        tuple(range(len(_stages))),
        stages=_stages,
    )
