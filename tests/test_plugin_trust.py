"""Plugins from someone else (visionbench/plugins.py, docs/your_activation.md): the provenance a run records covers
the helper modules a plugin imports, a plugin that exits or is given as a file path is one line, a wrong-shape
activation is named before it fails inside a conv, and `visionbench check` does not call NaN unequal to itself.

    .venv/bin/python -m pytest tests/test_plugin_trust.py -q
"""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

from visionbench import plugins
from visionbench.cli import main

from .test_plugins import MY_ACTS, isolated, write  # noqa: F401 - `isolated` is a fixture

USES_HELPER = """
import json
import torch
from visionbench.activations import register
import acts_helper
from acts_scale import scale

@register("helped_act")
class HelpedAct(torch.nn.Module):
    def __init__(self, inplace=False):
        super().__init__()

    def forward(self, x):
        return acts_helper.shape(torch.relu(x)) * scale()
"""
HELPER = """
import acts_deeper

def shape(x):
    return acts_deeper.same(x)
"""
DEEPER = """
def same(x):
    return x * {factor}
"""
SCALE = """
def scale():
    return 1.0
"""
WIDE = """
import torch
from visionbench.activations import register

@register("wide_act")
class Wide(torch.nn.Module):
    def __init__(self, inplace=False):
        super().__init__()

    def forward(self, x):
        return torch.cat([x, x], dim=1).relu()
"""
NAN = """
import torch
from visionbench.activations import register

@register("nan_act")
class NanAct(torch.nn.Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.register_buffer("b", torch.tensor([float("nan")]))

    def forward(self, x):
        return x * self.b
"""


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def reload_plugin(before: plugins.State, name: str, *modules: str) -> plugins.Plugin:
    """Load `name` afresh (a new process would): the plugins and registries as `before` (a `plugins.snapshot()`)
    saw them, `name` and `modules` out of sys.modules."""
    plugins.restore(before)
    for m in (name, *modules):
        sys.modules.pop(m, None)
    importlib.invalidate_caches()
    (plugin,) = plugins.load([name])
    return plugin


# ---- provenance: the plugin's helpers are in its sha256 -----------------------------------------------------
def test_the_sha256_covers_the_helper_modules_and_an_edited_helper_is_a_new_version(isolated, tmp_path):
    from visionbench.results import layout
    from visionbench.sweep.sweep import ConfigMismatch, check_resumable

    path = write(isolated, "helped", USES_HELPER)
    write(isolated, "acts_helper", HELPER)
    write(isolated, "acts_deeper", DEEPER.format(factor=1))
    write(isolated, "acts_scale", SCALE)
    importlib.import_module("acts_scale")  # imported before the plugin (by another plugin): found by its names
    before = plugins.snapshot()
    (plugin,) = plugins.load(["helped"])
    assert sorted(plugin.helpers) == ["acts_deeper", "acts_helper", "acts_scale"]  # not json, torch, visionbench
    assert plugin.sha256 != plugins._digest(str(path))  # the file alone is not the version
    run = plugins.record({"recipe": "r", "seed": 0, "act": "helped_act", "model": {"name": "vgg4"}})
    assert run["plugins"] == [
        {
            "module": "helped",
            "version": None,
            "sha256": plugin.sha256,
            "helpers": ["acts_deeper", "acts_helper", "acts_scale"],
        }
    ]
    run_dir = tmp_path / "r" / "helped_act" / "seed_0"
    run_dir.mkdir(parents=True)
    layout.write_config(run_dir, run)

    own = plugins._digest(str(path))
    write(isolated, "acts_deeper", DEEPER.format(factor=2))  # a helper's helper edited between seeds
    edited = reload_plugin(before, "helped", "acts_helper", "acts_deeper")
    assert edited.sha256 != plugin.sha256 and plugins._digest(str(path)) == own  # the plugin's file is unchanged
    again = plugins.record({"recipe": "r", "seed": 0, "act": "helped_act", "model": {"name": "vgg4"}})
    with pytest.raises(ConfigMismatch, match="plugins: stored"):  # never resumes with the old one's checkpoint
        check_resumable(again, run_dir)


def test_a_plugin_without_helpers_keeps_its_sha256(isolated):
    path = write(isolated, "my_acts", MY_ACTS.format(name="my_act"))
    (plugin,) = plugins.load(["my_acts"])
    assert plugin.helpers == {} and plugin.sha256 == plugins._digest(str(path))
    assert "helpers" not in plugin.provenance()


