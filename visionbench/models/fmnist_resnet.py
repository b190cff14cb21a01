"""Paper 003's Fashion-MNIST network, "2 Conv + 2 Res. Blocks + 2 Fc" (Table 6), registered in timm as
`vb_fmnist_resnet`, and the all-SLAF variant of the authors' code as `vb_fmnist_slnn`.

    >>> visionbench.models.create("fmnist_resnet", act="slaf", act_kwargs={"degree": 2})          # SLNN arm: 7 sites
    >>> visionbench.models.create("fmnist_resnet", act="slaf", act_kwargs={"swap_layers": "last"})  # NN(ReLU+SLAF)

Paper 003 (Sec 4.2 item 3, Table 6) says only "a small residual network with two residual blocks and two
fully connected layers followed by a softmax layer", no data augmentation. The rest is from the authors'
code (003 code: github mohit1997/PAF, TensorFlow), `Experiments/FMNIST/fmnist_resnet.py` (`deepnn`,
`res_block2`: the NNRELU baseline), for a 28x28x1 input:

    stem     conv3x3(32) -> BN -> act -> conv1x1(32) -> BN (no act) -> avgpool 2     28 -> 14
    block1   conv3x3(64) -> BN -> act -> conv3x3(64) -> BN, + conv1x1(64)(x) -> act; avgpool 2   14 -> 7
    block2   the same with 128 channels; avgpool 2 (TF 'VALID' pooling: floor)    7 -> 3
    fc1      flatten (3*3*128 = 1152) -> Linear(512) -> BN -> act
    fc2      Linear(512) -> BN -> act
    head     Linear(10)

7 activation sites, in this order: stem.act, block1.act1, block1.act2, block2.act1, block2.act2,
fc1.act, fc2.act. Convs (stride 1, 'SAME' padding) and linears have biases; the shortcut is a plain
1x1 conv (no BN); no dropout (the script feeds keep_prob but uses it nowhere). Init and BatchNorm are
TensorFlow 1.x's defaults, as the script leaves them: Glorot-uniform weights, zero biases, BN
momentum 0.99 (torch: 0.01) and epsilon 1e-3. The script's L2 (scale 5e-5 on every conv / linear
kernel but the classifier's, applied as a separate plain gradient step with the same lr) is AdamW's
decoupled weight decay 5e-5: `no_weight_decay()` names the classifier.

The arms of Table 6 in the code: NN(ReLU+SLAF) is this network with its last activation, fc2's, a
SLAF of degree 2 (`New_Init/FMNIST/fmnist_resnet_SLAF.py`, Ac/8; that script also drops fc2's BN and
puts fc1's BN after its ReLU, both kept here: a SLAF normalises its input's powers itself).
The SLNN arm (Table 6: degree 2^8, i.e. 8 SLAFs) is another network in the code
(`Experiments/FMNIST/fmnist_taylor.py`): `arch="slnn"` here, registered as `vb_fmnist_slnn`:

    stem     conv3x3(32) -> act -> conv3x3(32) -> act -> avgpool 2
    block    h1 = conv3x3(C)(x); out = act(conv3x3(C)(act(h1))) + h1 (the skip is the first conv's
             pre-activation output); avgpool 2; C = 64, then 128
    fc1/fc2  Linear(512) -> act
    head     Linear(10)

8 sites, no BatchNorm anywhere (SLAF normalises its powers). Paper 003 Sec 5 says the three arms share
"same architecture but different activations"; the fashion_mnist_slaf recipe follows the paper (one
network, `fmnist_resnet`, the activation swapped: 7 SLAFs, 2^7), `model.name=fmnist_slnn` runs the code's.
"""

from __future__ import annotations

import torch
from torch import nn

from .builder import pretrained_cfgs, register

# TensorFlow 1.x tf.layers.batch_normalization defaults (003 code leaves them): momentum 0.99, epsilon 1e-3
TF_BN_MOMENTUM, TF_BN_EPS = 0.01, 1e-3
ARCHS = ("resnet", "slnn")
WIDTHS = (32, 64, 128)  # stem, block1, block2 (003 code)
HIDDEN = 512  # fc1, fc2 (003 code)

default_cfgs = pretrained_cfgs(
    [f"vb_fmnist_{arch}" for arch in ARCHS],
    first_conv="stem.conv1",
    input_size=(1, 28, 28),
    mean=(0.2860,),
    std=(0.3530,),
)


