"""Activation variants and factor sweeps (the config's axes, visionbench/config/) and the paper-shaped
recipe-level table they feed (report/best_of.py): 004 Table 2 as one sweep. Bad variants and bad
sweeps on the command line: test_bad_inputs.py."""

from __future__ import annotations

import json

import pytest
import torch

from visionbench import activations
from visionbench.cli import main
from visionbench.config import RECIPES_DIR, ConfigError, parse_value, run_config, split_top_level, sweep_settings
from visionbench.results.provenance import run_dir
from visionbench.results.settings import format_value, parse_setting_label, setting_label
from visionbench.sweep.acts import parse_act, parse_acts, sweep_acts
from visionbench.sweep.preflight import load_config
from visionbench.sweep.sweep import plan

from .helpers import shrunk


def test_split_top_level_respects_brackets_and_quotes():
    assert split_top_level("relu,rational[init=gelu,degrees=[5,4]],'a,b'") == [
        "relu",
        "rational[init=gelu,degrees=[5,4]]",
        "'a,b'",
    ]
    with pytest.raises(ValueError, match="unbalanced"):
        split_top_level("rational[init=gelu")


@pytest.mark.parametrize("value", [None, True, False, 0.5, 1e-4, 3, [5, 4], "gelu", [0.6, 1.0], {"a": [1, 2]}])
def test_format_value_round_trips_without_spaces_in_lists(value):
    text = format_value(value)
    assert parse_value(text) == value
    if isinstance(value, list):
        assert " " not in text


def test_act_variants_have_labels_families_and_options():
    spec = parse_act("rational[init=gelu,degrees=[3,2]]")
    assert (spec.label, spec.family, spec.options) == (
        "rational[init=gelu,degrees=[3,2]]",
        "rational",
        {"init": "gelu", "degrees": [3, 2]},
    )
    assert parse_act("swish").label == "silu"  # aliases resolve to the registry name
    labels = [s.label for s in parse_acts("relu,rational[init=leaky_relu],rational[init=gelu]")]
    assert labels == ["relu", "rational[init=leaky_relu]", "rational[init=gelu]"]
    with pytest.raises(ValueError, match="lists relu more than once"):  # refused, not silently de-duplicated
        parse_acts("relu,rational,relu")


def test_act_all_is_every_registered_activation_after_those_named_first():
    names = activations.names()
    assert [s.label for s in parse_acts("all")] == names and len(names) >= 29
    labels = [s.label for s in parse_acts("relu,rational[init=gelu],all")]
    assert labels[:2] == ["relu", "rational[init=gelu]"] and labels[2:] == [n for n in names if n != "relu"]
    cfg = load_config(["act=relu,all", "seeds=2"])
    assert sweep_acts(cfg) == ["relu", *[n for n in names if n != "relu"]]
    assert len(plan(cfg)) == 2 * len(names)
    with pytest.raises(
        ValueError, match=r"unknown activation 'al' \(did you mean apl\?\); `visionbench list` .*; or all \(every one\)"
    ):
        parse_acts("relu,al")


@pytest.mark.parametrize("name, aliases", [("all", ()), ("mine", ("all",))])
def test_all_cannot_be_registered(name, aliases):
    with pytest.raises(ValueError, match="'all' is reserved: act=all sweeps every activation"):
        activations.register(name, aliases=aliases)(type("Mine", (torch.nn.Identity,), {}))
    assert "mine" not in activations.names()


def test_setting_labels_round_trip_and_make_one_directory_level(tmp_path):
    setting = {"model.norm": None, "model.lsuv": True, "data.augment.scale": [0.6, 1.0]}
    label = setting_label(setting)
    assert label == "model.norm=null,model.lsuv=true,data.augment.scale=[0.6,1.0]"
    assert parse_setting_label(label) == setting
    assert run_dir(tmp_path, "r", "relu", 2, setting) == tmp_path / "r" / label / "relu" / "seed_2"
    assert run_dir(tmp_path, "r", "relu", 2) == tmp_path / "r" / "relu" / "seed_2"
    assert "/" not in setting_label({"data.root": "/a/b"})


def test_table2_recipe_is_the_whole_experiment():
    """004 Table 2: 6 acts (two rational starts) x GN off/on x default/LSUV init, best of the inits."""
    cfg = load_config(["recipe=cifar10_vgg4_aug"])
    assert sweep_acts(cfg) == ["relu", "leaky_relu", "gelu", "silu", "rational[init=leaky_relu]", "rational[init=gelu]"]
    assert sweep_settings(cfg) == [{"model.norm": n, "model.lsuv": i} for n in (None, "group") for i in (False, True)]
    assert list(cfg.report.best_of) == ["model.lsuv"] and cfg.report.metric == "val_top1_best"
    run = run_config(cfg, "rational[init=gelu]", 3, {"model.norm": "group", "model.lsuv": True})
    assert (run["act"], run["act_label"], run["seed"]) == ("rational", "rational[init=gelu]", 3)
    assert run["act_options"]["rational"]["init"] == "gelu"
    assert run["act_options"]["rational"]["version"] == "A"  # the recipe's options stay under the variant's
    assert run["act_lr_mult"] == {"rational": 0.5}
    assert (run["model"]["norm"], run["model"]["lsuv"], run["setting"]) == (
        "group",
        True,
        {"model.norm": "group", "model.lsuv": True},
    )
    assert "factors" not in run


