"""Plugins (visionbench/plugins.py, docs/your_activation.md): the user's own module registers activations and models
and is loaded by `imports=` (the working directory importable) or an installed `visionbench.plugins` entry point;
each run records the plugin's module, version and sha256; bad plugins fail in one line before training.

Every test writes its plugin modules into tmp_path; the `isolated` fixture puts the registries, sys.path and
sys.modules back after it (a plugin's activation must not join the registry-wide tests of other files)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from visionbench import plugins
from visionbench.activations import registry
from visionbench.cli import main

from .helpers import shrunk

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "my_activation"

MY_ACTS = '''
import torch
from visionbench.activations import LearnableActivation, register

@register("{name}")
class MyAct(LearnableActivation):
    """F(x) = a relu(x): the smallest learnable activation."""
    fit_tolerance = {{}}

    def __init__(self, init="default", **kwargs):
        super().__init__(**kwargs)
        self.a = self.coefficient([1.0])
        self.reset_parameters(init)

    def init_default(self):
        self.set_coefficients(a=torch.tensor([1.0]))

    def reference_forward(self, x):
        return self.coef(self.a, 0, x) * torch.relu(x)
'''
MY_MODELS = """
import torch
from timm.models import register_model

@register_model
def my_tiny_net(pretrained=False, num_classes=10, **kwargs):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(num_classes))
"""
CLASH = """
import torch
from visionbench.activations import register

@register("gelu")
class MyGelu(torch.nn.Module):
    def __init__(self, inplace=False):
        super().__init__()
