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
    # stalled runs (at chance level) are not scored, as diverged ones are not (docs/reproducing.md): no number to test in B, and
    # A learned where B did not — not reproduced; at 3 runs a side Fisher's test of the counts (p = 0.1) cannot tell it from a
    # stall rate both trees share, so it is no `differs` either (tests/test_compare_rates.py: the rule's error rate)
    assert cli_main(["compare", str(trained_tree(*LEARNS)), str(trained_tree(*STALLS))]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("| digits_vgg4 | relu |"))
    assert line.endswith("| (no completed run) |  |  | 0.1000 |  |  | undecided (no run of B learned) |")
    assert "optim.lr: A 0.002, B 2e-05" in out
    assert (
        "digits_vgg4 relu: undecided — every run of B stalled, diverged or failed (named in the notes) where A's "
        "learned: not reproduced; runs left out: A 0 of 3, B 3 of 3 (Fisher p = 0.1000, Holm = 0.1000): too few runs"
        in out
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
    assert (rows["seeds_needed"] == 33).all() and "undecided (≈ 33 seeds/tree)" in out  # ±1 seed sd of A at 80 %
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


def test_the_interval_the_p_and_the_tost_use_welchs_se_with_hsus_df(tmp_path, capsys):
    va, vb = [97.1, 97.9, 98.4, 97.6], [98.3, 98.9, 98.0]
    a, b = two_trees(tmp_path, {"relu": va}, {"relu": vb})
    rc, out, _ = run_compare(capsys, str(a), str(b), "--margin", "0.8", "--out", str(tmp_path / "cmp.md"))
    row = read_rows(tmp_path / "cmp.csv").loc["relu"]
    diff = np.mean(vb) - np.mean(va)
    se, df = math.sqrt(np.var(va, ddof=1) / 4 + np.var(vb, ddof=1) / 3), 2  # Hsu: min(n) − 1
    half = sps.t.ppf(0.975, df) * se
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((diff - half, diff + half), rel=1e-12)
    assert row["welch_p"] == row["welch_p_holm"] == pytest.approx(2 * sps.t.sf(abs(diff) / se, df), rel=1e-12)
    tost = max(sps.t.sf((diff + 0.8) / se, df), sps.t.sf((0.8 - diff) / se, df))
    assert row["equivalence_test"] == "tost" and row["equivalence_p"] == pytest.approx(tost, rel=1e-12)
    assert row["diff"] == pytest.approx(diff)
    assert row["bound"] == pytest.approx(abs(diff) + sps.t.ppf(0.95, df) * se, rel=1e-12)  # where the TOST's p = α
    expected = "reproduced" if row["equivalence_p"] < 0.05 else "differs" if row["welch_p"] < 0.05 else "undecided"
    assert row["verdict"] == expected
    assert f"[{diff - half:+.2f}, {diff + half:+.2f}]" in out and f"±{row['bound']:.2f}" in out


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


def test_a_reproduced_row_says_what_its_design_is_worth_and_an_exact_tie_is_named(tmp_path, capsys):
    a, b = two_trees(
        tmp_path,
        {"relu": [98.0, 98.5, 99.0], "gelu": [97.0, 97.5, 98.0]},
        {"relu": [98.4, 98.5, 98.6], "gelu": [97.2, 97.5, 97.8]},
    )
    rc, out, _ = run_compare(capsys, str(a), str(b), "--out", str(tmp_path / "cmp.md"))
    rows = read_rows(tmp_path / "cmp.csv")
    assert rc == 0 and (rows["verdict"] == "reproduced").all() and rows["tie"].all()
    assert rows.loc["relu", "rate_same"] == pytest.approx(reproduction.equivalence.reference_rate(0.0, 1.0, 3, 3))
    assert "reproduced, a tie (9.9 % if same, 4.7 % if 1 sd off)" in out
    assert "an exact tie — both trees' means are equal (Δ = 0); it rests on 3 vs 3 runs and A's seed sd 0.50" in out
    assert "evidence of about 2 : 1 for 'nothing changed' over '1 sd off' — weak" in out


def test_a_noisier_rerun_is_no_reproduction_and_cannot_widen_the_margin(tmp_path, capsys):
    a_values = [98.0, 98.1, 97.9, 98.05, 97.95, 98.0]
    b_values = [96.0, 100.0, 97.0, 99.0, 98.0, 98.0]  # the same mean, ten times the spread
    a, b = two_trees(tmp_path, {"relu": a_values}, {"relu": b_values})
    rc, out, _ = run_compare(capsys, str(a), str(b), "--out", str(tmp_path / "cmp.md"))
    row = read_rows(tmp_path / "cmp.csv").loc["relu"]
    assert row["margin"] == pytest.approx(np.std(a_values, ddof=1))  # A's sd: B's spread is not in it
    assert row["verdict"] == "undecided" and row["spread_p"] < 0.05
    assert "undecided (B noisier)" in out and "B's runs are noisier than A's" in out


def test_b_noisier_is_judged_at_the_compares_alpha(tmp_path, capsys):
    """B's sd twice A's (one-sided F p = 0.077): reproduced at α = 0.05, `undecided (B noisier)` at --alpha 0.2 —
    the label and its sentence read the compare's α, not 0.05."""
    a_values = [98.0, 98.1, 97.9, 98.05, 97.95, 98.0]
    b_values = [98.0, 98.2, 97.8, 98.1, 97.9, 98.0]
    a, b = two_trees(tmp_path, {"relu": a_values}, {"relu": b_values})
    _, out, _ = run_compare(capsys, str(a), str(b))
    assert "reproduced" in out and "B noisier" not in out
    _, out, _ = run_compare(capsys, str(a), str(b), "--alpha", "0.2")
    assert "undecided (B noisier)" in out and "one-sided F test p = 0.0772 < 0.2" in out, out


def test_the_supported_bound_is_where_the_verdicts_own_test_rejects():
    rng = np.random.default_rng(3)
    a, b = rng.normal(98, 0.5, 5), rng.normal(98.2, 0.5, 5)
    row = reproduction.compare_runs(a, b)
    k = row["bound_sd"]
    assert (
        reproduction.equivalence.reference_p(a, b, k * 1.001)
        < 0.05
        <= reproduction.equivalence.reference_p(a, b, k * 0.999)
    )
    assert row["bound"] == pytest.approx(k * np.std(a, ddof=1))
    assert (row["equivalence_p"] < 0.05) == (k < 1.0)  # reproduced at ±1 sd exactly when the bound is inside it
