"""Fashion-MNIST (data/fashion_mnist.py), paper 003's Fashion-MNIST net (models/fmnist_resnet.py), the per-site
swap (`layers` / `swap_layers`) and the two recipes. Tiny IDX files are written here in the exact format;
tests that need the real files skip without them (`make data-fashion-mnist`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from visionbench import data, models
from visionbench.config import recipe_config, run_config
from visionbench.data import fashion_mnist as fm
from visionbench.data.datasets import CorruptDataError, DatasetNotFoundError

from .fixtures_fashion_mnist import TEST_PER_CLASS, TRAIN_PER_CLASS, idx_bytes, pixel, split_arrays, write_fmnist

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_system_copy(monkeypatch, tmp_path):
    """The machine's own /usr/share/datasets/fashion-mnist (if apt installed it) must not leak into these tests."""
    monkeypatch.setattr(fm, "SYSTEM_DIRS", (tmp_path / "no-system-copy",))
    monkeypatch.delenv(data.DATA_ENV_VAR, raising=False)


def make(cfg: dict, **kwargs):
    return data.create_datamodule({"name": "fashion_mnist", **cfg}, batch_size=kwargs.pop("batch_size", 16), **kwargs)


def one_line(err: BaseException, *names: str) -> str:
    msg = str(err)
    assert "\n" not in msg, msg
    for name in names:
        assert name in msg, msg
    return msg


# ---- the loader ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("folder", ["FashionMNIST/raw", "fashion-mnist", "usr/share/datasets/fashion-mnist", ""])
@pytest.mark.parametrize("gz", [False, True])
def test_reads_every_layout_plain_or_gz_labels_match_images(tmp_path, folder, gz):
    write_fmnist(tmp_path / folder if folder else tmp_path, gz=gz)
    dm = make({"root": str(tmp_path), "mean": [0.0], "std": [1.0]})
    assert (dm.num_classes, dm.in_chans, dm.img_size, dm.has_test) == (10, 1, 28, False)
    dm.setup()
    assert len(dm.train_set) == 10 * TRAIN_PER_CLASS and len(dm.val_set) == 10 * TEST_PER_CLASS  # val = test set
    for subset, offset in ((dm.train_set, 0), (dm.val_set, 10)):
        for i in range(len(subset)):
            x, y = subset[i]
            assert x.shape == (1, 28, 28) and x.dtype == torch.float32
            assert pixel(y, 0 + offset) <= round(float(x[0, 0, 0]) * 255) < pixel(y, 10 + offset)  # label <-> image


