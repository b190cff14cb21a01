"""Fine-tuning a trained backbone's activations (paper 001 App O): checkpoint formats, fitted swap
reproducing the source network, freezing (bit-identical frozen tensors, BatchNorm statistics included),
the optimizer's parameters, clear errors, and the fine-tune recipe end to end on CPU fixtures."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from visionbench import models
from visionbench.activations import learnable_parameters
from visionbench.activations.base import one_thread
from visionbench.config import ConfigError
from visionbench.data.digits import digits_split
from visionbench.models import finetune
from visionbench.models.pretrained import read_checkpoint
from visionbench.sweep.preflight import load_config
from visionbench.sweep.sweep import run_sweep

from .helpers import shrunk

# a ResNet-32 on digits, one epoch, one validation batch: the deltas to tests/helpers.py's shrink
RESNET32 = (
    "recipe=digits_resnet32",
    "seeds=1",
    "epochs=1",
    "data.limit_train=128",
    "data.limit_val=64",
    "trainer.limit_val_batches=1",
    "snapshot_epochs=[-1]",
)
# Relative logit error ||f_fitted(x) - f(x)|| / ||f(x)|| on the 360 digits test images of a VGG4 trained
# 3 epochs with the source act (measured: docs/finetune.md). Fits are on [-3, 3]; this VGG4's act inputs
# reach ~4-7, where polynomials grow. Hermite needs degree ~10 for GELU; the paper's degree 3 misses GELU
# by 0.21 on [-3, 3] and does not reproduce the network (rel ~6) -- it is a starting point, not a copy.
TOLERANCE = [
    ("gelu", "rational", {}, 0.05),  # measured 0.033
    ("relu", "rational", {}, 0.05),  # measured 0.021 (ReLU's kink: derivative error 0.49)
    ("gelu", "hermite", {"degree": 10}, 0.05),  # measured 0.013
    ("gelu", "fourier", {"degree": 6}, 0.01),  # measured 0.0003
    ("relu", "tropical_rational", {"degree": 6}, 0.01),
]  # measured 0.0006


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    """No torch.compile of the fused activation kernels: seconds per shape, and not what is tested here."""
    try:
        from visionbench.activations import fused
    except ImportError:
        return
    monkeypatch.setattr(fused, "BACKEND", "eager")


def digits(train: bool, n: int | None = None):
    images, labels = digits_split(train)
    x = (torch.tensor(images[:n], dtype=torch.float32).permute(0, 3, 1, 2) / 255.0 - 0.3053) / 0.3759
    return x, torch.tensor(labels[:n])


def builder(name: str, **kw):
    def build(act, act_kwargs, num_classes, pretrained):
        return models.create(
            name,
            act=act,
            act_kwargs=act_kwargs,
            num_classes=num_classes,
            img_size=8,
            in_chans=1,
            pretrained=pretrained,
            **kw,
        )

    return build


def train_briefly(model: nn.Module, epochs: int = 3, steps: int | None = None, lr: float = 0.02) -> nn.Module:
    with one_thread():
        return _train(model, epochs, steps, lr)


def _train(model: nn.Module, epochs: int, steps: int | None, lr: float) -> nn.Module:
    x, y = digits(True)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr, momentum=0.9)
    model.train()
    g = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        for i, idx in enumerate(torch.randperm(len(x), generator=g).split(64)):
            if steps is not None and i >= steps:
                break
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def vgg4_sources(tmp_path_factory):
    """VGG4s trained 3 epochs on digits with ReLU and GELU, saved as plain state dicts."""
    out = {}
    for act in ("relu", "gelu"):
        torch.manual_seed(0)
        model = train_briefly(models.create("vgg4", act=act, num_classes=10, img_size=8, in_chans=1))
        path = tmp_path_factory.mktemp("src") / f"vgg4_{act}.pth"
        torch.save(model.state_dict(), path)
        out[act] = (model, path)
    return out


@pytest.mark.parametrize("source,act,kwargs,tol", TOLERANCE, ids=[f"{s}-{a}" for s, a, _, _ in TOLERANCE])
def test_fitted_activations_reproduce_the_source_logits(vgg4_sources, source, act, kwargs, tol):
    original, path = vgg4_sources[source]
    net = finetune.prepare(builder("vgg4"), path, act, kwargs, num_classes=None, source_act=source).eval()
    x, _ = digits(False)
    with torch.no_grad(), one_thread():
        ref, out = original(x), net(x)
    assert ((out - ref).norm() / ref.norm()).item() < tol
    assert net.finetune_report.source_num_classes == 10 and len(net.swap_report) == 4


def test_same_fixed_act_reproduces_the_source_exactly(vgg4_sources):
    original, path = vgg4_sources["gelu"]
    net = finetune.prepare(builder("vgg4"), path, "gelu", num_classes=None, source_act="gelu").eval()
    x, _ = digits(False, 64)
    with torch.no_grad():
        assert torch.equal(net(x), original(x))
    assert net.finetune_report.trainable == ["head.weight", "head.bias"]  # act,head with a fixed act = head only


def test_batchnorm_resnet_frozen_tensors_stay_bit_identical_in_training(tmp_path):
    torch.manual_seed(0)
    source = train_briefly(
        models.create("resnet32", act="gelu", num_classes=10, img_size=8, in_chans=1), epochs=1, steps=3, lr=0.05
    )
    torch.save({"state_dict": source.state_dict(), "epoch": 1}, tmp_path / "r32.pth")  # timm train.py nesting
    for act in ("hermite", "rational"):
        net = finetune.prepare(builder("resnet32"), tmp_path / "r32.pth", act, num_classes=10, source_act="gelu")
        report = net.finetune_report
        assert len(report.frozen_batchnorms) == 1 + 3 * 5 * 2  # stem + 2 per block (option-A shortcuts: no norm)
        before = {k: v.clone() for k, v in net.state_dict().items()}
        trainable = set(report.trainable)
        coefficients = {n for n, p in net.named_parameters() if any(p is q for q in learnable_parameters(net))}
        assert set(before) - coefficients == set(source.state_dict())  # FrozenBatchNorm keeps BatchNorm's keys
        assert trainable == coefficients | {"head.weight", "head.bias"}
        train_briefly(net, epochs=1, steps=3, lr=0.05)
        after = net.state_dict()
        for k, v in before.items():
            if k in trainable:
                assert not torch.equal(v, after[k]), f"{act}: {k} did not train"
            else:
                assert torch.equal(v, after[k]), f"{act}: frozen {k} changed"
                if not k.startswith("head."):
                    assert torch.equal(v, source.state_dict()[k]), k


def test_frozen_batchnorm_is_eval_batchnorm_bit_for_bit():
    bn = nn.BatchNorm2d(5)
    bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2), bn.weight.data.uniform_(0.5, 2)
    x = torch.randn(4, 5, 3, 3)
    frozen = finetune.FrozenBatchNorm(bn.eval())
    expected = bn(x)
    frozen.train()
    assert torch.equal(frozen(x), expected)
    assert torch.equal(frozen.running_mean, bn.running_mean) and int(frozen.num_batches_tracked) == 0


@pytest.mark.parametrize("train", ["head", "act", "all"])
def test_train_choices(vgg4_sources, train):
    net = finetune.prepare(builder("vgg4"), vgg4_sources["relu"][1], "hermite", num_classes=5, train=train)
    names = {n for n, p in net.named_parameters() if p.requires_grad}
    want = {
        "head": {"head.weight", "head.bias"},
        "act": {n for n, _ in net.named_parameters() if ".act" in n},  # stages.*.act*.weight
        "all": {n for n, _ in net.named_parameters()},
    }[train]
    assert names == want and len(want) >= 2 and net.get_classifier().out_features == 5


def test_frozen_slaf_keeps_its_statistics(vgg4_sources):
    net = finetune.prepare(builder("vgg4"), vgg4_sources["relu"][1], "slaf", num_classes=10, train="head")
    before = {k: v.clone() for k, v in net.state_dict().items()}
    assert any(k.endswith("act1.running_mean") for k in before)
    train_briefly(net, epochs=1, steps=2)
    after = net.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in before.items() if not k.startswith("head."))


@pytest.mark.parametrize("layout", ["plain", "state_dict", "model", "module", "ema", "timm_train", "safetensors"])
def test_checkpoint_layouts(tmp_path, layout):
    net = models.create("vgg4", num_classes=10, img_size=8, in_chans=1)
    state = net.state_dict()
    path = tmp_path / {"safetensors": "w.safetensors", "timm_train": "model_best.pth.tar"}.get(layout, "w.pt")
    if layout == "safetensors":
        from safetensors.torch import save_file

        save_file(state, str(path))
    else:
        obj = {
            "plain": state,
            "state_dict": {"state_dict": state, "optimizer": {}},
            "model": {"model": state, "args": 1},
            "module": {f"module.{k}": v for k, v in state.items()},
            "ema": {"state_dict": {k: v * 0 for k, v in state.items()}, "state_dict_ema": state},
            "timm_train": {
                "epoch": 3,
                "arch": "vb_vgg4",
                "state_dict": state,
                "optimizer": {},
                "args": argparse.Namespace(lr=0.1),
                "version": 2,
            },
        }[layout]
        torch.save(obj, path)
    ckpt = read_checkpoint(path, ema=layout == "ema")
    assert ckpt.kind == "state_dict" and set(ckpt.state_dict) == set(state)
    assert all(torch.equal(ckpt.state_dict[k], v) for k, v in state.items())


def test_errors_say_what_is_wrong_and_what_is_accepted(vgg4_sources, tmp_path):
    build, path = builder("vgg4"), vgg4_sources["relu"][1]
    with pytest.raises(FileNotFoundError, match=r"does not exist.*\.pth.*\.safetensors.*timm"):
        finetune.prepare(build, tmp_path / "missing.pth", "hermite", num_classes=10)
    with pytest.raises(FileNotFoundError, match="is a directory"):
        finetune.prepare(build, tmp_path, "hermite", num_classes=10)
    (tmp_path / "w.npz").write_bytes(b"")
    with pytest.raises(ValueError, match=r"unknown file type '\.npz'; accepted: \.pth"):
        finetune.prepare(build, tmp_path / "w.npz", "hermite", num_classes=10)
    with pytest.raises(ValueError, match="nothing would train"):
        finetune.prepare(build, path, "gelu", num_classes=10, train="act")
    with pytest.raises(ValueError, match="choose one of act,head, act, head, all"):
        finetune.prepare(build, path, "hermite", num_classes=10, train="act,all")
    torch.save({"optimizer": {"lr": 1.0}}, tmp_path / "opt.pth")
    with pytest.raises(ValueError, match="no state dict found.*the file holds: optimizer"):
        finetune.prepare(build, tmp_path / "opt.pth", "hermite", num_classes=10)
    # VGG4 into VGG8 (and back): every key the two do not share is listed, the replaced head is not
    torch.save(models.create("vgg8", num_classes=3, in_chans=1).state_dict(), tmp_path / "vgg8.pth")
    with pytest.raises(
        ValueError,
        match=r"does not match VGG \(the classifier head\.\* excluded\): 8 unexpected: "
        r"stages\.0\.conv2\.weight, stages\.0\.conv2\.bias, stages\.1\.conv2",
    ) as e:
        finetune.prepare(build, tmp_path / "vgg8.pth", "hermite", num_classes=10)
    assert "head." not in str(e.value).split("excluded")[1]
    with pytest.raises(ValueError, match=r"8 missing: stages\.0\.conv2\.weight, .*stages\.3\.conv2\.bias"):
        finetune.prepare(
            lambda a, kw, n, p: models.create("vgg8", act=a, num_classes=n, in_chans=1), path, "hermite", num_classes=10
        )
    with pytest.raises(ValueError, match=r"another shape: stages\.0\.conv1\.weight \(64, 3, 3, 3\) vs model \(64, 1"):
        torch.save(models.create("vgg4", num_classes=3, in_chans=3).state_dict(), tmp_path / "rgb.pth")
        finetune.prepare(build, tmp_path / "rgb.pth", "hermite", num_classes=10)


def test_timm_weights_without_internet_is_a_clear_error(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # fail at once, no network retries

    def build(act, kw, n, pretrained):
        return models.create("test_resnet", act=act, num_classes=n, pretrained=pretrained)

    with pytest.raises(FileNotFoundError, match="timm's pretrained weights could not be loaded.*finetune.checkpoint="):
        finetune.prepare(build, "timm", "hermite", num_classes=10)
    with pytest.raises(ValueError, match="no pretrained weights"):
        finetune.prepare(builder("vgg4"), "timm", "hermite", num_classes=10)


# ---- through the sweep: visionbench checkpoints, Lightning training, the recipe ----------------
@pytest.fixture(scope="module")
def source_run(tmp_path_factory):
    """A visionbench ResNet-32 (BatchNorm) run on digits with ReLU: last.ckpt + config.yaml. (Its act inputs
    reach ~30-60: an unclamped cubic Hermite, or a rational fitted to GELU (~45 x for |x| >> 3), overflows.)"""
    root = tmp_path_factory.mktemp("source")
    cfg = load_config([f"results_dir={root}", *shrunk(*RESNET32, "act=relu")])
    with one_thread():
        (o,) = run_sweep(cfg, progress=False)
    assert o.status == "completed"
    return o.run_dir / "checkpoints" / "last.ckpt"


def test_finetune_run_trains_only_act_and_head(source_run, tmp_path, monkeypatch):
    from visionbench.train.module import ClassificationModule

    seen = []
    configure = ClassificationModule.configure_optimizers

    def spy(self):
        out = configure(self)
        seen.append(
            dict(
                optimized={id(p) for g in out["optimizer"].param_groups for p in g["params"]},
                trainable={id(p) for p in self.model.parameters() if p.requires_grad},
                names=set(self.model.finetune_report.trainable),
                init={k: v.clone() for k, v in self.model.state_dict().items()},
            )
        )
        return out

    monkeypatch.setattr(ClassificationModule, "configure_optimizers", spy)
    cfg = load_config(
        [
            f"results_dir={tmp_path}",
            *shrunk(*RESNET32, "act=hermite,rational"),
            f"finetune.checkpoint={source_run}",
            "act_options.hermite.clamp=true",
        ]
    )
    with one_thread():
        outcomes = run_sweep(cfg, progress=False)
    source = read_checkpoint(source_run).state_dict
    for o, s, per_site in zip(outcomes, seen, (4 + 1, 6 + 4)):
        assert o.status == "completed", o.summary.get("error")
        assert s["optimized"] == s["trainable"] and s["trainable"]
        final = read_checkpoint(o.run_dir / "checkpoints" / "last.ckpt").state_dict
        assert set(final) == set(s["init"])
        for k, v in s["init"].items():
            if k in s["names"]:
                assert not torch.equal(v, final[k]), f"{o.act}: {k} did not train"
            else:
                assert torch.equal(v, final[k]), f"{o.act}: frozen {k} changed"
                assert k.startswith("head.") or torch.equal(v, source[k]), k
        assert any(k.endswith("running_mean") for k in s["init"])
        summary = json.loads((o.run_dir / "summary.json").read_text())
        assert summary["act_params"] == 31 * per_site  # hermite(3): 4 + clamp L, rational A (5, 4): 6 + 4
        assert summary["trainable_params"] == 31 * per_site + 64 * 10 + 10 < summary["params"]


def test_missing_config_yaml_and_wrong_model_are_clear_errors(source_run, tmp_path):
    lone = tmp_path / "lone" / "last.ckpt"
    lone.parent.mkdir()
    lone.write_bytes(source_run.read_bytes())
    with pytest.raises(ValueError, match="without its run's config.yaml.*finetune.source_act"):
        finetune.prepare(builder("resnet32"), lone, "hermite", num_classes=10)
    with pytest.raises(ValueError, match="trained as model 'resnet32'.*set model.name=resnet32"):
        finetune.prepare(builder("vgg4"), source_run, "hermite", num_classes=10, model_name="vgg4")
    with pytest.raises(ValueError, match=r"no EMA weights \(ema\.module\.\*"):
        finetune.prepare(builder("resnet32"), source_run, "hermite", num_classes=10, ema=True)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(["recipe=finetune_cifar10_convnext_t", f"finetune.checkpoint={tmp_path}/none.pth"])


def _recipe_on_fixture(tmp_path, cifar_root, model_name: str, *extra: str):
    torch.manual_seed(0)
    kwargs = {"img_size": 32} if model_name == "vgg4" else {}
    src = models.create(model_name, num_classes=7, **kwargs)  # a 7-class "pretrained" net: the head is replaced
    torch.save(src.state_dict(), tmp_path / "src.pth")
    cfg = load_config(
        [
            "recipe=finetune_cifar10_convnext_t",
            f"results_dir={tmp_path}",
            f"data.root={cifar_root}",
            f"model.name={model_name}",
            f"finetune.checkpoint={tmp_path / 'src.pth'}",
            "epochs=1",
            "seeds=1",
            "snapshot_epochs=[-1]",
            *extra,
            # the recipe pins convnext_tiny's weight tag (fb_in1k), which no other model has
            *(["model.kwargs.pretrained_cfg=null"] if model_name != "convnext_t" else []),
        ]
    )
    with one_thread():
        return run_sweep(cfg, progress=False)


def test_finetune_recipe_end_to_end_on_a_cifar_fixture(tmp_path, cifar_root):
    gelu, hermite = _recipe_on_fixture(tmp_path, cifar_root, "vgg4", "act=gelu,hermite")
    assert (gelu.status, hermite.status) == ("completed", "completed"), hermite.summary.get("error")
    head = 256 * 10 + 10
    assert gelu.summary["trainable_params"] == head and gelu.summary["act_params"] == 0  # the baseline: head only
    assert hermite.summary["trainable_params"] == head + 4 * (4 + 1)  # + Hermite(3) coefficients and clamp L
    assert gelu.summary["baseline"] == "gelu"


@pytest.mark.slow
def test_finetune_recipe_convnext_t_on_a_cifar_fixture(tmp_path, cifar_root):
    gelu, hermite = _recipe_on_fixture(tmp_path, cifar_root, "convnext_t", "act=gelu,hermite")
    assert (gelu.status, hermite.status) == ("completed", "completed"), hermite.summary.get("error")
    assert gelu.summary["trainable_params"] == 768 * 10 + 10
    assert hermite.summary["trainable_params"] == 768 * 10 + 10 + 18 * 5  # 18 block-MLP GELUs


@pytest.mark.slow
def test_facebook_convnext_checkpoint_is_remapped(tmp_path):
    import re

    torch.manual_seed(0)
    net = models.create("convnext_t", num_classes=1000)
    fb = {}
    for k, v in net.state_dict().items():  # timm -> facebookresearch/ConvNeXt names (the inverse of timm's filter)
        k = k.replace("stem.", "downsample_layers.0.").replace("conv_dw", "dwconv").replace("mlp.fc", "pwconv")
        k = re.sub(r"stages\.(\d+)\.downsample\.(\d+)", r"downsample_layers.\1.\2", k)
        k = re.sub(r"stages\.(\d+)\.blocks\.(\d+)", r"stages.\1.\2", k)
        k = k.replace("head.fc.", "head.").replace("head.norm.", "norm.")
        fb[k] = v
    torch.save({"model": fb}, tmp_path / "convnext_tiny_1k_224_ema.pth")

    def build(act, kw, n, pretrained):
        return models.create("convnext_t", act=act, num_classes=n, pretrained=pretrained)

    ft = finetune.prepare(build, tmp_path / "convnext_tiny_1k_224_ema.pth", "gelu", num_classes=None).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(ft(x), net.eval()(x))


def test_finetune_train_is_read_one_way_by_the_preflight_and_the_surgery():
    """One rule (models/finetune.py `parse_train`): parts in any order, accepted by both."""
    assert load_config(["finetune.train='head,act'"]).finetune.train == "head,act"  # quoted: not a factor
    assert finetune.parse_train("head,act") == finetune.parse_train("act,head")
    with pytest.raises(ConfigError, match="finetune.train must be one of act,head, act, head, all"):
        load_config(["finetune.train='act,everything'"])