# ---- one line, exit 2 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["list", "run"])
def test_a_plugin_calling_sys_exit_is_one_line_naming_it(isolated, tmp_path, capsys, command):
    write(isolated, "p_exit", "import sys\nsys.exit(3)\n")
    args = [f"results_dir={tmp_path / 'r'}", "act=relu", "seeds=1"] if command == "run" else []
    assert main([command, "imports=p_exit", *args]) == 2
    assert one_line(capsys) == (
        f"visionbench {command}: imports=p_exit: plugin module 'p_exit' called sys.exit(3) "
        "while being imported; a plugin module must only define and register (no exit at "
        "import time)"
    )
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "given, hint",
    [
        ("./p_ok.py", "imports=p_ok (a module in the current directory or on PYTHONPATH)"),
        ("p_ok.py", "imports=p_ok (a module in the current directory or on PYTHONPATH)"),
        ("plugins/p_ok.py", "imports=plugins.p_ok (a module in the current directory or on PYTHONPATH)"),
        ("/opt/mine/p_ok.py", "imports=p_ok with PYTHONPATH=/opt/mine (the folder that holds it)"),
    ],
)
def test_a_file_path_in_imports_gets_the_module_name_hint(isolated, capsys, given, hint):
    assert main(["list", f"imports={given}"]) == 2
    assert one_line(capsys) == (
        f"visionbench list: imports={given}: {given!r} is a file path or a relative name, "
        f"not a module name; give the module's name: {hint}"
    )


def test_a_wrong_shape_activation_is_named_before_training(isolated, tmp_path, capsys):
    write(isolated, "p_shape", WIDE)
    assert main(["run", f"results_dir={tmp_path / 'r'}", "imports=p_shape", "act=relu,wide_act", "seeds=1"]) == 2
    assert one_line(capsys) == (
        "visionbench run: act wide_act: activation 'wide_act' returns shape (2, 8, 3, 3) for an input of shape "
        "(2, 4, 3, 3); an activation must return a tensor of its input's shape (elementwise), or the layer after it "
        "fails; run `visionbench check imports=p_shape act=wide_act`"
    )
    assert not (tmp_path / "r").exists()


def test_a_wrong_shape_activation_is_named_when_a_model_is_swapped(isolated):
    """The model builders' path (the API, a run's process): the swap's one tiny forward, before any conv sees it."""
    from visionbench.models.factory import create

    write(isolated, "p_shape", WIDE)
    plugins.load(["p_shape"])
    with pytest.raises(
        ValueError,
        match=r"activation 'wide_act' returns shape \(2, 128, 3, 3\) for an input of shape "
        r"\(2, 64, 3, 3\);.* run `visionbench check act=wide_act`",
    ):
        create("vgg4", act="wide_act", num_classes=10, in_chans=1)


def test_the_shape_probe_leaves_the_module_and_the_random_state_alone():
    from visionbench.models.swap import probe_shape

    module = torch.nn.BatchNorm2d(4)  # a forward in train mode would move its running statistics
    before, rng = {k: v.clone() for k, v in module.state_dict().items()}, torch.random.get_rng_state()
    probe_shape(module, "bn")
    probe_shape(torch.nn.Dropout(0.5), "dropout")  # draws random numbers inside
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())
    assert torch.equal(torch.random.get_rng_state(), rng)
    probe_shape(torch.nn.Linear(3, 3), "raises")  # a forward that raises is the model's to report: no error here


# ---- visionbench check: NaN is not unequal to itself --------------------------------------------------------
def test_a_nan_activation_gets_only_the_true_diagnoses(isolated):
    from visionbench.check import MODULE_CHECKS, Subject
    from visionbench.check.checks import equal

    write(isolated, "p_nan", NAN)
    plugins.load(["p_nan"])
    subject, device = Subject("nan_act"), torch.device("cpu")
    results = {
        name: MODULE_CHECKS[name](subject, device) for name in ("state_dict", "deepcopy", "deterministic", "finite")
    }
    assert results["state_dict"][0] and results["deepcopy"][0] and results["deterministic"][0], results
    assert not results["finite"][0] and "NaN" in results["finite"][1]  # the one that is true
    nan = torch.tensor([1.0, float("nan")])
    assert equal(nan, nan.clone()) and not equal(nan, torch.tensor([float("nan"), 1.0]))
    assert not equal(nan, torch.tensor([1.0, 2.0])) and not equal(nan, nan.double())
