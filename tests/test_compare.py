"""`visionbench compare A B` (report/compare.py, stats/reproduction.py): the verdicts on real trained trees and on
written ones, its numbers against scipy and statsmodels, its refusals; and the one-run prediction interval of
`visionbench report --published` (docs/report.md)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.weightstats import ttost_ind

from visionbench.cli import main as cli_main
from visionbench.report import published
from visionbench.report.compare import main
from visionbench.report.export import export
from visionbench.results import layout
from visionbench.stats import reproduction

from .helpers import copy_tree, write_recipe, write_run

# tests/helpers.py's shrink (2 epochs) on 128 images: lr 0.002 learns (40-70 % top-1; the same tree as
# tests/test_convergence.py's learning runs, trained once a session), 100× lower stays at chance
LEARNS = ("act=relu", "seeds=3", "optim.lr=0.002", "data.limit_train=128")
STALLS = ("act=relu", "seeds=3", "optim.lr=0.00002", "data.limit_train=128")


def run_compare(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def read_rows(path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False, na_values=[""]).set_index("act")


def test_a_tree_its_copy_and_its_record_are_identical(trained_tree, tmp_path, capsys):
    tree = trained_tree(*LEARNS)
    copy = copy_tree(tree, tmp_path / "copy")
    export(tree / "digits_vgg4", tmp_path / "record")
    for other in (copy, tmp_path / "record"):
        rc, out, _ = run_compare(capsys, str(tree), str(other), "--out", str(tmp_path / "cmp.md"))
        assert rc == 0
        row = read_rows(tmp_path / "cmp.csv").loc["relu"]
        assert row["verdict"] == "identical" and row["n_a"] == row["n_b"] == 3 and row["diff"] == 0
        assert row["margin_sd"] == 1 and row["margin"] == pytest.approx(row["sd_a"])  # the default: one seed sd
        assert "| digits_vgg4 | relu |" in out and "identical" in out and "configured alike" in out


def test_a_100x_lower_learning_rate_stalls_its_runs_are_left_out_and_the_config_difference_is_listed(
    trained_tree, capsys
):
    # stalled runs (at chance level) are not scored, as diverged ones are not (docs/reproducing.md): no number to test in B, but
    # A learned where B did not — not reproduced, and compare's exit status says so
    assert cli_main(["compare", str(trained_tree(*LEARNS)), str(trained_tree(*STALLS))]) == 1
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("| digits_vgg4 | relu |"))
    assert line.endswith("| (no completed run) |  |  |  |  |  | differs (no run of B learned) |")
    assert "optim.lr: A 0.002, B 2e-05" in out
    assert (
        "digits_vgg4 relu: differs — every run of B stalled, diverged or failed (named in the notes) where A's "
        "learned: not reproduced" in out
    )
    assert "B: 3 stalled runs (seed 0, 1, 2) left out of the scoring" in out


def two_trees(tmp_path, a: dict, b: dict, recipe: str = "digits_vgg4"):
    return write_recipe(tmp_path / "a", recipe, a), write_recipe(tmp_path / "b", recipe, b)


def test_trees_that_differ_by_seed_noise_are_reproduced_or_undecided(tmp_path, capsys):
    rng = np.random.default_rng(0)
    a, b = two_trees(
        tmp_path,
        {act: list(98 + 0.3 * rng.standard_normal(5)) for act in ("relu", "gelu")},
        {act: list(98 + 0.3 * rng.standard_normal(5)) for act in ("relu", "gelu")},
    )
    rc, out, _ = run_compare(capsys, str(a), str(b), "--out", str(tmp_path / "cmp.md"))
    assert rc == 0
    rows = read_rows(tmp_path / "cmp.csv")
    assert set(rows["verdict"]) <= {"undecided", "reproduced"}
    assert (rows["seeds_needed"] == 18).all() and "undecided (≈ 18 seeds/tree)" in out  # ±1 seed sd at 80 %
    run_compare(capsys, str(a), str(b), "--margin", "1", "--out", str(tmp_path / "cmp.md"))
    assert set(read_rows(tmp_path / "cmp.csv")["verdict"]) == {"reproduced"}


def test_the_environment_differences_are_listed(tmp_path, capsys):
    a, b = two_trees(tmp_path, {"relu": [98.0, 98.2]}, {"relu": [97.9, 98.3]})
    for tree, timm in ((a, "1.0.31"), (b, "1.0.32")):
        for run in layout.find_run_dirs(tree):
            summary = layout.read_summary(run)
            summary["environment"] = {
                "python": "3.11.7",
                "packages": {"timm": timm, "visionbench": timm},
                "git_commit": timm,
                "threads": 2,
            }
            layout.write_summary(run, summary)
    rc, out, _ = run_compare(capsys, str(a), str(b))
    assert rc == 0 and "A and B differ in timm: A 1.0.31, B 1.0.32." in out  # not the commit, not visionbench


def test_welch_interval_and_tost_p_are_scipys_and_statsmodels(tmp_path, capsys):
    va, vb = [97.1, 97.9, 98.4, 97.6], [98.3, 98.9, 98.0]
    a, b = two_trees(tmp_path, {"relu": va}, {"relu": vb})
    rc, out, _ = run_compare(capsys, str(a), str(b), "--margin", "0.8", "--out", str(tmp_path / "cmp.md"))
    row = read_rows(tmp_path / "cmp.csv").loc["relu"]
    welch = sps.ttest_ind(vb, va, equal_var=False)
    ci = welch.confidence_interval(0.95)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert row["welch_p"] == row["welch_p_holm"] == pytest.approx(welch.pvalue, rel=1e-12)  # a family of one
    assert row["equivalence_test"] == "tost" and row["equivalence_p"] == pytest.approx(
        ttost_ind(np.array(vb), np.array(va), -0.8, 0.8, usevar="unequal")[0], rel=1e-12
    )
    assert row["diff"] == pytest.approx(np.mean(vb) - np.mean(va))
    ci90 = welch.confidence_interval(0.90)
    assert row["bound"] == pytest.approx(max(abs(ci90.low), abs(ci90.high)), rel=1e-12)
    expected = "reproduced" if row["equivalence_p"] < 0.05 else "differs" if row["welch_p"] < 0.05 else "undecided"
    assert row["verdict"] == expected
    assert f"[{ci.low:+.2f}, {ci.high:+.2f}]" in out and f"±{row['bound']:.2f}" in out


def test_verdict_rule():
    assert reproduction.decide(True, math.nan, math.nan) == "identical"
    assert reproduction.decide(False, 0.001, 0.01) == "reproduced"  # equivalent within the margin wins
    assert reproduction.decide(False, 0.001, 0.2) == "differs"
    assert reproduction.decide(False, 0.3, 0.2) == "undecided"


def one_line_error(capsys, *argv) -> str:
    rc, out, err = run_compare(capsys, *argv)
    assert rc == 2 and out == "" and err.count("\n") == 1 and err.startswith("visionbench compare: error: ")
    return err


def test_different_recipes_are_refused_naming_both_sides(tmp_path, capsys):
    a = write_recipe(tmp_path / "a", "digits_vgg4", {"relu": [98.0, 98.2]})
    b = write_recipe(tmp_path / "b", "cifar10_vgg4", {"relu": [81.0, 81.2]})
    err = one_line_error(capsys, str(a), str(b), "--out", str(tmp_path / "out" / "cmp.md"))
    assert "A has digits_vgg4; B has cifar10_vgg4" in err
    assert not (tmp_path / "out").exists()


def reconfigure(recipe_dir, **keys):
    """Set dotted config keys in every run's config.yaml under `recipe_dir`."""
    for run in layout.find_run_dirs(recipe_dir):
        config = layout.read_config(run)
        for key, value in keys.items():
            *parents, last = key.split(".")
            node = config
            for p in parents:
                node = node.setdefault(p, {})
            node[last] = value
        layout.write_config(run, config)


