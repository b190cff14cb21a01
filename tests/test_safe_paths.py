"""Files from someone else (docs/reproducing.md "Files from someone else"): what `visionbench report`
and `visionbench compare --out` write never follows a symlink planted in the tree, and a label that is no plain
folder name (an activation option holding a path, a plugin's registered name) never makes a folder outside
results_dir — one line on stderr, exit 2, before any run.

The helpers themselves: visionbench/results/safe_paths.py (`inside`, `component`, `within`) and
visionbench/results/io.py (`atomic_path`, `atomic_write_bytes`)."""

from __future__ import annotations

import importlib
import os
import stat
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from visionbench.activations import registry
from visionbench.cli import main
from visionbench.results import layout
from visionbench.results.io import atomic_write_bytes
from visionbench.results.predictions import write_predictions
from visionbench.results.provenance import run_dir
from visionbench.results.safe_paths import UnsafePath, component, inside, within

from .helpers import write_recipe, write_run

R = "digits_vgg4"


def one_line(err: str, prefix: str) -> str:
    """The one line of `err`, checked to start with `prefix` and to hold no traceback."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(prefix) and "Traceback" not in err, err
    return lines[0]


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def plant(tree: Path, names: list[str], outside: Path) -> dict[Path, bytes]:
    """A symlink at each `tree/name` to its own file in `outside`; the outside files' bytes."""
    outside.mkdir(exist_ok=True)
    before = {}
    for i, name in enumerate(names):
        target = outside / f"victim_{i}"
        target.write_bytes(f"precious {i}\n".encode())
        before[target] = target.read_bytes()
        link = tree / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
    return before


def predicted_run(root: Path, act: str, seed: int, right: np.ndarray, epochs: int = 0, snapshot_epochs=()) -> Path:
    """A completed run whose predictions.npz is right on `right` (its summary's accuracy the same)."""
    target = np.arange(right.size) % 10
    acc = 100 * right.mean()
    run = write_run(
        root,
        R,
        act,
        seed,
        metrics={"val_top1_best": acc, "best_epoch": 3},
        epochs=epochs,
        value=acc,
        snapshot_epochs=snapshot_epochs,
    )
    pred = np.where(right, target, (target + 1) % 10)
    write_predictions(
        layout.files(run).predictions,
        {
            "raw": dict(
                pred=pred,
                p_true=np.where(right, 0.9, 0.05),
                confidence=np.full(right.size, 0.9),
                target=target,
                epoch=3,
            )
        },
    )
    return run