def _bn2d(chs: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(chs, eps=TF_BN_EPS, momentum=TF_BN_MOMENTUM)


class ResBlock(nn.Module):
    """003 code's `res_block2`: conv3x3-BN-act-conv3x3-BN, plus a 1x1 conv of the input, then act."""

    def __init__(self, in_chs: int, out_chs: int, act_layer):
        super().__init__()
        self.conv1 = nn.Conv2d(in_chs, out_chs, 3, padding=1)
        self.bn1 = _bn2d(out_chs)
        self.act1 = act_layer()
        self.conv2 = nn.Conv2d(out_chs, out_chs, 3, padding=1)
        self.bn2 = _bn2d(out_chs)
        self.shortcut = nn.Conv2d(in_chs, out_chs, 1)
        self.act2 = act_layer()

    def forward(self, x):
        out = self.bn2(self.conv2(self.act1(self.bn1(self.conv1(x)))))
        return self.act2(out + self.shortcut(x))


class SlnnBlock(nn.Module):
    """003 code's all-SLAF block (fmnist_taylor.py): h1 = conv(x); act(conv(act(h1))) + h1."""

    def __init__(self, in_chs: int, out_chs: int, act_layer):
        super().__init__()
        self.conv1 = nn.Conv2d(in_chs, out_chs, 3, padding=1)
        self.act1 = act_layer()
        self.conv2 = nn.Conv2d(out_chs, out_chs, 3, padding=1)
        self.act2 = act_layer()

    def forward(self, x):
        h1 = self.conv1(x)
        return self.act2(self.conv2(self.act1(h1))) + h1


class FashionResNet(nn.Module):
    """Paper 003's Fashion-MNIST net (module docstring).

    Args:
        arch: "resnet" (003 code's NNRELU network, 7 activations) or "slnn" (its all-SLAF
            network, 8 activations, no BatchNorm).
        num_classes: classifier outputs (0 = no classifier, `forward` returns the fc2 features).
        in_chans: input channels (1).
        img_size: input side (28); sizes fc1 (three 2x2 average pools, floor).
        act_layer: activation constructor, called once per site.
        drop_rate: dropout before the classifier (003 code: none).
        drop_path_rate: must be 0 (accepted because `timm.create_model` callers pass it).
        device, dtype: where the parameters live, as for timm's own models.
    """

    def __init__(
        self,
        arch: str = "resnet",
        num_classes: int = 10,
        in_chans: int = 1,
        img_size=28,
        act_layer=nn.ReLU,
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if arch not in ARCHS:
            raise ValueError(f"arch must be one of {', '.join(ARCHS)}, got {arch!r}")
        if drop_path_rate:
            raise ValueError(
                f"fmnist_{arch} has no drop-path branches: drop_path_rate must be 0, got {drop_path_rate!r}"
            )
        h, w = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        if min(h, w) < 8:
            raise ValueError(f"input {h}x{w} is too small: three 2x2 average pools need at least 8x8")
        self.arch, self.num_classes, self.drop_rate = arch, num_classes, drop_rate
        c0, c1, c2 = WIDTHS
        bn = arch == "resnet"
        self.stem = nn.Sequential()
        self.stem.add_module("conv1", nn.Conv2d(in_chans, c0, 3, padding=1))
        if bn:
            self.stem.add_module("bn1", _bn2d(c0))
        self.stem.add_module("act" if bn else "act1", act_layer())
        self.stem.add_module("conv2", nn.Conv2d(c0, c0, 1 if bn else 3, padding=0 if bn else 1))
        if bn:
            self.stem.add_module("bn2", _bn2d(c0))  # no activation here in 003 code (commented out)
        else:
            self.stem.add_module("act2", act_layer())
        self.stem.add_module("pool", nn.AvgPool2d(2, 2))
        block = ResBlock if bn else SlnnBlock
        self.block1 = nn.Sequential(block(c0, c1, act_layer), nn.AvgPool2d(2, 2))
        self.block2 = nn.Sequential(block(c1, c2, act_layer), nn.AvgPool2d(2, 2))
        self.feature_info = [
            dict(num_chs=c0, reduction=2, module="stem"),
            dict(num_chs=c1, reduction=4, module="block1"),
            dict(num_chs=c2, reduction=8, module="block2"),
        ]
        self.flatten = nn.Flatten(1)
        flat = c2 * (h // 8) * (w // 8)
        self.fc1, self.fc2 = (self._fc(n_in, act_layer, bn) for n_in in (flat, HIDDEN))
        self.num_features = self.head_hidden_size = HIDDEN
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(HIDDEN, num_classes) if num_classes > 0 else nn.Identity()
        self.init_weights()
        if device is not None or dtype is not None:
            self.to(device=device, dtype=dtype)

    @staticmethod
    def _fc(n_in: int, act_layer, bn: bool) -> nn.Sequential:
        fc = nn.Sequential()
        fc.add_module("linear", nn.Linear(n_in, HIDDEN))
        if bn:
            fc.add_module("bn", nn.BatchNorm1d(HIDDEN, eps=TF_BN_EPS, momentum=TF_BN_MOMENTUM))
        fc.add_module("act", act_layer())
        return fc

    @torch.no_grad()
    def init_weights(self) -> None:
        """TensorFlow 1.x's defaults (003 code sets none): Glorot-uniform kernels, zero biases; BN 1, 0."""
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def no_weight_decay(self) -> set[str]:
        """003 code puts no L2 on the classifier (its last `fully_connected` has no regularizer)."""
        return {"head.weight"}

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        if global_pool is not None:
            raise ValueError("fmnist nets flatten their last map: global_pool cannot be set")
        self.num_classes = num_classes
        self.head = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()

    def forward_features(self, x):
        return self.block2(self.block1(self.stem(x)))

    def forward_head(self, x, pre_logits: bool = False):
        x = self.head_drop(self.fc2(self.fc1(self.flatten(x))))
        return x if pre_logits else self.head(x)

    def forward(self, x):
        return self.forward_head(self.forward_features(x))


ENTRYPOINTS = {  # vb_fmnist_<arch>: its docstring; features_only gives the maps of stem, block1, block2
    "resnet": 'Paper 003 Table 6\'s "2 Conv + 2 Res. Blocks + 2 Fc" (003 code fmnist_resnet.py): 7 activations.',
    "slnn": "003 code's all-SLAF Fashion-MNIST net (fmnist_taylor.py): 8 activations, no BatchNorm.",
}
for _arch, _doc in ENTRYPOINTS.items():
    register(FashionResNet, f"vb_fmnist_{_arch}", _doc, (0, 1, 2), arch=_arch)