def test_another_test_set_is_refused_and_another_learning_rate_is_listed(tmp_path, capsys):
    a, b = two_trees(tmp_path, {"relu": [98.0, 98.2]}, {"relu": [97.9, 98.3]})
    reconfigure(a, **{"optim.lr": 0.02, "data.limit_val": 100, "model.norm": "group"})
    reconfigure(b, **{"optim.lr": 0.5, "data.limit_val": 100, "model.norm": "group", "model.lsuv": True})
    rc, out, _ = run_compare(capsys, str(a), str(b))
    assert rc == 0 and "model.lsuv: A False, B True; digits_vgg4: optim.lr: A 0.02, B 0.5" in out
    reconfigure(b, **{"data.limit_val": 50, "model.norm": "batch"})
    err = one_line_error(capsys, str(a), str(b))
    assert "data.limit_val: A 100, B 50; model.norm: A 'group', B 'batch' — another data set" in err
    assert "optim.lr" not in err.split("—")[0]


def test_missing_empty_or_damaged_inputs_are_refused(tmp_path, capsys):
    tree = write_recipe(tmp_path / "a", "digits_vgg4", {"relu": [98.0, 98.2]})
    assert f"B: {tmp_path / 'nowhere'} does not exist" in one_line_error(capsys, str(tree), str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    assert "is no results tree" in one_line_error(capsys, str(tmp_path / "empty"), str(tree))
    record = tmp_path / "record"
    record.mkdir()
    (record / "record.json").write_text('{"format": "visionbench-record", "vers')
    assert "A: " in one_line_error(capsys, str(record), str(tree))
    (record / "record.json").write_text(json.dumps({"format": "visionbench-record", "version": 99}))
    assert "version 99" in one_line_error(capsys, str(record), str(tree))


def test_an_unknown_metric_is_refused(tmp_path, capsys):
    tree = write_recipe(tmp_path / "a", "digits_vgg4", {"relu": [98.0, 98.2]})
    assert "no run has metric 'val_top5_best'" in one_line_error(
        capsys, str(tree), str(tree), "--metric", "val_top5_best"
    )


# --- visionbench report --published: the prediction interval of one run ----------------------------------


def test_the_one_run_prediction_interval_and_whether_the_paper_lies_in_it():
    # 004 Table 1 (cifar10_vgg4, val_top1_best): rational 81.96, relu 79.03, leaky_relu 79.19
    ours = pd.DataFrame(
        {
            "recipe": "cifar10_vgg4",
            "metric": "val_top1_best",
            "act": ["rational", "relu", "leaky_relu"],
            "mean": [82.3, 82.3, 80.0],
            "std": [0.3, 0.3, math.nan],
            "n": [4, 4, 1],
        }
    )
    table, notes = published.attach(ours)
    half = sps.t.ppf(0.975, 3) * 0.3 * math.sqrt(1 + 1 / 4)
    rows = table.set_index("act")
    assert (rows.at["rational", "pi_low"], rows.at["rational", "pi_high"]) == pytest.approx((82.3 - half, 82.3 + half))
    assert reproduction.prediction_interval(82.3, 0.3, 4) == pytest.approx((82.3 - half, 82.3 + half))
    assert rows.at["rational", "published_in_pi"] == "yes"  # 81.96 within 82.3 ± 1.07
    assert rows.at["relu", "published_in_pi"] == "no"  # 79.03 is not
    assert rows.at["leaky_relu", "published_in_pi"] == "" and math.isnan(rows.at["leaky_relu", "pi_low"])
    assert "1 of 2 published numbers lie inside" in notes[0] and "no interval for leaky_relu" in notes[0]


def test_the_report_shows_the_prediction_interval_column(tmp_path, capsys):
    from visionbench.report import main as report_main

    for seed, value in enumerate([81.7, 82.0, 82.3]):
        write_run(tmp_path, "cifar10_vgg4", "rational", seed, value, baseline=None)
    assert report_main([str(tmp_path / "cifar10_vgg4"), "--published", "--no-plots"]) == 0
    out = capsys.readouterr().out
    low, high = reproduction.prediction_interval(82.0, 0.3, 3)
    assert "one-run 95 % PI" in out and f"[{low:.2f}, {high:.2f}] paper inside" in out
    csv = pd.read_csv(tmp_path / "cifar10_vgg4" / "table.csv").set_index("act")
    assert csv.at["rational", "published_in_pi"] == "yes"
    assert csv.at["rational", "pi_low"] == pytest.approx(low)


@pytest.mark.parametrize("q", [0.1, 0.3, 0.5])
def test_the_never_learned_rule_fires_at_its_stated_rate(q):
    """The rule behind `differs (no run of B learned)` (compare._failed_side), fed n = 3 runs per tree that each stall
    with probability q: under no difference it fires at 2·qⁿ·(1 − qⁿ), and when B always stalls its power is 1 − qⁿ
    (docs/reproducing.md, the rates stated there)."""
    from visionbench.report.compare import _failed_side

    n, draws = 3, 20_000
    rng = np.random.default_rng(0)

    def rate(q_a: float, q_b: float) -> float:
        lost_a, lost_b = rng.binomial(n, q_a, draws), rng.binomial(n, q_b, draws)
        return float(
            np.mean(
                [
                    bool(_failed_side({"n_a": n - a, "n_b": n - b, "left_out_a": a, "left_out_b": b}))
                    for a, b in zip(lost_a, lost_b)
                ]
            )
        )

    false_alarm, expected = rate(q, q), 2 * q**n * (1 - q**n)
    assert abs(false_alarm - expected) < 3 * np.sqrt(expected * (1 - expected) / draws) + 1e-9
    power, expected = rate(q, 1.0), 1 - q**n
    assert abs(power - expected) < 3 * np.sqrt(expected * (1 - expected) / draws) + 1e-9