"""


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """tmp_path/plugins on sys.path; afterwards the activation registry, timm's model registry and the loaded plugins
    (`plugins.preserved()`), sys.modules and sys.path as they were."""
    modules, path = set(sys.modules), list(sys.path)
    where = tmp_path / "plugins"
    where.mkdir()
    monkeypatch.syspath_prepend(str(where))
    importlib.invalidate_caches()
    with plugins.preserved():
        yield where
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    sys.path[:] = path


def write(where: Path, module: str, text: str) -> Path:
    path = where / f"{module}.py"
    path.write_text(textwrap.dedent(text))
    importlib.invalidate_caches()
    return path


# ---- the worked example: examples/my_activation, loaded by imports=, run for one epoch and reported -------------
def test_the_example_plugin_runs_and_is_reported(isolated, monkeypatch, tmp_path, capsys):
    monkeypatch.syspath_prepend(str(EXAMPLE))  # as PYTHONPATH=examples/my_activation (never pip-installed in tests)
    results = tmp_path / "results"
    code = main(
        ["run", f"results_dir={results}", *shrunk(), "epochs=1", "imports=my_activation", "act=relu,my_act", "seeds=1"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "my_act             seed 0: completed" in out
    table = (results / "digits_vgg4" / "table.md").read_text()
    assert "| my_act | " in table and "| relu | " in table  # one epoch: counted, or stalled at chance
    run = results / "digits_vgg4" / "my_act" / "seed_0"
    summary = json.loads((run / "summary.json").read_text())
    (record,) = summary["plugins"]
    source = EXAMPLE / "my_activation" / "__init__.py"
    assert record["module"] == "my_activation" and record["sha256"] == plugins._digest(str(source))
    assert record["version"] == "0.1.0"  # its __version__ (installed: its distribution's, the same)
    assert "plugins" not in json.loads((results / "digits_vgg4" / "relu" / "seed_0" / "summary.json").read_text())
    # the example's activation keeps the registry-wide contract: timm's act_layer(inplace=True), exact fits
    from visionbench import activations

    assert activations.create("my_act", inplace=True, init="gelu").fit("gelu").max_abs_error < 1e-6


# ---- imports= from the working directory (parallel=K workers: the slow test at the end) ------------------------
def test_imports_finds_a_module_in_the_working_directory(isolated, monkeypatch, tmp_path):
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    write(cwd, "my_acts", MY_ACTS.format(name="my_act"))
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(cwd))])
    (plugin,) = plugins.load(["my_acts"])
    assert plugin.activations == ["my_act"] and plugin.file == str(cwd / "my_acts.py") and plugin.version is None
    assert registry.resolve("my_act") == "my_act" and str(cwd) in sys.path  # spawned workers inherit sys.path


def test_imports_takes_a_list_and_checks_the_swept_names(isolated):
    from visionbench.sweep.preflight import load_config

    write(isolated, "acts_a", MY_ACTS.format(name="act_a"))
    write(isolated, "acts_b", MY_ACTS.format(name="act_b"))
    cfg = load_config(["imports=acts_a,acts_b", "act=relu,act_a,act_b[init=gelu]", "seeds=1"])
    assert list(cfg.imports) == ["acts_a", "acts_b"] and not cfg.factors  # a list, not a factor sweep
    assert list(load_config(["imports=[acts_a]", "act=act_a"]).imports) == ["acts_a"]


def test_list_shows_each_plugin_entry_with_its_module(isolated, capsys):
    write(isolated, "my_acts", MY_ACTS.format(name="my_act"))
    write(isolated, "my_models", MY_MODELS)
    assert main(["list", "imports=my_acts,my_models"]) == 0
    out = capsys.readouterr().out
    assert "my_act (from my_acts)" in out
    assert "plugin my_models (imports=my_models" in out and "models: my_tiny_net" in out


def test_an_installed_entry_point_is_loaded_without_imports(isolated, capsys):
    """A package that declares `[project.entry-points."visionbench.plugins"]`, as pip installs it (a dist-info)."""
    write(isolated, "demo_acts", MY_ACTS.format(name="demo_act"))
    info = isolated / "visionbench_demo-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: visionbench-demo\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text("[visionbench.plugins]\ndemo = demo_acts\n")
    plugins._ENTRY_POINTS_DONE = False  # entry points are read once per process: this test's process reads them again
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "demo_act (from demo_acts)" in out
    assert "plugin demo_acts (entry point 'demo' of visionbench-demo (group visionbench.plugins); version 0.3" in out


# ---- what a run records: a changed plugin never resumes, nor pools silently in a report ------------------------
def test_a_run_records_its_plugin_and_a_changed_plugin_is_refused_or_flagged(isolated, tmp_path):
    from visionbench.results import layout
    from visionbench.results.identity import config_hash, fingerprint
    from visionbench.sweep.sweep import ConfigMismatch, check_resumable

    path = write(isolated, "my_acts", MY_ACTS.format(name="my_act"))
    (plugin,) = plugins.load(["my_acts"])
    base = {"recipe": "r", "seed": 0, "imports": ["my_acts"], "model": {"name": "vgg4"}}
    mine, relu = plugins.record({**base, "act": "my_act"}), plugins.record({**base, "act": "relu"})
    assert mine["plugins"] == [{"module": "my_acts", "version": None, "sha256": plugin.sha256}]
    assert "plugins" not in relu and config_hash(mine) == config_hash(relu)  # one table: relu vs my_act
    assert plugin.sha256 == plugins._digest(str(path))
    other = {**mine, "plugins": [{**mine["plugins"][0], "sha256": "0" * 64}]}  # the file edited since
    assert fingerprint(other) != fingerprint(mine)
    run = tmp_path / "r" / "my_act" / "seed_0"
    run.mkdir(parents=True)
    layout.write_config(run, mine)
    with pytest.raises(ConfigMismatch, match="plugins: stored"):
        check_resumable(other, run)


def test_the_report_flags_two_versions_of_one_plugin(tmp_path, capsys):
    from visionbench.report import main as report_main
    from visionbench.results import layout

    from .helpers import write_run

    for seed, value in enumerate((90.0, 91.0, 92.0)):
        write_run(tmp_path, "r", "relu", seed, value)
        run = write_run(tmp_path, "r", "my_act", seed, value + 1)
        summary = layout.read_summary(run)
        summary["plugins"] = [{"module": "my_acts", "version": None, "sha256": ("a" if seed < 2 else "b") * 64}]
        layout.write_summary(run, summary)
    assert report_main([str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "NOT ONE PLUGIN: the runs of plugin module my_acts come from 2 versions" in out
    assert "aaaaaaaaaaaa: my_act seed 0, my_act seed 1; bbbbbbbbbbbb: my_act seed 2" in out


# ---- bad plugins: one line, exit 2, before any training ------------------------------------------------------
BAD = [
    ("nope_module", None, "imports=nope_module: no module named 'nope_module' in the current directory or on sys.path"),
    (
        "broken",
        "import numpy_that_is_not_there\n",
        "imports=broken: plugin module 'broken' failed to import: ModuleNotFoundError: No module named "
        "'numpy_that_is_not_there'",
    ),
    (
        "raises",
        "raise RuntimeError('no GPU here')\n",
        "imports=raises: plugin module 'raises' failed to import: RuntimeError: no GPU here",
    ),
    (
        "clash",
        CLASH,
        "imports=clash: plugin module 'clash' is refused: activation 'gelu' of clash.MyGelu is already "
        "registered by visionbench.activations.fixed",
    ),
]


@pytest.mark.parametrize("module, text, line", BAD, ids=[b[0] for b in BAD])
def test_a_bad_plugin_fails_in_one_line_before_training(isolated, tmp_path, capsys, module, text, line):
    if text is not None:
        write(isolated, module, text)
    results = tmp_path / "results"
    assert main(["run", f"results_dir={results}", f"imports={module}", "act=relu", "seeds=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"visionbench run: {line}"), err
    assert not results.exists()


def test_a_plugin_that_registers_nothing_is_a_warning(isolated, capsys):
    write(isolated, "helpers_only", "X = 1\n")
    write(isolated, "helpers_too", "Y = 2\n")
    assert main(["list", "imports=helpers_only"]) == 0
    err = capsys.readouterr().err  # the command line: one line
    assert "warning: plugin module 'helpers_only' (imports=helpers_only) registered no activation and no model" in err
    with pytest.warns(plugins.PluginWarning, match="plugin module 'helpers_too' .* registered no activation"):
        plugins.load(["helpers_too"])  # a notebook: a Python warning


# ---- the registries put back: snapshot / restore -------------------------------------------------------------
def test_snapshot_and_restore_forget_a_plugin_and_what_it_registered(isolated):
    import timm
    import torch

    write(isolated, "my_acts", MY_ACTS.format(name="my_act"))
    write(isolated, "my_models", MY_MODELS)
    acts, models = registry.names(include_aliases=True), timm.list_models()
    state = plugins.snapshot()
    plugins.load(["my_acts", "my_models"])
    assert "my_act" in registry.names() and timm.models.is_model("my_tiny_net")
    assert [p.module for p in plugins.loaded()][-2:] == ["my_acts", "my_models"]
    plugins.restore(state)
    assert registry.names(include_aliases=True) == acts and timm.list_models() == models
    assert not timm.models.is_model("my_tiny_net") and "my_acts" not in [p.module for p in plugins.loaded()]
    for name in ("my_acts", "my_models"):  # a new process would import them afresh: so does the next load
        del sys.modules[name]
    (again,) = plugins.load(["my_acts"])
    assert again.activations == ["my_act"] and registry.resolve("my_act") == "my_act"
    plugins.restore(state)  # twice from one snapshot: the same state again
    assert registry.names(include_aliases=True) == acts
    with registry.preserved():  # the activation registry alone
        registry.register("only_inside")(type("Inside", (torch.nn.Identity,), {}))
        assert "only_inside" in registry.names()
    assert "only_inside" not in registry.names()


# slow: 25-40 s, a console-script sweep in two spawned workers; default-suite siblings: the in-process cwd import
# (test_imports_finds_a_module_in_the_working_directory) and the example's run (test_the_example_plugin_runs...)
@pytest.mark.slow
def test_a_researchers_module_in_a_temporary_directory_runs_in_parallel(tmp_path):
    write(tmp_path, "my_acts", MY_ACTS.format(name="my_act"))
    exe = Path(sys.executable).parent / "visionbench"
    out = subprocess.run(
        [str(exe), "run", "imports=my_acts", "act=relu,my_act", "seeds=1", *shrunk(), "epochs=1", "parallel=2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "my_act             seed 0: completed" in out.stdout
    # the default results_dir: runs/ in the working directory
    summary = json.loads((tmp_path / "runs" / "digits_vgg4" / "my_act" / "seed_0" / "summary.json").read_text())
    assert summary["plugins"][0]["module"] == "my_acts"