def test_command_line_factors_replace_or_extend_the_recipes():
    cfg = load_config(["recipe=cifar10_vgg4_aug", "model.norm=group"])  # one value: that factor is gone
    assert sweep_settings(cfg) == [{"model.lsuv": False}, {"model.lsuv": True}]
    assert cfg.model.norm == "group"
    cfg = load_config(["model.lsuv=false,true", "optim.lr=0.01,0.02", "baseline=gelu"])
    assert sweep_settings(cfg)[1] == {"model.lsuv": False, "optim.lr": 0.02} and len(sweep_settings(cfg)) == 4
    assert cfg.report.baseline == "gelu"  # baseline= is short for report.baseline
    cfg = load_config(["data.augment.scale=[0.6,1.0]"])  # a list value is not a sweep
    assert sweep_settings(cfg) == [{}] and list(cfg.data.augment.scale) == [0.6, 1.0]


@pytest.mark.parametrize(
    "recipe, argv, setting",
    [
        ("digits_vgg4", ["act=rational[init=gelu]", "act.version=B", "baseline=gelu", "optim.lr=1", "seed=2"], {}),
        (
            "cifar10_vgg4_aug",
            ["act=silu", "model.norm=group", "data.augment.scale=[0.6,1.0]", "data.augment.crop_pad=0"],
            {"model.norm": "group", "model.lsuv": False},
        ),  # the job's values of the recipe's factor keys
    ],
)
def test_the_hydra_app_reads_the_grammar_of_visionbench_run(recipe, argv, setting):
    """act=a[k=v], act.KEY=, baseline= and list values compose in a Hydra job as `visionbench run` composes them."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from visionbench.sweep import hydra_app

    with initialize_config_dir(config_dir=str(RECIPES_DIR), version_base=None):
        hydra_cfg = compose(recipe, overrides=hydra_app.to_hydra(argv))
    job, job_setting = hydra_app.job_config(hydra_cfg, recipe)
    expected = OmegaConf.to_container(load_config([f"recipe={recipe}", *argv]))
    assert OmegaConf.to_container(job) == {**expected, "factors": {}} and job_setting == setting
    # with -m, each comma list is a Hydra sweep whose jobs get one value each, variants whole
    swept = hydra_app.to_hydra(["-m", "act=relu,rational[init=gelu]", "model.lsuv=false,true", "act.degrees=[5,4]"])
    parsed = OverridesParser.create().parse_overrides(swept[1:])
    assert [[v.text for v in o.sweep_iterator()] if o.is_sweep_override() else o.value() for o in parsed] == [
        ["act=relu", "act=rational[init=gelu]"],
        ["model.lsuv=false", "model.lsuv=true"],
        "act.degrees=[5,4]",
    ]
    # the sweep is checked as a whole before any job (seed=0,1 is Hydra's sweep); a relu job skips act.version
    hydra_app.check_sweep(["-m", "act=relu,rational", "act.version=B", "seed=0,1"])
    with pytest.raises(ConfigError, match="no activation in the sweep .relu, rational. takes option 'versio'"):
        hydra_app.check_sweep(["-m", "act=relu,rational", "act.versio=B"])


# slow: a whole Table 2 sweep (12 s); the axes' folders are tested without training above
@pytest.mark.slow
def test_digits_table2_sweep_lands_apart_and_reports_in_the_papers_layout(tmp_path, capsys):
    # runs that learn (a run at chance is `stalled`, and a stalled cell is no selection): 3 epochs of 300 images
    code = main(
        [
            "run",
            f"results_dir={tmp_path}",
            *shrunk(
                "seeds=1",
                "epochs=3",
                "data.limit_train=300",
                "data.limit_val=60",
                "snapshot_epochs=[]",
                "act=relu,rational[init=leaky_relu],rational[init=gelu]",
                "model.lsuv=false,true",
                "model.norm=null,group",
                "report.best_of=[model.lsuv]",
            ),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    root = tmp_path / "digits_vgg4"
    summaries = sorted(root.glob("*/*/seed_0/summary.json"))
    assert len(summaries) == 12 and len({p.parent for p in summaries}) == 12
    for path in summaries:
        s = json.loads(path.read_text())
        assert path.parent.parent.name == s["act_label"] and path.parent.parent.parent.name == setting_label(
            s["setting"]
        )
        assert s["status"] == "completed"
    # the recipe-level table: one column per GN setting, the best init per cell, labelled as a selection
    table = (root / "table.md").read_text()
    assert "| Act. | model.norm=null | model.norm=group |" in table
    assert "best of the settings of model.lsuv" in table and "a selection over settings" in table
    for label in ("relu", "rational[init=leaky_relu]", "rational[init=gelu]"):
        assert f"| {label} |" in table
    cells = [c for line in table.splitlines() if line.startswith("| r") for c in line.split("|")[2:4]]
    assert len(cells) == 6 and all("(model.lsuv=" in c or c.strip() == "NaN" for c in cells), (
        cells
    )  # NaN: no run learned
    assert table.count("(model.lsuv=") >= 4
    assert "| Act. | model.norm=null | model.norm=group |" in out
    # the plain per-setting tables beside it
    for setting in ("model.lsuv=false,model.norm=null", "model.lsuv=true,model.norm=group"):
        assert "rational[init=gelu]" in (root / setting / "table.md").read_text()
