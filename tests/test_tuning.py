"""Equal tuning budgets (`tune=`, docs/tuning.md): the draw of the trials (reproducible from its seed, the same for
every activation), the bad inputs of a search space (one line each), the protocol warning, the equal-budget
sentences, and a tiny design end to end on the digits (2 activations x 3 trials, then 2 seeds of each best)."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from visionbench.cli import main
from visionbench.config import ConfigError
from visionbench.config import tune_space as design
from visionbench.report import tuning as report_tuning
from visionbench.sweep import tune_sweep
from visionbench.sweep.preflight import load_config
from visionbench.sweep.sweep import plan

from .helpers import shrunk

SPACE = "tune=optim.lr:log[1e-4,1e-1],optim.weight_decay:log[1e-6,1e-3]"


def test_the_draw_is_reproducible_from_its_seed_and_extends_with_the_budget():
    dims = design.parse_space("optim.lr:log[1e-4,1e-1],optim.momentum:uniform[0.5,0.99],sched.name:[constant,cosine]")
    a, b = design.trial_settings(dims, 8, seed=3), design.trial_settings(dims, 8, seed=3)
    assert a == b
    assert a != design.trial_settings(dims, 8, seed=4)
    assert design.trial_settings(dims, 16, seed=3)[:8] == a  # trial i is the same whatever B
    assert [s["tune.trial"] for s in a] == list(range(8))
    for s in a:
        assert 1e-4 <= s["optim.lr"] <= 1e-1 and 0.5 <= s["optim.momentum"] <= 0.99
        assert s["sched.name"] in ("constant", "cosine")
        assert s["optim.lr"] == float(f"{s['optim.lr']:.3g}")  # rounded: the folder label holds the exact value


def test_every_activation_trains_the_same_trials(tmp_path):
    cfg = load_config(shrunk("act=relu,gelu", SPACE, "trials=4", "tune_seed=7", f"results_dir={tmp_path}"))
    assert (cfg.tune.trials, cfg.tune.seed) == (4, 7)
    settings = tune_sweep.trials(cfg)
    assert settings == tune_sweep.trials(cfg) and len(settings) == 4
    jobs = plan(cfg, settings=settings, seeds=[design.TRIAL_SEED])
    by_act: dict[str, list] = {}
    for run, out in jobs:
        by_act.setdefault(run["act_label"], []).append(run["setting"])
        assert run["tune"]["trial"] == run["setting"]["tune.trial"]  # recorded in config.yaml
        assert run["optim"]["lr"] == run["setting"]["optim.lr"] and run["seed"] == design.TRIAL_SEED
        assert out.parent.parent.name.startswith(f"tune.trial={run['setting']['tune.trial']},optim.lr=")
    assert by_act["relu"] == by_act["gelu"] == settings


@pytest.mark.parametrize(
    "args, key, text",
    [
        (["tune=optim.lrr:log[1e-4,1e-1]"], "tune.space", "unknown key 'optim.lrr' (did you mean optim.lr"),
        (["tune=sched.name:log[1,2]"], "tune.space", "sched.name is not numeric"),
        (["tune=optim.lr:log[1e-1,1e-4]"], "tune.space", "has its bounds out of order"),
        (["tune=optim.lr:log[0,1e-1]"], "tune.space", "needs 0 < LO on a log scale"),
        (["tune=optim.lr:uniform[-1,1]"], "tune.space", "optim.lr must be a number >= 0, got -1.0"),
        (["tune=optim.lr:log[1e-4,1e-1]", "trials=1"], "tune.trials", "tune.trials must be an integer >= 2, got 1"),
        (["tune=seeds:[1,2]"], "tune.space", "seeds is not a key a search can vary"),
        (["tune=optim.lr:[1e-3,1e-3]"], "tune.space", "repeats a value"),
        (["tune=optim.lr:nope"], "tune.space", "expected KEY:log[LO,HI], KEY:uniform[LO,HI] or KEY:[V1,V2,...]"),
        (["tune=optim.lr:[1e-3,1e-2]", "data.val_split=0"], "data.val_split", "data.val_split=0 has none"),
        (["tune=optim.lr:[1e-3,1e-2]", "model.norm=null,group"], "factors", "a factor sweep beside it"),
        (["tune.trial=3"], "tune.trial", "tune.trial is set per run by the sweep"),
        (["tune.repeat=1"], "tune.repeat", "tune.repeat is set per run by the sweep"),
        (["tune=optim.lr:[1e-3,1e-2]", "tune_repeats=0"], "tune.repeats", "tune.repeats must be an integer >= 1"),
        (["tune=optim.lr:[1e-3,1e-2]", "tune_repeats=3", "seeds=auto"], "tune.repeats", "give seeds=S"),
        (
            ["tune=optim.lr:[1e-3,1e-2]", "tune_repeats=101", "seeds=100"],
            "tune.repeats",
            "would reach the trials' seed",
        ),
        (["tune=sched.name:[constant,nope]"], "tune.space", "sched.name must be one of constant"),
    ],
)
def test_a_bad_search_space_is_one_line_naming_the_key(args, key, text):
    with pytest.raises(ConfigError) as e:
        load_config(args)
    assert e.value.key == key and text in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "space, why",
    [
        ("data.val_split:[0,0.2]", "a split of 0 selects the best trial on the test set"),
        ("act:[relu,gelu]", "labelled with the swept activation"),
        ("data.root:[/tmp/a,/tmp/b]", "the data a run reads"),
        ("model.name:[vgg4,nonexistent_model]", "the architecture"),
    ],
)
def test_a_key_that_breaks_the_design_is_refused_before_training(tmp_path, capsys, space, why):
    """Issue 57 item 10: only keys of how one activation is trained may be tuned; the rest, one line, exit 2."""
    assert main(["run", f"results_dir={tmp_path}/r", "act=relu,gelu", f"tune={space}", "trials=2"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    key = space.split(":")[0]
    assert line.startswith(f"visionbench run: tune.space: {key} is not tunable") and why in line
    assert "tunable: optim.*, sched.*" in line and not (tmp_path / "r").exists()


def test_a_tuned_keys_values_are_checked_like_a_direct_override_before_training(tmp_path, capsys):
    """A value the key's own rule or the registries refuse: refused before any trial, naming the value."""
    assert main(["run", f"results_dir={tmp_path}/r", "tune=model.dropout:[0.1,1.5]", "trials=2"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "model.dropout" in line and "1.5" in line and not (tmp_path / "r").exists()
    assert main(["run", f"results_dir={tmp_path}/r", "tune=optim.decay_rule:[conv_linear,nope]", "trials=2"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "optim.decay_rule must be one of" in line and "optim.decay_rule=nope" in line


def test_a_bad_search_space_on_the_command_line_exits_2_in_one_line(tmp_path, capsys):
    assert main(["run", f"results_dir={tmp_path}/r", "tune=optim.lr:log[1e-1,1e-4]"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        err
        == [
            "visionbench run: tune.space: optim.lr:log[1e-1,1e-4] has its bounds out of order; write [LO,HI] "
            "with LO < HI"
        ]
        and not (tmp_path / "r").exists()
    )


def test_tuning_a_key_a_papers_recipe_fixes_warns_and_says_which(capsys):
    load_config(["recipe=fashion_mnist_slaf", "act=relu", "tune=optim.lr:log[1e-4,1e-2]", "data.val_split=0.1"])
    err = capsys.readouterr().err
    assert "warning: tune= varies optim.lr, which recipe fashion_mnist_slaf fixes" in err and "003 code" in err
    load_config(["act=relu", "tune=optim.lr:log[1e-4,1e-2]"])  # the digits recipe reruns no paper: no warning
    assert "warning" not in capsys.readouterr().err


def _summary(verdicts: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({"act": list(verdicts), "verdict": list(verdicts.values()), "baseline": "relu"})


def test_the_sentence_says_what_the_verdict_is_about_and_tests_the_change():
    from visionbench.stats.tuned_comparison import Comparison

    best, fixed = _summary({"relu": "", "rational": "inconclusive"}), _summary({"relu": "", "rational": "better"})
    change = {"rational": {"about": None, "change": Comparison(-0.8, -1.4, -0.2, 0.012, 7.5, "worse")}}
    (line,) = report_tuning.sentences(best, fixed, "relu", 16, change)
    assert line == (
        "tuned alike (16 trials each), rational vs relu is inconclusive: a verdict about the two selected "
        "configurations, not the activations (tune_repeats=R >= 2 makes it one about the activations); at the "
        "recipe's own values rational is better than relu; tuning changed the comparison against rational: "
        "Δ_tuned − Δ_recipe -0.80 [-1.40, -0.20], p = 0.012, over the seeds, given the two selected configurations"
    )
    about = Comparison(0.5, 0.1, 0.9, 0.03, 2.0, "better")
    flat = {"rational": {"about": about, "change": Comparison(0.1, -0.5, 0.7, 0.7, 5.0, "inconclusive")}}
    (line,) = report_tuning.sentences(best, fixed, "relu", 16, flat, repeats=3)
    assert line.startswith("over 3 independent tuning procedures each (16 trials each), rational is better than relu")
    assert "tuning did not measurably change the comparison" in line and "over the 3 procedures" in line
    (line,) = report_tuning.sentences(best, None, "relu", 16)
    assert "were not retrained" in line


def test_selection_takes_the_best_validation_score_never_a_failed_trial():
    from types import SimpleNamespace as O

    def trial(i, status, val):
        return O(
            act="relu",
            summary={
                "status": status,
                "setting": {"tune.trial": i, "optim.lr": i / 10},
                "metrics": {"val_top1_best": val, "test_top1_at_best_val": 100 - val},
            },
        )

    chosen = tune_sweep.select(
        [
            trial(0, "completed", 90.0),
            trial(1, "diverged", 99.0),
            trial(2, "completed", 95.0),
            trial(3, "completed", 95.0),
        ],
        "val_top1_best",
    )
    assert chosen["relu"]["trial"] == 2 and chosen["relu"]["values"] == {"optim.lr": 0.2}  # ties: the earlier
    assert chosen["relu"]["scores"][1] is None and math.isclose(chosen["relu"]["score"], 95.0)


@pytest.mark.slow  # 16 trials and their retrains (14 s); the design's parts are tested above in make test
def test_a_tiny_design_runs_end_to_end_and_reports_the_equal_budget_verdict(tmp_path, capsys):
    root = tmp_path / "runs"
    argv = shrunk("act=relu,gelu", "tune=optim.lr:log[1e-3,5e-3]", "trials=3", "seeds=2", f"results_dir={root}")
    assert main(["run", *argv]) == 0
    out = capsys.readouterr().out
    recipe = root / "digits_vgg4"
    assert (recipe / "tuning.json").is_file()
    for name in ("tuning.md", "tuning.csv", "tuning.png", "tune.trial=best/table.md", "tune.trial=defaults/table.md"):
        assert (recipe / name).is_file(), name
    assert len(list(recipe.glob("tune.trial=*,optim.lr=*/gelu/seed_10000/summary.json"))) == 3
    assert len(list(recipe.glob("tune.trial=best/*/seed_*/summary.json"))) == 4
    assert "equal tuning budgets" in out and "expected best val_top1_best" in out
    assert "Tuned alike (3 trials each)" in out and "at the recipe's own values" in out
    assert "a verdict about the two selected configurations" in out
    assert re.search(r"(tuning (did not measurably )?change(d)?|whether tuning changed) the comparison", out)
    assert "Optimism of the selection" in out and "NOT COMPARABLE" not in out
    curve = pd.read_csv(recipe / "tuning.csv")
    assert set(curve["act"]) == {"relu", "gelu"} and list(curve[curve["act"] == "relu"]["n"]) == [1, 2, 3]
    # the same command again trains nothing and reports the same
    assert main(["run", *argv]) == 0
    assert "Tuned alike (3 trials each)" in capsys.readouterr().out


def test_repeated_procedures_each_draw_train_and_retrain_their_own(tmp_path):
    """tune_repeats=R: procedure j's trials in `tune.repeat=j,tune.trial=i,...` (j = 0 draws the R = 1 design's
    trials), trial seed 10000 + j, its selection retrained with seeds j*S..(j+1)*S-1; the executor stands in for
    training; tuning.json records each procedure's selection."""
    import json

    from visionbench.sweep.steps import Steps
    from visionbench.sweep.sweep import Outcome

    calls = []

    def execute(jobs):
        out = []
        for run, run_dir in jobs:
            calls.append((run["setting"], run["act_label"], run["seed"], run_dir))
            score = 90.0 + 100 * run["optim"]["lr"] + run["seed"] % 3
            summary = {"status": "completed", "setting": run["setting"], "metrics": {"val_top1_best": score}}
            out.append(Outcome(run["act_label"], run["seed"], "completed", summary, run_dir))
        return out

    argv = shrunk("act=relu,gelu", "tune=optim.lr:log[1e-3,1e-1]", "trials=3", "seeds=2", "tune_repeats=3")
    cfg = load_config(argv + [f"results_dir={tmp_path}"])
    assert tune_sweep.trials(cfg, 0) == [{"tune.repeat": 0, **t} for t in tune_sweep.trials(cfg)]
    assert tune_sweep.trials(cfg, 1) != tune_sweep.trials(cfg, 0)  # each procedure its own draw
    tune_sweep.run_tuning(cfg, Steps(plan, execute, None))
    assert len(calls) == 3 * (2 * 3 + 2 * 2) + 2 * 2  # R x (trials + best) per act, then the recipe's values
    for j in range(3):
        trials = [c for c in calls if c[0].get("tune.repeat") == j and isinstance(c[0]["tune.trial"], int)]
        assert len(trials) == 6 and {c[2] for c in trials} == {10_000 + j}
        assert all(c[3].parent.parent.name.startswith(f"tune.repeat={j},tune.trial=") for c in trials)
        best = [c for c in calls if c[0].get("tune.repeat") == j and c[0]["tune.trial"] == "best"]
        assert sorted({c[2] for c in best}) == [2 * j, 2 * j + 1]
        assert {c[3].parent.parent.name for c in best} == {f"tune.repeat={j},tune.trial=best"}
    assert {c[3].parent.parent.name for c in calls if c[0]["tune.trial"] == "defaults"} == {"tune.trial=defaults"}
    record = json.loads((tmp_path / "digits_vgg4" / tune_sweep.RECORD).read_text())
    assert record["repeats"] == 3 and [p["retrain_seeds"] for p in record["procedures"]] == [[0, 1], [2, 3], [4, 5]]


@pytest.mark.slow  # the procedures' bookkeeping is tested with a stub executor in the default suite
def test_a_tiny_repeated_design_reports_the_verdict_about_the_activations(tmp_path, capsys):
    """tune_repeats=2 end to end: each procedure's folders, and the sentence's test over the procedures."""
    root = tmp_path / "runs"
    argv = shrunk("act=relu,gelu", "tune=optim.lr:log[1e-3,5e-3]", "optim.lr=0.003", "trials=2", "seeds=2")
    assert main(["run", *argv, "tune_repeats=2", f"results_dir={root}"]) == 0
    out = capsys.readouterr().out
    recipe = root / "digits_vgg4"
    for j in (0, 1):
        assert len(list(recipe.glob(f"tune.repeat={j},tune.trial=*,optim.lr=*/relu/seed_{10_000 + j}"))) == 2
        assert len(list(recipe.glob(f"tune.repeat={j},tune.trial=best/*/seed_*/summary.json"))) == 4
    assert "Over 2 independent tuning procedures each (2 trials each), gelu" in out
    assert "t-test over the procedures" in out and "over the 2 procedures" in out


def test_the_retrain_is_planned_by_the_sweeps_own_plan_and_checks_the_data_at_its_values(tmp_path, monkeypatch):
    """`retrain_plan` plans through the sweep's `plan` (one planning loop): each activation's runs at its chosen
    values, in `tune.trial=best` (the folder names the phase alone), the data checked at those values as for any
    setting; an activation whose every trial failed is not retrained."""
    from visionbench.sweep import sweep as sweep_module
    from visionbench.sweep.acts import sweep_acts

    checked, check_data = [], sweep_module.check_data
    monkeypatch.setattr(sweep_module, "check_data", lambda c: checked.append(c.optim.lr) or check_data(c))
    cfg = load_config(shrunk("act=relu,gelu", SPACE, "trials=2", "seeds=2", f"results_dir={tmp_path}"))
    chosen = {"relu": {"values": {"optim.lr": 0.00123}}, "gelu": {"values": None}}
    jobs = tune_sweep.retrain_plan(cfg, chosen, design.BEST, sweep_acts(cfg), range(2), plan)
    assert [(run["act_label"], run["seed"]) for run, _ in jobs] == [("relu", 0), ("relu", 1)]
    for run, out in jobs:
        assert run["setting"] == {"tune.trial": "best", "optim.lr": 0.00123} and run["optim"]["lr"] == 0.00123
        assert out == tmp_path / "digits_vgg4" / "tune.trial=best" / "relu" / f"seed_{run['seed']}"
    assert checked == [0.00123]
    defaults = tune_sweep.retrain_plan(cfg, chosen, design.DEFAULTS, sweep_acts(cfg), [0], plan)
    assert [out.parent.parent.name for _, out in defaults] == ["tune.trial=defaults"] * 2
    assert all(run["setting"] == {"tune.trial": "defaults"} for run, _ in defaults)


def test_a_design_with_seeds_auto_retrains_each_phase_in_rounds(tmp_path):
    """tune= with seeds=auto: the trials, then each phase's retrain in seeds=auto's rounds (sweep/rounds.py), planned
    by the sweep's plan; the executor stands in for training."""
    from visionbench.sweep.steps import Steps
    from visionbench.sweep.sweep import Outcome

    calls, lines = [], []

    def execute(jobs):
        out = []
        for run, run_dir in jobs:
            calls.append((str(run["setting"]["tune.trial"]), run["act_label"], run["seed"], run_dir))
            score = (90.0 if run["act_label"] == "relu" else 60.0) + run["seed"] % 3 + run["optim"]["lr"]
            metrics = {"val_top1_best": score, "test_top1_at_best_val": score}
            summary = {"status": "completed", "setting": run["setting"], "metrics": metrics}
            out.append(Outcome(run["act_label"], run["seed"], "completed", summary, run_dir))
        return out

    cfg = load_config(
        shrunk("act=relu,gelu", "tune=optim.lr:[1e-3,1e-2]", "trials=2", "seeds=auto", "seeds_max=3")
        + [f"results_dir={tmp_path}"]
    )
    outcomes = tune_sweep.run_tuning(cfg, Steps(plan, execute, lines.append))
    assert len(outcomes) == len(calls) == 4 + 2 * 2 * 3  # 2 trials each, then best and defaults: 3 seeds each
    assert {c[0] for c in calls[:4]} == {"0", "1"} and all(c[2] == design.TRIAL_SEED for c in calls[:4])
    for phase in ("best", "defaults"):
        runs = [c for c in calls if c[0] == phase]
        assert sorted((act, seed) for _, act, seed, _ in runs) == [(a, s) for a in ("gelu", "relu") for s in range(3)]
        assert {run_dir.parent.parent.name for *_, run_dir in runs} == {f"tune.trial={phase}"}
        assert (tmp_path / "digits_vgg4" / f"tune.trial={phase}" / "sequential.json").is_file()
    assert any(line.startswith("seeds=auto round 1/1 (3 seeds) [tune.trial=best]") for line in lines), lines
    assert (tmp_path / "digits_vgg4" / tune_sweep.RECORD).is_file()


def test_estimate_prices_the_trials_and_the_retrain(tmp_path):
    from visionbench.bench.estimate import estimate

    cfg = load_config(
        shrunk("act=relu,gelu", "tune=optim.lr:[1e-3,1e-2]", "trials=3", "seeds=2", f"results_dir={tmp_path}")
    )
    est = estimate(cfg)
    assert [(r.setting, r.act, r.runs) for r in est.rows] == [
        ("tune: 3 trials + 2 best + 2 defaults", "relu", 7),
        ("tune: 3 trials + 2 best + 2 defaults", "gelu", 7),
    ]
    assert (
        any(n.startswith("tune=: per activation 3 trials") for n in est.notes)
        and not tmp_path.joinpath("digits_vgg4").exists()
    )


def test_estimate_prices_each_repeated_procedure(tmp_path):
    from visionbench.bench.estimate import estimate

    argv = shrunk("act=relu", "tune=optim.lr:[1e-3,1e-2]", "trials=3", "seeds=2", "tune_repeats=3")
    est = estimate(load_config(argv + [f"results_dir={tmp_path}"]))
    assert [(r.setting, r.runs) for r in est.rows] == [("tune: 3 × (3 trials + 2 best) + 2 defaults", 3 * 5 + 2)]
    assert any(n.startswith("tune=: per activation 3 independent procedures of 3 trials") for n in est.notes)


def test_the_hydra_entry_point_refuses_a_design_in_one_line():
    from visionbench.sweep.hydra_app import check_sweep

    with pytest.raises(ConfigError, match="tune= is a design of `visionbench run`"):
        check_sweep(["act=relu", "tune=optim.lr:[1e-3,1e-2]"])


def test_the_equal_budget_table_is_comparable_though_its_tuned_keys_differ(tmp_path):
    from visionbench.config import recipe_config, run_config
    from visionbench.report.comparable import mixed_configs
    from visionbench.results import layout
    from visionbench.results.identity import config_hash

    cfg = recipe_config("digits_vgg4")
    rows = []
    for act, lr, momentum in (("relu", 0.001, 0.9), ("gelu", 0.01, 0.9), ("rational", 0.01, 0.5)):
        run = run_config(cfg, act, 0, {"tune.trial": "best", "optim.lr": lr, "optim.momentum": momentum})
        out = tmp_path / act
        out.mkdir()
        layout.write_config(out, run)
        rows.append({"act": act, "config_hash": config_hash(run), "run_dir": str(out)})
    runs = pd.DataFrame(rows)
    assert mixed_configs(runs).startswith("keys optim.lr, optim.momentum")  # any other table: NOT COMPARABLE
    assert mixed_configs(runs, {"optim.lr", "optim.momentum"}) == ""
    assert mixed_configs(runs, {"optim.lr"}).startswith("keys optim.lr, optim.momentum")  # only the tuned keys