# ---- item 2: the report's writes never follow a planted symlink --------------------------------------------------
@pytest.mark.plots  # the curves PNG is drawn (the conftest stubs figures out elsewhere)
def test_report_replaces_planted_symlinks_and_leaves_their_targets_untouched(tmp_path, capsys):
    tree = tmp_path / "tree"
    rng = np.random.default_rng(0)
    for seed in range(2):
        predicted_run(tree, "relu", seed, rng.random(200) < 0.8, epochs=3, snapshot_epochs=(0, 2) if seed == 0 else ())
        predicted_run(tree, "gelu", seed, rng.random(200) < 0.85, epochs=3)
    recipe = tree / R
    names = [
        "table.md",
        "table.csv",
        "table.tex",
        "per_example.md",
        "per_example.csv",
        "curves_val_top1.png",
        "act_shapes_relu_seed0.png",
    ]
    before = plant(recipe, names, tmp_path / "outside")
    assert main(["report", str(tree), "--format", "md,csv,tex", "--plots"]) == 0
    capsys.readouterr()
    assert {p: p.read_bytes() for p in before} == before  # the outside files: the same bytes
    for name in names:
        path = recipe / name
        assert not path.is_symlink() and path.is_file() and path.stat().st_size > 0, name
    for png in names[-2:]:
        assert (recipe / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    assert "per-example evidence" in (recipe / "per_example.md").read_text()


def test_the_suite_views_files_replace_planted_symlinks(tmp_path, capsys):
    tree = tmp_path / "tree"
    for recipe in ("a_recipe", "b_recipe"):
        write_recipe(tree, recipe, {"relu": [90.0, 90.5, 91.0], "gelu": [91.0, 91.2, 91.9]})
    before = plant(tree, ["ranks.md", "ranks.csv", "improvement.csv"], tmp_path / "outside")
    assert main(["report", str(tree)]) == 0
    capsys.readouterr()
    assert {p: p.read_bytes() for p in before} == before
    for name in ("ranks.md", "ranks.csv", "improvement.csv"):
        assert not (tree / name).is_symlink() and (tree / name).is_file()
    assert "Friedman" in (tree / "ranks.md").read_text()


def test_compare_out_replaces_a_planted_symlink(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    write_recipe(a, R, {"relu": [90.0, 90.5, 91.0]})
    write_recipe(b, R, {"relu": [90.1, 90.4, 91.1]})
    before = plant(tmp_path / "out", ["cmp.md", "cmp.csv"], tmp_path / "outside")
    code = main(["compare", str(a), str(b), "--out", str(tmp_path / "out" / "cmp.md")])
    capsys.readouterr()
    assert code in (0, 1)
    assert {p: p.read_bytes() for p in before} == before
    assert not (tmp_path / "out" / "cmp.md").is_symlink() and "relu" in (tmp_path / "out" / "cmp.md").read_text()


def test_atomic_write_bytes_replaces_a_link_and_gives_the_files_usual_mode(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "t.md").symlink_to(victim)
    (tmp_path / "h.md").hardlink_to(victim)
    assert atomic_write_bytes(tmp_path / "t.md", "Δ ± new") == tmp_path / "t.md"
    atomic_write_bytes(tmp_path / "h.md", b"\x00new")
    assert victim.read_text() == "keep" and (tmp_path / "t.md").read_text(encoding="utf-8") == "Δ ± new"
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE((tmp_path / "t.md").stat().st_mode) == 0o666 & ~mask  # not mkstemp's 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.md", "t.md", "victim"]  # no temporary left


def test_a_record_reports_into_its_folder_and_refuses_a_folder_linked_out_of_it(tmp_path, capsys):
    """`visionbench report FOLDER/record` writes the tables at their places under FOLDER: a planted file symlink is
    replaced; a planted folder symlink leading out of FOLDER is one line, exit 2, nothing written."""
    tree = tmp_path / "tree"
    write_recipe(tree, R, {"relu": [90.0, 90.5, 91.0], "gelu": [91.0, 91.2, 91.9]})
    folder = tmp_path / "received"
    if main(["export", str(tree), str(folder / "record")]) != 0:
        pytest.skip("visionbench export did not write a record: " + capsys.readouterr().err.strip())
    capsys.readouterr()
    outside = tmp_path / "outside"
    before = plant(folder, [f"{R}/table.md"], outside)
    assert main(["report", str(folder / "record")]) == 0
    capsys.readouterr()
    assert {p: p.read_bytes() for p in before} == before
    assert not (folder / R / "table.md").is_symlink() and "relu" in (folder / R / "table.md").read_text()

    received = tmp_path / "received2"
    assert main(["export", str(tree), str(received / "record")]) == 0
    capsys.readouterr()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (received / R).symlink_to(elsewhere, target_is_directory=True)
    assert main(["report", str(received / "record")]) == 2
    line = one_line(capsys.readouterr().err, "visionbench report: ")
    assert "leads outside" in line and R in line
    assert files_under(elsewhere) == []


# ---- item 4: labels and registered names that are no folder name ------------------------------------------------
@pytest.mark.parametrize(
    "label",
    [
        "rational[init=gelu]",
        "rational[version=B,init=leaky_relu]",
        "rational[degrees=[5,4]]",
        "hermite[degree=4]",
        "gelu[approximate=tanh]",
        "spline[grid_range=[-3.0,3.0]]",
        "my-act.v2",
        "x[tag={a: 1}]",
    ],
)
def test_legitimate_labels_make_one_folder_level(tmp_path, label):
    assert run_dir(tmp_path, R, label, 3) == tmp_path / R / label / "seed_3"
    setting = {"model.norm": None, "data.root": "/a/b", "data.augment.scale": [0.6, 1.0]}
    out = run_dir(tmp_path, R, label, 0, setting)
    assert out.parent.parent.parent == tmp_path / R and out.parent.name == label


@pytest.mark.parametrize(
    "recipe, label, seed, setting, why",
    [
        (
            R,
            "gelu[approximate=../../../x]",
            0,
            None,
            "activation label 'gelu[approximate=../../../x]' cannot name a folder: it holds a '/'",
        ),
        (R, "tagact[tag=/etc]", 0, None, "it holds a '/'"),
        (R, "..", 0, None, "it has an empty, '.' or '..' component"),
        (R, "a\\b", 0, None, "it holds a backslash"),
        (R, "a\x00b", 0, None, "it holds a NUL character"),
        ("../x", "relu", 0, None, "recipe '../x' cannot name a folder"),
        (R, "relu", "0/../../x", None, "seed folder 'seed_0/../../x' cannot name a folder"),
        (
            R,
            "relu",
            0,
            {"data.root": "c:\\x"},
            "factor setting 'data.root=c:\\\\x' cannot name a folder: it holds a backslash",
        ),
    ],
)
def test_run_dir_refuses_what_is_no_plain_folder_name(tmp_path, recipe, label, seed, setting, why):
    with pytest.raises(UnsafePath) as info:
        run_dir(tmp_path, recipe, label, seed, setting)
    assert why in str(info.value) and "\n" not in str(info.value)


def test_run_with_a_path_in_an_activation_option_is_one_line_and_writes_nothing(tmp_path, capsys):
    label = "gelu[approximate=../../../../../x]"
    results = tmp_path / "a" / "b" / "c" / "R"
    code = main(["run", f"act={label}", f"results_dir={results}", "epochs=1", "seeds=1"])
    err = capsys.readouterr().err
    assert code == 2
    line = one_line(err, "visionbench run: ")
    assert f"activation label '{label}' cannot name a folder: it holds a '/'" in line
    assert files_under(tmp_path) == []  # nothing outside R, and nothing in it


@pytest.mark.parametrize(
    "name",
    ["../evil", "../../../evil", "a/b", "a\\b", "..", ".hidden", "a..b", "x y", "x[1]", "x,y", "x=y", "tab\tname"],
)
def test_register_refuses_a_name_that_cannot_be_a_folder(name):
    cls = type("Evil", (torch.nn.Identity,), {"__module__": "someone.plugin"})
    with pytest.raises(ValueError, match=r"activation name .* of someone\.plugin\.Evil cannot name a folder"):
        registry.register(name)(cls)
    with pytest.raises(ValueError, match="cannot name a folder"):
        registry.register("fine_name_for_alias_test", aliases=(name,))(cls)
    assert "fine_name_for_alias_test" not in registry.names() and name.lower() not in registry.names()


def test_register_still_takes_ordinary_names():
    with registry.preserved():
        for name in ("my_act", "my-act.v2", "relu2x", "élu", "act+"):
            registry.register(name)(type("Mine", (torch.nn.Identity,), {}))
            assert name in registry.names()
    assert all(registry.NAME.fullmatch(n) for n in registry.names(include_aliases=True))  # every built-in


@pytest.fixture
def plugin_dir(monkeypatch, tmp_path):
    """tmp_path/plugins importable; the registries, the loaded plugins and sys.modules put back afterwards."""
    from visionbench import plugins

    modules = set(sys.modules)
    where = tmp_path / "plugins"
    where.mkdir()
    monkeypatch.syspath_prepend(str(where))
    with plugins.preserved():
        yield where
    for name in set(sys.modules) - modules:
        del sys.modules[name]


EVIL = """
import torch
from visionbench.activations import register

@register("{name}")
class Evil(torch.nn.ReLU):
    def __init__(self, inplace=False, tag="x"):
        super().__init__()
"""


def test_a_plugin_registering_a_path_fails_at_load_in_one_line(plugin_dir, tmp_path, capsys):
    (plugin_dir / "evil_plugin.py").write_text(textwrap.dedent(EVIL.format(name="../../../evil")))
    importlib.invalidate_caches()
    results = tmp_path / "R"
    code = main(["run", "imports=evil_plugin", "act=relu", f"results_dir={results}", "epochs=1", "seeds=1"])
    assert code == 2
    line = one_line(capsys.readouterr().err, "visionbench run: ")
    assert "evil_plugin" in line and "'../../../evil'" in line and "cannot name a folder" in line
    assert not results.exists() and not (tmp_path / "evil").exists()


def test_a_plugins_option_holding_a_path_is_refused_before_training(plugin_dir, tmp_path, capsys):
    (plugin_dir / "tag_plugin.py").write_text(textwrap.dedent(EVIL.format(name="tagact")))
    importlib.invalidate_caches()
    results = tmp_path / "a" / "b" / "R"
    code = main(
        [
            "run",
            "imports=tag_plugin",
            "act=tagact[tag=../../../../../escaped]",
            f"results_dir={results}",
            "epochs=1",
            "seeds=1",
        ]
    )
    assert code == 2
    line = one_line(capsys.readouterr().err, "visionbench run: ")
    assert "activation label 'tagact[tag=../../../../../escaped]' cannot name a folder" in line
    assert [p for p in files_under(tmp_path) if not p.startswith("plugins")] == []  # nothing but the plugin's folder


# ---- the helpers, as the report and the record use them -----------------------------------------------------------
def test_inside_component_and_within(tmp_path):
    (tmp_path / "tree" / "relu").mkdir(parents=True)
    (tmp_path / "tree" / "out").symlink_to(tmp_path, target_is_directory=True)
    assert inside(tmp_path / "tree", "relu/seed_0", "p") == tmp_path / "tree" / "relu" / "seed_0"
    for bad in ("/etc/passwd", "../x", "a//b", "a/./b", "a\\b", "", "out/x"):
        with pytest.raises(UnsafePath):
            inside(tmp_path / "tree", bad, "p")
    assert component("rational[init=gelu]", "label") == "rational[init=gelu]"
    with pytest.raises(UnsafePath, match="it holds a '/'"):
        component("a/b", "label")
    assert within(tmp_path / "tree", tmp_path / "tree" / "relu" / "new", "p")
    with pytest.raises(UnsafePath, match="leads outside"):
        within(tmp_path / "tree", tmp_path / "tree" / "out" / "x", "p")


@pytest.mark.slow  # a Hydra subprocess (8 s): make test-slow
def test_a_hydra_job_with_a_path_in_its_label_is_one_line_and_trains_nothing(tmp_path):
    """The Hydra entry point (sweep/hydra_app.py) builds its run folder itself: refused there in one line too."""
    import subprocess

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "visionbench.sweep.hydra_app",
            "act=gelu[approximate=../../x]",
            f"results_dir={tmp_path / 'R'}",
            f"hydra.run.dir={tmp_path / 'hydra'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode != 0
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "visionbench hydra_app: activation label 'gelu[approximate=../../x]' cannot name a folder: it holds a '/'"
        )
    )
    assert not (tmp_path / "R").exists() and not (tmp_path.parent / "x").exists()


