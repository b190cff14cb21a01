"""The typed config schema (issue 12 item 1): one source of defaults, unknown keys and wrong types
refused by the config layer with the key named, code defaults that agree with the schema."""
from __future__ import annotations

import torch
import pytest

from visionbench import schema
from visionbench.cli import main
from visionbench.sweep import config
from visionbench.sweep.config import ConfigError, load_config, run_config


def test_the_schema_is_the_recipes_base_and_no_yaml_copy_exists():
    assert not (config.RECIPES_DIR / "_base.yaml").exists()
    run = run_config(load_config(["recipe=digits_vgg4"]), "relu", 0)
    d = schema.defaults()
    assert run["sched"]["warmup_lr"] == d["sched"]["warmup_lr"] == 1e-6
    assert run["optim"]["nesterov"] is d["optim"]["nesterov"] is True
    assert set(config.valid_keys()) >= {"optim.nesterov", "data.augment.repeated_aug_epoch", "trainer.precision"}


@pytest.mark.parametrize("arg, line", [
    ("epochs=abc", "epochs must be an integer >= 1, got 'abc'"),
    ("optim.nesterov=maybe", "optim.nesterov must be true or false, got 'maybe'"),
    ("optim.nam=adamw", "unknown key 'optim.nam' (did you mean optim.name"),
])
def test_issue_commands_fail_before_training_with_one_line(arg, line, tmp_path, capsys):
    assert main(["run", f"results_dir={tmp_path}", arg]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("visionbench run: ") and line in err
    assert not any(tmp_path.iterdir())


@pytest.fixture
def recipes(tmp_path, monkeypatch):
    """A recipes dir of our own, composed over the same `_base` (the schema in Hydra's ConfigStore)."""
    monkeypatch.setattr(config, "RECIPES_DIR", tmp_path)

    def write(body: str) -> str:
        (tmp_path / "mine.yaml").write_text("defaults: [_base, _self_]\nrecipe: mine\n" + body)
        return "recipe=mine"

    return write


def test_a_recipe_with_an_unknown_key_is_refused_by_the_composition_with_a_hint(recipes):
    with pytest.raises(ConfigError, match=r"recipe 'mine' sets unknown key 'model.nrom' \(did you mean model.norm"):
        load_config([recipes("model:\n  nrom: group\n")])


def test_a_recipe_value_of_the_wrong_type_is_refused_naming_the_key(recipes):
    with pytest.raises(ConfigError, match=r"^recipe 'mine': epochs: .*abc"):
        load_config([recipes("epochs: abc\n")])


def test_the_composed_config_stays_typed_and_in_struct_mode(recipes):
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigAttributeError, ValidationError

    cfg = load_config([recipes("act: rational\n"), "act.version=B"])
    assert OmegaConf.is_struct(cfg) and cfg.act_options.rational.version == "B"
    with pytest.raises(ConfigAttributeError):
        cfg.optim.nam = "adamw"
    with pytest.raises(ValidationError):
        cfg.epochs = "abc"


def test_code_defaults_are_the_schema_defaults():
    """A partial block means what it means in a recipe (004 Table 6 SGD is Nesterov; warmup from 1e-6)."""
    from visionbench.data import DataConfig
    from visionbench.train.optim import build_optimizer
    from visionbench.train.schedules import lr_lambda

    opt = build_optimizer(torch.nn.Linear(2, 2), {"name": "sgd", "lr": 0.1}, batch_size=8)
    assert opt.defaults["nesterov"] is True
    assert lr_lambda({"name": "cosine", "warmup_epochs": 1}, 1e-3, steps_per_epoch=10, epochs=2)(0) == pytest.approx(1e-3)
    data = DataConfig.from_mapping({})
    assert data.augment.repeated_aug_epoch == schema.defaults()["data"]["augment"]["repeated_aug_epoch"]


def test_the_optimizer_name_is_checked_in_one_place():
    from visionbench.train.optim import check_name

    assert check_name("AdamW") == "adamw"
    with pytest.raises(ValueError, match=r"^unknown optim.name 'adamz'; accepted: sgd, adamw$"):
        check_name("adamz")
