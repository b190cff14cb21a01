"""The typed config schema (visionbench/config/; docs/configuration.md): one source of defaults and
rules, one pass that checks a config whatever it came from (command line, recipe YAML, a partial
block), the key named in one line; code defaults that are the schema's. A bad key or value on the
command line, run through `visionbench run`: tests/test_bad_inputs.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch

from visionbench import config
from visionbench.config import ConfigError, block, run_config
from visionbench.config.rules import rule
from visionbench.config.validate import errors
from visionbench.sweep.preflight import load_config


def test_the_schema_is_the_recipes_base_and_no_yaml_copy_exists():
    assert not (config.RECIPES_DIR / "_base.yaml").exists()
    run = run_config(load_config(["recipe=digits_vgg4"]), "relu", 0)
    d = config.defaults()
    assert run["sched"]["warmup_lr"] == d["sched"]["warmup_lr"] == 1e-6
    assert run["optim"]["nesterov"] is d["optim"]["nesterov"] is True
    assert set(config.valid_keys()) >= {"optim.nesterov", "data.augment.repeated_aug_epoch", "trainer.precision"}
    assert "estimate" not in d  # `visionbench estimate` is a subcommand, not a key


@pytest.fixture
def recipes(tmp_path, monkeypatch):
    """A recipes dir of our own, composed over the same `_base` (the schema's defaults in Hydra's ConfigStore)."""
    monkeypatch.setattr(config.recipes, "RECIPES_DIR", tmp_path)

    def write(body: str) -> str:
        (tmp_path / "mine.yaml").write_text("defaults: [_base, _self_]\nrecipe: mine\n" + body)
        return "recipe=mine"

    return write


def test_a_recipe_with_an_unknown_key_is_refused_with_a_hint(recipes):
    with pytest.raises(ConfigError, match=r"recipe 'mine' sets unknown key 'model.nrom' \(did you mean model.norm"):
        load_config([recipes("model:\n  nrom: group\n")])


@pytest.mark.parametrize(
    "body, line",
    [
        ("epochs: abc\n", "epochs must be an integer >= 1, got 'abc'"),
        ('batch_size: "64"\n', "batch_size must be an integer >= 1, got '64'"),  # OmegaConf alone would take "64" as 64
        ("optim:\n  nesterov: 1\n", "optim.nesterov must be true or false, got 1"),
        ("data:\n  augment:\n    hflip: 2\n", "data.augment.hflip must be a number >= 0 and <= 1, got 2"),
        ("model: 5\n", "model must be a mapping, got 5"),
        ("sched:\n  name: poly\n", "sched.name must be one of constant, step, cosine, got 'poly'"),
        ("factors:\n  batch_size: [64, 0]\n", "batch_size must be an integer >= 1, got 0 (setting batch_size=0)"),
    ],
)
def test_a_recipe_value_of_the_wrong_type_is_refused_naming_the_recipe_and_key(recipes, body, line):
    with pytest.raises(ConfigError) as e:
        load_config([recipes(body)])
    assert str(e.value) == f"recipe 'mine': {line}"


def test_a_command_line_value_replaces_the_recipes_before_it_is_checked(recipes):
    assert load_config([recipes('batch_size: "64"\n'), "batch_size=32"]).batch_size == 32


def test_the_composed_config_stays_typed_and_in_struct_mode(recipes):
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigAttributeError, ValidationError

    cfg = load_config([recipes("act: rational\noptim:\n  lr: 1\n"), "act.version=B"])
    assert OmegaConf.is_struct(cfg) and cfg.act_options.rational.version == "B"
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float)  # typed after the check, as before
    with pytest.raises(ConfigAttributeError):
        cfg.optim.nam = "adamw"
    with pytest.raises(ValidationError):
        cfg.epochs = "abc"


def test_code_defaults_are_the_schema_defaults():
    """A partial block means what it means in a recipe (004 Table 6 SGD is Nesterov; warmup from 1e-6)."""
    from visionbench.train.module import lr_lambda
    from visionbench.train.optim import build_optimizer

    opt = build_optimizer(torch.nn.Linear(2, 2), block("optim", {"name": "sgd", "lr": 0.1}), batch_size=8)
    assert opt.defaults["nesterov"] is True
    f = lr_lambda(block("sched", {"name": "cosine", "warmup_epochs": 1}), 1e-3, steps_per_epoch=10, epochs=2)
    assert f(0) == pytest.approx(1e-3)
    data = block("data", {})
    assert data.augment.repeated_aug_epoch == config.defaults()["data"]["augment"]["repeated_aug_epoch"]
    assert isinstance(data, config.DataConfig) and data.augment.color_jitter is None
    with pytest.raises(ConfigError, match=r"^unknown key 'data.augment.flip'"):
        block("data", {"augment": {"flip": 0.5}})


def test_the_optimizer_name_is_checked_in_one_place():
    for check in (lambda: block("optim", {"name": "lamb"}), lambda: load_config(["optim.name=lamb"])):  # the schema,
        with pytest.raises(
            ConfigError, match=r"^optim.name must be one of sgd, adamw, got 'lamb'$"
        ):  # the command line
            check()


def test_a_field_is_checked_by_its_annotation_and_its_rule():
    """A key added to the schema needs no entry in a table elsewhere: its type is the check."""

    @dataclass
    class Mine:
        new_text: str = "avg"
        new_flag: bool = False
        new_int: int = 3
        new_float: float = 0.5
        new_any: Any = None
        new_opt: int | None = rule(None, ">= 1")
        new_frac: float = rule(0.0, "[0, 1)")
        new_mode: str = rule("a", choices=("a", "b"))

    good = {
        "new_text": "max",
        "new_flag": True,
        "new_int": 0,
        "new_float": 2,
        "new_any": [1, "x"],
        "new_opt": None,
        "new_frac": 0.5,
        "new_mode": "b",
    }
    assert errors(good, Mine) == []
    bad = {
        "new_text": 3,
        "new_flag": "maybe",
        "new_int": 1.5,
        "new_float": "x",
        "new_opt": 0,
        "new_frac": 1.0,
        "new_mode": "c",
        "new_key": 1,
    }
    assert [line for _, line in errors(bad, Mine)][:7] == [
        "new_text must be a non-empty string, got 3",
        "new_flag must be true or false, got 'maybe'",
        "new_int must be an integer, got 1.5",
        "new_float must be a number, got 'x'",
        "new_opt must be null or an integer >= 1, got 0",
        "new_frac must be a number >= 0 and < 1, got 1.0",
        "new_mode must be one of a, b, got 'c'",
    ]
    assert errors(bad, Mine)[-1][0] == "new_key"


def test_the_kernel_backend_is_a_checked_key_out_of_the_config_hash(tmp_path, capsys):
    """trainer.kernels: its values in one line; at any value the run's config hash is the one it had before the key
    (the backend is recorded in the run's environment instead: tests/test_environment.py)."""
    from visionbench.cli import main
    from visionbench.results.identity import config_hash

    assert main(["run", f"results_dir={tmp_path}/results", "trainer.kernels=bogus"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert (
        len(err) == 1
        and err[0].startswith("visionbench run")
        and ("trainer.kernels must be one of auto, triton, compile, eager, reference, got 'bogus'") in err[0]
    )
    assert not (tmp_path / "results").exists()
    runs = [run_config(load_config([f"trainer.kernels={k}"]), "relu", 0) for k in ("auto", "reference")]
    before = {k: v for k, v in runs[0].items()}
    before["trainer"] = {k: v for k, v in runs[0]["trainer"].items() if k != "kernels"}
    assert config_hash(runs[0]) == config_hash(runs[1]) == config_hash(before)