@pytest.mark.parametrize(
    "linked",
    [
        pytest.param("digits_vgg4", marks=pytest.mark.slow),
        "digits_vgg4/relu",
        pytest.param("digits_vgg4/relu/seed_0", marks=pytest.mark.slow),
    ],
)
def test_a_sweep_refuses_a_tree_whose_folders_are_links_before_writing_anything(tmp_path, capsys, linked):
    """A received tree whose recipe, activation or run folder is a link: resuming or extending the sweep would write
    whole runs (checkpoints, summary, predictions) where the link points. One line, exit 2, nothing written there."""
    from visionbench.cli import main

    tree, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tree / linked
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(elsewhere, target_is_directory=True)
    assert main(["run", f"results_dir={tree}", "act=relu", "seeds=1", "epochs=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{link} is a symbolic link (to {elsewhere})" in err
    assert list(elsewhere.iterdir()) == []  # nothing written where the link points


def test_first_link_finds_a_linked_folder_at_any_depth_without_entering_it(tmp_path):
    from visionbench.results.layout import first_link

    (tmp_path / "r" / "relu" / "seed_0").mkdir(parents=True)
    assert first_link(tmp_path / "r") is None
    (tmp_path / "out").mkdir()
    (tmp_path / "r" / "gelu").symlink_to(tmp_path / "out", target_is_directory=True)
    assert first_link(tmp_path / "r") == tmp_path / "r" / "gelu"
    assert first_link(tmp_path / "r" / "gelu") == tmp_path / "r" / "gelu"
    (tmp_path / "r" / "gelu").unlink()
    (tmp_path / "r" / "relu" / "seed_0" / "wandb").mkdir()
    (tmp_path / "r" / "relu" / "seed_0" / "wandb" / "latest-run").symlink_to("offline-run-1")
    assert first_link(tmp_path / "r") is None  # a tracker's link inside a run is the run's own


def test_a_report_onto_a_full_disk_is_one_line_not_a_traceback(tmp_path, capsys, monkeypatch):
    import errno

    from visionbench.report import render
    from visionbench.report.command import main
    from visionbench.results.io import DiskFullError

    root = write_recipe(tmp_path, "toy", {"relu": [98.0, 98.5], "gelu": [97.9, 98.3]})

    def full(*args, **kwargs):
        raise DiskFullError(root / "table.md")

    monkeypatch.setattr(render, "write", full)
    assert main([str(root), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no space left on the device" in err and "Traceback" not in err
    assert DiskFullError(root).errno == errno.ENOSPC


@pytest.mark.parametrize("value", ["runs/a;b", "$(whoami)"])
def test_a_results_dir_hydras_grammar_cannot_read_gets_the_quoting_hint(value, capsys):
    from visionbench.cli import main

    assert main(["run", f"results_dir={value}", "act=relu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot read the override 'results_dir={value}'" in err
    assert f"""'results_dir="{value}"'""" in err


def test_report_names_a_linked_recipe_folder_as_a_link(tmp_path, capsys):
    """The report follows no folder link; a tree whose only recipe folder is one found nothing, and says why."""
    from visionbench.report.command import main

    real = write_recipe(tmp_path / "real", "lt4", {"relu": [98.0, 98.5]})
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "lt4").symlink_to(real, target_is_directory=True)
    assert main([str(tmp_path / "tree"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path / 'tree' / 'lt4'} is a symbolic link (to {real})" in err
    assert "no finished run" not in err