def test_held_out_split_is_stratified_and_test_is_the_t10k_files(tmp_path):
    write_fmnist(tmp_path / "fashion-mnist")
    dm = make({"root": str(tmp_path), "val_split": 0.5}, test_in_val=True)
    dm.setup()
    assert dm.has_test and len(dm.val_dataloader()) == 2
    assert np.bincount(dm.val_set.targets).tolist() == [TRAIN_PER_CLASS // 2] * 10
    assert np.bincount(dm.train_set.targets).tolist() == [TRAIN_PER_CLASS // 2] * 10
    assert len(dm.test_set) == 10 * TEST_PER_CLASS and dm.test_set.source.classes[9] == "Ankle boot"
    again = make({"root": str(tmp_path), "val_split": 0.5}, seed=3)
    again.setup()
    assert (again.val_set.indices == dm.val_set.indices).all()  # the split does not depend on the seed


def test_found_through_env_var_and_the_debian_install_path(tmp_path, monkeypatch):
    write_fmnist(tmp_path / "env" / "usr/share/datasets/fashion-mnist", gz=True)  # `dpkg -x` into the data root
    monkeypatch.setenv(data.DATA_ENV_VAR, str(tmp_path / "env"))
    assert fm.find_folder(make({}).root) == tmp_path / "env/usr/share/datasets/fashion-mnist"
    monkeypatch.delenv(data.DATA_ENV_VAR)
    system = write_fmnist(tmp_path / "root" / "usr/share/datasets/fashion-mnist", gz=True)  # apt-get install, at /
    monkeypatch.setattr(fm, "SYSTEM_DIRS", (system,))
    dm = make({"root": str(tmp_path / "empty")})
    dm.setup()
    assert len(dm.train_set) == 10 * TRAIN_PER_CLASS


def test_missing_dataset_names_root_layout_and_fixes(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        make({"root": str(tmp_path / "nowhere")})
    msg = str(e.value)
    assert "data.root" in msg and "make data-fashion-mnist" in msg and "data.download=true" in msg
    assert "usr/share/datasets/fashion-mnist" in msg
    make({"root": str(tmp_path / "nowhere"), "download": True})  # no error: prepare_data() downloads


def test_download_goes_through_torchvision(tmp_path, monkeypatch):
    import torchvision.datasets

    calls = []

    class FakeFashionMNIST:  # what torchvision's download leaves: <root>/FashionMNIST/raw/ (plain and .gz)
        def __init__(self, root, train, download):
            calls.append((root, train, download))
            write_fmnist(Path(root) / "FashionMNIST" / "raw")

    monkeypatch.setattr(torchvision.datasets, "FashionMNIST", FakeFashionMNIST)
    dm = make({"root": str(tmp_path), "download": True})
    dm.prepare_data()
    dm.setup()
    assert [c[2] for c in calls] == [True, True] and len(dm.train_set) == 10 * TRAIN_PER_CLASS


@pytest.mark.parametrize("gz", [False, True])
def test_one_missing_file_is_one_line_naming_it(tmp_path, gz):
    write_fmnist(tmp_path, gz=gz, skip=("t10k-labels-idx1-ubyte",))
    with pytest.raises(DatasetNotFoundError) as e:
        make({"root": str(tmp_path)})
    one_line(e.value, str(tmp_path / "t10k-labels-idx1-ubyte"), "missing", "make data-fashion-mnist")


def _damage(path: Path, how: str) -> None:
    raw = path.read_bytes()
    if how == "truncated":
        path.write_bytes(raw[:-100])
    elif how == "header":
        path.write_bytes(raw[:6])
    elif how == "magic":
        path.write_bytes((2049).to_bytes(4, "big") + raw[4:])  # an image file that says it holds labels
    elif how == "trailing":
        path.write_bytes(raw + b"\0" * 7)


@pytest.mark.parametrize(
    "how, words",
    [
        ("truncated", "truncated: header announces 60 images (47040 bytes)"),
        ("header", "shorter than the 16-byte IDX images header"),
        ("magic", "magic number 2049 (an IDX label file), expected 2051"),
        ("trailing", "longer than its header says"),
    ],
)
def test_corrupt_image_file_is_one_line_naming_it(tmp_path, how, words):
    write_fmnist(tmp_path)
    _damage(tmp_path / "train-images-idx3-ubyte", how)
    with pytest.raises(CorruptDataError) as e:
        make({"root": str(tmp_path)})
    one_line(e.value, str(tmp_path / "train-images-idx3-ubyte"), words, "replace the file")


def test_wrong_label_magic_bad_label_and_count_mismatch(tmp_path):
    labels = tmp_path / "t10k-labels-idx1-ubyte"
    write_fmnist(tmp_path)
    labels.write_bytes(b"\0\0\x08\x03" + labels.read_bytes()[4:])
    with pytest.raises(CorruptDataError) as e:
        make({"root": str(tmp_path)})
    one_line(e.value, str(labels), "magic number 2051 (an IDX image file), expected 2049 (IDX labels)")

    test_images, test_labels = split_arrays(TEST_PER_CLASS, offset=10)
    labels.write_bytes(idx_bytes(test_labels[:-1], 2049))  # one label short: both files are well-formed
    with pytest.raises(CorruptDataError) as e:
        make({"root": str(tmp_path)})
    one_line(
        e.value,
        str(labels),
        f"{len(test_labels) - 1} labels for the {len(test_images)} images of",
        str(tmp_path / "t10k-images-idx3-ubyte"),
    )

    bad = test_labels.copy()
    bad[3] = 10
    labels.write_bytes(idx_bytes(bad, 2049))
    with pytest.raises(CorruptDataError) as e:
        make({"root": str(tmp_path)})
    one_line(e.value, str(labels), "labels must be 0..9, found 10")


def test_torn_gzip_and_wrong_image_size(tmp_path):
    write_fmnist(tmp_path, gz=True)
    gz = tmp_path / "train-labels-idx1-ubyte.gz"
    gz.write_bytes(gz.read_bytes()[:20])
    with pytest.raises(CorruptDataError) as e:
        make({"root": str(tmp_path)})
    one_line(e.value, str(gz), "not a readable gzip file")

    big = np.zeros((2, 32, 32), dtype=np.uint8)
    path = tmp_path / "x-idx3-ubyte"
    path.write_bytes(idx_bytes(big, 2051))
    with pytest.raises(CorruptDataError) as e:
        fm.read_idx(path, "images")
    one_line(e.value, str(path), "images are 32x32, expected 28x28")


# ---- the real files (make data-fashion-mnist) --------------------------------------------------------------


def _real_folder() -> Path | None:
    import os

    roots = [Path(os.environ[data.DATA_ENV_VAR])] if os.environ.get(data.DATA_ENV_VAR) else []
    for root in roots + [REPO / "data"]:
        for folder in fm.candidate_dirs(root.resolve())[: -len(fm.SYSTEM_DIRS)] + [
            Path("/usr/share/datasets/fashion-mnist")
        ]:
            if all(fm.file_path(folder, n) for n in fm.FILES):
                return folder
    return None


REAL = _real_folder()
needs_real = pytest.mark.skipif(
    REAL is None, reason="the real Fashion-MNIST files are not here (make data-fashion-mnist, or set $VISIONBENCH_DATA)"
)


@needs_real
def test_real_files_60000_plus_10000_balanced_and_the_default_statistics():
    train, test = fm.read_split(REAL, True), fm.read_split(REAL, False)
    assert train[0].shape == (60000, 28, 28, 1) and test[0].shape == (10000, 28, 28, 1)
    assert np.bincount(train[1]).tolist() == [6000] * 10 and np.bincount(test[1]).tolist() == [1000] * 10
    x = train[0].astype(np.float64) / 255
    mean, std = fm.FashionMNISTDataModule.default_mean[0], fm.FashionMNISTDataModule.default_std[0]
    assert round(x.mean(), 4) == mean and round(x.std(), 4) == std


# ---- the model: paper 003 Table 6's net ------------------------------------------------------------------

FMNIST_RESNET_SITES = [
    "stem.act",
    "block1.0.act1",
    "block1.0.act2",
    "block2.0.act1",
    "block2.0.act2",
    "fc1.act",
    "fc2.act",
]


@pytest.mark.parametrize(
    "name, params, sites",
    [
        # 003 code fmnist_resnet.py: convs 320 + 1056 + 18,496 + 36,928 + 2,112 + 73,856 + 147,584 + 8,320, BN 1,920,
        # fc 590,336 + 262,656 + 5,130
        ("fmnist_resnet", 1_149_738, 7),
        ("fmnist_slnn", 1_144_554, 8),  # 003 code fmnist_taylor.py, no BN (SLAF coefficients not counted: relu)
    ],
)
def test_model_forward_backward_28x28x1_and_parameter_count(name, params, sites):
    net = models.create(name, act="relu", num_classes=10, img_size=28, in_chans=1)
    assert sum(p.numel() for p in net.parameters()) == params
    assert len(net.swap_report) == sites
    x = torch.rand(4, 1, 28, 28)
    out = net(x)
    assert out.shape == (4, 10)
    out.sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    assert net.no_weight_decay() == {"head.weight"}  # 003 code: no L2 on the classifier


def test_model_layout_follows_003_code():
    net = models.create("fmnist_resnet", act="relu", num_classes=10, img_size=28, in_chans=1)
    assert net.swap_report.paths == FMNIST_RESNET_SITES
    assert net.stem.conv2.kernel_size == (1, 1) and isinstance(net.stem.pool, nn.AvgPool2d)
    assert net.fc1.linear.in_features == 3 * 3 * 128  # 28 -> 14 -> 7 -> 3 (TF 'VALID' average pools)
    bns = [m for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    assert len(bns) == 8 and all(m.momentum == 0.01 and m.eps == 1e-3 for m in bns)  # TF 1.x defaults
    assert not any(isinstance(m, nn.Dropout) and m.p > 0 for m in net.modules())
    feats = net.forward_features(torch.rand(2, 1, 28, 28))
    assert feats.shape == (2, 128, 3, 3)


def test_slaf_everywhere_swaps_all_seven():
    net = models.create(
        "fmnist_resnet",
        act="slaf",
        act_kwargs={"degree": 2, "per_channel": True},
        num_classes=10,
        img_size=28,
        in_chans=1,
    )
    assert len(net.swap_report) == 7 and not net.swap_report.kept
    assert not any(isinstance(m, nn.ReLU) for m in net.modules())
    assert [e.num_channels for e in net.swap_report] == [32, 64, 64, 128, 128, 512, 512]


# ---- the per-site swap -----------------------------------------------------------------------------------


def test_last_layer_only_swaps_exactly_one_site():
    net = models.create(
        "fmnist_resnet",
        act="slaf",
        act_kwargs={"degree": 2, "swap_layers": "last"},
        num_classes=10,
        img_size=28,
        in_chans=1,
    )
    report = net.swap_report
    assert len(report) == 1 and report.paths == ["fc2.act"] and report.sites == FMNIST_RESNET_SITES
    assert report.kept == FMNIST_RESNET_SITES[:-1] and "swapped 1 of 7" in report.summary()
    kinds = [type(m).__name__ for m in net.modules() if type(m).__name__ in ("ReLU", "SLAF")]
    assert kinds.count("SLAF") == 1 and kinds.count("ReLU") == 6 and type(net.fc2.act).__name__ == "SLAF"
    net(torch.rand(4, 1, 28, 28)).sum().backward()
    assert net.fc2.act.weight.grad is not None


@pytest.mark.parametrize(
    "layers, expected",
    [
        ("first", [0]),
        ("last", [3]),
        (-1, [3]),
        (1, [1]),
        ([0, -1], [0, 3]),
        ("1:3", [1, 2]),
        ("-2:", [2, 3]),
        ("::2", [0, 2]),
        ("all", [0, 1, 2, 3]),
        (None, [0, 1, 2, 3]),
    ],
)
def test_swap_layers_on_any_model(layers, expected):
    net = models.create("vgg4", num_classes=10, img_size=8, in_chans=1)
    all_sites = [p for p, m in net.named_modules() if isinstance(m, nn.ReLU)]
    report = models.swap_activations(net, "gelu", layers=layers)
    assert report.paths == [all_sites[i] for i in expected] and report.sites == all_sites


@pytest.mark.parametrize(
    "layers, words",
    [
        (4, "index 4 is out of range; the model has 4 activation site(s), numbered 0..3 (or -4..-1)"),
        ([0, -5], "index -5 is out of range"),
        ("3:1", "the slice selects no site"),
        ("middle", "unknown word; accepted: all, first, last"),
        ([0.5], "0.5 is not an integer index"),
        ([], "empty list"),
        ("1:2:0", "slice step 0"),
    ],
)
def test_bad_swap_layers_is_one_line_and_leaves_the_model_alone(layers, words):
    net = models.create("vgg4", num_classes=10, img_size=8, in_chans=1)
    with pytest.raises(ValueError) as e:
        models.swap_activations(net, "gelu", layers=layers)
    one_line(e.value, f"swap layers={layers!r}", words)
    assert sum(isinstance(m, nn.ReLU) for m in net.modules()) == 4


def test_swap_layers_given_twice_or_without_act():
    with pytest.raises(ValueError, match="given twice"):
        models.create("vgg4", act="gelu", act_kwargs={"swap_layers": "last"}, swap_layers="first", img_size=8)
    with pytest.raises(ValueError, match="needs an act"):
        models.create("vgg4", swap_layers="last", img_size=8)
    net = models.create("vgg4", act="gelu", swap_layers=[0, 1], img_size=8, in_chans=1)
    assert len(net.swap_report) == 2


# ---- the recipes -----------------------------------------------------------------------------------------


def test_fashion_mnist_slaf_recipe_composes_to_003_table_6():
    cfg = recipe_config("fashion_mnist_slaf")
    assert cfg.act == "relu,slaf[swap_layers=last],slaf" and cfg.report.baseline == "relu"
    assert (cfg.data.name, cfg.data.img_size, list(cfg.data.mean), list(cfg.data.std)) == (
        "fashion_mnist",
        28,
        [0.0],
        [1.0],
    )
    assert not cfg.data.augment.crop_pad and not cfg.data.augment.hflip  # 003 Table 6: no augmentation
    assert (cfg.model.name, cfg.optim.name, cfg.optim.lr, cfg.batch_size) == ("fmnist_resnet", "adamw", 1e-3, 64)
    arms = {}
    for act in ("relu", "slaf", "slaf[swap_layers=last]"):
        run = run_config(cfg, act, seed=0)
        from visionbench.train.run import build_model

        arms[act] = build_model(run, 10, 1, 28).swap_report
    assert [len(arms[a]) for a in arms] == [7, 7, 1] and arms["slaf[swap_layers=last]"].paths == ["fc2.act"]
    assert arms["slaf"].sites == arms["slaf[swap_layers=last]"].sites == FMNIST_RESNET_SITES


@pytest.mark.parametrize("recipe", ["fashion_mnist_slaf", "fashion_mnist_vgg4"])
def test_recipes_pass_the_sweep_preflight(recipe):
    """The sweep's checks accept the packaged recipe (a failure fails the test: no skip), swap option and per-channel
    acts included, and keep every arm it lists, variants whole, in its order."""
    from visionbench.config import split_top_level
    from visionbench.sweep.acts import sweep_acts
    from visionbench.sweep.preflight import load_config

    cfg = load_config([f"recipe={recipe}"])
    arms = split_top_level(str(recipe_config(recipe).act))
    assert cfg.recipe == recipe and sweep_acts(cfg) == arms and len(arms) >= 3
    assert recipe != "fashion_mnist_slaf" or "slaf[swap_layers=last]" in arms


def test_vgg4_recipe_smoke_run_on_tiny_files(tmp_path):
    from visionbench.cli import main

    write_fmnist(tmp_path / "data" / "fashion-mnist")
    code = main(
        [
            "run",
            "recipe=fashion_mnist_vgg4",
            f"results_dir={tmp_path / 'results'}",
            f"data.root={tmp_path / 'data'}",
            "act=relu",
            "seeds=1",
            "epochs=1",
            "batch_size=10",
            "data.val_split=0.5",
            "snapshot_epochs=[-1]",
        ]
    )
    assert code == 0
    assert (tmp_path / "results" / "fashion_mnist_vgg4" / "relu" / "seed_0" / "summary.json").exists()
